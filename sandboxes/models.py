"""Slot leases: which sandbox slot (and so which unprivileged uid) a live sandbox holds,
on which host and under which worker pid, so a janitor can find what dead workers left;
and worker hosts' heartbeats, so any host's janitor sees a host that stopped."""

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q


class SandboxLease(models.Model):
    slot = models.PositiveIntegerField()
    backend = models.CharField(max_length=20)
    host = models.CharField(max_length=255)
    worker_pid = models.PositiveIntegerField()
    # The worker process itself (``arena_site.hosts.process_token``): its pid may be
    # given again to another process once it is dead.
    worker_token = models.CharField(max_length=64, blank=True, default="")
    run = models.ForeignKey("battles.Run", null=True, blank=True, on_delete=models.SET_NULL)
    path = models.CharField(max_length=500, blank=True)
    acquired_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)
    # Beaten with its host (sandboxes.heartbeats): a live lease of a host whose
    # heartbeat stopped is lost with it, until that host reaps it at its next start.
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["host", "slot"],
                condition=Q(released_at=None),
                name="sandboxlease_one_live_per_slot",
            )
        ]

    def __str__(self) -> str:
        return f"slot {self.slot} on {self.host}"


class WorkerHost(models.Model):
    """A host that runs battle workers (``ARENA_HOST_ID``). Its workers beat
    ``heartbeat_at`` every ``ARENA_HOST_HEARTBEAT_S``; once it is older than
    ``ARENA_HOST_DEAD_AFTER_S``, any host's janitor takes the host for dead and re-queues
    its running battles (``lost_at`` says when). A beat clears ``lost_at``."""

    host_id = models.CharField(max_length=255, unique=True)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    lost_at = models.DateTimeField(null=True, blank=True)
    # The machine whose workers beat it (``arena_site.hosts.machine_id``), set at a
    # worker's start: another machine starting with the same id is refused while it beats.
    machine = models.CharField(max_length=255, blank=True, default="")
    # What it runs and how loaded it is, from its beats (``sandboxes.heartbeats``): the
    # fleet's capacity is read from these rows (``sandboxes.selectors.fleet_capacity``).
    backend = models.CharField(max_length=32, blank=True, default="")
    version = models.CharField(max_length=64, blank=True, default="")
    load_1m = models.FloatField(null=True, blank=True)
    # Its battle workers' process tokens and their last beats (ISO times, the database's
    # clock); one that stopped beating drops out after the fleet's dead-after time.
    workers = models.JSONField(default=dict, blank=True)
    # An operator's: a cordoned host's workers take no new battle; draining, they also
    # stop once the battle in hand ends (``battles.services.hosts``, the admin).
    cordoned_at = models.DateTimeField(null=True, blank=True)
    draining = models.BooleanField(default=False)
    cordon_reason = models.CharField(max_length=500, blank=True, default="")

    def __str__(self) -> str:
        return self.host_id


class FleetSettings(models.Model):
    """What every worker host of the arena must agree on, in one row all hosts read
    (``sandboxes.fleet``): the heartbeat and dead-after times (a janitor's "dead" is the
    fleet's, whatever its own environment says) and the key-encryption key ring's
    fingerprints (the first, the key that seals; a host holding another key would fail
    to open teams' keys and charge the failures to their agents). The first worker host
    to start writes it; an operator changes it in the admin (the times) or with
    ``manage.py agent_keys_rotate`` (the ring)."""

    heartbeat_s = models.FloatField()
    dead_after_s = models.FloatField()
    kek_fingerprints = models.JSONField(default=list, blank=True)
    set_by = models.CharField(max_length=255, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "fleet settings"

    def __str__(self) -> str:
        return f"heartbeat {self.heartbeat_s:g} s, dead after {self.dead_after_s:g} s"

    def clean(self) -> None:
        if self.heartbeat_s <= 0 or self.dead_after_s < 2 * self.heartbeat_s:
            raise ValidationError(
                "The dead-after time must be at least twice the heartbeat: one late beat "
                "must not make a live host look dead."
            )
