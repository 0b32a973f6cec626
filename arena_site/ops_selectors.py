"""Reads for the operator's figures (``/metrics/prometheus``, arena_site/prometheus.py):
counts over every arena together, per-host figures of the worker fleet, and the rq
queues. Aggregate only: nothing here is per team, per user or per arena, so nothing a
private arena or team owns can reach a label (host ids and queue names are the
operator's own).

Every read is bounded: on PostgreSQL the statements run under a statement timeout
(``FIGURES_STATEMENT_TIMEOUT_MS``), and Redis is asked through a client whose connect and
read time out (arena_site/redis.py ``probe_client``)."""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Exists, Min, OuterRef, Q
from rq import Queue

from agents.models import PUBLIC_ARENA_SLUG
from arena_site.redis import probe_client
from battles.models import Battle, Run
from judging.models import Vote
from ratings.models import RefitState
from sandboxes.models import SandboxLease, WorkerHost

FIGURES_STATEMENT_TIMEOUT_MS = 5000
# What made a failed battle fail, as far as its runs tell: a lane ended in error through
# its agent's own fault; a lane ended in error otherwise (sandbox, worker, engine); or
# neither (the orchestrator, a lost host on the last attempt, an admission fault).
FAILURE_CAUSES = ("agent", "arena", "other")
VOTE_STATES = ("admissible", "inadmissible", "retracted")


@dataclass(frozen=True)
class BattleFigures:
    by_status: dict[str, int]
    decided_by_source: dict[str, int]
    failed_by_cause: dict[str, int]
    oldest_queued_at: datetime | None
    # decided, rated battles (not excluded, with an outcome) no refit includes yet
    awaiting_refit: int
    oldest_awaiting_refit_at: datetime | None


@dataclass(frozen=True)
class HostFigures:
    host_id: str
    heartbeat_at: datetime | None  # None: leases of a host that never beat
    lost: bool
    leases_busy: int


@dataclass(frozen=True)
class QueueFigures:
    name: str
    queued: int
    started: int
    failed: int


@contextmanager
def _bounded_reads() -> Iterator[None]:
    """A transaction whose statements PostgreSQL cancels past the timeout."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL statement_timeout = {FIGURES_STATEMENT_TIMEOUT_MS}")
        yield


def battle_figures() -> BattleFigures:
    """Battles of every arena by status, decisions by source, failures by cause, the
    oldest queued battle and the rated battles awaiting a refit. Two statements."""
    statuses = list(Battle.Status.values)
    sources = list(Battle.DecisionSource.values)
    runs = Run.objects.filter(battle=OuterRef("pk"), end_reason=Run.EndReason.ERROR)
    failed = Q(status=Battle.Status.FAILED)
    rated_pending = Q(status=Battle.Status.DECIDED, exclusion_reason="", incorporated_at=None) & ~Q(
        outcome=""
    )
    with _bounded_reads():
        totals = Battle.objects.aggregate(
            **{f"status_{s}": Count("pk", filter=Q(status=s)) for s in statuses},
            **{
                f"source_{s}": Count(
                    "pk", filter=Q(status=Battle.Status.DECIDED, decision_source=s)
                )
                for s in sources
            },
            oldest_queued_at=Min("submitted_at", filter=Q(status=Battle.Status.QUEUED)),
            awaiting_refit=Count("pk", filter=rated_pending),
            oldest_awaiting_refit_at=Min("decided_at", filter=rated_pending),
        )
        causes = (
            Battle.objects.filter(failed)
            .annotate(agent_error=Exists(runs.filter(agent_fault=True)), any_error=Exists(runs))
            .aggregate(
                cause_agent=Count("pk", filter=Q(agent_error=True)),
                cause_arena=Count("pk", filter=Q(agent_error=False, any_error=True)),
                cause_other=Count("pk", filter=Q(any_error=False)),
            )
        )
    return BattleFigures(
        by_status={s: totals[f"status_{s}"] for s in statuses},
        decided_by_source={s: totals[f"source_{s}"] for s in sources},
        failed_by_cause={c: causes[f"cause_{c}"] for c in FAILURE_CAUSES},
        oldest_queued_at=totals["oldest_queued_at"],
        awaiting_refit=totals["awaiting_refit"],
        oldest_awaiting_refit_at=totals["oldest_awaiting_refit_at"],
    )


def vote_figures() -> dict[str, int]:
    """Votes of every arena: standing admissible, standing inadmissible, taken back."""
    live = Q(retracted=False)
    with _bounded_reads():
        counts = Vote.objects.aggregate(
            n_admissible=Count("pk", filter=live & Q(admissible=True)),
            n_inadmissible=Count("pk", filter=live & Q(admissible=False)),
            n_retracted=Count("pk", filter=Q(retracted=True)),
        )
    return {state: counts[f"n_{state}"] for state in VOTE_STATES}


def public_refit_last_run_at() -> datetime | None:
    """When the public arena's refit last ran (None: never). Private arenas are left out:
    their refits are their own teams' business."""
    with _bounded_reads():
        return (
            RefitState.objects.filter(arena__slug=PUBLIC_ARENA_SLUG, arena__team=None)
            .values_list("last_run_at", flat=True)
            .first()
        )


def host_figures() -> list[HostFigures]:
    """Every worker host that beat or holds a live lease, with its live leases."""
    with _bounded_reads():
        busy = dict(
            SandboxLease.objects.filter(released_at=None)
            .values_list("host")
            .annotate(n=Count("pk"))
            .values_list("host", "n")
        )
        rows = list(WorkerHost.objects.values_list("host_id", "heartbeat_at", "lost_at"))
    hosts = [
        HostFigures(host_id=h, heartbeat_at=beat, lost=lost is not None, leases_busy=busy.pop(h, 0))
        for h, beat, lost in rows
    ]
    hosts += [
        HostFigures(host_id=h, heartbeat_at=None, lost=False, leases_busy=n)
        for h, n in busy.items()
    ]
    return sorted(hosts, key=lambda host: host.host_id)


def queue_urls() -> Mapping[str, str]:
    """Each rq queue of ``RQ_QUEUES`` and the Redis URL it lives on."""
    return {name: conf.get("URL", settings.REDIS_URL) for name, conf in settings.RQ_QUEUES.items()}


def queue_figures(urls: Mapping[str, str] | None = None) -> list[QueueFigures]:
    """Jobs waiting, running and failed per rq queue (no registry clean-up: a read)."""
    figures = []
    for name, url in (queue_urls() if urls is None else urls).items():
        queue = Queue(name, connection=probe_client(url))
        figures.append(
            QueueFigures(
                name=name,
                queued=queue.count,
                started=queue.started_job_registry.get_job_count(cleanup=False),
                failed=queue.failed_job_registry.get_job_count(cleanup=False),
            )
        )
    return figures
