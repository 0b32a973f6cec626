"""The "machine-judged" board: a Bradley-Terry board of an arena over one machine
judge's verdicts (one judge model and method), never mixed into the human board.

Its input is the human board's own set of battles (``ratings.selectors.rated_battles``:
decided, with an outcome, not excluded — so never a battle a judge may still vote on),
each counted once with the machine's resolved verdict in place of the human outcome
(A a win, B a loss, a tie half of each, as the human board counts ties), weight 1. The
fit, its parameters (ridge, R0, bootstrap, n0), the centring, the withholding of
provisional and unplaceable agents and the two-agent minimum are those of the category
boards (``ratings.refit.fit``, ``ratings.category_boards``). The machine judge is one
judge: one cluster, so the intervals are battle-level (the cluster-robust one needs as
many judges as agents).

The document is cached like a category board's, replaced when its input's digest
changes: a read counts the input (one grouped query) and fits only when it changed."""

import hashlib
import logging
import time
from typing import Any

import numpy as np
from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Case, Count, F, FloatField, Value, When
from django.db.models.functions import Greatest, Least
from django.utils import timezone

from agents.models import Agent, Arena
from arena_site.exceptions import ApplicationError
from battles.models import Battle
from judging.models import MachineVerdict
from ratings.board_query import BoardQueryError, board_ordered, board_query, with_style_ranks
from ratings.bradley_terry import ClusterSums
from ratings.category_boards import MIN_RATED_AGENTS
from ratings.refit import FitInput, FitParams, fit, fit_reference
from ratings.selectors import rated_battles
from ratings.services import OUTCOME_Y
from ratings.style import STYLE_FEATURES
from ratings.style_board import StyleFit, not_enough, style_covariates, style_fit
from ratings.style_features import StyleBattles, side_features

logger = logging.getLogger(__name__)

METHODS = tuple(MachineVerdict.Method.values)
STYLE_FIELDS = ("style_rating", "style_lower", "style_upper", "style_rank")
ROUNDED = ("rating", "lower", "upper", "style_rating", "style_lower", "style_upper")


def _verdicts(*, arena_id: int, judge_model: str | None = None, method: str | None = None):
    rated = rated_battles(arena_id=arena_id).values("pk")
    verdicts = MachineVerdict.objects.filter(status="resolved", battle__in=rated)
    if judge_model is not None:
        verdicts = verdicts.filter(judge_model=judge_model, method=method)
    return verdicts


def machine_boards(*, arena_id: int) -> list[dict[str, Any]]:
    """The arena's machine boards: one per (judge model, method) with verdicts on rated
    battles, with their battle counts, in model then method order."""
    return [
        {"judge_model": row["judge_model"], "method": row["method"], "battles": row["n"]}
        for row in _verdicts(arena_id=arena_id)
        .values("judge_model", "method")
        .annotate(n=Count("pk"))
        .order_by("judge_model", "method")
    ]


