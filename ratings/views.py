"""The leaderboard and agent pages. Public: roster identities, published ratings and
aggregate counts; never a task, a team or a battle."""

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET

from agents.models import PUBLIC_ARENA_SLUG, Arena
from battles.classify import CATEGORY_LABELS
from ratings.board_query import (
    STYLE_CONTROLLED,
    BoardQuery,
    BoardQueryError,
    board_query,
    filter_options,
)
from ratings.category_boards import board_for_query
from ratings.heatmap_svg import battle_count_heatmap, win_rate_heatmap
from ratings.matrices import MAX_AGENTS, PairMatrices
from ratings.selectors import (
    NoSuchBoard,
    agent_history,
    agent_public,
    board_arena,
    board_context,
    demo_arena,
    has_published_rating,
    head_to_head,
    leaderboard_rows,
)
from ratings.services import leaderboard_current
from ratings.style_board import style_covariates
from ratings.svg import HistoryPoint, rating_history


def _url(name: str, params: dict[str, str], *args: str) -> str:
    path = reverse(name, args=args)
    return f"{path}?{urlencode(params)}" if params else path


def _arena_params(request: HttpRequest) -> dict[str, str]:
    """The ``arena`` a reader asked for, kept in the links between boards and pages."""
    requested = request.GET.get("arena", "").strip()
    return {"arena": requested} if requested else {}


def _demo_context(arena: Arena, standing_in: bool) -> dict[str, Any]:
    """What the pages say about the demo board: on it, that its data is simulated and
    where the arena's own board is; on the public board, that a demo board exists."""
    if not arena.demo:
        demo = demo_arena() if arena.slug == PUBLIC_ARENA_SLUG else None
        url = _url("ratings:leaderboard", {"arena": demo.slug}) if demo else None
        return {"demo": None, "demo_board_url": url}
    public = Arena.objects.public()
    return {
        "demo": {
            "standing_in": standing_in,
            "public_rated": has_published_rating(arena_id=public.pk),
            "public_url": _url("ratings:leaderboard", {"arena": public.slug}),
            "n0": settings.ARENA.n0,
        }
    }


def _demo_rows(board: dict[str, Any], arena: Arena) -> dict[str, Any]:
    """The demo board's agent links lead to its own agents' pages."""
    if not arena.demo:
        return board
    rows = [{**row, "url": _url("ratings:agent", {"arena": arena.slug}, row["slug"])}
            for row in board["rows"]]  # fmt: skip
    return {**board, "rows": rows}


