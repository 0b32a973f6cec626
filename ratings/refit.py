"""The batch refit of SPEC §7.2 as a service: count an arena's rated battles in the
database (rows per agent pair, outcome and weight, and per deciding judge and pair:
never a row per battle), fit
Bradley-Terry with intervals and rank bands (``ratings.bradley_terry.rate``), publish a
snapshot when the input changed, record r for the battles it newly includes (one
``Incorporation`` for the run, an ``IncorporatedBattle`` row per battle), push the board.

Refit input: battles of the arena that are decided, have an outcome and no exclusion
reason (retired agents' battles included); y from side A's view; w the evidence weight
(1 when null); cluster the judge whose vote decided it (``Battle.cluster_judge``; SPEC
§7.3 clusters = judges); and, when the arena's bootstrap resamples tasks
(``Arena.bootstrap_unit``), their sums per (task, pair) as well.
"""

import hashlib
import logging
import math
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import BigIntegerField, Case, F, FloatField, Value, When
from django.db.models.functions import Coalesce, Greatest, Least
from django.utils import timezone
from threadpoolctl import threadpool_limits

from agents.models import Arena
from ratings.bradley_terry import ClusterSums, Rating, rate
from ratings.models import (
    IncorporatedBattle,
    Incorporation,
    RatingPoint,
    RatingSnapshot,
    RefitState,
    RunStyle,
)
from ratings.selectors import rated_battles
from ratings.services import OUTCOME_Y, leaderboard_changed, leaderboard_push
from ratings.style_board import StyleFit, board_style
from ratings.style_features import FEATURES, measure_runs, unmeasured_runs

logger = logging.getLogger(__name__)

# How much longer than the read of a refit a battle's decision may take to commit (with
# the hosts' clock skew) and still be shown among the board's pending battles before the
# next refit (``RefitState.pending_floor``). The refit's own read has no such bound.
PENDING_LOOKBACK = timedelta(minutes=10)


@dataclass(frozen=True)
class FitParams:
    ridge: float
    r0: float
    bootstrap: int
    min_battles: int
    # What the rank bands resample (``Arena.BootstrapUnit``): "battles" (what the
    # published interval treats as independent) or "tasks".
    bootstrap_unit: str = Arena.BootstrapUnit.BATTLES

    @classmethod
    def from_settings(cls) -> "FitParams":
        arena = settings.ARENA
        return cls(
            ridge=float(arena.ridge),
            r0=float(arena.r0),
            bootstrap=int(arena.bootstrap_replicates),
            min_battles=int(arena.n0),
        )

    @classmethod
    def for_arena(cls, arena_id: int) -> "FitParams":
        """The settings' parameters with the arena's own choice of bootstrap unit."""
        unit = Arena.objects.filter(pk=arena_id).values_list("bootstrap_unit", flat=True).get()
        return replace(cls.from_settings(), bootstrap_unit=unit)

    @property
    def resamples_tasks(self) -> bool:
        return self.bootstrap_unit == Arena.BootstrapUnit.TASKS


@dataclass(frozen=True)
class FitInput:
    """The rated battles of an arena as counted by the database, never a row per battle:
    ``a``, ``b``, ``y``, ``w``, ``count`` one row per distinct (pair, y from the lower
    index's side, weight) with its number of battles, ``clustered`` their sums per
    (deciding judge, pair) and, when the bootstrap resamples tasks, ``tasks`` their sums
    per (task, pair). The fit, its intervals and its bootstrap on
    these are those of the battles listed one by one (``ratings.bradley_terry.rate``)."""

    battles: int
    unstamped_ids: list[int]  # battles no published refit has included yet (no r)
    agent_ids: list[int]  # index → Agent id
    a: np.ndarray
    b: np.ndarray
    y: np.ndarray
    w: np.ndarray
    count: np.ndarray
    clustered: ClusterSums
    digest: str
    tasks: ClusterSums | None = None  # sums per (task id, pair); None: bands resample battles

    @property
    def seed(self) -> int:
        """The snapshot's bootstrap seed: derived from its input, so a refit of the same
        battles reproduces the same bands."""
        return int(self.digest[:15], 16)


@dataclass(frozen=True)
class RefitResult:
    snapshot: RatingSnapshot | None  # the snapshot written by this run, if any
    battles: int
    compute_ms: int
    stamped: int  # battles that got r from this run


