"""Latency, capacity, freshness and duplicate figures of SPEC §6. Pure: no ORM.

A battle's events are a mapping from the event-time names to aware datetimes or
``None`` (a stamp the battle has not reached, or one the platform does not write yet):
``Battle`` fields, but r and ℓ, which are those of the refit run that first included the
battle (``ratings.models.Incorporation``; ``metrics_selectors.with_stamps``)::

    submitted_at s · dequeued_at q · lanes_started_at q + δ · ended_at e
    first_judgment_at h · incorporated_at r · leaderboard_served_at ℓ

A latency is computed only for battles that carry every stamp it needs. With a window
``(since, until]`` a latency counts when its *closing* stamp (the latest one it uses)
falls in the window: the figures describe latencies observed in the window, as a
monitoring histogram would.
"""

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from battles.similarity import jaccard, trigrams

Events = Mapping[str, datetime | None]


@dataclass(frozen=True)
class Stamp:
    field: str
    symbol: str
    label: str


STAMPS: tuple[Stamp, ...] = (
    Stamp("submitted_at", "s", "submission"),
    Stamp("dequeued_at", "q", "taken by a worker"),
    Stamp("lanes_started_at", "q + δ", "both sandboxes ready"),
    Stamp("ended_at", "e", "both runs ended"),
    Stamp("first_judgment_at", "h", "first judge's vote that counts"),
    Stamp("incorporated_at", "r", "included in the published ratings"),
    Stamp("leaderboard_served_at", "ℓ", "first shown on a leaderboard"),
)
STAMP_FIELDS = tuple(stamp.field for stamp in STAMPS)

# Why a stamp may be missing from every battle. The figures list a stamp as missing only
# while no battle of the arena carries it, so these notes drop out by themselves.
PENDING_STAMP_NOTES = {
    "incorporated_at": (
        "stamped when a decided battle first moves the published rating; no battle has "
        "been rated yet"
    ),
    "leaderboard_served_at": (
        "stamped when a leaderboard reflecting the battle is first served (page, API or "
        "live socket); no rated battle has been served yet"
    ),
}
# What a stamp means where a reader could take it for another event. Shown with the figures.
STAMP_CAVEATS = {
    "incorporated_at": (
        "r is when the first published batch refit (one runs every Δ) that includes the "
        "battle committed, not when the streaming value moved (that happens at once): r − h "
        "includes the wait for the next refit, at most Δ + c (c: how long a refit takes)."
    ),
}
# The caveats as the metrics page says them (the API keeps the notes above).
STAMP_CAVEAT_WORDS = {
    "incorporated_at": (
        "A battle counts as included in the published ratings when the first published "
        "refit that includes it has finished, not when the live rating moved (that "
        "happens at once). So the incorporation time includes the wait for the next "
        "refit: at most one refit period plus the time a refit takes."
    ),
}
NO_BATTLE_YET_NOTE = "no battle of the arena has reached this event yet"


@dataclass(frozen=True)
class Latency:
    name: str
    label: str
    formula: str
    needs: tuple[str, ...]
    closes: str  # the stamp whose time places the latency in a window
    compute: Callable[[dict[str, float]], float]
    meaning: str = ""  # what it measures, in words (the page shows this, not the formula)


def _seconds(events: Events, fields: Iterable[str]) -> dict[str, float] | None:
    times = {}
    for field in fields:
        value = events.get(field)
        if value is None:
            return None
        times[field] = value.timestamp()
    return times


