"""Ratings of judged games with a task-clustered percentile bootstrap (003 "Ratings").
Pure: numpy, no ORM.

The fit is the arena's own (``ratings.bradley_terry``: the same Newton iteration, the
same identifiability diagnosis of ``ratings.connectivity``), unpenalised: draws are
half-wins, a candidate gets a number only inside the main strongly connected component
of the win graph, centred so the rated candidates average 1500, on the 400-point
scale (400 points is a 10× strength ratio). Otherwise its rating is None with the
reason: ``no_comparisons``, ``disconnected``, ``separated`` (connectivity's labels),
``nonconvergence`` (the iteration did not meet its tolerance) or ``nonfinite_result``.

Intervals: a percentile bootstrap that resamples whole tasks (all of a task's games
together, the two orientations of a game never apart: a game is one row), ``replicates``
times from ``seed``, each replicate refitted the same way; 95 % bounds are Hyndman–Fan
type-7 quantiles (numpy's default, "linear"). No bounds, with the reason, when there are
fewer than two tasks (``too_few_tasks``), when a requested candidate has no full-data
rating (``original_unrated``), or when any replicate fails to rate every candidate
(``invalid_replicates``; ``bootstrap_valid`` counts those that did). The draws are the
live board's (``ratings.bootstrap``: ``cells_resampler`` over the games summed per
(task, pair), one seeded ``resamples`` sequence), as when an arena's board resamples
tasks.

(003 fits by Hunter's MM algorithm; Newton reaches the same maximum-likelihood estimate
where it exists, and is what the arena's board already uses.)
"""

from dataclasses import dataclass, field

import numpy as np

from ratings import bootstrap, connectivity
from ratings.bradley_terry import newton, win_probability
from ratings.cells import cluster_cells
from ratings.intervals import ELO_SCALE

CENTRE = 1500.0
NONCONVERGENCE, NONFINITE = "nonconvergence", "nonfinite_result"
TOO_FEW_TASKS, ORIGINAL_UNRATED, INVALID_REPLICATES = (
    "too_few_tasks",
    "original_unrated",
    "invalid_replicates",
)
QUANTILES = (0.025, 0.975)


@dataclass(frozen=True)
class CandidateRating:
    rating: float | None
    lower: float | None
    upper: float | None
    unavailable: str | None


@dataclass(frozen=True)
class GameRatings:
    candidates: list[CandidateRating]
    seed: int
    replicates: int
    clusters: int  # distinct tasks among the games
    ran: bool  # whether the resampling loop ran
    valid: int | None = None  # replicates that rated every candidate; None: did not run
    unavailable: str | None = None  # why there are no bounds
    iterations: int = 0
    samples: np.ndarray | None = field(default=None, repr=False)  # replicates × candidates


def _pair_sums(a, b, y, n: int):
    """Per unordered pair (i < j), in (i, j) order: games and i's win mass."""
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    wins_lo = np.where(a == lo, y, 1.0 - y)
    keys, index = np.unique(lo * n + hi, return_inverse=True)
    total = np.bincount(index, minlength=len(keys)).astype(float)
    wins = np.bincount(index, wins_lo, minlength=len(keys))
    return keys // n, keys % n, total, wins


def _finite_strengths(theta: np.ndarray) -> bool:
    with np.errstate(over="ignore"):
        return bool(np.all(np.isfinite(np.exp(theta))) and np.all(np.exp(theta) > 0))


def _fit(i, j, total, wins, n: int, theta0=None) -> tuple[np.ndarray | None, list, int]:
    """(ratings of every candidate or None, reasons per candidate, iterations)."""
    keep = total > 0
    i, j, total, wins = i[keep], j[keep], total[keep], wins[keep]
    diagnosis = connectivity.diagnose(i, j, wins, total - wins, n_agents=n)
    labels = list(diagnosis.labels)
    members = np.flatnonzero(diagnosis.fitted)
    if len(members) == 0:
        return None, labels, 0
    local = np.full(n, -1)
    local[members] = np.arange(len(members))
    inside = diagnosis.fitted[i] & diagnosis.fitted[j]
    fit = newton(
        local[i[inside]],
        local[j[inside]],
        total[inside],
        wins[inside],
        n_agents=len(members),
        ridge=0.0,
        theta0=None if theta0 is None else theta0[members],
    )
    theta = fit.theta - fit.theta.mean()
    rating = CENTRE + ELO_SCALE * theta
    reason = None
    if not fit.converged:
        reason = NONCONVERGENCE
    elif not np.all(np.isfinite(rating)) or not _finite_strengths(theta):
        reason = NONFINITE
    out = np.full(n, np.nan)
    if reason is None:
        out[members] = rating
    for m in members:
        labels[m] = reason
    return out, labels, fit.iterations


