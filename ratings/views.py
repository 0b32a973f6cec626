"""The leaderboard and agent pages. Public: roster identities, published ratings and
aggregate counts; never a task, a team or a battle."""

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET

from agents.models import Arena
from ratings.selectors import (
    agent_history,
    agent_public,
    board_context,
    head_to_head,
    leaderboard_rows,
)
from ratings.services import leaderboard_current
from ratings.svg import HistoryPoint, rating_history


@require_GET
def leaderboard_page(request: HttpRequest) -> HttpResponse:
    arena = Arena.objects.public()
    context = board_context(leaderboard_current(arena_id=arena.pk))
    return render(request, "ratings/leaderboard.html", {"arena": arena, **context})


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
