"""Batch Bradley-Terry refit of SPEC §7.2 with the intervals of §7.3 and the
identifiability labels of §7.4. Pure: numpy (scipy's LAPACK imported when used), no ORM.

Battles are counted into cells and pairs first (``ratings.cells``), so a Newton
iteration costs O(pairs) plus one dense m × m solve. The fit covers the main strongly
connected component only (see ``connectivity``): that is the limit of the penalised fit
as the ridge vanishes, and every other agent is labelled instead of being given a
number.

Newton works on the identified subspace: the likelihood does not see a common shift of
all strengths, and the penalised optimum has mean strength 0 (the ridge's gradient is
the only one along the shift), so each step is solved with the shift fixed
(``H + 11ᵀ/m``, which is H on the differences and invertible whenever the differences
are identified, ridge or not) and the stop test reads the differences only. A full
step that does not bring the gradient down is halved until the penalised
log-likelihood rises enough (Armijo), so a near-singular Hessian cannot throw the
iteration off. See docs/intervals.md.
"""

from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np

from ratings import cells as cells_module
from ratings import connectivity, intervals
from ratings.cells import ClusterCells, aggregate  # noqa: F401 (aggregate: the pair sums' door)

RIDGE = 1e-3
R0 = 1000.0
TOLERANCE = 1e-10
MAX_ITERATIONS = 100
# A ridge for bootstrap replicates when the fit itself has none: a replicate may lose
# the strong connection the full data have, and its ranks need finite strengths.
REPLICATE_RIDGE = 1e-6
ARMIJO = 1e-4


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
    step: float = 0.0  # the last step's largest move of a difference (θ scale)


@dataclass(slots=True)  # not frozen: a frozen init costs 5× and a refit makes one per agent
class AgentEstimate:
    index: int
    battles: int
    weight: float
    rating: float | None
    lower: float | None
    upper: float | None
    model_halfwidth: float | None  # battle-level sandwich, z critical value
    robust_halfwidth: float | None  # cluster-robust, t(G* − 1) critical value (unfloored)
    rank_lower: int | None
    rank_upper: int | None
    unavailable: str | None
    information_halfwidth: float | None = None  # C H⁻¹ Cᵀ: the textbook one, diagnostic


_ESTIMATE_FIELDS = [f.name for f in fields(AgentEstimate)]


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
    interval: str = intervals.BATTLE  # the published interval's kind
    critical_value: float = intervals.Z95  # its multiplier of the standard error
    bootstrap_resamples: str = "battles"  # what a replicate resamples: battles, clusters, tasks
    bootstrap_clusters: int | None = None  # the clusters (judges, tasks) it draws; None: battles
    floored: int = 0  # agents whose published half-width is the floor
    effective_clusters: float | None = None  # G*, the clustered interval's t is t(G* − 1)


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
    mu: np.ndarray | None = None,
) -> np.ndarray:
    """g = Σ w (y − μ) x − rθ over pair sums (``mu``: μ at θ when the caller has it)."""
    if mu is None:
        mu = win_probability(theta, i, j)
    residual = wins - total * mu
    n = len(theta)
    g = np.bincount(i, residual, minlength=n) - np.bincount(j, residual, minlength=n)
    g -= ridge * theta
    return g


def laplacian(i: np.ndarray, j: np.ndarray, h: np.ndarray, n: int, diagonal: float = 0.0):
    """Σ_pairs h (e_i − e_j)(e_i − e_j)ᵀ + diagonal · I, dense n × n, pairs unique (one
    compiled pass: ``ratings.kernels``)."""
    from ratings import kernels

    return kernels.laplacian(_i(i), _i(j), _f(h), int(n), float(diagonal))


def neg_hessian(
    i: np.ndarray, j: np.ndarray, total: np.ndarray, theta: np.ndarray, ridge: float
) -> np.ndarray:
    """H = Σ w μ(1 − μ) x xᵀ + rI, dense n × n."""
    mu = win_probability(theta, i, j)
    return laplacian(i, j, total * mu * (1.0 - mu), len(theta), ridge)


