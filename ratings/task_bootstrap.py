"""Ratings of judged games with task-clustered intervals (003 "Ratings", corrected for
few tasks: issue 38). Pure: numpy (scipy.special for the t quantile), no ORM.

The fit is the arena's own (``ratings.bradley_terry``: the same Newton iteration, the
same identifiability diagnosis of ``ratings.connectivity``), unpenalised: draws are
half-wins, a candidate gets a number only inside the main strongly connected component
of the win graph, centred so the rated candidates average 1500, on the 400-point
scale (400 points is a 10× strength ratio). Otherwise its rating is None with the
reason: ``no_comparisons``, ``disconnected``, ``separated`` (connectivity's labels),
``nonconvergence`` (the iteration did not meet its tolerance) or ``nonfinite_result``.

Intervals (``METHOD``): the task-clustered sandwich with the CR2 small-sample correction
and a t critical value. Each task is one cluster (all of its games together, the two
orientations of a game never apart: a game is one row). The variance of the centred
ratings is ``C A⁻¹ (Σ_g s̃_g s̃_gᵀ) A⁻¹ Cᵀ`` with A the information (plus 11ᵀ/m, as the
board's ``bradley_terry.shift_fixed``), s_g task g's score and s̃_g = (I − B_g A⁻¹)^(−½)
s_g, B_g task g's own information: the bias-reduced linearisation of Bell and McCaffrey
(2002), which removes the downward bias a task-clustered variance has when each task
holds a visible share of the evidence. 95 % bounds are rating ± t(G* − 1) · se, G* the
effective number of tasks (``intervals.effective_clusters`` of their game counts, G when
every task has as many games). In a round robin every task has the same design, so the
correction is exactly the factor G/(G − 1) of the board's clustered variance
(``intervals.robust_variance``): the tournaments' intervals are the board's
task-clustered rule without its floor. Measured in ``ratings.tournament_coverage``: the
percentile bootstrap it replaces covered 0.89–0.92 of its 95 % claim with a few tasks.

No bounds, with the reason, when there are fewer than two tasks (``too_few_tasks``),
when a requested candidate has no full-data rating (``original_unrated``), when a
resampling of whole tasks cannot rate every candidate (``invalid_replicates``: 003's
percentile bootstrap, kept as a check — ``replicates`` draws from ``seed`` through the
live board's ``ratings.bootstrap.cells_resampler``, each refitted; ``bootstrap_valid``
counts those that rated everyone; the bounds are published only when all did), or when
the tasks hold too little independent evidence for t (``too_few_effective_tasks``:
fewer than two effective tasks, so t would have under one degree of freedom, or one
task alone decides some candidate's rating, where CR2 is undefined). With
``replicates`` = 0 the check does not run and the bounds need only the rest.

(003 fits by Hunter's MM algorithm; Newton reaches the same maximum-likelihood estimate
where it exists, and is what the arena's board already uses.)
"""

from dataclasses import dataclass, field

import numpy as np

from ratings import bootstrap, connectivity, intervals
from ratings.bradley_terry import newton, win_probability
from ratings.cells import ClusterCells, cluster_cells
from ratings.intervals import ELO_SCALE

CENTRE = 1500.0
NONCONVERGENCE, NONFINITE = "nonconvergence", "nonfinite_result"
TOO_FEW_TASKS, ORIGINAL_UNRATED, INVALID_REPLICATES = (
    "too_few_tasks",
    "original_unrated",
    "invalid_replicates",
)
TOO_FEW_EFFECTIVE_TASKS = "too_few_effective_tasks"
QUANTILES = (0.025, 0.975)  # the percentile bootstrap's (before issue 38; tests, coverage)
METHOD = "task_clustered_sandwich_cr2_t"
METHOD_NAME = "task-clustered sandwich (CR2) with t(G* − 1)"
METHOD_SENTENCE = (
    "Each bound is the rating plus or minus t times its standard error, where the standard "
    "error counts every task as one independent unit (all its games together) and is "
    "corrected for having only a few tasks; resampling whole tasks only checks that every "
    "candidate stays rated."
)
LEVEL = 0.95
LEVERAGE_LIMIT = 1.0 - 1e-9  # a task whose own information reaches this decides a rating


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
    # the interval's settings (None where it was not computed)
    effective_clusters: float | None = None  # G*: the tasks' game counts, (Σn)²/Σn²
    critical_value: float | None = None  # t(G* − 1) at 97.5 %

    @property
    def degrees_of_freedom(self) -> float | None:
        return None if self.effective_clusters is None else self.effective_clusters - 1.0


