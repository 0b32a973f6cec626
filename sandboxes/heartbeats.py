"""Worker hosts' heartbeats (docs/deployment.md). Each battle worker beats its host's
row, and the live leases of its host, from a thread of its own (``battles.worker``);
any host's janitor reads which hosts went silent and re-queues their battles
(``battles.services.orchestration.battles_recover_dead_hosts``). A dead host's
sandboxes cannot be reached from another machine: the host reaps them itself at its
next start (``sandboxes.services.sandbox_janitor``)."""

from django.utils import timezone

from arena_site.hosts import host_id
from sandboxes.models import SandboxLease, WorkerHost


def host_beat(*, starting: bool = False) -> WorkerHost:
    """Beats this host's row (created on its first beat) and its live leases; a beat
    clears a ``lost_at`` another janitor set. ``starting``: a worker starts, so the
    host's current life starts now if it had been declared lost or never beat."""
    now = timezone.now()
    host, created = WorkerHost.objects.get_or_create(
        host_id=host_id(), defaults={"started_at": now, "heartbeat_at": now}
    )
    if not created:
        changes = {"heartbeat_at": now, "lost_at": None}
        if starting and host.lost_at is not None:
            changes["started_at"] = now
        WorkerHost.objects.filter(pk=host.pk).update(**changes)
    SandboxLease.objects.filter(host=host.host_id, released_at=None).update(heartbeat_at=now)
    return host


def host_mark_lost(*, host: str) -> bool:
    """Records that a janitor took ``host`` for dead (once per silence)."""
    return bool(
        WorkerHost.objects.filter(host_id=host, lost_at=None).update(lost_at=timezone.now())
    )