# Row kinds of ``refit_rows``, in the order they come.
PAIR_ROW, CLUSTER_ROW, UNSTAMPED_ROW, TASK_ROW = 0, 1, 2, 3
ROW_KINDS = (PAIR_ROW, CLUSTER_ROW, UNSTAMPED_ROW, TASK_ROW)


def refit_counts(
    *, arena_id: int, category: str | None = None, tasks: bool = False
) -> tuple[list[tuple], list[int]]:
    """The arena's rated battles counted in the database, in one statement (one snapshot
    of the table, so the parts agree): the rows of ``refit_rows`` but the UNSTAMPED_ROWs,
    and the ids of the battles no published refit includes yet (no IncorporatedBattle
    row), ascending.

    The ids come as one array, not a row each: at a first refit they are every battle,
    and a million rows sorted with the counts and sent one by one cost seconds."""
    y_a = Case(
        *(When(outcome=o, then=Value(v)) for o, v in OUTCOME_Y.items()),
        output_field=FloatField(),
    )
    rated = (
        rated_battles(arena_id=arena_id, category=category)
        .order_by()
        .values(
            lo=Least("agent_a_id", "agent_b_id"),
            hi=Greatest("agent_a_id", "agent_b_id"),
            y=Case(When(agent_a_id__lt=F("agent_b_id"), then=y_a), default=Value(1.0) - y_a),
            w=Coalesce(F("evidence_weight"), Value(1.0), output_field=FloatField()),
            c=Coalesce(F("cluster_judge_id"), -F("pk"), output_field=BigIntegerField()),
            **({"t": F("task_id")} if tasks else {}),
            i=F("pk"),
        )
    )
    battles, params = rated.query.sql_with_params()
    # An anti-join on IncorporatedBattle's primary key. Every decided battle is read
    # (a battle decided late may have any id, and nothing on its row says whether a
    # refit counted it), but the counts read them all anyway.
    unstamped, unstamped_params = (
        rated_battles(arena_id=arena_id, category=category)
        .filter(incorporation__isnull=True)
        .order_by()
        .values("pk")
        .query.sql_with_params()
    )
    # The battles' query is repeated, not shared through a WITH: a WITH read three
    # times is materialised (a million rows written aside, then read back).
    # The fresh ids as one array on PostgreSQL; SQLite (``make run``'s embedded
    # database) has no arrays: one comma-separated text instead.
    postgres = connection.vendor == "postgresql"
    # Each cluster's Σ w and Σ w y added in battle-id order, as ``python -m ratings fit``
    # adds them from the open data (docs/open-data.md): float addition depends on its
    # order, and the plan's row order would change an interval's last bits. SQLite (3.40
    # here) has no ORDER BY inside an aggregate: its sums keep the scan's order.
    in_order = " ORDER BY i" if postgres else ""
    sums = f"sum(w{in_order}), sum(w * y{in_order})"
    by_task = f"""
        UNION ALL
        SELECT {TASK_ROW}, lo, hi, NULL, NULL, t, count(*), {sums}, NULL
          FROM ({battles}) AS rated GROUP BY t, lo, hi
    """  # noqa: S608 (the selector's own SQL; every value is a parameter)
    no_ids, ids = ("NULL::bigint[]", "array_agg(pk)") if postgres else ("NULL", "group_concat(pk)")
    sql = f"""
        SELECT {PAIR_ROW}, lo, hi, y, w, NULL, count(*), NULL, NULL, {no_ids}
          FROM ({battles}) AS rated GROUP BY lo, hi, y, w
        UNION ALL
        SELECT {CLUSTER_ROW}, lo, hi, NULL, NULL, c, count(*), {sums}, NULL
          FROM ({battles}) AS rated GROUP BY c, lo, hi
        UNION ALL
        SELECT {UNSTAMPED_ROW}, NULL, NULL, NULL, NULL, NULL, count(*), NULL, NULL,
               {ids}
          FROM ({unstamped}) AS fresh
        {by_task if tasks else ""}
        ORDER BY 1, 2, 3, 4, 5, 6
    """  # noqa: S608 (the selector's own SQL; every value is a parameter)
    params = (*params, *params, *unstamped_params, *(params if tasks else ()))
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        # A fixed-shape aggregate read once a period: compiling it (JIT) costs more than
        # it saves (~1 s at a million battles).
        if postgres:
            cursor.execute("SET LOCAL jit = off")
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    # (the array in scan order: sorted here, a near-sorted list costs one pass)
    (fresh,) = (row for row in rows if row[0] == UNSTAMPED_ROW)
    counted = [row[:9] for row in rows if row[0] != UNSTAMPED_ROW]
    fresh_ids = fresh[9] or ()
    if isinstance(fresh_ids, str):  # SQLite's group_concat
        fresh_ids = map(int, fresh_ids.split(","))
    return counted, sorted(fresh_ids)


