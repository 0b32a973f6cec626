"""Slot leases: which sandbox slot (and so which unprivileged uid) a live sandbox holds,
on which host and under which worker pid, so a janitor can find what dead workers left;
and worker hosts' heartbeats, so any host's janitor sees a host that stopped."""

from django.db import models
from django.db.models import Q


class SandboxLease(models.Model):
    slot = models.PositiveIntegerField()
    backend = models.CharField(max_length=20)
    host = models.CharField(max_length=255)
    worker_pid = models.PositiveIntegerField()
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

    def __str__(self) -> str:
        return self.host_id