def _board_links(
    query: BoardQuery,
    board: dict[str, Any],
    page: str = "ratings:leaderboard",
    keep: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The boards a reader can switch to (overall and each category) on ``page``,
    keeping the filters (and ``keep``: the arena asked for); each says how many rated
    battles it rests on."""
    keep = keep or {}
    links = [
        {
            "label": "Overall",
            "url": _url(page, {**query.params(category=""), **keep}),
            "current": not query.category,
            "battles": board["refit"]["battles"],
        }
    ]
    for item in board["categories"]:
        links.append(
            {
                "label": item["label"],
                "url": _url(page, {**query.params(category=item["slug"]), **keep}),
                "current": query.category == item["slug"],
                "battles": item["battles"],
            }
        )
    return links


def _bad_query(
    request: HttpRequest, arena: Arena, template: str, exc: Exception, status: int = 400
) -> HttpResponse:
    return render(request, template, {"arena": arena, "query_error": str(exc)}, status=status)


def _no_board(request: HttpRequest, template: str, exc: NoSuchBoard) -> HttpResponse:
    """An ``arena`` that names no board here: 404, saying which boards exist."""
    return _bad_query(request, Arena.objects.public(), template, exc, status=404)


@dataclass(frozen=True)
class _BoardRequest:
    """What a board page's request asks for: the arena kept in its links, the board's
    arena (and whether the demo board stands in for the public one) and its query."""

    keep: dict[str, str]
    arena: Arena
    standing_in: bool
    query: BoardQuery


def _board_request(request: HttpRequest, template: str) -> "_BoardRequest | HttpResponse":
    """The board a page shows, or the page's answer when the request names none (404)
    or asks a query the board cannot answer (400)."""
    keep = _arena_params(request)
    try:
        arena, standing_in = board_arena(keep.get("arena", ""))
    except NoSuchBoard as exc:
        return _no_board(request, template, exc)
    try:
        query = board_query(request.GET)
    except BoardQueryError as exc:
        return _bad_query(request, arena, template, exc)
    return _BoardRequest(keep, arena, standing_in, query)


def _order_links(query: BoardQuery, keep: dict[str, str]) -> dict[str, Any]:
    """The board's two orders (plain rating, style-controlled rating) as links keeping
    the board and its filters, and the link to the method of style control."""
    return {
        "style": query.style == STYLE_CONTROLLED,
        "plain_url": _url("ratings:leaderboard", {**query.params(style=""), **keep}),
        "style_url": _url("ratings:leaderboard", {**query.params(style=STYLE_CONTROLLED), **keep}),
        "method_url": _url(
            "ratings:method", {**BoardQuery(category=query.category).params(), **keep}
        ),
    }


@require_GET
def leaderboard_page(request: HttpRequest) -> HttpResponse:
    """The overall board (live: its rows follow every decided battle over the socket) or
    a task category's (``?category=``), narrowed by ``kind``, ``provider`` and
    ``organisation``; a narrowed or category board is as of the last refit, not live.
    ``?arena=demo`` is the demo board (docs/leaderboard.md "The demo board"), shown too
    while the public arena has no rating yet; it is never live."""
    asked = _board_request(request, "ratings/leaderboard.html")
    if isinstance(asked, HttpResponse):
        return asked
    keep, arena, standing_in, query = asked.keep, asked.arena, asked.standing_in, asked.query
    board = _demo_rows(board_for_query(arena_id=arena.pk, query=query), arena)
    everyone = leaderboard_current(arena_id=arena.pk)["rows"]  # the filters' choices
    context = board_context(board)
    return render(
        request,
        "ratings/leaderboard.html",
        {
            "arena": arena,
            **context,
            **_demo_context(arena, standing_in),
            "query": query,
            "keep": keep,
            # (ordered by style, the rows a push sends would come in the plain order)
            "live": not query.category
            and not query.narrowed
            and not arena.demo
            and not query.style,
            "order": _order_links(query, keep),
            "options": filter_options(everyone),
            "boards": _board_links(query, board, keep=keep),
            "category_label": CATEGORY_LABELS.get(query.category, ""),
            "matrices_url": _url("ratings:matrices", {**query.params(), **keep}),
            "clear_url": _url(
                "ratings:leaderboard",
                {**query.params(kind="", provider="", organisation=""), **keep},
            ),
        },
    )


@require_GET
def method_page(request: HttpRequest) -> HttpResponse:
    """How a board's style-controlled ratings are made: the style covariates, their
    coefficients with 95% intervals (Elo per standard deviation), what was dropped and
    why, and what style control does and does not control. Public: figures about the
    board's battles as a whole, never a task, a team or a battle."""
    asked = _board_request(request, "ratings/method.html")
    if isinstance(asked, HttpResponse):
        return asked
    keep, arena, standing_in, query = asked.keep, asked.arena, asked.standing_in, asked.query
    query = BoardQuery(category=query.category)  # the board's method: filters play no part
    board = board_for_query(arena_id=arena.pk, query=query)
    style = board.get("style")
    return render(
        request,
        "ratings/method.html",
        {
            "arena": arena,
            "query": query,
            "style": style,
            "covariates": style_covariates(style),
            "category_label": CATEGORY_LABELS.get(query.category, ""),
            "battles": board["category"]["battles"]
            if board["category"]
            else board["refit"]["battles"],
            "board_url": _url("ratings:leaderboard", {**query.params(), **keep}),
            "style_board_url": _url(
                "ratings:leaderboard", {**query.params(style=STYLE_CONTROLLED), **keep}
            ),
            "boards": _board_links(query, board, "ratings:method", keep=keep),
            **_demo_context(arena, standing_in),
        },
    )


@require_GET
def matrices_page(request: HttpRequest) -> HttpResponse:
    """Win rates and battle counts between the agents of a board, as heatmaps with the
    same figures in tables."""
    asked = _board_request(request, "ratings/matrices.html")
    if isinstance(asked, HttpResponse):
        return asked
    keep, arena, standing_in, query = asked.keep, asked.arena, asked.standing_in, asked.query
    board = board_for_query(arena_id=arena.pk, query=query)
    doc = board["matrices"]
    tables = PairMatrices(
        agents=list(range(len(doc["agents"]))),
        battles=doc["battles"],
        win_rate=doc["win_rate"],
        left_out=doc["left_out"],
    )
    names = doc["names"]
    scope = CATEGORY_LABELS.get(query.category, "All tasks")
    rows = [
        {
            "number": i + 1,
            "agent": name,
            "slug": doc["agents"][i],
            "cells": [
                {"rate": doc["win_rate"][i][j], "battles": doc["battles"][i][j], "self": i == j}
                for j in range(len(names))
            ],
        }
        for i, name in enumerate(names)
    ]
    return render(
        request,
        "ratings/matrices.html",
        {
            "arena": arena,
            "query": query,
            "scope": scope,
            "rows": rows,
            "names": names,
            "left_out": doc["left_out"],
            "max_agents": MAX_AGENTS,
            "total_battles": tables.total_battles,
            **_demo_context(arena, standing_in),
            "board_url": _url("ratings:leaderboard", {**query.params(), **keep}),
            "boards": _board_links(query, board, "ratings:matrices", keep=keep),
            # Built by ratings.heatmap_svg from numbers and escaped text only.
            "win_rate_svg": mark_safe(  # noqa: S308
                win_rate_heatmap(tables, names, title=f"Win rate between agents, {scope.lower()}")
            ),
            "battles_svg": mark_safe(  # noqa: S308
                battle_count_heatmap(
                    tables, names, title=f"Rated battles between agents, {scope.lower()}"
                )
            ),
        },
    )


@require_GET
def agent_page(request: HttpRequest, slug: str) -> HttpResponse:
    """An agent of the public arena (of the demo board with ``?arena=demo``): its
    published and streaming values, its rating history over the refit snapshots, and
    its record against each opponent."""
    keep = _arena_params(request)
    # (without ?arena=, the public arena's agent, even while the demo board stands in)
    try:
        arena = board_arena(keep["arena"])[0] if keep else Arena.objects.public()
    except NoSuchBoard as exc:
        raise Http404(str(exc)) from None
    agent = agent_public(arena_id=arena.pk, slug=slug)
    if agent is None:
        raise Http404("No such agent.")
    history = agent_history(agent_id=agent.pk)
    row = next((r for r in leaderboard_rows(arena_id=arena.pk) if r["slug"] == agent.slug), None)
    chart = rating_history(
        [HistoryPoint(p["computed_at"], p["rating"], p["lower"], p["upper"]) for p in history],
        title=f"Published rating of {agent.display_name}",
    )
    return render(
        request,
        "ratings/agent.html",
        {
            "arena": arena,
            "agent": agent,
            "row": row,
            "streaming": getattr(agent, "rating", None),
            "history": history,
            "latest": history[-1] if history else None,
            # Built by ratings.svg from numbers and escaped text only.
            "history_svg": mark_safe(chart),  # noqa: S308
            "opponents": head_to_head(agent_id=agent.pk, arena_id=arena.pk),
            **_demo_context(arena, False),
            "arena_query": f"?{urlencode(keep)}" if keep else "",
            "n0": settings.ARENA.n0,
        },
    )