def machine_board_input(
    *, arena_id: int, judge_model: str, method: str, params: FitParams
) -> FitInput:
    """The verdicts counted per (lower agent id, higher agent id, y from the lower's
    side) in the database, as the refit counts battles (``ratings.refit.refit_input``)."""
    y_a = Case(
        *(When(outcome=o, then=Value(v)) for o, v in OUTCOME_Y.items()),
        output_field=FloatField(),
    )
    rows = list(
        _verdicts(arena_id=arena_id, judge_model=judge_model, method=method)
        .order_by()
        .values(
            lo=Least("battle__agent_a_id", "battle__agent_b_id"),
            hi=Greatest("battle__agent_a_id", "battle__agent_b_id"),
            y=Case(
                When(battle__agent_a_id__lt=F("battle__agent_b_id"), then=y_a),
                default=Value(1.0) - y_a,
            ),
        )
        .annotate(n=Count("pk"))
        .order_by("lo", "hi", "y")
        .values_list("lo", "hi", "y", "n")
    )
    agent_ids = sorted({agent for lo, hi, _, _ in rows for agent in (lo, hi)})
    index = {agent: i for i, agent in enumerate(agent_ids)}
    digest = hashlib.sha256(
        f"machine {judge_model!r} {method};ridge={params.ridge!r};r0={params.r0!r};"
        f"bootstrap={params.bootstrap};n0={params.min_battles}\n".encode()
    )
    for lo, hi, y, n in rows:
        digest.update(f"{lo},{hi},{y!r},{n}\n".encode())
    pairs: dict[tuple[int, int], list[float]] = {}
    for lo, hi, y, n in rows:
        total = pairs.setdefault((index[lo], index[hi]), [0.0, 0.0])
        total[0] += n
        total[1] += n * y
    keys = sorted(pairs)
    return FitInput(
        battles=sum(n for *_, n in rows),
        unstamped_ids=[],
        agent_ids=agent_ids,
        a=np.array([index[lo] for lo, *_ in rows], dtype=np.int64),
        b=np.array([index[hi] for _, hi, *_ in rows], dtype=np.int64),
        y=np.array([y for _, _, y, _ in rows], dtype=np.float64),
        w=np.ones(len(rows), dtype=np.float64),
        count=np.array([n for *_, n in rows], dtype=np.int64),
        # one judge: one cluster
        clustered=ClusterSums(
            cluster=np.zeros(len(keys), dtype=np.int64),
            a=np.array([i for i, _ in keys], dtype=np.int64),
            b=np.array([j for _, j in keys], dtype=np.int64),
            total=np.array([pairs[k][0] for k in keys], dtype=np.float64),
            wins=np.array([pairs[k][1] for k in keys], dtype=np.float64),
        ),
        digest=digest.hexdigest(),
    )


def machine_style(
    *, arena_id: int, judge_model: str, method: str, data: FitInput, published: set[int],
    params: FitParams,
) -> StyleFit:  # fmt: skip
    """Style control of the machine board (``ratings.style_board``): its verdicts one by
    one (a battle's y the machine's), weight 1, one judge (no clusters), each battle
    side's style (``ratings.style_features``), beside the plain fit of ``data``."""
    verdicts = _verdicts(arena_id=arena_id, judge_model=judge_model, method=method)
    rows = list(
        verdicts.order_by("battle_id").values_list(
            "battle_id", "battle__agent_a_id", "battle__agent_b_id", "outcome"
        )
    )
    ids = np.array([row[0] for row in rows], dtype=np.int64)
    judged = Battle.objects.filter(pk__in=verdicts.order_by().values("battle_id"))
    features_a, features_b = side_features(judged, ids, STYLE_FEATURES)
    if np.isnan(features_a).all() and np.isnan(features_b).all():
        return not_enough("No battle this judge rated has a recorded run, so there is no "
                          "style to measure.")  # fmt: skip
    battles = StyleBattles(
        ids=ids,
        agent_a=np.array([row[1] for row in rows], dtype=np.int64),
        agent_b=np.array([row[2] for row in rows], dtype=np.int64),
        y=np.array([OUTCOME_Y[row[3]] for row in rows], dtype=np.float64),
        w=np.ones(len(rows)),
        cluster=np.zeros(len(rows), dtype=np.int64),
        features_a=features_a,
        features_b=features_b,
        names=STYLE_FEATURES,
    )
    return style_fit(battles, agent_ids=data.agent_ids, reference=fit_reference(data, params),
                     published=published, r0=params.r0, ridge=params.ridge,
                     clustered=False)  # fmt: skip


def _records(data: FitInput) -> dict[int, dict[str, int]]:
    """Wins, draws and losses per agent id, by the machine's verdicts."""
    records: dict[int, dict[str, int]] = {}
    for a, b, y, n in zip(
        data.a.tolist(), data.b.tolist(), data.y.tolist(), data.count.tolist(), strict=True
    ):
        lo, hi = data.agent_ids[a], data.agent_ids[b]
        for agent in (lo, hi):
            records.setdefault(agent, {"wins": 0, "draws": 0, "losses": 0})
        if y == 0.5:
            records[lo]["draws"] += n
            records[hi]["draws"] += n
        else:
            records[lo if y == 1.0 else hi]["wins"] += n
            records[hi if y == 1.0 else lo]["losses"] += n
    return records


