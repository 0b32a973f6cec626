"""The batch refit of SPEC §7.2 as a service: load an arena's rated battles, fit
Bradley-Terry with intervals and rank bands (``ratings.bradley_terry.rate``), publish a
snapshot when the input changed, stamp r on the battles it newly includes, push the board.

Refit input: battles of the arena that are decided, have an outcome and no exclusion
reason (retired agents' battles included); y from side A's view; w the evidence weight
(1 when null); cluster the judge whose vote decided it (``Battle.cluster_judge``; SPEC
§7.3 clusters = judges).
"""

import hashlib
import logging
import time
from dataclasses import dataclass

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from battles.models import Battle
from ratings.bradley_terry import Rating, rate
from ratings.models import RatingPoint, RatingSnapshot, RefitState
from ratings.selectors import rated_battles
from ratings.services import OUTCOME_Y, leaderboard_push

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitParams:
    ridge: float
    r0: float
    bootstrap: int
    min_battles: int

    @classmethod
    def from_settings(cls) -> "FitParams":
        arena = settings.ARENA
        return cls(
            ridge=float(arena.ridge),
            r0=float(arena.r0),
            bootstrap=int(arena.bootstrap_replicates),
            min_battles=int(arena.n0),
        )


@dataclass(frozen=True)
class FitInput:
    """The rated battles of an arena as arrays, in battle id order."""

    battle_ids: list[int]
    unstamped_ids: list[int]  # battles no published refit has included yet (r is null)
    agent_ids: list[int]  # index → Agent id
    a: np.ndarray
    b: np.ndarray
    y: np.ndarray
    w: np.ndarray
    cluster: np.ndarray
    digest: str

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


def refit_input(*, arena_id: int, params: FitParams) -> FitInput:
    rows = list(
        rated_battles(arena_id=arena_id)
        .order_by("pk")
        .values_list(
            "pk",
            "agent_a_id",
            "agent_b_id",
            "outcome",
            "evidence_weight",
            "incorporated_at",
            "cluster_judge_id",
        )
    )
    judges = {row[0]: row[6] for row in rows if row[6] is not None}
    agent_index: dict[int, int] = {}
    cluster_index: dict[int, int] = {}
    n = len(rows)
    a = np.empty(n, dtype=np.int64)
    b = np.empty(n, dtype=np.int64)
    y = np.empty(n, dtype=np.float64)
    w = np.empty(n, dtype=np.float64)
    cluster = np.empty(n, dtype=np.int64)
    digest = hashlib.sha256(
        f"ridge={params.ridge!r};r0={params.r0!r};bootstrap={params.bootstrap};"
        f"n0={params.min_battles}\n".encode()
    )
    unstamped = []
    for i, (pk, agent_a, agent_b, outcome, weight, incorporated_at, _) in enumerate(rows):
        weight = 1.0 if weight is None else float(weight)
        judge = judges.get(pk)
        a[i] = agent_index.setdefault(agent_a, len(agent_index))
        b[i] = agent_index.setdefault(agent_b, len(agent_index))
        y[i] = OUTCOME_Y[outcome]
        w[i] = weight
        # A battle whose deciding judge is gone (a deleted account) is a cluster of its own.
        key = judge if judge is not None else -pk
        cluster[i] = cluster_index.setdefault(key, len(cluster_index))
        digest.update(f"{pk},{agent_a},{agent_b},{outcome},{weight!r},{judge}\n".encode())
        if incorporated_at is None:
            unstamped.append(pk)
    return FitInput(
        battle_ids=[row[0] for row in rows],
        unstamped_ids=unstamped,
        agent_ids=list(agent_index),
        a=a,
        b=b,
        y=y,
        w=w,
        cluster=cluster,
        digest=digest.hexdigest(),
    )


def fit(data: FitInput, params: FitParams) -> Rating:
    """Bradley-Terry on the input, centred on the non-provisional agents (all agents
    with battles while none is non-provisional yet)."""
    counts = np.bincount(np.concatenate([data.a, data.b]), minlength=len(data.agent_ids))
    reference = counts >= params.min_battles
    return rate(
        data.a,
        data.b,
        data.y,
        n_agents=len(data.agent_ids),
        w=data.w,
        cluster=data.cluster,
        reference=reference if reference.any() else None,
        ridge=params.ridge,
        r0=params.r0,
        bootstrap=params.bootstrap,
        seed=data.seed,
    )


def _points(snapshot: RatingSnapshot, data: FitInput, rating: Rating, n0: int) -> list:
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
    return points


def arena_refit(*, arena_id: int) -> RefitResult:
    """Refits the arena and publishes a snapshot when its input changed since the last
    one; records the run either way. Refits of one arena are serialised by a row lock on
    its RefitState, so two running at once write one snapshot: the second finds the
    digest unchanged. Precondition: not inside a transaction (stamping r and the push
    follow the commit of the snapshot)."""
    params = FitParams.from_settings()
    state, _ = RefitState.objects.get_or_create(arena_id=arena_id)
    snapshot = None
    with transaction.atomic():
        # Lock first, read the snapshot after: a join in the locking statement would see
        # the snapshot a concurrent run just committed as missing (its statement snapshot
        # predates it), and that run would write a second one.
        state = RefitState.objects.select_for_update().get(pk=state.pk)
        started = time.perf_counter()
        data = refit_input(arena_id=arena_id, params=params)
        previous = RatingSnapshot.objects.filter(pk=state.snapshot_id).first()
        changed = bool(data.battle_ids) if previous is None else previous.digest != data.digest
        rating = fit(data, params) if changed and data.battle_ids else None
        compute_ms = round((time.perf_counter() - started) * 1000)
        now = timezone.now()
        if changed:
            snapshot = RatingSnapshot.objects.create(
                arena_id=arena_id,
                computed_at=now,
                compute_ms=compute_ms,
                battles=len(data.battle_ids),
                digest=data.digest,
                ridge=params.ridge,
                bootstrap_replicates=rating.bootstrap_replicates if rating else 0,
                seed=data.seed,
                min_battles=params.min_battles,
                iterations=rating.iterations if rating else 0,
                converged=rating.converged if rating else True,
                clusters=rating.clusters if rating else None,
                robust_published=rating.robust_published if rating else False,
            )
            if rating is not None:
                RatingPoint.objects.bulk_create(_points(snapshot, data, rating, params.min_battles))
            state.snapshot = snapshot
        state.runs = F("runs") + 1
        state.last_run_at = now
        state.last_compute_ms = compute_ms
        state.last_wrote_snapshot = changed
        state.save(
            update_fields=["snapshot", "runs", "last_run_at", "last_compute_ms",
                           "last_wrote_snapshot"]
        )  # fmt: skip
    # r (SPEC §6): the first published refit that depends on the battle, now committed.
    # An unchanged input still stamps battles a crashed run committed but never stamped.
    stamped = 0
    if data.unstamped_ids and state.snapshot_id is not None:
        stamped = Battle.objects.filter(pk__in=data.unstamped_ids, incorporated_at=None).update(
            incorporated_at=timezone.now()
        )
    if changed or stamped:
        leaderboard_push(arena_id=arena_id)
    if changed:
        logger.info(
            "refit of arena %s: %s battles, %s ms, %s newly incorporated",
            arena_id,
            len(data.battle_ids),
            compute_ms,
            stamped,
        )
    return RefitResult(
        snapshot=snapshot, battles=len(data.battle_ids), compute_ms=compute_ms, stamped=stamped
    )