def _task_information(cells: ClusterCells, h: np.ndarray, n: int) -> np.ndarray:
    """B_g = Σ_{cells of g} h (e_i − e_j)(e_i − e_j)ᵀ per task, a G × n × n stack."""
    size = cells.clusters * n * n
    base = cells.cluster * (n * n)
    out = np.bincount(base + cells.i * (n + 1), h, minlength=size)
    out += np.bincount(base + cells.j * (n + 1), h, minlength=size)
    out -= np.bincount(base + cells.i * n + cells.j, h, minlength=size)
    out -= np.bincount(base + cells.j * n + cells.i, h, minlength=size)
    return out.reshape(cells.clusters, n, n)


def cr2_variance(cells: ClusterCells, theta: np.ndarray) -> np.ndarray | None:
    """Per candidate, the CR2 task-clustered variance of the centred strengths (θ scale)
    at the fit ``theta``: diag C A⁻¹ (Σ_g s̃_g s̃_gᵀ) A⁻¹ Cᵀ with s̃_g = (I − B_g A⁻¹)^(−½) s_g.
    The power of the non-symmetric B_g A⁻¹ is taken through the symmetric
    S_g = A^(−½) B_g A^(−½): (I − B_g A⁻¹)^(−½) = A^(½) (I − S_g)^(−½) A^(−½). None when a
    task alone decides some direction of the strengths (an eigenvalue of S_g reaches 1)."""
    n = len(theta)
    mu = win_probability(theta, cells.i, cells.j)
    scores = intervals.cluster_scores(
        cells.cluster, cells.i, cells.j, cells.wins - cells.total * mu,
        n_clusters=cells.clusters, n_agents=n,
    )  # fmt: skip
    own = _task_information(cells, cells.total * mu * (1.0 - mu), n)
    a = own.sum(axis=0) + 1.0 / n  # A = H + 11ᵀ/n
    values, vectors = np.linalg.eigh(a)
    root = (vectors * np.sqrt(values)) @ vectors.T
    inverse_root = (vectors / np.sqrt(values)) @ vectors.T
    leverage, basis = np.linalg.eigh(inverse_root @ own @ inverse_root)
    if leverage.max(initial=0.0) >= LEVERAGE_LIMIT:
        return None
    shrink = 1.0 / np.sqrt(1.0 - np.clip(leverage, 0.0, None))
    turned = np.einsum("gkl,gk->gl", basis, scores @ inverse_root)  # Uᵀ A^(−½) s_g
    adjusted = np.einsum("gkl,gl->gk", basis, shrink * turned) @ root  # A^(½) U f Uᵀ …
    bread = intervals.bread(np.linalg.inv(a), np.ones(n))
    projected = adjusted @ bread.T
    return np.einsum("gi,gi->i", projected, projected)


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
    theta0 = (full - CENTRE) / ELO_SCALE
    # Games and win mass per (task, pair): integers and halves, so the sums of a drawn
    # replicate are exactly those of its games listed one by one.
    cells = cluster_cells(cluster, a, b, np.ones(len(a)), y, n_agents=n)
    effective = intervals.effective_clusters(np.bincount(cells.cluster, cells.total))
    settings = {"effective_clusters": effective}
    if effective >= 2.0:
        settings["critical_value"] = intervals.t95(effective)
    checked: dict = {"ran": False}
    if replicates >= 1:
        draw = bootstrap.cells_resampler(cells, i, j)
        samples = np.full((replicates, n), np.nan)
        replicate_sums = bootstrap.resamples(draw, replicates=replicates, seed=seed)
        for r, (rtotal, rwins) in enumerate(replicate_sums):
            rating, _, _ = _fit(i, j, rtotal, rwins, n, theta0)
            if rating is not None:
                samples[r] = rating
        valid = int(np.all(np.isfinite(samples), axis=1).sum())
        checked = {"ran": True, "valid": valid, "samples": samples}
        if valid < replicates:
            return result(**checked, **settings, unavailable=INVALID_REPLICATES)
    variance = cr2_variance(cells, theta0 - theta0.mean())
    if "critical_value" not in settings or variance is None:
        return result(**checked, **settings, unavailable=TOO_FEW_EFFECTIVE_TASKS)
    halfwidth = intervals.halfwidth(variance, settings["critical_value"])
    return result(**checked, **settings, bounds=(full - halfwidth, full + halfwidth))


def percentile_bounds(samples: np.ndarray) -> np.ndarray:
    """The 95 % percentile bootstrap's bounds (type-7 quantiles of the replicates): what
    the tournaments published before issue 38, kept for the coverage comparison."""
    return np.quantile(samples, QUANTILES, axis=0, method="linear")


def expected_score(ratings: np.ndarray, i: int, j: int) -> float:
    """P(i beats j) under the fitted ratings (for reports and checks)."""
    theta = (np.asarray(ratings, float) - CENTRE) / ELO_SCALE
    return float(win_probability(theta, np.array([i]), np.array([j]))[0])