def refit_rows(*, arena_id: int, category: str | None = None, tasks: bool = False) -> list[tuple]:
    """The arena's rated battles (of tasks of ``category`` only, when given: a category's
    board) counted in the database, in one statement (one snapshot
    of the table, so the parts agree), as (kind, lower agent id, higher agent id,
    y, weight, cluster key, battles, Σ w, Σ w y) rows, y from the lower id's side (1 a
    win, 0 a loss, ½ a tie or both bad):

    - PAIR_ROW per (pair, y, weight): its battles;
    - CLUSTER_ROW per (cluster key, pair): its battles, Σ w and Σ w y;
    - UNSTAMPED_ROW per battle no published refit includes yet (no r), its id in the
      cluster key column: the battles since the last refit, few;
    - with ``tasks``, TASK_ROW per (task, pair), the task id in the cluster key column:
      its battles, Σ w and Σ w y (what a bootstrap over tasks draws).

    The weight is 1 when unset; the cluster key is the deciding judge, or minus the
    battle id when that judge is gone (a cluster of its own). The refit reads
    ``refit_counts`` (the same statement, the unstamped ids as one list)."""
    counted, unstamped = refit_counts(arena_id=arena_id, category=category, tasks=tasks)
    return [
        *(row for row in counted if row[0] < UNSTAMPED_ROW),
        *((UNSTAMPED_ROW, None, None, None, None, pk, 1, None, None) for pk in unstamped),
        *(row for row in counted if row[0] > UNSTAMPED_ROW),
    ]


def refit_input(*, arena_id: int, params: FitParams, category: str | None = None) -> FitInput:
    rows, unstamped = refit_counts(
        arena_id=arena_id, category=category, tasks=params.resamples_tasks
    )
    by_kind: dict[int, list[tuple]] = {kind: [] for kind in ROW_KINDS}
    for row in rows:
        by_kind[row[0]].append(row)
    pairs, clusters, tasks = by_kind[PAIR_ROW], by_kind[CLUSTER_ROW], by_kind[TASK_ROW]
    # Agents indexed in id order, so every row's lower id is its lower index too.
    agent_ids = sorted({agent for row in pairs for agent in row[1:3]})
    index = {agent: i for i, agent in enumerate(agent_ids)}
    # The unit is named only when it is not the default, so the default's digest (and
    # every board published before the choice existed) stays as it was.
    unit = f";bootstrap_unit={params.bootstrap_unit}" if params.resamples_tasks else ""
    digest = hashlib.sha256(
        f"ridge={params.ridge!r};r0={params.r0!r};bootstrap={params.bootstrap};"
        f"n0={params.min_battles}{unit}\n".encode()
    )
    for row in pairs:
        digest.update("p{1},{2},{3!r},{4!r},{6}\n".format(*row).encode())
    for row in clusters:
        digest.update("c{5}:{1},{2},{6}\n".format(*row).encode())
    for row in tasks:
        digest.update("t{5}:{1},{2},{6}\n".format(*row).encode())
    columns = list(zip(*pairs, strict=True)) if pairs else [()] * 9
    return FitInput(
        battles=sum(columns[6]),
        unstamped_ids=unstamped,
        agent_ids=agent_ids,
        a=np.array([index[agent] for agent in columns[1]], dtype=np.int64),
        b=np.array([index[agent] for agent in columns[2]], dtype=np.int64),
        y=np.array(columns[3], dtype=np.float64),
        w=np.array(columns[4], dtype=np.float64),
        count=np.array(columns[6], dtype=np.int64),
        clustered=_cluster_sums(clusters, index, renumber=True),
        digest=digest.hexdigest(),
        tasks=_cluster_sums(tasks, index) if params.resamples_tasks else None,
    )