LATENCIES: tuple[Latency, ...] = (
    Latency(
        "wait",
        "Wait",
        "q − s",
        ("submitted_at", "dequeued_at"),
        "dequeued_at",
        lambda t: t["dequeued_at"] - t["submitted_at"],
        meaning="from submission until a worker takes the battle",
    ),
    Latency(
        "provisioning",
        "Provisioning",
        "δ",
        ("dequeued_at", "lanes_started_at"),
        "lanes_started_at",
        lambda t: t["lanes_started_at"] - t["dequeued_at"],
        meaning="from a worker taking the battle until both agents' sandboxes are ready",
    ),
    Latency(
        "execution",
        "Execution",
        "e − q − δ",
        ("lanes_started_at", "ended_at"),
        "ended_at",
        lambda t: t["ended_at"] - t["lanes_started_at"],
        meaning="from both sandboxes being ready until both runs have ended",
    ),
    Latency(
        "judgment",
        "Judgment (human)",
        "h − e",
        ("ended_at", "first_judgment_at"),
        "first_judgment_at",
        lambda t: t["first_judgment_at"] - t["ended_at"],
        meaning="from both runs ending until the first judge's vote that counts",
    ),
    Latency(
        "incorporation",
        "Incorporation",
        "r − h",
        ("first_judgment_at", "incorporated_at"),
        "incorporated_at",
        lambda t: t["incorporated_at"] - t["first_judgment_at"],
        meaning="from that first vote until the published ratings include the battle",
    ),
    Latency(
        "service",
        "Service",
        "ℓ − r",
        ("incorporated_at", "leaderboard_served_at"),
        "leaderboard_served_at",
        lambda t: t["leaderboard_served_at"] - t["incorporated_at"],
        meaning=(
            "from the published ratings including the battle until a leaderboard first shows it"
        ),
    ),
    Latency(
        "machine",
        "Machine latency",
        "(ℓ − s) − (h − e)",
        ("submitted_at", "ended_at", "first_judgment_at", "leaderboard_served_at"),
        "leaderboard_served_at",
        lambda t: (
            (t["leaderboard_served_at"] - t["submitted_at"])
            - (t["first_judgment_at"] - t["ended_at"])
        ),
        meaning=(
            "from submission until a leaderboard first shows the battle, less the time "
            "spent waiting for judges"
        ),
    ),
    Latency(
        "end_to_end",
        "End-to-end",
        "ℓ − s",
        ("submitted_at", "leaderboard_served_at"),
        "leaderboard_served_at",
        lambda t: t["leaderboard_served_at"] - t["submitted_at"],
        meaning="from submission until a leaderboard first shows the battle",
    ),
)

# Capacity (SPEC §6): service S = δ + execution = e − q, for battles that have both
# parts; time in system T = wait + S = e − s, for Little's law E[N] = λ E[T].
SERVICE_TIME = Latency(
    "service_time",
    "Service time S",
    "δ + (e − q − δ)",
    ("dequeued_at", "lanes_started_at", "ended_at"),
    "ended_at",
    lambda t: t["ended_at"] - t["dequeued_at"],
)
TIME_IN_SYSTEM = Latency(
    "time_in_system",
    "Time in system T",
    "e − s",
    ("submitted_at", "dequeued_at", "ended_at"),
    "ended_at",
    lambda t: t["ended_at"] - t["submitted_at"],
)


def in_window(t: datetime | None, since: datetime | None, until: datetime | None) -> bool:
    """``t`` in ``(since, until]``; a missing bound is open."""
    if t is None:
        return False
    return (since is None or t > since) and (until is None or t <= until)


