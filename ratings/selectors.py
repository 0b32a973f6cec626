"""Reads for the leaderboard."""

from typing import Any

from django.conf import settings

from agents.models import Agent


def leaderboard_rows(*, arena_id: int) -> list[dict[str, Any]]:
    """One row per active or paused (not retired) agent, best streaming value first.
    ``rating`` is the published refit value; provisional agents have none (SPEC §7.2)."""
    r0 = settings.ARENA["R0"]
    n0 = settings.ARENA["N0"]
    agents = Agent.objects.filter(arena_id=arena_id, retired_at=None).select_related("rating")
    rows = []
    for agent in agents:
        rating = getattr(agent, "rating", None)
        votes = rating.rated_battles if rating else 0
        rows.append(
            {
                "agent": agent.display_name,
                "slug": agent.slug,
                "kind": agent.kind,
                "baseline": agent.is_baseline,
                "rating": None,
                "streaming_rating": round(rating.streaming_rating if rating else r0, 1),
                "votes": votes,
                "wins": rating.wins if rating else 0,
                "losses": rating.losses if rating else 0,
                "draws": rating.draws if rating else 0,
                "provisional": votes < n0,
            }
        )
    rows.sort(key=lambda r: (-r["streaming_rating"], r["agent"]))
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank
    return rows
