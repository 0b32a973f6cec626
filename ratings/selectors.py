"""Reads for the leaderboard and agent pages. Public: agent identities, published
ratings and aggregate counts only; never a task, a team or a battle id."""

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Case, CharField, Count, F, FloatField, Min, Q, Value, When
from django.db.models.functions import Coalesce, Greatest, Least
from django.urls import reverse
from django.utils import timezone

from agents.models import DEMO_ARENA_SLUG, PUBLIC_ARENA_SLUG, Agent, Arena
from battles.classify import CATEGORIES, CATEGORY_LABELS
from battles.models import Battle
from ratings import intervals
from ratings.board_query import with_style_ranks
from ratings.matrices import pair_matrices
from ratings.models import RatingPoint, RefitState

# The board's "organisation" of an agent the arena entered itself (no team).
ARENA_ORGANISATION = "Arena"
KIND_TEXT = {
    Agent.Kind.BUILTIN: "built-in",
    Agent.Kind.SCAFFOLD: "scaffold model",
    Agent.Kind.REMOTE: "remote system",
    Agent.Kind.CLI: "CLI coding agent",
    Agent.Kind.HUMAN: "human baseline",
}

UNAVAILABLE_TEXT = {
    "no_comparisons": "no comparisons",
    "disconnected": "disconnected",
    "separated": "separated",
}


class NoSuchBoard(Exception):
    """The board a reader asked for does not exist here; the message says what does."""


def demo_arena() -> Arena | None:
    """The demo board's arena (``Arena.demo``) while ARENA_DEMO_BOARD is on and it has
    been built (``judging.services.demo_board``); None otherwise."""
    if not settings.ARENA.demo_board:
        return None
    return Arena.objects.filter(slug=DEMO_ARENA_SLUG, demo=True).first()


def has_published_rating(*, arena_id: int) -> bool:
    """Some agent has a rating on the arena's published board."""
    published = RefitState.objects.filter(arena_id=arena_id).values("snapshot_id")
    return RatingPoint.objects.filter(snapshot_id__in=published, rating__isnull=False).exists()


def board_arena(requested: str) -> tuple[Arena, bool]:
    """The arena whose board a page shows, and whether it is the demo board standing in
    for the public one: ``requested`` "demo" the demo board, "public" the public arena,
    "" the public arena unless it has no rating yet and a demo board exists. Raises
    NoSuchBoard for any other value, or "demo" when there is no demo board."""
    if requested not in ("", PUBLIC_ARENA_SLUG, DEMO_ARENA_SLUG):
        raise NoSuchBoard(
            f"There is no {requested[:50]!r} board here; arena is {PUBLIC_ARENA_SLUG} (the "
            f"arena's own battles) or {DEMO_ARENA_SLUG} (the demo board), or blank."
        )
    public = Arena.objects.public()
    if requested == PUBLIC_ARENA_SLUG:
        return public, False
    demo = demo_arena()
    if requested == DEMO_ARENA_SLUG:
        if demo is None:
            raise NoSuchBoard(
                "There is no demo board on this arena (its operator has not turned it on); "
                "the overall board is the arena's own."
            )
        return demo, False
    if demo is not None and not has_published_rating(arena_id=public.pk):
        return demo, True
    return public, False


def exclusion_counts(*, arena_id: int) -> dict[str, int]:
    """Excluded battles of the arena per reason, every reason in rule order (zeros
    included; a retired rule only where it excluded some battle)."""
    rows = (
        Battle.objects.filter(arena_id=arena_id, status=Battle.Status.EXCLUDED)
        .exclude(exclusion_reason="")
        .values("exclusion_reason")
        .annotate(n=Count("pk"))
    )
    found = {row["exclusion_reason"]: row["n"] for row in rows}
    return {
        reason: found.get(reason, 0)
        for reason in Battle.ExclusionReason.values
        if reason not in Battle.RETIRED_EXCLUSIONS or found.get(reason)
    }


def self_judged_tally(*, arena_id: int) -> int:
    """Decided battles whose outcome rests on the submitting team's own blind votes."""
    return Battle.objects.filter(
        arena_id=arena_id,
        status=Battle.Status.DECIDED,
        decision_source=Battle.DecisionSource.SUBMITTER,
    ).count()