def _f(values) -> np.ndarray:
    """A float64 array (no copy when it is one): the float type the kernels compile for."""
    return np.asarray(values, dtype=np.float64)


def _i(values) -> np.ndarray:
    """An int64 array (no copy when it is one): the index type the kernels compile for."""
    return np.asarray(values, dtype=np.int64)


def objective(i, j, total, wins, theta, ridge) -> float:
    """ℓ(θ) − (r/2)‖θ‖², ℓ = Σ [wins log μ + (total − wins) log(1 − μ)] over pairs."""
    d = theta[i] - theta[j]
    # log σ(d) = −log(1 + e^−d), stable both ways
    log_mu = -np.logaddexp(0.0, -d)
    log_nu = -np.logaddexp(0.0, d)
    return float(wins @ log_mu + (total - wins) @ log_nu) - 0.5 * ridge * float(theta @ theta)


def shift_fixed(hessian: np.ndarray) -> np.ndarray:
    """H + 11ᵀ/n in place: H on the differences, 1 on the common shift. H has 1 as an
    eigenvector (eigenvalue r), so C(H + 11ᵀ/n)⁻¹Cᵀ = CH⁻¹Cᵀ for every centring C
    (C1 = 0), and it stays invertible at r = 0 when the differences are identified."""
    hessian += 1.0 / len(hessian)
    return hessian


def start(i, j, total, wins, n_agents: int) -> np.ndarray:
    """A starting point near the fit: each agent's log-odds of its score against the
    opponents it met (½ added to both sides so that no score is 0 or 1)."""
    won = np.bincount(i, wins, minlength=n_agents) + np.bincount(
        j, total - wins, minlength=n_agents
    )
    played = np.bincount(i, total, minlength=n_agents) + np.bincount(j, total, minlength=n_agents)
    return np.log((won + 0.5) / (played - won + 0.5))