def durations(
    events: Iterable[Events],
    latency: Latency,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[float]:
    """``latency`` in seconds for every battle that has its stamps (and, with bounds,
    whose closing stamp is in ``(since, until]``), in input order."""
    values = []
    for battle in events:
        if (since is not None or until is not None) and not in_window(
            battle.get(latency.closes), since, until
        ):
            continue
        times = _seconds(battle, latency.needs)
        if times is not None:
            values.append(latency.compute(times))
    return values


def latencies(
    events: Iterable[Events],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> dict[str, list[float]]:
    """Every latency of SPEC §6, by name, in seconds (see ``durations``)."""
    rows = list(events)
    return {
        latency.name: durations(rows, latency, since=since, until=until) for latency in LATENCIES
    }


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, p50, p95, p99 and mean; percentiles interpolate linearly between order
    statistics (numpy's default). Every figure but n is None when there are no values."""
    n = len(values)
    if n == 0:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "mean": None}
    data = np.asarray(values, dtype=float)
    p50, p95, p99 = np.percentile(data, [50, 95, 99])
    return {
        "n": n,
        "p50": float(p50),
        "p95": float(p95),
        "p99": float(p99),
        "mean": float(data.mean()),
    }


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """min, p25, p75 and max (the rest of a box plot beside ``summary``'s median)."""
    if len(values) == 0:
        return {"min": None, "p25": None, "p75": None, "max": None}
    data = np.asarray(values, dtype=float)
    p25, p75 = np.percentile(data, [25, 75])
    return {
        "min": float(data.min()),
        "p25": float(p25),
        "p75": float(p75),
        "max": float(data.max()),
    }


def mean_or_none(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def offered_load(
    arrival_rate_per_s: float | None, mean_service_s: float | None, slots: int
) -> float | None:
    """ρ = λ E[S] / C; the queue is stable only if ρ < 1. None when λ or E[S] is unknown."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, not {slots}")
    if arrival_rate_per_s is None or mean_service_s is None:
        return None
    return arrival_rate_per_s * mean_service_s / slots


def weight_share(part: float, total: float) -> float | None:
    """part / total, or None when there is no weight at all."""
    return part / total if total > 0 else None


def freshness(ages_s: Sequence[float], weights: Sequence[float], alpha_s: float) -> float | None:
    """F(α) = Σ_{age_b ≤ α} w_b / Σ_b w_b over the rated corpus; None when Σ w = 0."""
    if len(ages_s) != len(weights):
        raise ValueError("ages_s and weights must have the same length")
    fresh = sum(w for age, w in zip(ages_s, weights, strict=True) if age <= alpha_s)
    return weight_share(fresh, sum(weights))


# Above this many texts the selector keeps only the newest: the worst case (many texts
# sharing trigrams but staying under θ) compares every pair.
DUPLICATE_CORPUS_MAX = 2000


def duplicate_flags(texts_in_rated_order: Sequence[str], theta: float) -> list[bool]:
    """For each text, whether some earlier text has word-trigram Jaccard J ≥ θ with it.

    O(n²) comparisons in the worst case; an inverted index over trigrams compares a
    text only with earlier texts sharing a trigram (J > 0 needs one) and stops at the
    first match, so distinct or verbatim-repeated tasks cost close to O(n). Callers cap
    n (``DUPLICATE_CORPUS_MAX``)."""
    grams = [trigrams(text) for text in texts_in_rated_order]
    if theta <= 0:
        # J ≥ 0 holds for every pair: everything after the first text has a match.
        return [index > 0 for index in range(len(grams))]
    by_gram: dict[tuple[str, ...], list[int]] = {}
    flags = []
    for index, mine in enumerate(grams):
        seen: set[int] = set()
        found = False
        for gram in mine:
            for earlier in by_gram.get(gram, ()):
                if earlier in seen:
                    continue
                seen.add(earlier)
                if jaccard(mine, grams[earlier]) >= theta:
                    found = True
                    break
            if found:
                break
        flags.append(found)
        for gram in mine:
            by_gram.setdefault(gram, []).append(index)
    return flags


def duplicate_rate(texts_in_rated_order: Sequence[str], theta: float) -> float | None:
    """D(θ): the share of rated battles whose task has J ≥ θ with an earlier task of
    the rated corpus (texts in rated order). None for an empty corpus."""
    flags = duplicate_flags(texts_in_rated_order, theta)
    return sum(flags) / len(flags) if flags else None


def binned_counts(
    times: Iterable[datetime | None], *, until: datetime, window_s: float, bin_s: float
) -> list[int]:
    """Counts of ``times`` in consecutive bins of ``bin_s`` seconds ending at ``until``
    and covering ``(until − window_s, until]``; the oldest bin is cut short when the
    window is not a whole number of bins. Each bin is half-open ``(start, end]``."""
    if bin_s <= 0 or window_s <= 0:
        raise ValueError("window_s and bin_s must be positive")
    n_bins = math.ceil(window_s / bin_s)
    counts = [0] * n_bins
    end = until.timestamp()
    for t in times:
        if t is None:
            continue
        age = end - t.timestamp()
        if age < 0 or age >= window_s:
            continue
        counts[n_bins - 1 - int(age // bin_s)] += 1
    return counts


_UNITS = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))


def format_duration(seconds: float | None) -> str:
    """A short human reading of a duration: 350 ms, 4.2 s, 3.5 min, 2 h, 1.5 d."""
    if seconds is None:
        return "—"
    sign = "−" if seconds < 0 else ""
    s = abs(seconds)
    if s < 1:
        return f"{sign}{s * 1000:.0f} ms"
    unit_s, unit = next((u, name) for u, name in _UNITS if s >= u)
    return f"{sign}{f'{s / unit_s:.1f}'.removesuffix('.0')} {unit}"
