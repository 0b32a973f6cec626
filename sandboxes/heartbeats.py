"""Worker hosts' heartbeats (docs/deployment.md). Each battle worker beats its host's
row, and the live leases of its host, from a thread of its own (``battles.worker``);
any host's janitor reads which hosts went silent and re-queues their battles
(``battles.services.orchestration.battles_recover_dead_hosts``). A dead host's
sandboxes cannot be reached from another machine: the host reaps them itself at its
next start (``sandboxes.services.sandbox_janitor``)."""

from django.db import transaction
from django.db.models.functions import Now

from arena_site.dbclock import db_now
from arena_site.hosts import host_id, machine_id
from sandboxes.models import SandboxLease, WorkerHost
from sandboxes.selectors import fleet_times


class HostIdTaken(RuntimeError):
    """Another machine beats this host id: two hosts sharing an id would reap each
    other's sandboxes and re-queue each other's battles."""


def host_beat(*, starting: bool = False) -> WorkerHost:
    """Beats this host's row (created on its first beat) and its live leases; a beat
    clears a ``lost_at`` another janitor set. ``starting``: a worker starts, so the
    host's current life starts now if it had been declared lost or never beat, and the
    row becomes this machine's, unless another machine beat it within
    ``ARENA_HOST_DEAD_AFTER_S`` and was not declared lost: then :class:`HostIdTaken`,
    and nothing changes. Every time here is the database's (``arena_site.dbclock``): a
    host whose clock runs late does not look dead."""
    machine = machine_id()
    with transaction.atomic():
        now = db_now()
        host, created = WorkerHost.objects.select_for_update().get_or_create(
            host_id=host_id(), defaults={"started_at": now, "heartbeat_at": now, "machine": machine}
        )
        if not created:
            changes = {"heartbeat_at": now, "lost_at": None}
            if starting:
                _refuse_if_taken(host, machine, now)
                changes["machine"] = machine
                if host.lost_at is not None:
                    changes["started_at"] = now
            WorkerHost.objects.filter(pk=host.pk).update(**changes)
    SandboxLease.objects.filter(host=host.host_id, released_at=None).update(heartbeat_at=now)
    return host


def _refuse_if_taken(host: WorkerHost, machine: str, now) -> None:
    if not host.machine or host.machine == machine or host.lost_at is not None:
        return  # (a row from before machines were recorded is anyone's)
    silent_s = (now - host.heartbeat_at).total_seconds()
    _, dead_after_s = fleet_times()
    if silent_s >= dead_after_s:
        return  # that machine is gone (a janitor will say so): this one takes the id over
    raise HostIdTaken(
        f"the host id {host.host_id!r} (ARENA_HOST_ID) is in use by another machine "
        f"({host.machine}, last beat {max(silent_s, 0):.0f} s ago): give every worker "
        f"host an id of its own, or start this one once that machine has been silent "
        f"for the fleet's dead-after time ({dead_after_s:g} s)"
    )


def host_mark_lost(*, host: str) -> bool:
    """Records that a janitor took ``host`` for dead (once per silence)."""
    return bool(WorkerHost.objects.filter(host_id=host, lost_at=None).update(lost_at=Now()))