def rate_games(
    a: np.ndarray,
    b: np.ndarray,
    y: np.ndarray,
    task: np.ndarray,
    *,
    n_candidates: int,
    replicates: int = 1000,
    seed: int = 0,
) -> GameRatings:
    """Ratings from resolved games: candidate indices ``a``, ``b``, ``y`` = 1 when a won,
    0 when b did, 0.5 for a draw; ``task`` each game's task index (its cluster)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    y, task = np.asarray(y, float), np.asarray(task, np.int64)
    if not (len(a) == len(b) == len(y) == len(task)):
        raise ValueError("a, b, y and task must have one entry per game")
    if len(a) and (np.any(a == b) or a.min() < 0 or max(a.max(), b.max()) >= n_candidates):
        raise ValueError("games need two distinct candidates in range")
    if not np.all(np.isin(y, (0.0, 0.5, 1.0))):
        raise ValueError("y must be 1 (a won), 0 (b won) or 0.5 (a draw)")
    n = n_candidates
    _, cluster = np.unique(task, return_inverse=True)
    clusters = int(cluster.max()) + 1 if len(cluster) else 0
    i, j, total, wins = _pair_sums(a, b, y, n)
    full, labels, iterations = _fit(i, j, total, wins, n)

    def result(**bootstrap) -> GameRatings:
        bounds = bootstrap.pop("bounds", None)
        rows = []
        for k in range(n):
            value = None if full is None or not np.isfinite(full[k]) else float(full[k])
            lower = upper = None
            if bounds is not None and value is not None:
                lower, upper = float(bounds[0][k]), float(bounds[1][k])
            reason = None if value is not None else labels[k]
            rows.append(CandidateRating(value, lower, upper, reason))
        return GameRatings(rows, seed, replicates, clusters, iterations=iterations, **bootstrap)

    if full is None or not np.all(np.isfinite(full)):
        return result(ran=False, unavailable=ORIGINAL_UNRATED)
    if clusters < 2:
        return result(ran=False, unavailable=TOO_FEW_TASKS)
    if replicates < 1:
        return result(ran=False)
    theta0 = (full - CENTRE) / ELO_SCALE
    # Games and win mass per (task, pair): integers and halves, so the sums of a drawn
    # replicate are exactly those of its games listed one by one.
    draw = bootstrap.cells_resampler(
        cluster_cells(cluster, a, b, np.ones(len(a)), y, n_agents=n), i, j
    )
    samples = np.full((replicates, n), np.nan)
    replicate_sums = bootstrap.resamples(draw, replicates=replicates, seed=seed)
    for r, (rtotal, rwins) in enumerate(replicate_sums):
        rating, _, _ = _fit(i, j, rtotal, rwins, n, theta0)
        if rating is not None:
            samples[r] = rating
    finite = np.all(np.isfinite(samples), axis=1)
    valid = int(finite.sum())
    if valid < replicates:
        return result(ran=True, valid=valid, unavailable=INVALID_REPLICATES, samples=samples)
    bounds = np.quantile(samples, QUANTILES, axis=0, method="linear")
    return result(ran=True, valid=valid, bounds=bounds, samples=samples)


def expected_score(ratings: np.ndarray, i: int, j: int) -> float:
    """P(i beats j) under the fitted ratings (for reports and checks)."""
    theta = (np.asarray(ratings, float) - CENTRE) / ELO_SCALE
    return float(win_probability(theta, np.array([i]), np.array([j]))[0])
