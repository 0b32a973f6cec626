"""Batch Bradley-Terry refit of SPEC §7.2 with the intervals of §7.3 and the
identifiability labels of §7.4. Pure: numpy (and scipy for graph components), no ORM.

Battles are aggregated into per-pair sums first, so a Newton iteration costs O(pairs)
plus one dense n × n solve. The fit covers the main strongly connected component only
(see ``connectivity``): that is the limit of the penalised fit as the ridge vanishes,
and every other agent is labelled instead of being given a number.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ratings import connectivity, intervals

RIDGE = 1e-3
R0 = 1000.0
TOLERANCE = 1e-10
MAX_ITERATIONS = 100
# Up to this many cells the pair lookup is a dense n × n table (one bincount pass);
# beyond it, np.unique sorts the pair keys instead.
DENSE_PAIR_TABLE = 1 << 24


@dataclass(frozen=True)
class PairSums:
    """Battles summed per unordered pair (i < j), from i's view."""

    i: np.ndarray  # int64, lower agent index of the pair
    j: np.ndarray  # int64, higher agent index
    total: np.ndarray  # Σ w_b over the pair's battles
    wins: np.ndarray  # Σ w_b y_b, y from i's view (ties ½)
    battles: np.ndarray  # number of battles
    inverse: np.ndarray  # per input battle: its row in these arrays


@dataclass(frozen=True)
class ClusterSums:
    """Battles summed per (cluster, agent A, agent B): all the judge-clustered interval
    needs of them, since a cluster's score on a pair is Σ w (y − μ) = wins − μ · total.
    What ``ratings.refit`` reads from the database instead of one cluster per battle."""

    cluster: np.ndarray  # cluster id of the row
    a: np.ndarray  # int64 agent indices
    b: np.ndarray
    total: np.ndarray  # Σ w_b
    wins: np.ndarray  # Σ w_b y_b, y from a's view


@dataclass(frozen=True)
class Fit:
    theta: np.ndarray
    iterations: int
    converged: bool


@dataclass(frozen=True)
class AgentEstimate:
    index: int
    battles: int
    weight: float
    rating: float | None
    lower: float | None
    upper: float | None
    model_halfwidth: float | None
    robust_halfwidth: float | None
    rank_lower: int | None
    rank_upper: int | None
    unavailable: str | None


@dataclass(frozen=True)
class Rating:
    agents: list[AgentEstimate]
    iterations: int
    converged: bool
    clusters: int | None
    robust_published: bool
    bootstrap_replicates: int
    seed: int
    fitted_agents: int = 0  # m: the agents of the main component, the ones rated
    reference_agents: int = 0  # agents whose mean strength is R0 (reference ∩ fitted)