def rated_battles(*, arena_id: int | None, category: str | None = None):
    """The battles that enter the arena's rating: decided (and so published: a decision
    is final and public when it is made), with an outcome, not excluded (self-judged
    ones included; each carries evidence_weight and cluster_judge). With ``category``,
    those whose task has that category (battles.classify): the category's board.
    ``arena_id`` None: those of every public arena (no team's own, not the demo board's
    simulated ones)."""
    arena = Q(arena__team=None, arena__demo=False) if arena_id is None else Q(arena_id=arena_id)
    rated = Battle.objects.filter(arena, status=Battle.Status.DECIDED, exclusion_reason="").exclude(
        outcome=""
    )
    return rated if category is None else rated.filter(task__category=category)


def rated_battles_pending(*, arena_id: int, since: datetime | None = None):
    """The arena's rated battles no published refit includes yet (no r: no
    ``IncorporatedBattle`` row), an anti-join on that table's primary key. With
    ``since`` (``RefitState.pending_floor``), only those decided since: the index
    battle_rated_recent walks them, not every rated battle of the arena. A decision
    committed more than PENDING_LOOKBACK after the last refit's read is then missed here
    until the next refit, whose own read (every rated battle) counts it."""
    pending = rated_battles(arena_id=arena_id).filter(incorporation__isnull=True)
    return pending if since is None else pending.filter(decided_at__gte=since)


def rated_battles_pending_everywhere():
    """``rated_battles_pending`` of every arena (public or a team's), each since its own
    floor, in one statement: one index range per arena (battle_rated_recent), the
    floors read first (an inequality on a joined column would scan every battle)."""
    window = Q(pk__in=[])
    for arena_id, floor in Arena.objects.values_list("pk", "refit__pending_floor"):
        since = {} if floor is None else {"decided_at__gte": floor}
        window |= Q(arena_id=arena_id, **since)
    return Battle.objects.filter(
        window, status=Battle.Status.DECIDED, exclusion_reason="", incorporation__isnull=True
    ).exclude(outcome="")