def _cluster_sums(rows: list[tuple], index: dict[int, int], renumber: bool = False) -> ClusterSums:
    """CLUSTER_ROWs or TASK_ROWs of ``refit_rows`` as ClusterSums: the cluster its key
    (a task id), or with ``renumber`` the key's place in order of first appearance
    (a judge: the numbering the judges' bootstrap draws have always had)."""
    cells = list(zip(*rows, strict=True)) if rows else [()] * 9
    keys: dict[int, int] = {}
    cluster = [keys.setdefault(key, len(keys)) for key in cells[5]] if renumber else cells[5]
    return ClusterSums(
        cluster=np.array(cluster, dtype=np.int64),
        a=np.array([index[agent] for agent in cells[1]], dtype=np.int64),
        b=np.array([index[agent] for agent in cells[2]], dtype=np.int64),
        total=np.array(cells[7], dtype=np.float64),
        wins=np.array(cells[8], dtype=np.float64),
    )


def fit_reference(data: FitInput, params: FitParams) -> np.ndarray | None:
    """The agents a fit is centred on: the non-provisional ones; None (all agents with
    battles) while there is none."""
    counts = np.bincount(
        np.concatenate([data.a, data.b]),
        np.concatenate([data.count, data.count]),
        minlength=len(data.agent_ids),
    )
    reference = counts >= params.min_battles
    return reference if reference.any() else None


def fit(data: FitInput, params: FitParams) -> Rating:
    """Bradley-Terry on the input, centred on the non-provisional agents (all agents
    with battles while none is non-provisional yet), on one BLAS thread (threadpoolctl:
    a pool of threads only slows the many small solves of Newton and the bootstrap)."""
    reference = fit_reference(data, params)
    with threadpool_limits(1):  # one BLAS thread: the solves are small and many
        return rate(
            data.a,
            data.b,
            data.y,
            n_agents=len(data.agent_ids),
            w=data.w,
            count=data.count,
            clustered=data.clustered,
            tasks=data.tasks,
            reference=reference,
            ridge=params.ridge,
            r0=params.r0,
            bootstrap=params.bootstrap,
            seed=data.seed,
        )


# What a replicate resampled, in the board's words: the live board's clusters are judges.
BOOTSTRAP_UNITS = {"battles": "battles", "clusters": "judges", "tasks": "tasks"}


def bootstrap_unit(rating: Rating) -> str:
    """What the rating's bootstrap resampled: battles, judges or tasks."""
    return BOOTSTRAP_UNITS[rating.bootstrap_resamples]


def _points(
    snapshot: RatingSnapshot, data: FitInput, rating: Rating, n0: int, style: StyleFit | None = None
) -> list:
    points = []
    for estimate in rating.agents:
        provisional = estimate.battles < n0
        published = not provisional and not estimate.unavailable and estimate.rating is not None
        points.append(
            RatingPoint(
                snapshot=snapshot,
                agent_id=data.agent_ids[estimate.index],
                # Withheld at the source: a provisional or unavailable agent has no number.
                rating=estimate.rating if published else None,
                lower=estimate.lower if published else None,
                upper=estimate.upper if published else None,
                rank_lower=estimate.rank_lower if published else None,
                rank_upper=estimate.rank_upper if published else None,
                unavailable=estimate.unavailable or "",
                battles=estimate.battles,
                weight=estimate.weight,
                provisional=provisional,
            )
        )
        figures = style.points.get(points[-1].agent_id) if style and published else None
        if figures is not None:
            point = points[-1]
            point.style_rating, point.style_lower, point.style_upper, point.style_rank = figures
    return points


def refit_style(
    *, arena_id: int, data: FitInput, params: FitParams, published: set[int],
    category: str | None = None,
) -> StyleFit:  # fmt: skip
    """Style control (``ratings.style_board``) beside the plain fit of ``data``: its
    agents, centring, ridge and R0."""
    return board_style(arena_id=arena_id, agent_ids=data.agent_ids,
                       reference=fit_reference(data, params), published=published,
                       r0=params.r0, ridge=params.ridge, category=category)  # fmt: skip