def orient(a: np.ndarray, b: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """(lo, hi, y from lo's view) for each battle."""
    swap = a > b
    return np.where(swap, b, a), np.where(swap, a, b), np.where(swap, 1.0 - y, y)


def aggregate(
    a: np.ndarray,
    b: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    *,
    n_agents: int,
    count: np.ndarray | None = None,
) -> PairSums:
    """Per-pair sums of weights and win mass; vectorised (bincount), no Python loop.
    ``count``: how many identical battles each row stands for (one each when None)."""
    lo, hi, y_lo = orient(a, b, y)
    key = lo * n_agents + hi
    cells = n_agents * n_agents
    if cells <= DENSE_PAIR_TABLE:
        counts = np.bincount(key, minlength=cells)
        present = np.flatnonzero(counts)
        lookup = np.zeros(cells, dtype=np.int64)
        lookup[present] = np.arange(len(present))
        inverse = lookup[key]
        battles = counts[present]
    else:
        present, inverse, battles = np.unique(key, return_inverse=True, return_counts=True)
    rows = len(present)
    if count is not None:
        battles = np.bincount(inverse, count, minlength=rows).astype(np.int64)
        w = w * count
    return PairSums(
        i=present // n_agents,
        j=present % n_agents,
        total=np.bincount(inverse, w, minlength=rows),
        wins=np.bincount(inverse, w * y_lo, minlength=rows),
        battles=battles,
        inverse=inverse,
    )


def win_probability(theta: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """μ = σ(θ_i − θ_j), written with tanh so large gaps do not overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * (theta[i] - theta[j])))


def gradient(
    i: np.ndarray,
    j: np.ndarray,
    total: np.ndarray,
    wins: np.ndarray,
    theta: np.ndarray,
    ridge: float,
) -> np.ndarray:
    """g = Σ w (y − μ) x − rθ over pair sums."""
    residual = wins - total * win_probability(theta, i, j)
    n = len(theta)
    return (
        np.bincount(i, residual, minlength=n)
        - np.bincount(j, residual, minlength=n)
        - (ridge * theta)
    )


def neg_hessian(
    i: np.ndarray, j: np.ndarray, total: np.ndarray, theta: np.ndarray, ridge: float
) -> np.ndarray:
    """H = Σ w μ(1 − μ) x xᵀ + rI, dense n × n (pairs are unique, so plain assignment)."""
    mu = win_probability(theta, i, j)
    h = total * mu * (1.0 - mu)
    n = len(theta)
    hessian = np.zeros((n, n))
    hessian[i, j] = -h
    hessian[j, i] = -h
    hessian[np.diag_indices(n)] = (
        np.bincount(i, h, minlength=n) + np.bincount(j, h, minlength=n) + ridge
    )
    return hessian


def newton(
    i: np.ndarray,
    j: np.ndarray,
    total: np.ndarray,
    wins: np.ndarray,
    *,
    n_agents: int,
    ridge: float = RIDGE,
    theta0: np.ndarray | None = None,
    tol: float = TOLERANCE,
    max_iterations: int = MAX_ITERATIONS,
) -> Fit:
    """Maximise ℓ(θ) − (r/2)‖θ‖² by θ ← θ + H⁻¹g (a solve, not an inverse) from θ0
    (default 0) until no coordinate moves more than ``tol``. Needs ridge > 0 or a
    strongly connected win graph for H to be invertible."""
    theta = np.zeros(n_agents) if theta0 is None else np.array(theta0, dtype=float)
    for iteration in range(1, max_iterations + 1):
        step = np.linalg.solve(
            neg_hessian(i, j, total, theta, ridge), gradient(i, j, total, wins, theta, ridge)
        )
        theta += step
        if np.max(np.abs(step), initial=0.0) <= tol:
            return Fit(theta, iteration, True)
    return Fit(theta, max_iterations, False)


def _validate(a, b, y, w, cluster, reference, n_agents, count=None):
    if n_agents < 0:
        raise ValueError("n_agents must be non-negative")
    a = np.asarray(a)
    b = np.asarray(b)
    y = np.asarray(y, dtype=float)
    if not (a.ndim == b.ndim == y.ndim == 1 and len(a) == len(b) == len(y)):
        raise ValueError("a, b and y must be one-dimensional and of the same length")
    if len(a) and not (np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer)):
        raise ValueError("a and b must be integer agent indices")
    a = a.astype(np.int64)
    b = b.astype(np.int64)
    if len(a) and (min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= n_agents):
        raise ValueError(f"agent indices must lie in 0..{n_agents - 1}")
    if np.any(a == b):
        raise ValueError(f"battle {int(np.argmax(a == b))} pits an agent against itself")
    if not np.all((y == 0.0) | (y == 0.5) | (y == 1.0)):
        raise ValueError("outcomes y must be 1, 0.5 or 0")
    if w is None:
        w = np.ones(len(a))
    else:
        w = np.asarray(w, dtype=float)
        if w.shape != a.shape:
            raise ValueError("w needs one weight per battle")
        if not np.all(np.isfinite(w) & (w >= 0)):
            raise ValueError("weights w must be finite and non-negative")
    if cluster is not None:
        cluster = np.asarray(cluster)
        if cluster.shape != a.shape:
            raise ValueError("cluster needs one id per battle")
    if reference is not None:
        reference = np.asarray(reference, dtype=bool)
        if reference.shape != (n_agents,):
            raise ValueError("reference must be a boolean mask over the agents")
    if count is not None:
        count = np.asarray(count)
        if count.shape != a.shape:
            raise ValueError("count needs one multiplicity per row")
        if len(count) and not (np.issubdtype(count.dtype, np.integer) and count.min() >= 1):
            raise ValueError("counts must be positive integers")
        count = count.astype(np.int64)
    return a, b, y, w, cluster, reference, count


def rate(
    a: np.ndarray,
    b: np.ndarray,
    y: np.ndarray,
    *,
    n_agents: int,
    w: np.ndarray | None = None,
    cluster: np.ndarray | None = None,
    reference: np.ndarray | None = None,
    ridge: float = RIDGE,
    r0: float = R0,
    bootstrap: int = 0,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    count: np.ndarray | None = None,
    clustered: ClusterSums | None = None,
) -> Rating:
    """The published board from battles (a_b, b_b, y_b from a's view, weight w_b).

    Fits the main strongly connected component, centres on the mean strength of the
    ``reference`` agents in it (all of them when the mask is None or selects none of
    them), gives model-based and, when ``cluster`` is given and G ≥ m, cluster-robust
    95% intervals (the published interval is the robust one when it exists), and with
    ``bootstrap`` > 0 rank bands from that many seeded replicates over battles.
    ``progress`` is called once per finished replicate.

    ``count`` lets one row stand for that many identical battles (same agents, outcome,
    weight and cluster: what a GROUP BY in the database gives, ``ratings.refit``); every
    figure, the bootstrap's replicates included, is that of the battles listed one by
    one, each row's copies side by side in row order. ``clustered`` gives the clusters
    as sums per (cluster, pair) instead of ``cluster`` per row: the same intervals."""
    if clustered is not None and cluster is not None:
        raise ValueError("give cluster or clustered, not both")
    a, b, y, w, cluster, reference, count = _validate(
        a, b, y, w, cluster, reference, n_agents, count
    )
    pairs = aggregate(a, b, y, w, n_agents=n_agents, count=count)
    battles = np.bincount(pairs.i, pairs.battles, minlength=n_agents) + np.bincount(
        pairs.j, pairs.battles, minlength=n_agents
    )
    weight = np.bincount(pairs.i, pairs.total, minlength=n_agents) + np.bincount(
        pairs.j, pairs.total, minlength=n_agents
    )
    diagnosis = connectivity.diagnose(
        pairs.i, pairs.j, pairs.wins, pairs.total - pairs.wins, n_agents=n_agents
    )
    fitted = diagnosis.fitted
    members = np.flatnonzero(fitted)
    m = len(members)

    def estimates(**columns) -> list[AgentEstimate]:
        return [
            AgentEstimate(
                index=agent,
                battles=int(battles[agent]),
                weight=float(weight[agent]),
                unavailable=diagnosis.labels[agent],
                **{name: values[agent] for name, values in columns.items()},
            )
            for agent in range(n_agents)
        ]

    if m == 0:
        empty = [None] * n_agents
        return Rating(
            agents=estimates(
                rating=empty,
                lower=empty,
                upper=empty,
                model_halfwidth=empty,
                robust_halfwidth=empty,
                rank_lower=empty,
                rank_upper=empty,
            ),
            iterations=0,
            converged=True,
            clusters=None,
            robust_published=False,
            bootstrap_replicates=0,
            seed=seed,
        )

    local = np.full(n_agents, -1, dtype=np.int64)
    local[members] = np.arange(m)
    keep_pair = fitted[pairs.i] & fitted[pairs.j]
    pi, pj = local[pairs.i[keep_pair]], local[pairs.j[keep_pair]]
    total, wins = pairs.total[keep_pair], pairs.wins[keep_pair]
    fit = newton(pi, pj, total, wins, n_agents=m, ridge=ridge)
    hessian_inverse = np.linalg.inv(neg_hessian(pi, pj, total, fit.theta, ridge))

    ref = fitted if reference is None else reference & fitted
    if not ref.any():
        ref = fitted
    centring = intervals.centring_map(ref[members])
    theta_c = centring @ fit.theta
    model_hw = intervals.halfwidth(intervals.model_covariance(hessian_inverse, centring))

    keep_battle = keep_pair[pairs.inverse] if cluster is not None or bootstrap > 0 else None
    clusters = None
    robust_hw = None
    if clustered is not None:
        keep = fitted[clustered.a] & fitted[clustered.b]
        _, cluster_index = np.unique(clustered.cluster[keep], return_inverse=True)
        clusters = int(cluster_index.max()) + 1 if len(cluster_index) else 0
        if clusters >= m:
            ca, cb = clustered.a[keep], clustered.b[keep]
            total_c, wins_c = clustered.total[keep], clustered.wins[keep]
            swap = ca > cb
            lo, hi = np.where(swap, cb, ca), np.where(swap, ca, cb)
            wins_lo = np.where(swap, total_c - wins_c, wins_c)
            li, lj = local[lo], local[hi]
            residual = wins_lo - total_c * win_probability(fit.theta, li, lj)
            scores = intervals.cluster_scores(
                cluster_index, li, lj, residual, n_clusters=clusters, n_agents=m
            )
            robust_hw = intervals.halfwidth(
                intervals.robust_covariance(hessian_inverse, scores, centring)
            )
    elif cluster is not None:
        _, cluster_index = np.unique(cluster[keep_battle], return_inverse=True)
        clusters = int(cluster_index.max()) + 1 if len(cluster_index) else 0
        if clusters >= m:
            lo, hi, y_lo = orient(a[keep_battle], b[keep_battle], y[keep_battle])
            li, lj = local[lo], local[hi]
            mass = w[keep_battle] if count is None else w[keep_battle] * count[keep_battle]
            residual = mass * (y_lo - win_probability(fit.theta, li, lj))
            scores = intervals.cluster_scores(
                cluster_index, li, lj, residual, n_clusters=clusters, n_agents=m
            )
            robust_hw = intervals.halfwidth(
                intervals.robust_covariance(hessian_inverse, scores, centring)
            )

    rank_lower = rank_upper = None
    if bootstrap > 0:
        from ratings.bootstrap import rank_bands  # builds on this module's Newton fit

        row_of_kept = np.cumsum(keep_pair) - 1
        rank_lower, rank_upper = rank_bands(
            pi,
            pj,
            row_of_kept[pairs.inverse[keep_battle]],
            w[keep_battle],
            orient(a[keep_battle], b[keep_battle], y[keep_battle])[2],
            n_agents=m,
            ridge=ridge,
            theta=fit.theta,
            replicates=bootstrap,
            seed=seed,
            progress=progress,
            count=None if count is None else count[keep_battle],
        )

    def spread(values) -> list:
        out: list = [None] * n_agents
        if values is not None:
            for position, agent in enumerate(members):
                out[agent] = values[position].item()
        return out

    rating = r0 + intervals.ELO_SCALE * theta_c
    published_hw = model_hw if robust_hw is None else robust_hw
    return Rating(
        agents=estimates(
            rating=spread(rating),
            lower=spread(rating - published_hw),
            upper=spread(rating + published_hw),
            model_halfwidth=spread(model_hw),
            robust_halfwidth=spread(robust_hw),
            rank_lower=spread(rank_lower),
            rank_upper=spread(rank_upper),
        ),
        iterations=fit.iterations,
        converged=fit.converged,
        clusters=clusters,
        robust_published=robust_hw is not None,
        bootstrap_replicates=bootstrap,
        seed=seed,
        fitted_agents=m,
        reference_agents=int(ref.sum()),
    )