def machine_board_build(
    *, arena_id: int, judge_model: str, method: str, data: FitInput | None = None
) -> dict[str, Any]:
    """The board document: per agent id its rating, interval, rank band (withheld for a
    provisional or unplaceable agent), battles and record; what the fit rests on."""
    params = FitParams.from_settings()
    started = time.perf_counter()
    if data is None:
        data = machine_board_input(
            arena_id=arena_id, judge_model=judge_model, method=method, params=params
        )
    records = _records(data)
    battles = {agent: sum(r.values()) for agent, r in records.items()}
    eligible = sum(n >= params.min_battles for n in battles.values())
    rating = fit(data, params) if eligible >= MIN_RATED_AGENTS else None
    points: dict[int, dict[str, Any]] = {}
    for agent, n in battles.items():
        points[agent] = {"rating": None, "lower": None, "upper": None, "rank_lower": None,
                         "rank_upper": None, "provisional": n < params.min_battles,
                         "unavailable": None, "battles": n, **records[agent]}  # fmt: skip
    if rating is not None:
        if not rating.converged:
            logger.error("machine board %s %s of arena %s did NOT converge", judge_model,
                         method, arena_id)  # fmt: skip
        for estimate in rating.agents:
            point = points[data.agent_ids[estimate.index]]
            point["unavailable"] = estimate.unavailable or None
            if (
                not point["provisional"]
                and not estimate.unavailable
                and estimate.rating is not None
            ):
                point.update(
                    rating=estimate.rating, lower=estimate.lower, upper=estimate.upper,
                    rank_lower=estimate.rank_lower, rank_upper=estimate.rank_upper,
                )  # fmt: skip
        if sum(p["rating"] is not None for p in points.values()) < MIN_RATED_AGENTS:
            rating = None
            for point in points.values():
                point.update(rating=None, lower=None, upper=None, rank_lower=None,
                             rank_upper=None)  # fmt: skip
    style = not_enough("Too few machine-judged battles for a rating, so none with style "
                       "held equal.")  # fmt: skip
    if rating is not None:
        published = {agent for agent, p in points.items() if p["rating"] is not None}
        style = machine_style(arena_id=arena_id, judge_model=judge_model, method=method,
                              data=data, published=published, params=params)  # fmt: skip
    for agent, point in points.items():
        figures = style.points.get(agent, (None,) * 4)
        point.update(zip(STYLE_FIELDS, figures, strict=True))
    rated = sum(p["rating"] is not None for p in points.values())
    return {
        "judge_model": judge_model,
        "method": method,
        "battles": data.battles,
        "digest": data.digest,
        "computed_at": timezone.now(),
        "compute_ms": round((time.perf_counter() - started) * 1000),
        "min_battles": params.min_battles,
        "min_rated_agents": MIN_RATED_AGENTS,
        "enough": rated > 0,
        "rated_agents": rated,
        "interval": rating.interval if rating else None,
        "bootstrap_replicates": rating.bootstrap_replicates if rating else 0,
        "converged": rating.converged if rating else None,
        "points": points,
        "style": style.document,
    }


def _key(arena_id: int, judge_model: str, method: str) -> str:
    model = hashlib.sha256(judge_model.encode()).hexdigest()[:16]
    return f"machine-board:{arena_id}:{model}:{method}"


def machine_board(*, arena_id: int, judge_model: str, method: str) -> dict[str, Any]:
    """The board as last fitted when its input is unchanged (the cache), else fitted
    now and stored (unless inside a transaction: rows that may never commit are
    served, not kept). Redis away: fitted on every read."""
    params = FitParams.from_settings()
    data = machine_board_input(
        arena_id=arena_id, judge_model=judge_model, method=method, params=params
    )
    key = _key(arena_id, judge_model, method)
    try:
        stored = cache.get(key)
    except Exception:
        logger.warning("machine board cache unavailable; fitting the board", exc_info=True)
        stored = None
    if stored is not None and stored.get("digest") == data.digest:
        return stored
    document = machine_board_build(
        arena_id=arena_id, judge_model=judge_model, method=method, data=data
    )
    if not transaction.get_connection().in_atomic_block:
        try:
            ttl = max(300, 5 * settings.ARENA.refit_period_s)
            cache.set(key, document, timeout=ttl)
        except Exception:
            logger.warning("machine board not stored", exc_info=True)
    return document