def refit_status(*, arena_id: int, now: datetime | None = None) -> dict[str, Any]:
    """When the refit last ran and published, what it cost, and how stale the board is:
    the age of the oldest rated battle no published refit includes yet (measured from
    its first admissible judgment h; from submission for imported battles, which have
    none; those decided since the last refit's read, ``rated_battles_pending``). SPEC §6
    bounds it by Δ + c."""
    now = now or timezone.now()
    period_s = settings.ARENA.refit_period_s
    state = RefitState.objects.filter(arena_id=arena_id).select_related("snapshot").first()
    snapshot = state.snapshot if state else None
    pending = rated_battles_pending(
        arena_id=arena_id, since=state.pending_floor if state else None
    ).aggregate(battles=Count("pk"), oldest=Min(Coalesce("first_judgment_at", "submitted_at")))
    compute_ms = state.last_compute_ms if state else None
    return {
        "period_s": period_s,
        "last_run_at": state.last_run_at if state else None,
        "compute_ms": compute_ms,
        "published_at": snapshot.computed_at if snapshot else None,
        "battles": snapshot.battles if snapshot else 0,
        "robust_intervals": snapshot.robust_published if snapshot else False,
        "clusters": snapshot.clusters if snapshot else None,
        "interval": snapshot.interval if snapshot else None,
        "critical_value": snapshot.critical_value if snapshot else None,
        "effective_clusters": snapshot.effective_clusters if snapshot else None,
        # the board's words beside the intervals when their coverage is known to fall
        "interval_caveat": (
            intervals.caveat(interval=snapshot.interval, judges=snapshot.clusters)
            if snapshot
            else None
        ),
        "bootstrap_replicates": snapshot.bootstrap_replicates if snapshot else 0,
        "bootstrap_unit": snapshot.bootstrap_unit if snapshot else None,
        "bootstrap_clusters": snapshot.bootstrap_clusters if snapshot else None,
        # False: the fit stopped at its iteration cap, so the numbers may be off (shown
        # on the board). None while nothing is published.
        "converged": snapshot.converged if snapshot else None,
        "iterations": snapshot.iterations if snapshot else None,
        "pending_battles": pending["battles"],
        "oldest_pending_at": pending["oldest"],
        "oldest_pending_age_s": _age_s(pending["oldest"], now),
        "staleness_bound_s": round(period_s + (compute_ms or 0) / 1000, 1),
        "snapshot_id": snapshot.pk if snapshot else None,
        # style control's table (ratings.style_board); None: none computed for it yet
        "style": snapshot.style if snapshot else None,
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
    agents = list(
        Agent.objects.filter(arena_id=arena_id, retired_at=None).select_related("rating", "team")
    )
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
                "agent_id": agent.pk,  # internal: the matrices' key (not in the API)
                "kind": agent.kind,
                "kind_text": KIND_TEXT.get(agent.kind, agent.kind),
                "organisation": agent.team.name if agent.team else ARENA_ORGANISATION,
                "provider": agent.provider,
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
                **_style_cells(point),
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
    return with_style_ranks(rows)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _style_cells(point) -> dict[str, float | None]:
    """A row's style-controlled rating and interval (of a RatingPoint or a category
    board's point), rounded as the plain ones; its rank follows from the rows."""
    get = point.get if isinstance(point, dict) else lambda name: getattr(point, name, None)
    return {name: _round(get(name)) for name in ("style_rating", "style_lower", "style_upper")}


def leaderboard(*, arena_id: int, now: datetime | None = None) -> dict[str, Any]:
    """The whole published board: refit status, exclusion counts, the self-judged-only
    tally and the rows."""
    refit = refit_status(arena_id=arena_id, now=now)
    # 0, not None, when nothing is published: the status has looked for the snapshot already
    rows = leaderboard_rows(arena_id=arena_id, snapshot_id=refit["snapshot_id"] or 0)
    exclusions, self_judged = exclusions_and_self_judged(arena_id=arena_id)
    return {
        "refit": refit,
        "exclusions": exclusions,
        "self_judged_only": self_judged,
        "rows": rows,
        "category": None,  # the overall board; a category's board names its category here
        "style": refit["style"],  # style control of the board shown
    }


def exclusions_and_self_judged(*, arena_id: int) -> tuple[dict[str, int], int]:
    """``exclusion_counts`` and ``self_judged_tally`` in one round trip (each part reads
    its own partial index, as the two queries do)."""
    excluded = (
        Battle.objects.filter(arena_id=arena_id, status=Battle.Status.EXCLUDED)
        .exclude(exclusion_reason="")
        .order_by()
        .values("exclusion_reason")
        .annotate(n=Count("pk"))
    )
    self_judged = (
        Battle.objects.filter(
            arena_id=arena_id,
            status=Battle.Status.DECIDED,
            decision_source=Battle.DecisionSource.SUBMITTER,
        )
        .order_by()
        .annotate(reason=Value("", output_field=CharField()))
        .values("reason")
        .annotate(n=Count("pk"))
    )
    found = {row["exclusion_reason"]: row["n"] for row in excluded.union(self_judged, all=True)}
    counts = {reason: found.get(reason, 0) for reason in Battle.ExclusionReason.values}
    return counts, found.get("", 0)


def battle_categories(pairs: list[tuple[int, int, float, str, int]]) -> list[dict[str, Any]]:
    """Rated battles per task category, every category in order (zeros included), of
    ``pair_tallies`` rows."""
    counts = dict.fromkeys(CATEGORIES, 0)
    for *_, category, n in pairs:
        if category in counts:
            counts[category] += n
    return [{"slug": c, "label": CATEGORY_LABELS[c], "battles": n} for c, n in counts.items()]


def pair_tallies(*, arena_id: int) -> list[tuple[int, int, float, str, int]]:
    """Rated battles counted per (lower agent id, higher agent id, y from the lower's
    side, task category), in one query: the matrices and the categories' battle counts.
    Unweighted: a battle is a battle here, whatever its evidence weight."""
    from ratings.services import OUTCOME_Y

    y_a = Case(
        *(When(outcome=o, then=Value(v)) for o, v in OUTCOME_Y.items()),
        output_field=FloatField(),
    )
    rows = (
        rated_battles(arena_id=arena_id)
        .order_by()
        .values(
            lo=Least("agent_a_id", "agent_b_id"),
            hi=Greatest("agent_a_id", "agent_b_id"),
            y=Case(When(agent_a_id__lt=F("agent_b_id"), then=y_a), default=Value(1.0) - y_a),
            category=F("task__category"),
        )
        .annotate(n=Count("pk"))
    )
    return [(r["lo"], r["hi"], r["y"], r["category"], r["n"]) for r in rows]


def matrices_document(
    rows: list[dict[str, Any]], pairs: list[tuple[int, int, float, int]]
) -> dict[str, Any]:
    """The board's pairwise tables as public data: agents by slug in the board's order
    (those with rated battles, at most ``ratings.matrices.MAX_AGENTS``), battle counts
    and the row agent's win rate (None where a pair never met)."""
    by_id = {row["agent_id"]: row for row in rows}
    tables = pair_matrices([row["agent_id"] for row in rows], pairs)
    return {
        "agents": [by_id[agent]["slug"] for agent in tables.agents],
        "names": [by_id[agent]["agent"] for agent in tables.agents],
        "battles": tables.battles,
        "win_rate": tables.win_rate,
        "left_out": tables.left_out,
    }


def leaderboard_aged(board: dict[str, Any], *, now: datetime | None = None) -> dict[str, Any]:
    """A stored board as of ``now``: the staleness age recomputed from the oldest
    pending battle's time (the only cell that moves without a write)."""
    refit = board["refit"]
    aged = _age_s(refit["oldest_pending_at"], now or timezone.now())
    return {**board, "refit": {**refit, "oldest_pending_age_s": aged}}


def interval_bars(
    rows: list[dict[str, Any]], *, streaming: bool = True
) -> dict[str, dict[str, float | None]]:
    """slug → the rating interval as percentages of a scale shared by the board (left,
    width, and the mark at the rating or streaming value). A provisional or unavailable
    agent's interval is the full scale: nothing narrower is known. Without
    ``streaming`` (a category's board, whose scale the overall streaming value is not
    on) such an agent's bar has no mark."""
    keys = ("lower", "upper", "streaming_rating") if streaming else ("lower", "upper")
    values = [v for r in rows for v in (r[k] for k in keys) if v]
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
            mark = pct(row["streaming_rating"]) if streaming else None
            bars[row["slug"]] = {"left": 0.0, "width": 100.0, "mark": mark}
        else:
            left = pct(row["lower"])
            bars[row["slug"]] = {
                "left": left,
                "width": round(pct(row["upper"]) - left, 2),
                "mark": pct(row["rating"]),
            }
    return bars


def _exclusion_words(reason: str) -> str:
    """An exclusion reason as the board says it (the API keeps the code)."""
    try:
        return Battle.ExclusionReason(reason).label
    except ValueError:
        return reason.replace("_", " ")


def board_context(board: dict[str, Any]) -> dict[str, Any]:
    """Template context of the board fragment, shared by the page, the socket's first
    frame and every push."""
    bars = interval_bars(board["rows"], streaming=board.get("category") is None)
    rows = [{**row, "bar": bars.get(row["slug"])} for row in board["rows"]]
    exclusions = board["exclusions"]
    return {
        **board,
        "rows": rows,
        "exclusion_items": (
            [(reason, _exclusion_words(reason), count) for reason, count in exclusions.items()]
            if exclusions is not None
            else None
        ),
        "excluded_total": sum(exclusions.values()) if exclusions else 0,
        "n0": settings.ARENA.n0,
        "interval_caveat": intervals.board_caveat(board),  # beside the intervals, or None
    }


def category_leaderboard(board: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """A category's board shaped like the overall one: the overall board's roster (its
    agents and their organisation, kind and provider; streaming value and record stay
    the overall ones) with the category fit's rating, interval, rank band and battle
    count (``ratings.category_boards``), ranked by it. Rated agents first, then by
    battles in the category."""
    points = document["points"]
    rows = []
    for row in board["rows"]:
        point = points.get(row["agent_id"]) or {}
        rows.append(
            {
                **row,
                "rank": None,
                "rating": _round(point.get("rating")),
                "lower": _round(point.get("lower")),
                "upper": _round(point.get("upper")),
                "rank_lower": point.get("rank_lower"),
                "rank_upper": point.get("rank_upper"),
                "provisional": point.get("provisional", True),
                "unavailable": point.get("unavailable"),
                "fit_battles": point.get("battles", 0),
                **_style_cells(point),
            }
        )
    rows.sort(key=lambda r: (r["rating"] is None, -(r["rating"] or 0.0), -r["fit_battles"],
                             r["agent"]))  # fmt: skip
    for rank, row in enumerate((r for r in rows if r["rating"] is not None), start=1):
        row["rank"] = rank
    rows = with_style_ranks(rows)
    meta = {k: v for k, v in document.items() if k not in ("points", "pairs", "style")}
    return {
        **board,
        "category": meta,
        "rows": rows,
        "matrices": matrices_document(rows, document["pairs"]),
        "style": document.get("style"),  # None: a board stored before style control
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
