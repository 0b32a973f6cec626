"""The leaderboard and agent pages. Public: roster identities, published ratings and
aggregate counts; never a task, a team or a battle."""

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET

from agents.models import Arena
from battles.classify import CATEGORY_LABELS
from ratings.board_query import BoardQuery, BoardQueryError, board_query, filter_options
from ratings.category_boards import board_for_query
from ratings.heatmap_svg import battle_count_heatmap, win_rate_heatmap
from ratings.matrices import MAX_AGENTS, PairMatrices
from ratings.selectors import (
    agent_history,
    agent_public,
    board_context,
    head_to_head,
    leaderboard_rows,
)
from ratings.services import leaderboard_current
from ratings.svg import HistoryPoint, rating_history


def _url(name: str, params: dict[str, str]) -> str:
    path = reverse(name)
    return f"{path}?{urlencode(params)}" if params else path


def _board_links(
    query: BoardQuery, board: dict[str, Any], page: str = "ratings:leaderboard"
) -> list[dict[str, Any]]:
    """The boards a reader can switch to (overall and each category) on ``page``,
    keeping the filters; each says how many rated battles it rests on."""
    links = [
        {
            "label": "Overall",
            "url": _url(page, query.params(category="")),
            "current": not query.category,
            "battles": board["refit"]["battles"],
        }
    ]
    for item in board["categories"]:
        links.append(
            {
                "label": item["label"],
                "url": _url(page, query.params(category=item["slug"])),
                "current": query.category == item["slug"],
                "battles": item["battles"],
            }
        )
    return links


def _bad_query(request: HttpRequest, arena: Arena, template: str, exc: BoardQueryError):
    return render(request, template, {"arena": arena, "query_error": str(exc)}, status=400)


@require_GET
def leaderboard_page(request: HttpRequest) -> HttpResponse:
    """The overall board (live: its rows follow every decided battle over the socket) or
    a task category's (``?category=``), narrowed by ``kind``, ``provider`` and
    ``organisation``; a narrowed or category board is as of the last refit, not live."""
    arena = Arena.objects.public()
    try:
        query = board_query(request.GET)
    except BoardQueryError as exc:
        return _bad_query(request, arena, "ratings/leaderboard.html", exc)
    board = board_for_query(arena_id=arena.pk, query=query)
    everyone = leaderboard_current(arena_id=arena.pk)["rows"]  # the filters' choices
    context = board_context(board)
    return render(
        request,
        "ratings/leaderboard.html",
        {
            "arena": arena,
            **context,
            "query": query,
            "live": not query.category and not query.narrowed,
            "options": filter_options(everyone),
            "boards": _board_links(query, board),
            "category_label": CATEGORY_LABELS.get(query.category, ""),
            "matrices_url": _url("ratings:matrices", query.params()),
            "clear_url": _url(
                "ratings:leaderboard", query.params(kind="", provider="", organisation="")
            ),
        },
    )


@require_GET
def matrices_page(request: HttpRequest) -> HttpResponse:
    """Win rates and battle counts between the agents of a board, as heatmaps with the
    same figures in tables."""
    arena = Arena.objects.public()
    try:
        query = board_query(request.GET)
    except BoardQueryError as exc:
        return _bad_query(request, arena, "ratings/matrices.html", exc)
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
            "board_url": _url("ratings:leaderboard", query.params()),
            "boards": _board_links(query, board, "ratings:matrices"),
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
    """An agent of the public arena: its published and streaming values, its rating
    history over the refit snapshots, and its record against each opponent."""
    arena = Arena.objects.public()
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
            "n0": settings.ARENA.n0,
        },
    )
