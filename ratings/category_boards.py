"""Boards per task category (battles.classify: browsing, files and data, general).

Each category's board is a Bradley-Terry refit of its own, with its own intervals and
rank bands, over the rated battles whose task has that category: the same input rules,
fit, centring, withholding and bootstrap as the published board (``ratings.refit``),
on the subset. An agent with fewer than n0 rated battles *in the category* is
provisional there; a category where no agent has n0 yet publishes no numbers at all and
says so (a fit on a handful of battles would print intervals hundreds of points wide),
and so does one where fewer than two agents have (one agent alone is its own centre).

The boards are computed by the refit job (``category_boards_refresh``, after the
arena's refit, every Δ) and kept in the cache, one document per category, replaced
when its input's digest changes; a read that finds none (a flushed cache, a fresh
deployment) builds it. Nothing is stored in the database: a board is recomputed from
the battles at any time.
"""

import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from battles.classify import BOARD_CATEGORIES, CATEGORY_LABELS
from battles.services.categories import task_categories_backfill
from ratings.board_query import BoardQuery, board_narrow, board_ordered
from ratings.refit import (
    FitInput,
    FitParams,
    _points,
    bootstrap_unit,
    fit,
    refit_input,
    refit_style,
)
from ratings.selectors import (
    battle_categories,
    category_leaderboard,
    matrices_document,
    pair_tallies,
)
from ratings.services import leaderboard_current
from ratings.style_board import StyleFit, not_enough

logger = logging.getLogger(__name__)


# Agents with a rating a category's board needs before it shows any number.
MIN_RATED_AGENTS = 2
TOO_FEW_FOR_STYLE = "Too few battles on these tasks for a rating, so none with style held equal."


def _key(arena_id: int, category: str) -> str:
    return f"category-board:{arena_id}:{category}"


def _extras_key(arena_id: int) -> str:
    return f"board-pairs:{arena_id}"


def _ttl_s() -> int:
    """How long a stored document may outlive the refit job that keeps it fresh (should
    the job stop, a read rebuilds it after this)."""
    return max(300, 5 * settings.ARENA.refit_period_s)


def _agent_battles(data: FitInput) -> dict[int, int]:
    counts: dict[int, int] = {}
    for a, b, n in zip(data.a.tolist(), data.b.tolist(), data.count.tolist(), strict=True):
        for index in (a, b):
            agent = data.agent_ids[index]
            counts[agent] = counts.get(agent, 0) + n
    return counts


def _pairs(data: FitInput) -> list[tuple[int, int, float, int]]:
    """Battles per (lower id, higher id, y from the lower's side), unweighted: the
    matrices' input."""
    found: dict[tuple[int, int, float], int] = {}
    for a, b, y, n in zip(
        data.a.tolist(), data.b.tolist(), data.y.tolist(), data.count.tolist(), strict=True
    ):
        key = (data.agent_ids[a], data.agent_ids[b], y)
        found[key] = found.get(key, 0) + n
    return [(lo, hi, y, n) for (lo, hi, y), n in sorted(found.items())]


def category_board_build(
    *, arena_id: int, category: str, data: FitInput | None = None, params: FitParams | None = None
) -> dict[str, Any]:
    """The category's board document: its fit's figures per agent (``points``, by agent
    id), the pair counts for its matrices and what the fit rests on."""
    if category not in BOARD_CATEGORIES:
        raise ValueError(f"unknown category {category!r}")
    params = params or FitParams.for_arena(arena_id)
    started = time.perf_counter()
    if data is None:
        data = refit_input(arena_id=arena_id, params=params, category=category)
    battles = _agent_battles(data)
    # A board needs two agents with n0 battles each: one alone is centred on itself and
    # would show 1000 with an interval of zero width.
    eligible = sum(n >= params.min_battles for n in battles.values())
    rating = fit(data, params) if eligible >= MIN_RATED_AGENTS else None
    if rating is not None and not rating.converged:
        logger.error(
            "category board %s of arena %s: the refit did NOT converge after %s iterations",
            category,
            arena_id,
            rating.iterations,
        )
    if rating is not None:
        published = [p for p in _points(None, data, rating, params.min_battles) if p.rating]
        if len(published) < MIN_RATED_AGENTS:
            rating = None
    points: dict[int, dict[str, Any]] = {}
    style: StyleFit = not_enough(TOO_FEW_FOR_STYLE)
    if rating is not None:
        # The published board's own rule: a provisional or unplaceable agent has no number.
        published = {p.agent_id for p in _points(None, data, rating, params.min_battles)
                     if p.rating is not None}  # fmt: skip
        style = refit_style(arena_id=arena_id, data=data, params=params,
                            published=published, category=category)  # fmt: skip
        for point in _points(None, data, rating, params.min_battles, style):
            points[point.agent_id] = {
                "rating": point.rating,
                "lower": point.lower,
                "upper": point.upper,
                "rank_lower": point.rank_lower,
                "rank_upper": point.rank_upper,
                "provisional": point.provisional,
                "unavailable": point.unavailable or None,
                "battles": point.battles,
                **_style_fields(point),
            }
    else:
        for agent, n in battles.items():
            points[agent] = {
                "rating": None,
                "lower": None,
                "upper": None,
                "rank_lower": None,
                "rank_upper": None,
                "provisional": True,
                "unavailable": None,
                "battles": n,
                **_style_fields(None),
            }
    rated = sum(p["rating"] is not None for p in points.values())
    return {
        "category": category,
        "label": CATEGORY_LABELS[category],
        "battles": data.battles,
        "digest": data.digest,
        "computed_at": timezone.now(),
        "compute_ms": round((time.perf_counter() - started) * 1000),
        "min_battles": params.min_battles,
        "min_rated_agents": MIN_RATED_AGENTS,
        "enough": rated > 0,
        "rated_agents": rated,
        "robust_intervals": bool(rating and rating.robust_published),
        "clusters": rating.clusters if rating else None,
        "bootstrap_replicates": rating.bootstrap_replicates if rating else 0,
        "bootstrap_unit": bootstrap_unit(rating) if rating else None,
        "bootstrap_clusters": rating.bootstrap_clusters if rating else None,
        # As the published board's snapshot: False when the fit stopped at its iteration
        # cap (the board says its numbers may be off); None when there is no fit.
        "converged": rating.converged if rating else None,
        "iterations": rating.iterations if rating else None,
        "points": points,
        "pairs": _pairs(data),
        # style control of this board (ratings.style_board): its table, or why none
        "style": style.document,
    }