def run_styles_record(*, battles) -> int:
    """Stores the ``RunStyle`` of every run of the battles of the queryset ``battles``
    that has none yet (the refit's part: later reads take them from there); returns how
    many. Concurrent refits of one arena are serialised by their lock; a row another
    writer stored first is left as it is."""
    measured = measure_runs(unmeasured_runs(battles.order_by().values("pk")))
    RunStyle.objects.bulk_create(
        [RunStyle(run_id=m["pk"], battle_id=m["battle_id"], side=m["side"],
                  **{name: None if math.isnan(m[name]) else m[name] for name in FEATURES})
         for m in measured],
        batch_size=5000,
        ignore_conflicts=True,
    )  # fmt: skip
    return len(measured)


def published_agents(data: FitInput, rating: Rating, n0: int) -> set[int]:
    """The agents whose plain rating the board publishes (``_points``' rule)."""
    return {p.agent_id for p in _points(None, data, rating, n0) if p.rating is not None}


def snapshot_style_backfill(*, snapshot: RatingSnapshot, data: FitInput, params: FitParams) -> None:
    """Style control for a published snapshot computed before it existed (its ``style``
    empty), on the battles it counted (the input's digest is the snapshot's)."""
    points = list(RatingPoint.objects.filter(snapshot=snapshot))
    published = {p.agent_id for p in points if p.rating is not None}
    style = refit_style(arena_id=snapshot.arena_id, data=data, params=params, published=published)
    for point in points:
        figures = style.points.get(point.agent_id)
        if figures is not None:
            point.style_rating, point.style_lower, point.style_upper, point.style_rank = figures
    RatingPoint.objects.bulk_update(
        points, ["style_rating", "style_lower", "style_upper", "style_rank"]
    )
    snapshot.style = style.document
    snapshot.save(update_fields=["style"])


def battles_stamp_incorporated(
    *, arena_id: int, snapshot_id: int, battle_ids: list[int], at: datetime
) -> int:
    """Records r = ``at`` for the battles of ``battle_ids``: one ``Incorporation`` (the
    run; ℓ follows when a board is next served) and an ``IncorporatedBattle`` row each.
    Returns how many battles got it: all of them. None has r yet: the ids were read
    under the arena's RefitState lock, and only a refit holding it writes these rows
    (a duplicate would fail the refit, not be skipped: ON CONFLICT doubled the insert).

    The ids are those one refit read counted (``FitInput.unstamped_ids``): a battle
    decided after that read is not among them, whatever its id (ids follow submission,
    not decision), so no bound on the id or the time can stand for the list. One
    statement for the battles, insert-only on a two-column table (no battle row is
    written); the ids travel as one array literal (a parameter per id, or psycopg
    adapting a million ints, costs seconds). Precondition: inside the transaction that
    publishes ``snapshot_id`` (or, for an unchanged input, with the arena's RefitState
    locked, ``snapshot_id`` the one published)."""
    if not battle_ids:
        return 0
    run = Incorporation.objects.create(
        arena_id=arena_id, snapshot_id=snapshot_id, incorporated_at=at
    )
    table = connection.ops.quote_name(IncorporatedBattle._meta.db_table)
    battle = connection.ops.quote_name(IncorporatedBattle._meta.get_field("battle").column)
    incorporation = connection.ops.quote_name(
        IncorporatedBattle._meta.get_field("incorporation").column
    )
    insert = f"INSERT INTO {table} ({battle}, {incorporation})"
    ids = ",".join(map(str, battle_ids))
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"{insert} SELECT unnest(%s::text::bigint[]), %s", ["{" + ids + "}", run.pk]
            )
        else:  # SQLite (``make run``'s embedded database): no arrays, a JSON list instead
            sql = f"{insert} SELECT value, %s FROM json_each(%s)"  # noqa: S608 (names from models)
            cursor.execute(sql, [run.pk, f"[{ids}]"])
        return cursor.rowcount