def machine_board_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The board's agents for a page or the API: rated ones by rating, then the rest by
    battles; each with its roster identity."""
    points = document["points"]
    agents = Agent.objects.filter(pk__in=list(points)).select_related("team")
    rows = []
    for agent in agents:
        point = points[agent.pk]
        rows.append(
            {
                "agent": agent.display_name,
                "slug": agent.slug,
                "provider": agent.provider,
                "kind": agent.kind,
                "organisation": agent.team.name if agent.team_id else "Arena",
                **{k: _round(v) if k in ROUNDED else v for k, v in point.items()},
            }
        )
    rows.sort(key=lambda r: (r["rating"] is None, -(r["rating"] or 0.0), -r["battles"], r["agent"]))
    for rank, row in enumerate((r for r in rows if r["rating"] is not None), start=1):
        row["rank"] = rank
    for row in rows:
        row.setdefault("rank", None)
        row.setdefault("style_rating", None)  # a board stored before style control
    return with_style_ranks(rows)  # the rank's rule, on the page's rows


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _board_choice(arena: Arena, judge_model: str | None, method: str | None, boards: list):
    """The (judge model, method) asked for, else the arena's judge's pairwise board,
    else the first there is; None without any. 400/404 with what there is."""
    if method is not None and method not in METHODS:
        raise ApplicationError(
            f"method must be one of {', '.join(METHODS)}.", code="invalid_method"
        )
    if judge_model is None and method is None:
        current = arena.machine_judge.model_id if arena.machine_judge_id else None
        ranked = sorted(boards, key=lambda b: (b["judge_model"] != current, b["method"]))
        return (ranked[0]["judge_model"], ranked[0]["method"]) if ranked else None
    found = [
        b for b in boards
        if judge_model in (None, b["judge_model"]) and method in (None, b["method"])
    ]  # fmt: skip
    if not found:
        have = ", ".join(f"{b['judge_model']} {b['method']}" for b in boards) or "none"
        raise ApplicationError(
            f"No machine board for that judge model and method (boards: {have}).",
            code="no_machine_board",
            status=404,
        )
    return found[0]["judge_model"], found[0]["method"]


def machine_board_document(
    arena: Arena, judge_model: str | None, method: str | None, style: str | None = None
) -> dict:
    """The page's and the API's board (raises ``ApplicationError`` for a bad choice or
    order); ``style`` "controlled" orders it by style-controlled rating."""
    try:
        query = board_query({"style": style or ""})
    except BoardQueryError as exc:
        raise ApplicationError(str(exc), code="invalid_board_query") from exc
    boards = machine_boards(arena_id=arena.pk)
    choice = _board_choice(arena, judge_model, method, boards)
    if choice is None:
        return {"arena": arena.slug, "judge_model": None, "method": None, "battles": 0,
                "computed_at": None, "min_battles": None, "enough": False, "interval": None,
                "converged": None, "boards": boards, "rows": [], "style": None,
                "order": query.style or "plain"}  # fmt: skip
    document = machine_board(arena_id=arena.pk, judge_model=choice[0], method=choice[1])
    body = {
        **{k: document[k] for k in ("judge_model", "method", "battles", "computed_at",
                                    "min_battles", "enough", "interval", "converged")},
        "arena": arena.slug,
        "boards": boards,
        "rows": machine_board_rows(document),
        "style": document.get("style"),
        "style_covariates": style_covariates(document.get("style")),
        "order": query.style or "plain",
    }  # fmt: skip
    return board_ordered(body, query)
