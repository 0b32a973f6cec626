"""Reads for the leaderboard and agent pages. Public: agent identities, published
ratings and aggregate counts only; never a task, a team or a battle id."""

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Min, Q
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent
from battles.models import Battle
from ratings.models import RatingPoint, RefitState

UNAVAILABLE_TEXT = {
    "no_comparisons": "no comparisons",
    "disconnected": "disconnected",
    "separated": "separated",
}


def exclusion_counts(*, arena_id: int) -> dict[str, int]:
    """Excluded battles of the arena per SPEC §5.3 reason, every reason in rule order
    (zeros included)."""
    rows = (
        Battle.objects.filter(arena_id=arena_id, status=Battle.Status.EXCLUDED)
        .exclude(exclusion_reason="")
        .values("exclusion_reason")
        .annotate(n=Count("pk"))
    )
    found = {row["exclusion_reason"]: row["n"] for row in rows}
    return {reason: found.get(reason, 0) for reason in Battle.ExclusionReason.values}


def self_judged_tally(*, arena_id: int) -> int:
    """Decided battles whose outcome rests on the submitting team's own blind votes."""
    return Battle.objects.filter(
        arena_id=arena_id,
        status=Battle.Status.DECIDED,
        decision_source=Battle.DecisionSource.SUBMITTER,
    ).count()


def rated_battles(*, arena_id: int):
    """The battles that enter the arena's rating: decided (and so published: a decision
    is final and public when it is made), with an outcome, not excluded (self-judged
    ones included; each carries evidence_weight and cluster_judge)."""
    return Battle.objects.filter(
        arena_id=arena_id, status=Battle.Status.DECIDED, exclusion_reason=""
    ).exclude(outcome="")


def refit_status(*, arena_id: int, now: datetime | None = None) -> dict[str, Any]:
    """When the refit last ran and published, what it cost, and how stale the board is:
    the age of the oldest rated battle no published refit includes yet (measured from
    its first admissible judgment h; from submission for imported battles, which have
    none). SPEC §6 bounds it by Δ + c."""
    now = now or timezone.now()
    period_s = settings.ARENA.refit_period_s
    state = RefitState.objects.filter(arena_id=arena_id).select_related("snapshot").first()
    snapshot = state.snapshot if state else None
    pending = (
        rated_battles(arena_id=arena_id)
        .filter(incorporated_at=None)
        .aggregate(battles=Count("pk"), oldest=Min(Coalesce("first_judgment_at", "submitted_at")))
    )
    compute_ms = state.last_compute_ms if state else None
    return {
        "period_s": period_s,
        "last_run_at": state.last_run_at if state else None,
        "compute_ms": compute_ms,
        "published_at": snapshot.computed_at if snapshot else None,
        "battles": snapshot.battles if snapshot else 0,
        "robust_intervals": snapshot.robust_published if snapshot else False,
        "clusters": snapshot.clusters if snapshot else None,
        "bootstrap_replicates": snapshot.bootstrap_replicates if snapshot else 0,
        "pending_battles": pending["battles"],
        "oldest_pending_at": pending["oldest"],
        "oldest_pending_age_s": _age_s(pending["oldest"], now),
        "staleness_bound_s": round(period_s + (compute_ms or 0) / 1000, 1),
        "snapshot_id": snapshot.pk if snapshot else None,
    }


def _age_s(at: datetime | None, now: datetime) -> float | None:
    return round((now - at).total_seconds(), 1) if at else None


