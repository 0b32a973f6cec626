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
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import (
    Case,
    CharField,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    Min,
    OuterRef,
    Q,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Greatest
from rq import Queue

from agents.models import PUBLIC_ARENA_SLUG, Arena
from arena_site.dbclock import db_ago
from arena_site.redis import probe_client
from battles.models import Battle, Run
from battles.services.failures import FAILED_NO_RERUN, FAILED_RERUN
from battles.services.orchestration import (
    DIED_REASON,
    LOST_REASON,
    ORCHESTRATOR_REASON,
    REPOSITORY_REASON,
    STUCK_REASON,
)
from judging.models import Vote
from ratings.models import RefitState
from ratings.selectors import rated_battles_pending_everywhere
from sandboxes.models import SandboxLease, WorkerHost

FIGURES_STATEMENT_TIMEOUT_MS = 5000
# What made a failed battle fail, as far as its runs tell: a lane ended in error through
# its agent's own fault; a lane ended in error otherwise (sandbox, worker, engine); or
# neither (the orchestrator, a lost host on the last attempt, an admission fault).
FAILURE_CAUSES = ("agent", "arena", "other")
VOTE_STATES = ("admissible", "inadmissible", "retracted")

# The recent figures (phase latencies, failures by cause) cover battles whose closing
# event fell in the last hour, on the database's clock.
RECENT_WINDOW_S = 3600


@dataclass(frozen=True)
class Phase:
    """A stretch of a battle's life, between two of its event stamps (SPEC §6). It is
    observed when its closing stamp (``end``) falls in the window."""

    name: str
    start: str
    end: str


BATTLE_PHASES = (
    Phase("queue", "submitted_at", "dequeued_at"),  # waiting for a battle worker
    Phase("provisioning", "dequeued_at", "lanes_started_at"),  # sandboxes up, lanes start
    Phase("lanes", "lanes_started_at", "ended_at"),  # both lanes run (or the battle fails)
    Phase("judgment", "ended_at", "first_judgment_at"),  # screening, then the first human vote
    Phase("decision", "ended_at", "decided_at"),  # screening, judging and resolution
)
# Upper bounds in seconds: a warm sandbox starts in under a second, judging may wait a day.
PHASE_BUCKETS_S = (
    0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 24 * 3600,
)  # fmt: skip


def _prefix(template: str) -> str:
    """The fixed opening of a reason template ("… {attempts} …" → "…")."""
    return template.split("{", 1)[0]


# Why a recent battle failed or was voided, a small fixed set (never the free text of a
# reason): the first that applies, in this order.
RECENT_FAILURE_CAUSES = (
    "sandbox_lost",  # its sandboxes' engine stopped answering on every attempt
    "worker_died",  # its worker process or host died on every attempt
    "worker_stuck",  # its lanes stopped beating (a worker killed mid-battle)
    "repository",  # the task's repository could not be prepared
    "agent",  # a side's agent failed (unreachable, broke the protocol)
    "orchestrator",  # the orchestrator itself raised
    "lane_error",  # a lane ended in error through the arena (sandbox, worker, engine)
    "other",
)
_REASON_PREFIXES = (
    ("sandbox_lost", _prefix(LOST_REASON)),
    ("worker_died", _prefix(DIED_REASON)),
    ("worker_stuck", _prefix(STUCK_REASON)),
    ("repository", _prefix(REPOSITORY_REASON)),
    ("agent", _prefix(FAILED_RERUN)),
    ("agent", _prefix(FAILED_NO_RERUN)),
    ("orchestrator", _prefix(ORCHESTRATOR_REASON)),
)


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
class PhaseFigures:
    # (upper bound in seconds, battles whose phase took at most that long): cumulative
    buckets: tuple[tuple[float, int], ...]
    count: int
    sum_s: float


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


def _demo_arena_ids() -> list[int]:
    """The demo board's arena (simulated votes, docs/leaderboard.md), left out of the
    figures below; none in a deployment, whose statements then carry no condition."""
    return list(Arena.objects.filter(demo=True).values_list("pk", flat=True))


def battle_figures() -> BattleFigures:
    """Battles of every arena (not the demo board's) by status, decisions by source,
    failures by cause, the oldest queued battle and the rated battles awaiting a refit
    (as the boards count them: ``ratings.selectors.rated_battles_pending``, since each
    arena's ``RefitState.pending_floor``). Five statements."""
    statuses = list(Battle.Status.values)
    sources = list(Battle.DecisionSource.values)
    runs = Run.objects.filter(battle=OuterRef("pk"), end_reason=Run.EndReason.ERROR)
    failed = Q(status=Battle.Status.FAILED)
    with _bounded_reads():
        demo = _demo_arena_ids()
        battles = Battle.objects.exclude(arena_id__in=demo) if demo else Battle.objects
        totals = battles.aggregate(
            **{f"status_{s}": Count("pk", filter=Q(status=s)) for s in statuses},
            **{
                f"source_{s}": Count(
                    "pk", filter=Q(status=Battle.Status.DECIDED, decision_source=s)
                )
                for s in sources
            },
            oldest_queued_at=Min("submitted_at", filter=Q(status=Battle.Status.QUEUED)),
        )
        pending = rated_battles_pending_everywhere().aggregate(
            n=Count("pk"), oldest=Min("decided_at")
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
        awaiting_refit=pending["n"],
        oldest_awaiting_refit_at=pending["oldest"],
    )


def recent_phase_figures() -> dict[str, PhaseFigures]:
    """Each phase of ``BATTLE_PHASES`` observed in the last ``RECENT_WINDOW_S``: how many
    battles took at most each bound of ``PHASE_BUCKETS_S``, how many in all, and their
    total seconds. Imported battles are left out (their stamps are not the arena's). One
    statement; a negative duration (stamps of two clocks) counts as 0."""
    since = db_ago(RECENT_WINDOW_S)
    aggregates = {}
    for phase in BATTLE_PHASES:
        observed = Q(**{f"{phase.end}__gt": since, f"{phase.start}__isnull": False})
        duration = ExpressionWrapper(F(phase.end) - F(phase.start), output_field=DurationField())
        for i, bound in enumerate(PHASE_BUCKETS_S):
            within = Q(**{f"{phase.end}__lte": F(phase.start) + timedelta(seconds=bound)})
            aggregates[f"{phase.name}_le{i}"] = Count("pk", filter=observed & within)
        aggregates[f"{phase.name}_count"] = Count("pk", filter=observed)
        aggregates[f"{phase.name}_sum"] = Sum(
            Greatest(duration, Value(timedelta(0), output_field=DurationField())),
            filter=observed,
        )
    recent = Q()
    for end in {phase.end for phase in BATTLE_PHASES}:
        recent |= Q(**{f"{end}__gt": since})
    with _bounded_reads():
        totals = (
            Battle.objects.filter(recent)
            .exclude(decision_source=Battle.DecisionSource.IMPORT)
            .aggregate(**aggregates)
        )
    return {
        phase.name: PhaseFigures(
            buckets=tuple(
                (bound, totals[f"{phase.name}_le{i}"]) for i, bound in enumerate(PHASE_BUCKETS_S)
            ),
            count=totals[f"{phase.name}_count"],
            sum_s=(totals[f"{phase.name}_sum"] or timedelta(0)).total_seconds(),
        )
        for phase in BATTLE_PHASES
    }


def recent_failure_figures() -> dict[str, int]:
    """Battles whose lanes ended in the last ``RECENT_WINDOW_S`` and that failed, or were
    excluded because a side could not run through the arena's fault, by cause (each of
    ``RECENT_FAILURE_CAUSES``, 0 included). The cause is read from the failure reason's
    fixed opening and the runs' errors, never reported as text. One statement."""
    errors = Run.objects.filter(battle=OuterRef("pk"), end_reason=Run.EndReason.ERROR)
    failed = Q(status=Battle.Status.FAILED)
    cause = Case(
        *(
            When(failed & Q(failure_reason__startswith=prefix), then=Value(name))
            for name, prefix in _REASON_PREFIXES
        ),
        When(failed & Q(agent_error=True), then=Value("agent")),
        When(
            Q(status=Battle.Status.EXCLUDED) | Q(any_error=True),
            then=Value("lane_error"),
        ),
        default=Value("other"),
        output_field=CharField(),
    )
    with _bounded_reads():
        rows = (
            Battle.objects.filter(ended_at__gt=db_ago(RECENT_WINDOW_S))
            .filter(
                failed
                | Q(
                    status=Battle.Status.EXCLUDED,
                    exclusion_reason=Battle.ExclusionReason.ARENA_FAULT,
                )
            )
            .annotate(
                agent_error=Exists(errors.filter(agent_fault=True)),
                any_error=Exists(errors),
            )
            .annotate(cause=cause)
            .values("cause")
            .annotate(n=Count("pk"))
            .values_list("cause", "n")
        )
        counts = dict(rows)
    return {name: counts.get(name, 0) for name in RECENT_FAILURE_CAUSES}


def vote_figures() -> dict[str, int]:
    """Votes of every arena (not the demo board's): standing admissible, standing
    inadmissible, taken back."""
    live = Q(retracted=False)
    with _bounded_reads():
        demo = _demo_arena_ids()
        votes = Vote.objects.exclude(battle__arena_id__in=demo) if demo else Vote.objects
        counts = votes.aggregate(
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