def _style_fields(point) -> dict[str, Any]:
    names = ("style_rating", "style_lower", "style_upper", "style_rank")
    return {name: getattr(point, name, None) for name in names}


def category_board(*, arena_id: int, category: str) -> dict[str, Any]:
    """The category's board as the refit job last computed it; built now when the cache
    has none (and stored, unless inside a transaction: a board of rows that may never
    commit is served, not kept). Redis away: built on every read."""
    try:
        document = cache.get(_key(arena_id, category))
    except Exception:
        logger.warning("category board cache unavailable; building the board", exc_info=True)
        return category_board_build(arena_id=arena_id, category=category)
    if document is None:
        document = category_board_build(arena_id=arena_id, category=category)
        if not transaction.get_connection().in_atomic_block:
            _store(arena_id, category, document)
    return document


def _store(arena_id: int, category: str, document: dict[str, Any]) -> None:
    try:
        cache.set(_key(arena_id, category), document, timeout=_ttl_s())
    except Exception:
        logger.warning("category board not stored", exc_info=True)


def category_boards_refresh(*, arena_id: int) -> list[str]:
    """The refit job's part: first gives a category to tasks that have none (made before
    categories, or by an import), then refits each category whose input changed since
    its stored board. Returns the categories refitted."""
    filled = task_categories_backfill()
    if filled:
        logger.info("categorised %s tasks", filled)
    _store_pairs(arena_id, _pairs_build(arena_id))
    params = FitParams.for_arena(arena_id)
    refitted = []
    for category in BOARD_CATEGORIES:
        data = refit_input(arena_id=arena_id, params=params, category=category)
        try:
            stored = cache.get(_key(arena_id, category))
        except Exception:
            stored = None
        if stored is not None and stored.get("digest") == data.digest:
            continue
        _store(
            arena_id,
            category,
            category_board_build(arena_id=arena_id, category=category, data=data, params=params),
        )
        refitted.append(category)
    return refitted


def board_for_query(*, arena_id: int, query: BoardQuery) -> dict[str, Any]:
    """The board a reader asked for (``ratings.board_query.BoardQuery``): the published
    overall board, or a category's, narrowed to the agents the filters keep."""
    board = leaderboard_current(arena_id=arena_id)
    tallies = board_pairs(arena_id=arena_id)
    board = {**board, "categories": battle_categories(tallies["pairs"])}
    if query.category:
        document = category_board(arena_id=arena_id, category=query.category)
        board = category_leaderboard(board, document)
    else:
        pairs = [(lo, hi, y, n) for lo, hi, y, _, n in tallies["pairs"]]
        board["matrices"] = matrices_document(board["rows"], pairs)
    return board_ordered(board_narrow(board, query), query)


def _pairs_build(arena_id: int) -> dict[str, Any]:
    return {"pairs": pair_tallies(arena_id=arena_id), "computed_at": timezone.now()}


def _store_pairs(arena_id: int, document: dict[str, Any]) -> None:
    try:
        cache.set(_extras_key(arena_id), document, timeout=_ttl_s())
    except Exception:
        logger.warning("board pair counts not stored", exc_info=True)


def board_pairs(*, arena_id: int) -> dict[str, Any]:
    """The arena's rated battles per (agent pair, outcome, task category), as the refit
    job last counted them (``ratings.selectors.pair_tallies``; a read that finds none
    counts them now): the overall matrices and the boards' battle counts. Kept apart
    from the board document, which is rebuilt on every vote: this count reads every
    rated battle, so it runs once per refit, not once per vote."""
    try:
        document = cache.get(_extras_key(arena_id))
    except Exception:
        document = None
    if document is None:
        document = _pairs_build(arena_id)
        if not transaction.get_connection().in_atomic_block:
            _store_pairs(arena_id, document)
    return document