def leaderboard_rows(*, arena_id: int, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    """One row per active or paused (not retired) agent. Rated agents first, by their
    published refit rating; then provisional and unavailable ones by streaming value.
    ``rating`` and its interval and rank band come from the published snapshot and are
    None for provisional (fewer than n0 rated battles in the fit) and unavailable agents."""
    if snapshot_id is None:
        snapshot_id = (
            RefitState.objects.filter(arena_id=arena_id)
            .values_list("snapshot_id", flat=True)
            .first()
        )
    r0 = settings.ARENA.r0
    agents = list(Agent.objects.filter(arena_id=arena_id, retired_at=None).select_related("rating"))
    points = (
        {p.agent_id: p for p in RatingPoint.objects.filter(snapshot_id=snapshot_id)}
        if snapshot_id
        else {}
    )
    rows = []
    for agent in agents:
        rating = getattr(agent, "rating", None)
        point = points.get(agent.pk)
        rows.append(
            {
                "agent": agent.display_name,
                "slug": agent.slug,
                "url": reverse("ratings:agent", args=[agent.slug]),
                "kind": agent.kind,
                "baseline": agent.is_baseline,
                "rank": None,
                "rating": _round(point.rating if point else None),
                "lower": _round(point.lower if point else None),
                "upper": _round(point.upper if point else None),
                "rank_lower": point.rank_lower if point else None,
                "rank_upper": point.rank_upper if point else None,
                "provisional": point.provisional if point else True,
                "unavailable": (point.unavailable or None) if point else None,
                "fit_battles": point.battles if point else 0,
                "streaming_rating": round(rating.streaming_rating if rating else r0, 1),
                "votes": rating.rated_battles if rating else 0,
                "wins": rating.wins if rating else 0,
                "losses": rating.losses if rating else 0,
                "draws": rating.draws if rating else 0,
            }
        )
    rows.sort(
        key=lambda r: (
            r["rating"] is None,
            -(r["rating"] if r["rating"] is not None else r["streaming_rating"]),
            r["agent"],
        )
    )
    for rank, row in enumerate((r for r in rows if r["rating"] is not None), start=1):
        row["rank"] = rank
    return rows


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def leaderboard(*, arena_id: int, now: datetime | None = None) -> dict[str, Any]:
    """The whole published board: refit status, exclusion counts, the self-judged-only
    tally and the rows."""
    refit = refit_status(arena_id=arena_id, now=now)
    return {
        "refit": refit,
        "exclusions": exclusion_counts(arena_id=arena_id),
        "self_judged_only": self_judged_tally(arena_id=arena_id),
        "rows": leaderboard_rows(arena_id=arena_id, snapshot_id=refit["snapshot_id"]),
    }


def leaderboard_aged(board: dict[str, Any], *, now: datetime | None = None) -> dict[str, Any]:
    """A stored board as of ``now``: the staleness age recomputed from the oldest
    pending battle's time (the only cell that moves without a write)."""
    refit = board["refit"]
    aged = _age_s(refit["oldest_pending_at"], now or timezone.now())
    return {**board, "refit": {**refit, "oldest_pending_age_s": aged}}


def interval_bars(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """slug → the rating interval as percentages of a scale shared by the board (left,
    width, and the mark at the rating or streaming value). A provisional or unavailable
    agent's interval is the full scale: nothing narrower is known."""
    values = [v for r in rows for v in (r["lower"], r["upper"], r["streaming_rating"]) if v]
    if not values:
        return {}
    low, high = min(values), max(values)
    pad = max(10.0, (high - low) * 0.05)
    low, high = low - pad, high + pad

    def pct(value: float) -> float:
        return round(100 * (value - low) / (high - low), 2)

    bars = {}
    for row in rows:
        if row["rating"] is None or row["lower"] is None or row["upper"] is None:
            bars[row["slug"]] = {"left": 0.0, "width": 100.0, "mark": pct(row["streaming_rating"])}
        else:
            left = pct(row["lower"])
            bars[row["slug"]] = {
                "left": left,
                "width": round(pct(row["upper"]) - left, 2),
                "mark": pct(row["rating"]),
            }
    return bars


def board_context(board: dict[str, Any]) -> dict[str, Any]:
    """Template context of the board fragment, shared by the page, the socket's first
    frame and every push."""
    bars = interval_bars(board["rows"])
    rows = [{**row, "bar": bars.get(row["slug"])} for row in board["rows"]]
    exclusions = board["exclusions"]
    return {
        **board,
        "rows": rows,
        "exclusion_items": (
            [(reason.replace("_", " "), count) for reason, count in exclusions.items()]
            if exclusions is not None
            else None
        ),
        "excluded_total": sum(exclusions.values()) if exclusions else 0,
        "n0": settings.ARENA.n0,
    }


def agent_public(*, arena_id: int, slug: str) -> Agent | None:
    """A roster entry of the arena by slug (retired ones too: their history stays)."""
    return Agent.objects.filter(arena_id=arena_id, slug=slug).select_related("rating").first()


def agent_history(*, agent_id: int) -> list[dict[str, Any]]:
    """The agent's points in every snapshot that includes it, oldest first."""
    return list(
        RatingPoint.objects.filter(agent_id=agent_id)
        .order_by("snapshot_id")
        .values(
            "rating",
            "lower",
            "upper",
            "rank_lower",
            "rank_upper",
            "provisional",
            "unavailable",
            "battles",
            computed_at=F("snapshot__computed_at"),
        )
    )


def head_to_head(*, agent_id: int, arena_id: int) -> list[dict[str, Any]]:
    """Wins, losses, ties and both-bad against each opponent over the agent's rated
    battles (decided, not excluded): counts only, never a task or a battle."""
    battles = rated_battles(arena_id=arena_id).filter(
        Q(agent_a_id=agent_id) | Q(agent_b_id=agent_id)
    )
    tallies: dict[int, dict[str, int]] = {}
    for side_a, side_b, outcome in battles.values_list("agent_a_id", "agent_b_id", "outcome"):
        mine_a = side_a == agent_id
        opponent = side_b if mine_a else side_a
        tally = tallies.setdefault(opponent, {"wins": 0, "losses": 0, "ties": 0, "both_bad": 0})
        if outcome == Battle.Outcome.TIE:
            tally["ties"] += 1
        elif outcome == Battle.Outcome.BOTH_BAD:
            tally["both_bad"] += 1
        elif (outcome == Battle.Outcome.A) == mine_a:
            tally["wins"] += 1
        else:
            tally["losses"] += 1
    opponents = Agent.objects.in_bulk(list(tallies))
    rows = [
        {
            "agent": opponents[pk].display_name,
            "slug": opponents[pk].slug,
            "retired": opponents[pk].retired_at is not None,
            "battles": sum(tally.values()),
            **tally,
        }
        for pk, tally in tallies.items()
    ]
    rows.sort(key=lambda r: (-r["battles"], r["agent"]))
    return rows
