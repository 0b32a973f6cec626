"""Reads of the sandboxes app."""

from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, Subquery, Value
from django.db.models.functions import Coalesce, Now

from arena_site.dbclock import db_ago
from arena_site.hosts import host_id
from sandboxes.models import FleetSettings, WorkerHost


def fleet_times() -> tuple[float, float]:
    """The fleet's heartbeat and dead-after times (``sandboxes.fleet``): its row's, or
    this process's settings before any worker host wrote one."""
    row = FleetSettings.objects.filter(pk=1).values_list("heartbeat_s", "dead_after_s").first()
    arena = settings.ARENA
    return row or (arena.host_heartbeat_s, arena.host_dead_after_s)


def _fleet_cutoff() -> ExpressionWrapper:
    """The database's time the fleet's dead-after ago, in the query itself (its row's
    time, or this process's setting before any worker host wrote one): no read more.
    SQLite (``make run`` without PostgreSQL) multiplies no interval: one read more."""
    if connection.vendor != "postgresql":
        return db_ago(fleet_times()[1])
    dead_after_s = Coalesce(
        Subquery(FleetSettings.objects.filter(pk=1).values("dead_after_s")[:1]),
        Value(float(settings.ARENA.host_dead_after_s)),
    )
    ago = ExpressionWrapper(
        dead_after_s * Value(timedelta(seconds=1)), output_field=DurationField()
    )
    return ExpressionWrapper(Now() - ago, output_field=DateTimeField())


def hosts_silent() -> list[str]:
    """Ids of hosts whose last beat is older than the fleet's dead-after, on the
    database's clock (a host that never beat — a test's or a command's process — is
    never among them)."""
    return list(
        WorkerHost.objects.filter(heartbeat_at__lt=_fleet_cutoff())
        .exclude(host_id=host_id())
        .values_list("host_id", flat=True)
    )


def fleet_capacity() -> dict:
    """The fleet's battle capacity from its hosts' rows: each live host (beaten within
    the fleet's dead-after, not declared lost) with its backend, version, load, live
    battle workers and whether it is cordoned; ``slots`` counts the workers of the
    hosts that take battles (not cordoned)."""
    hosts = []
    rows = WorkerHost.objects.filter(heartbeat_at__gte=_fleet_cutoff(), lost_at=None)
    for host in rows.order_by("host_id"):
        hosts.append(
            {
                "host": host.host_id,
                "backend": host.backend,
                "version": host.version,
                "load_1m": host.load_1m,
                "workers": len(host.workers or {}),
                "cordoned": host.cordoned_at is not None,
                "draining": host.draining,
            }
        )
    slots = sum(h["workers"] for h in hosts if not h["cordoned"])
    return {"hosts": hosts, "slots": slots}


def host_beats(host: str) -> bool:
    """Whether ``host`` beat within the fleet's dead-after (the database's clock)."""
    return WorkerHost.objects.filter(host_id=host, heartbeat_at__gte=_fleet_cutoff()).exists()


def host_cordon_state(host: str) -> tuple[bool, bool, str]:
    """(cordoned, draining, the operator's reason) of ``host``."""
    row = (
        WorkerHost.objects.filter(host_id=host)
        .values_list("cordoned_at", "draining", "cordon_reason")
        .first()
    )
    if row is None:
        return False, False, ""
    return row[0] is not None, row[1], row[2]