def spd_inverse(matrix: np.ndarray) -> np.ndarray:
    """The inverse of a symmetric positive definite matrix by its Cholesky factor
    (LAPACK potrf/potri: half the work of a general inverse)."""
    from scipy.linalg import lapack  # imported here: see intervals.t95

    factor, info = lapack.dpotrf(matrix, lower=False)
    if info == 0:
        inverse, info = lapack.dpotri(factor, lower=False)
    if info != 0:  # not numerically positive definite: the general inverse decides
        return np.linalg.inv(matrix)
    lower = np.tril_indices(len(inverse), -1)
    inverse[lower] = inverse.T[lower]  # potri fills the upper triangle only
    return inverse


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
    max_iterations: int | None = None,
) -> Fit:
    """Maximise ℓ(θ) − (r/2)‖θ‖² over mean-zero θ from θ0 (default ``start``) by
    Newton steps on the differences, halved while they would lower the objective,
    until no difference moves more than ``tol``. Needs ridge > 0 or a strongly
    connected win graph (the data identify the differences)."""
    if max_iterations is None:
        max_iterations = MAX_ITERATIONS
    if n_agents < 2:
        return Fit(np.zeros(n_agents), 0, True)
    theta = start(i, j, total, wins, n_agents) if theta0 is None else np.array(theta0, float)
    theta -= theta.mean()

    def projected_gradient(at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(g − mean g, μ) at θ = ``at``: μ serves the Hessian at the same point."""
        mu = win_probability(at, i, j)
        g = gradient(i, j, total, wins, at, ridge, mu)
        return g - g.mean(), mu

    g, mu = projected_gradient(theta)
    moved = previous = np.inf
    for iteration in range(1, max_iterations + 1):
        hessian = laplacian(i, j, total * mu * (1.0 - mu), n_agents, ridge)
        # numpy's solve: the least overhead per call for the small systems of replicates
        step = np.linalg.solve(shift_fixed(hessian), g)
        step -= step.mean()
        moved = float(np.max(np.abs(step)))
        trial = theta + step
        g_trial, mu_trial = projected_gradient(trial)
        if moved > 1e-6 and g_trial @ g_trial > g @ g:
            # The full step did not bring the gradient down: step control, halving
            # until the penalised log-likelihood rises enough (Armijo).
            current = objective(i, j, total, wins, theta, ridge)
            slope, t = float(g @ step), 1.0
            while objective(i, j, total, wins, trial, ridge) < current + ARMIJO * t * slope:
                t *= 0.5
                if t < 1e-12:  # no step along Newton's direction helps: stuck
                    return Fit(theta, iteration, False, moved)
                trial = theta + t * step
            g_trial, mu_trial = projected_gradient(trial)
            moved *= t
        theta, g, mu = trial, g_trial, mu_trial
        # Newton converges quadratically: once the next move, predicted from the last
        # two (κ · moved², κ = moved / previous²), is below the tolerance, the move
        # just made was the last one that mattered.
        if moved <= tol or (moved < 1e-4 and moved**3 / previous**2 <= tol):
            return Fit(theta, iteration, True, moved)
        previous = moved
    return Fit(theta, max_iterations, False, moved)


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
    a = np.asarray(a, dtype=np.int64)  # no copy when they are int64 already
    b = np.asarray(b, dtype=np.int64)
    if w is not None:
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
        if len(count) and not np.issubdtype(count.dtype, np.integer):
            raise ValueError("counts must be positive integers")
        count = np.asarray(count, dtype=np.int64)
    if cells_module.dense_uniform(w, n_agents):
        # One compiled pass checks every battle and counts it (ratings.kernels).
        from ratings import kernels

        table, first = kernels.ordered_table(a, b, y, count, n_agents)
        _refuse(first, n_agents)
        return a, b, y, w, cluster, reference, count, table
    if len(a) and (min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= n_agents):
        raise ValueError(f"agent indices must lie in 0..{n_agents - 1}")
    if np.any(a == b):
        raise ValueError(f"battle {int(np.argmax(a == b))} pits an agent against itself")
    twice = y * 2.0
    if len(y) and not np.all((twice == 0.0) | (twice == 1.0) | (twice == 2.0)):
        raise ValueError("outcomes y must be 1, 0.5 or 0")
    if count is not None and len(count) and count.min() < 1:
        raise ValueError("counts must be positive integers")
    return a, b, y, w, cluster, reference, count, None


def _refuse(first: np.ndarray, n_agents: int) -> None:
    """The error for the first kind of fault ``kernels.ordered_table`` found, in the
    order the numpy checks above report them."""
    from ratings import kernels

    if first[kernels.OUT_OF_RANGE] >= 0:
        raise ValueError(f"agent indices must lie in 0..{n_agents - 1}")
    if first[kernels.SELF] >= 0:
        raise ValueError(f"battle {int(first[kernels.SELF])} pits an agent against itself")
    if first[kernels.OUTCOME] >= 0:
        raise ValueError("outcomes y must be 1, 0.5 or 0")
    if first[kernels.COUNT] >= 0:
        raise ValueError("counts must be positive integers")


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
    tasks: ClusterSums | None = None,
) -> Rating:
    """The published board from battles (a_b, b_b, y_b from a's view, weight w_b).

    Fits the main strongly connected component, centres on the mean strength of the
    ``reference`` agents in it (all of them when the mask is None or selects none of
    them), and gives the 95% intervals of ``ratings.intervals``: battle-level always,
    cluster-robust when ``cluster`` is given and G ≥ m, the published one chosen by
    ``intervals.publish``. With ``bootstrap`` > 0, rank bands from that many seeded
    replicates that resample what the published interval treats as independent:
    clusters when the clustered interval is published, battles otherwise
    (``ratings.bootstrap``). ``progress`` is called once per finished replicate.

    ``count`` lets one row stand for that many identical battles (same agents, outcome,
    weight and cluster: what a GROUP BY in the database gives, ``ratings.refit``); every
    figure, the bootstrap's replicates included, is that of the battles listed one by
    one, in any order. ``clustered`` gives the clusters as sums per (cluster, pair)
    instead of ``cluster`` per row: the same intervals and bands.

    ``tasks``, the battles summed per (task, pair) like ``clustered``, makes every
    replicate resample whole tasks instead, whatever interval is published (the arena's
    choice, ``agents.models.Arena.bootstrap_unit``); the intervals stay as they are."""
    if clustered is not None and cluster is not None:
        raise ValueError("give cluster or clustered, not both")
    if not (np.isfinite(ridge) and ridge >= 0):
        raise ValueError("the ridge must be finite and non-negative")
    if not np.isfinite(r0):
        raise ValueError("R0 must be finite")
    if bootstrap < 0 or seed < 0:
        raise ValueError("bootstrap replicates and the seed must be non-negative")
    a, b, y, w, cluster, reference, count, table = _validate(
        a, b, y, w, cluster, reference, n_agents, count
    )
    cells = cells_module.count_cells(a, b, y, w, n_agents=n_agents, count=count, table=table)
    pairs = cells.pairs
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

    def estimates(**columns: list) -> list[AgentEstimate]:
        """One estimate per agent from one list per remaining field."""
        given = {
            "index": range(n_agents),
            "battles": battles.astype(np.int64).tolist(),
            "weight": weight.tolist(),
            "unavailable": diagnosis.labels,
            **columns,
        }
        return [
            AgentEstimate(*row) for row in zip(*(given[f] for f in _ESTIMATE_FIELDS), strict=True)
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
                information_halfwidth=empty,
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
    kept = cells.keep(fitted[pairs.i] & fitted[pairs.j])
    pi, pj = local[kept.pairs.i], local[kept.pairs.j]
    total, wins = kept.pairs.total, kept.pairs.wins
    fit = newton(pi, pj, total, wins, n_agents=m, ridge=ridge)
    a_inv = spd_inverse(shift_fixed(neg_hessian(pi, pj, total, fit.theta, ridge)))

    ref = fitted if reference is None else reference & fitted
    if not ref.any():
        ref = fitted
    reference_local = ref[members].astype(float)
    bread = intervals.bread(a_inv, reference_local)
    theta_c = fit.theta - reference_local @ fit.theta / reference_local.sum()
    information_hw = intervals.halfwidth(intervals.information_variance(bread, reference_local))
    mu = win_probability(fit.theta, pi, pj)
    meat = laplacian(pi, pj, battle_meat(kept, mu), m)
    battle_hw = intervals.halfwidth(
        intervals.battle_variance(bread, meat, battles=int(kept.pairs.battles.sum()), free=m - 1)
    )

    groups = _cluster_cells(a, b, y, w, count, cluster, clustered, n_agents)
    clusters = robust_hw = effective = judged = None
    if groups is not None:
        judged = _fitted_cells(groups, fitted, local)
        clusters = judged.clusters
        mass = np.bincount(judged.cluster, judged.total, minlength=clusters)
        effective = intervals.effective_clusters(mass)
        if clusters >= max(m, 2) and effective > 1:
            residual = judged.wins - judged.total * win_probability(fit.theta, judged.i, judged.j)
            scores = intervals.cluster_scores(
                judged.cluster, judged.i, judged.j, residual, n_clusters=clusters, n_agents=m
            )
            robust_hw = intervals.halfwidth(
                intervals.robust_variance(bread, scores), intervals.t95(effective)
            )
    choice = intervals.publish(battle_hw, robust_hw, clusters=effective)

    # What a replicate resamples: tasks when asked, else what the published interval
    # treats as independent (its clusters, or the battles).
    resampled = None
    if tasks is not None:
        by_task = _cluster_cells(a, b, y, w, count, None, tasks, n_agents)
        resampled = _fitted_cells(by_task, fitted, local)
    elif choice.kind == intervals.CLUSTERED:
        resampled = judged
    rank_lower = rank_upper = None
    if bootstrap > 0:
        from ratings import bootstrap as resampling  # builds on this module's Newton fit

        if resampled is not None:
            draw = resampling.cells_resampler(resampled, pi, pj)
        else:
            draw = resampling.battle_resampler(kept)
        rank_lower, rank_upper = resampling.rank_bands(
            draw,
            pi,
            pj,
            n_agents=m,
            ridge=ridge if ridge > 0 else REPLICATE_RIDGE,
            theta=fit.theta,
            replicates=bootstrap,
            seed=seed,
            progress=progress,
        )

    def spread(values) -> list:
        if values is None:
            return [None] * n_agents
        if m == n_agents:  # every agent is fitted: members is 0..n − 1
            return values.tolist()
        out: list = [None] * n_agents
        for agent, value in zip(members.tolist(), values.tolist(), strict=True):
            out[agent] = value
        return out

    rating = r0 + intervals.ELO_SCALE * theta_c
    return Rating(
        agents=estimates(
            rating=spread(rating),
            lower=spread(rating - choice.halfwidth),
            upper=spread(rating + choice.halfwidth),
            model_halfwidth=spread(battle_hw),
            robust_halfwidth=spread(robust_hw),
            rank_lower=spread(rank_lower),
            rank_upper=spread(rank_upper),
            information_halfwidth=spread(information_hw),
        ),
        iterations=fit.iterations,
        converged=fit.converged,
        clusters=clusters,
        robust_published=choice.kind == intervals.CLUSTERED,
        bootstrap_replicates=bootstrap,
        seed=seed,
        fitted_agents=m,
        reference_agents=int(ref.sum()),
        interval=choice.kind,
        critical_value=choice.critical,
        bootstrap_resamples=(
            "tasks" if tasks is not None else "battles" if resampled is None else "clusters"
        ),
        bootstrap_clusters=None if resampled is None else resampled.clusters,
        floored=choice.floored,
        effective_clusters=effective,
    )


def battle_meat(kept: cells_module.Cells, mu: np.ndarray) -> np.ndarray:
    """Per pair, the battle-level meat of ``intervals.pair_meat``: the pair's squared
    residuals Σ_b w_b² (y_b − μ)² shrunk towards the board's measured variance by one
    imaginary battle counted among the pair's own (n/(n + 1)), not added to them."""
    p = kept.pair
    mass = kept.count * kept.w * kept.w
    n_pairs = len(mu)
    spread = np.bincount(p, mass * (kept.y - mu[p]) ** 2, minlength=n_pairs)
    square = np.bincount(p, mass, minlength=n_pairs)
    return intervals.pair_meat(spread, square * mu * (1.0 - mu), kept.pairs.battles)


def _fitted_cells(groups: ClusterCells, fitted: np.ndarray, local: np.ndarray) -> ClusterCells:
    """The sums of ``groups`` on pairs of fitted agents, in the fit's local indices,
    clusters renumbered 0..G−1 over those that keep a battle."""
    keep = fitted[groups.i] & fitted[groups.j]
    _, cluster_index = np.unique(groups.cluster[keep], return_inverse=True)
    return ClusterCells(
        cluster=cluster_index,
        i=local[groups.i[keep]],
        j=local[groups.j[keep]],
        total=groups.total[keep],
        wins=groups.wins[keep],
        clusters=int(cluster_index.max()) + 1 if len(cluster_index) else 0,
    )


def _cluster_cells(a, b, y, w, count, cluster, clustered, n_agents) -> ClusterCells | None:
    """The battles summed per (cluster, pair), from ``clustered`` or per-row keys."""
    if clustered is not None:
        return cells_module.cluster_cells(
            np.asarray(clustered.cluster),
            np.asarray(clustered.a, dtype=np.int64),
            np.asarray(clustered.b, dtype=np.int64),
            np.asarray(clustered.total, dtype=float),
            np.asarray(clustered.wins, dtype=float),
            n_agents=n_agents,
        )
    if cluster is None:
        return None
    mass = np.ones(len(a)) if w is None else w
    if count is not None:
        mass = mass * count
    return cells_module.cluster_cells(cluster, a, b, mass, mass * y, n_agents=n_agents)