def arena_refit(*, arena_id: int) -> RefitResult:
    """Refits the arena and publishes a snapshot when its input changed since the last
    one; records the run either way. Refits of one arena are serialised by a row lock on
    its RefitState, so two running at once write one snapshot: the second finds the
    digest unchanged. r is stamped in the same transaction as the snapshot, on exactly
    the battles its read counted (``battles_stamp_incorporated``). Precondition: not
    inside a transaction (the push follows the commit)."""
    params = FitParams.for_arena(arena_id)
    state, _ = RefitState.objects.get_or_create(arena_id=arena_id)
    snapshot = None
    with transaction.atomic():
        # Lock first, read the snapshot after: a join in the locking statement would see
        # the snapshot a concurrent run just committed as missing (its statement snapshot
        # predates it), and that run would write a second one.
        state = RefitState.objects.select_for_update().get(pk=state.pk)
        started, read_at = time.perf_counter(), timezone.now()
        data = refit_input(arena_id=arena_id, params=params)
        previous = RatingSnapshot.objects.filter(pk=state.snapshot_id).first()
        changed = data.battles > 0 if previous is None else previous.digest != data.digest
        rating = fit(data, params) if changed and data.battles else None
        style = None
        if data.battles:  # each new run's style measured once, for every board's reads
            run_styles_record(battles=rated_battles(arena_id=arena_id))
        if rating is not None:  # the plain fit is done: style control reads on its own
            published = published_agents(data, rating, params.min_battles)
            style = refit_style(arena_id=arena_id, data=data, params=params, published=published)
        elif not changed and previous is not None and previous.style is None and data.battles:
            snapshot_style_backfill(snapshot=previous, data=data, params=params)
        compute_ms = round((time.perf_counter() - started) * 1000)
        now = timezone.now()
        if changed:
            snapshot = RatingSnapshot.objects.create(
                arena_id=arena_id,
                computed_at=now,
                compute_ms=compute_ms,
                battles=data.battles,
                digest=data.digest,
                ridge=params.ridge,
                bootstrap_replicates=rating.bootstrap_replicates if rating else 0,
                seed=data.seed,
                min_battles=params.min_battles,
                iterations=rating.iterations if rating else 0,
                converged=rating.converged if rating else True,
                clusters=rating.clusters if rating else None,
                robust_published=rating.robust_published if rating else False,
                interval=rating.interval if rating else "battle",
                critical_value=rating.critical_value if rating else 1.96,
                effective_clusters=rating.effective_clusters if rating else None,
                floored=rating.floored if rating else 0,
                bootstrap_unit=bootstrap_unit(rating) if rating else params.bootstrap_unit,
                bootstrap_clusters=rating.bootstrap_clusters if rating else None,
                style=style.document if style else None,
            )
            if rating is not None:
                RatingPoint.objects.bulk_create(
                    _points(snapshot, data, rating, params.min_battles, style)
                )
            state.snapshot = snapshot
        state.runs = F("runs") + 1
        state.last_run_at = now
        state.last_compute_ms = compute_ms
        state.last_wrote_snapshot = changed
        if state.snapshot_id is not None:  # every battle the read saw is in it from now
            state.pending_floor = read_at - PENDING_LOOKBACK
        state.save(
            update_fields=["snapshot", "runs", "last_run_at", "last_compute_ms",
                           "last_wrote_snapshot", "pending_floor"]
        )  # fmt: skip
        # r (SPEC §6): the first published refit that depends on the battle, committed
        # with it. An unchanged input still stamps what its published snapshot counts.
        stamped = 0
        if state.snapshot_id is not None:
            stamped = battles_stamp_incorporated(
                arena_id=arena_id,
                snapshot_id=state.snapshot_id,
                battle_ids=data.unstamped_ids,
                at=now,
            )
    leaderboard_changed(arena_id=arena_id)  # every run: the board shows when it last ran
    if changed or stamped:
        leaderboard_push(arena_id=arena_id)
    if rating is not None and not rating.converged:
        # Published (the board must move on), but never as converged: the snapshot says
        # so, the board's footer and the metrics page show it, and operators are told.
        logger.error(
            "refit of arena %s did NOT converge after %s iterations (%s battles); "
            "snapshot %s is published flagged as not converged",
            arena_id,
            rating.iterations,
            data.battles,
            snapshot.pk if snapshot else None,
        )
    if changed:
        logger.info(
            "refit of arena %s: %s battles, %s ms, %s newly incorporated",
            arena_id,
            data.battles,
            compute_ms,
            stamped,
        )
    return RefitResult(
        snapshot=snapshot, battles=data.battles, compute_ms=compute_ms, stamped=stamped
    )
