"""Reads of the sandboxes app."""

from django.conf import settings

from arena_site.dbclock import db_ago
from arena_site.hosts import host_id
from sandboxes.models import FleetSettings, WorkerHost


def fleet_times() -> tuple[float, float]:
    """The fleet's heartbeat and dead-after times (``sandboxes.fleet``): its row's, or
    this process's settings before any worker host wrote one."""
    row = FleetSettings.objects.filter(pk=1).values_list("heartbeat_s", "dead_after_s").first()
    arena = settings.ARENA
    return row or (arena.host_heartbeat_s, arena.host_dead_after_s)


def hosts_silent() -> list[str]:
    """Ids of hosts whose last beat is older than the fleet's dead-after, on the
    database's clock (a host that never beat — a test's or a command's process — is
    never among them)."""
    _, dead_after_s = fleet_times()
    return list(
        WorkerHost.objects.filter(heartbeat_at__lt=db_ago(dead_after_s))
        .exclude(host_id=host_id())
        .values_list("host_id", flat=True)
    )
