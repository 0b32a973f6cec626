"""Style control (issue 38): the Bradley–Terry fit with style covariates that LMArena
and arena-hard-auto publish beside their plain ratings. Pure: numpy (scipy's LAPACK
and t quantile through ``ratings.bradley_terry`` / ``ratings.intervals``), no ORM.

Model, per battle b between agents a and b (y from a's view, weight w, ties ½):

    logit P(a beats b) = θ_a − θ_b + Σ_f β_f z_bf

z_bf is the battle's *style difference* on feature f: the normalised side difference
d = (f_a − f_b)/(f_a + f_b) of a non-negative count-like feature (0 when both sides are
0). It lies in [−1, 1], so one very long message cannot dominate the fit; it is a
ratio, so "twice as long" weighs the same for short and long messages; and it is
antisymmetric: swapping the sides flips its sign. It is divided by its root mean
square over the battles where it is known (weighted by their evidence weights, like
the fit): its standard deviation when sides are listed at random. A battle where either
side's feature is unknown (NaN) gets 0 for that feature: no style difference is
claimed. Unlike the published method the difference is scaled about 0, not centred on
its mean: centring an antisymmetric covariate adds a constant to every battle from a's
side, a bias towards whoever is listed first whenever sides are not random, and changes
nothing when they are; with it, which side is listed first matters.

A feature unknown in every battle is dropped ("not measured"), and so is one whose
difference is the same in every battle where it is known ("constant": it cannot be told
from the side listed first). β_f is reported on the Elo scale: a battle whose
difference on f is one standard deviation in a's favour moves a's odds as much as
``coef`` Elo points of strength would.

The fit is the board's: penalised Newton on the identified subspace (the common shift
of θ fixed), Armijo step control, the same ridge, on the main strongly connected
component of ``ratings.connectivity``, centred on the reference agents' mean (= r0).
Intervals for strengths and coefficients alike come from the battle-level sandwich
(the board's per-pair meat, ``intervals.pair_meat``, spread over each pair's
battles: ``battle_meat``; HC1 factor B/(B − (m − 1 + k))) or the judge-clustered
sandwich with t(G* − 1) and the battle-level floor, chosen by ``intervals.publish``.
The clustered one needs G ≥ m + k clusters (its meat has rank G − 1 and there are
m − 1 + k free parameters). With no feature kept this is exactly ``bradley_terry.rate``.
See docs/intervals.md, "Style control".
"""

from dataclasses import dataclass, field

import numpy as np

from ratings import bradley_terry, connectivity, intervals

STYLE_FEATURES: tuple[str, ...] = ("length", "markdown", "steps", "wall_time", "files", "diff_size")
NOT_MEASURED = "not measured"
CONSTANT = "constant"
NO_BATTLES = "no battles between rated agents"


@dataclass(frozen=True)
class StyleRating:
    rating: np.ndarray  # Elo per agent, NaN where unrated
    lower: np.ndarray  # 95 % bounds, NaN where unrated (or no interval can be given)
    upper: np.ndarray
    interval: str  # "battle" | "clustered"
    critical_value: float
    names: tuple[str, ...]  # the kept features, in input order
    coef: np.ndarray  # Elo per 1 sd of the standardised difference, per kept feature
    coef_lower: np.ndarray
    coef_upper: np.ndarray
    dropped: dict[str, str]  # feature -> reason
    n_battles: int  # battles in the fit (between agents of the main component)
    converged: bool = True
    iterations: int = 0
    clusters: int | None = None  # G: clusters with a battle in the fit
    effective_clusters: float | None = None  # G*, t(G* − 1) when clustered
    floored: int = 0  # published half-widths (agents and coefficients) at the floor
    scale: np.ndarray = field(default_factory=lambda: np.zeros(0))  # sd of d per kept feature
    fitted_agents: int = 0


@dataclass(frozen=True)
class Design:
    """The battles of one fit in local indices, with their pairs and covariates."""

    a: np.ndarray  # int64 local agent index, 0..m−1
    b: np.ndarray
    y: np.ndarray
    w: np.ndarray
    z: np.ndarray  # n × k standardised style differences
    m: int
    pair: np.ndarray  # int64 row of the battle's unordered pair
    pi: np.ndarray  # the pairs' agents
    pj: np.ndarray
    pair_battles: np.ndarray  # battles per pair

    @property
    def k(self) -> int:
        return self.z.shape[1]


def differences(features_a, features_b) -> np.ndarray:
    """(f_a − f_b)/(f_a + f_b) per battle and feature, 0 when both are 0, NaN when
    either side is unknown. Features must be non-negative (counts, lengths, seconds)."""
    fa = np.asarray(features_a, dtype=float)
    fb = np.asarray(features_b, dtype=float)
    if fa.shape != fb.shape or fa.ndim != 2:
        raise ValueError("features_a and features_b must be n_battles × k arrays alike")
    total = fa + fb
    if np.isinf(total).any():
        raise ValueError("style features must be finite or NaN (unknown)")
    if np.nanmin(np.minimum(fa, fb), initial=0.0) < 0:
        raise ValueError("style features must be non-negative")
    with np.errstate(invalid="ignore", divide="ignore"):
        d = (fa - fb) / total  # 0/0 is NaN; NaN stays NaN
    d[total == 0] = 0.0
    return d


def standardise(
    d: np.ndarray, names, w: np.ndarray | None = None
) -> tuple[np.ndarray, tuple, np.ndarray, dict[str, str]]:
    """(z, kept names, scale, dropped): each kept column divided by its root mean
    square over the battles where it is known, weighted by their evidence weights ``w``
    (so a battle of weight 2 counts as that battle listed twice, and a tie as a win and
    a loss of half its weight, as in the fit); unknown battles set to 0; unmeasurable or
    constant columns dropped with their reason. About 0, not about the mean: the
    difference is antisymmetric, and the scale must not depend on which side of each
    battle is listed first (it is the standard deviation when sides are random).
    z comes column-major (each feature's column contiguous)."""
    w = np.ones(len(d)) if w is None else np.asarray(w, dtype=float)
    values = np.asfortranarray(d)  # a copy: each feature's column contiguous
    k = values.shape[1]
    mass, mean, rms, spread = np.zeros(k), np.zeros(k), np.zeros(k), np.zeros(k)
    for c in range(k):
        column = values[:, c]
        known = ~np.isnan(column)
        column[~known] = 0.0
        weight = w * known
        mass[c] = weight.sum()
        if mass[c] > 0:
            mean[c] = (weight @ column) / mass[c]
            rms[c] = np.sqrt((weight @ column**2) / mass[c])
            spread[c] = np.sqrt((weight @ (column - mean[c]) ** 2) / mass[c])
    dropped = {}
    keep = []
    for c, name in enumerate(names):
        if not mass[c] > 0:
            dropped[name] = NOT_MEASURED
        elif not spread[c] > 1e-9:
            dropped[name] = CONSTANT
        else:
            keep.append(c)
    scale = rms[keep]
    z = values[:, keep] / scale if keep else np.zeros((len(d), 0), order="F")
    return z, tuple(names[c] for c in keep), scale, dropped


def design(a, b, y, w, z, m: int) -> Design:
    """The battles with their unordered pairs (for the θθ block and the imaginary
    battles)."""
    key = np.minimum(a, b) * m + np.maximum(a, b)
    if m * m <= 1 << 24:  # a count over the dense key table: no sort
        seen = np.bincount(key, minlength=m * m) > 0
        keys = np.flatnonzero(seen)
        pair = (np.cumsum(seen) - 1)[key]
    else:
        keys, pair = np.unique(key, return_inverse=True)
    return Design(
        a=a,
        b=b,
        y=y,
        w=w,
        z=z,
        m=m,
        pair=pair.astype(np.int64),
        pi=keys // m,
        pj=keys % m,
        pair_battles=np.bincount(pair, minlength=len(keys)).astype(float),
    )


def linear(d: Design, params: np.ndarray) -> np.ndarray:
    """θ_a − θ_b + zβ per battle."""
    theta, beta = params[: d.m], params[d.m :]
    return theta[d.a] - theta[d.b] + d.z @ beta


def probability(eta: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * eta))


def scores(d: Design, per_battle: np.ndarray) -> np.ndarray:
    """Σ_b v_b x_b, x_b = (e_a − e_b, z_b)."""
    g_theta = np.bincount(d.a, per_battle, minlength=d.m) - np.bincount(
        d.b, per_battle, minlength=d.m
    )
    return np.concatenate([g_theta, per_battle @ d.z])


def assemble(d: Design, h: np.ndarray, diagonal: float = 0.0) -> np.ndarray:
    """Σ_b h_b x_b x_bᵀ + diagonal · I, dense (m + k)²."""
    m, k = d.m, d.k
    out = np.empty((m + k, m + k))
    out[:m, :m] = bradley_terry.laplacian(
        d.pi, d.pj, np.bincount(d.pair, h, minlength=len(d.pi)), m, diagonal
    )
    if k:
        hz = [h * d.z[:, c] for c in range(k)]
        for c in range(k):
            cross = np.bincount(d.a, hz[c], minlength=m) - np.bincount(d.b, hz[c], minlength=m)
            out[:m, m + c] = out[m + c, :m] = cross
            for e in range(c, k):
                out[m + c, m + e] = out[m + e, m + c] = hz[c] @ d.z[:, e]
            out[m + c, m + c] += diagonal
    return out


def objective(d: Design, params: np.ndarray, ridge: float) -> float:
    eta = linear(d, params)
    log_mu = -np.logaddexp(0.0, -eta)
    log_nu = -np.logaddexp(0.0, eta)
    like = float((d.w * d.y) @ log_mu + (d.w * (1.0 - d.y)) @ log_nu)
    return like - 0.5 * ridge * float(params @ params)


def newton(
    d: Design, *, ridge: float, tol: float = bradley_terry.TOLERANCE, max_iterations: int = 100
) -> bradley_terry.Fit:
    """Maximise the penalised log-likelihood over (θ, β), θ of mean zero, by Newton
    steps with the shift fixed, halved (Armijo) while a full step would not help."""
    m = d.m
    pairs_total = np.bincount(d.pair, d.w, minlength=len(d.pi))
    oriented = np.where(d.a == d.pi[d.pair], d.y, 1.0 - d.y)  # y from the pair's i's view
    pairs_wins = np.bincount(d.pair, d.w * oriented, minlength=len(d.pi))
    theta0 = bradley_terry.start(d.pi, d.pj, pairs_total, pairs_wins, m)
    params = np.concatenate([theta0 - theta0.mean(), np.zeros(d.k)])

    def projected(at):
        mu = probability(linear(d, at))
        g = scores(d, d.w * (d.y - mu)) - ridge * at
        g[:m] -= g[:m].mean()
        return g, mu

    g, mu = projected(params)
    moved = previous = np.inf
    for iteration in range(1, max_iterations + 1):
        hessian = assemble(d, d.w * mu * (1.0 - mu), ridge)
        hessian[:m, :m] += 1.0 / m
        step = np.linalg.solve(hessian, g)
        step[:m] -= step[:m].mean()
        moved = float(np.max(np.abs(step)))
        trial = params + step
        g_trial, mu_trial = projected(trial)
        if moved > 1e-6 and g_trial @ g_trial > g @ g:
            current = objective(d, params, ridge)
            slope, t = float(g @ step), 1.0
            while objective(d, trial, ridge) < current + bradley_terry.ARMIJO * t * slope:
                t *= 0.5
                if t < 1e-12:
                    return bradley_terry.Fit(params, iteration, False, moved)
                trial = params + t * step
            g_trial, mu_trial = projected(trial)
            moved *= t
        params, g, mu = trial, g_trial, mu_trial
        if moved <= tol or (moved < 1e-4 and moved**3 / previous**2 <= tol):
            return bradley_terry.Fit(params, iteration, True, moved)
        previous = moved
    return bradley_terry.Fit(params, max_iterations, False, moved)


def _nan(n: int) -> np.ndarray:
    return np.full(n, np.nan)


def style_rate(
    a,
    b,
    y,
    *,
    n_agents: int,
    features_a,
    features_b,
    w=None,
    cluster=None,
    r0: float = 1500.0,
    names=STYLE_FEATURES,
    reference=None,
    ridge: float = bradley_terry.RIDGE,
) -> StyleRating:
    """The style-controlled board from battles (a_b, b_b, y_b from a's view, weight
    w_b) and the RAW per-side features (n_battles × len(names), NaN = unknown for that
    side). Agents outside the main component, and any interval that cannot be given
    (no battle left for the HC1 factor), are NaN; nothing published is infinite."""
    names = tuple(names)
    if not np.isfinite(r0):
        raise ValueError("R0 must be finite")
    if not (np.isfinite(ridge) and ridge >= 0):
        raise ValueError("the ridge must be finite and non-negative")
    a, b, y, w, cluster, reference, _, _ = bradley_terry._validate(
        a, b, y, w, cluster, reference, n_agents
    )
    d_all = differences(features_a, features_b)
    if d_all.shape != (len(a), len(names)):
        raise ValueError("features need one row per battle and one column per name")
    weight = np.ones(len(a)) if w is None else w

    diagnosis = connectivity.diagnose(a, b, weight * y, weight * (1.0 - y), n_agents=n_agents)
    fitted = diagnosis.fitted
    members = np.flatnonzero(fitted)
    m = len(members)
    inside = fitted[a] & fitted[b] if len(a) else np.zeros(0, dtype=bool)
    n_battles = int(inside.sum())
    if m == 0:
        return StyleRating(
            rating=_nan(n_agents),
            lower=_nan(n_agents),
            upper=_nan(n_agents),
            interval=intervals.BATTLE,
            critical_value=intervals.Z95,
            names=(),
            coef=_nan(0),
            coef_lower=_nan(0),
            coef_upper=_nan(0),
            dropped=dict.fromkeys(names, NO_BATTLES),
            n_battles=0,
        )
    local = np.full(n_agents, -1, dtype=np.int64)
    local[members] = np.arange(m)
    z, kept, scale, dropped = standardise(d_all[inside], names, weight[inside])
    des = design(local[a[inside]], local[b[inside]], y[inside], weight[inside], z, m)
    k = des.k
    fit = newton(des, ridge=ridge)
    params = fit.theta

    mu = probability(linear(des, params))
    a_inv = bradley_terry.spd_inverse(_shift_fixed(assemble(des, des.w * mu * (1 - mu), ridge), m))
    ref = fitted if reference is None else reference & fitted
    if not ref.any():
        ref = fitted
    r = ref[members].astype(float)
    r /= r.sum()
    bread = a_inv.copy()
    bread[:m] -= r @ a_inv[:m]  # C A⁻¹ with C = blockdiag(I − 1rᵀ, I)
    meat = assemble(des, battle_meat(des, mu))
    battle_hw = intervals.halfwidth(
        intervals.battle_variance(bread, meat, battles=n_battles, free=m - 1 + k)
    )

    clusters = robust_hw = effective = None
    if cluster is not None:
        ids, g_index = np.unique(cluster[inside], return_inverse=True)
        clusters = len(ids)
        effective = intervals.effective_clusters(np.bincount(g_index, des.w, minlength=clusters))
        if clusters >= max(m + k, 2) and effective > 1:
            per = _cluster_scores(des, des.w * (des.y - mu), g_index, clusters)
            robust_hw = intervals.halfwidth(
                intervals.robust_variance(bread, per), intervals.t95(effective)
            )
    choice = intervals.publish(battle_hw, robust_hw, clusters=effective)

    hw = np.where(np.isfinite(choice.halfwidth), choice.halfwidth, np.nan)
    theta = params[:m]
    rating_local = r0 + intervals.ELO_SCALE * (theta - r @ theta)
    rating, lower, upper = _nan(n_agents), _nan(n_agents), _nan(n_agents)
    rating[members] = rating_local
    lower[members] = rating_local - hw[:m]
    upper[members] = rating_local + hw[:m]
    coef = intervals.ELO_SCALE * params[m:]
    return StyleRating(
        rating=rating,
        lower=lower,
        upper=upper,
        interval=choice.kind,
        critical_value=float(choice.critical),
        names=kept,
        coef=coef,
        coef_lower=coef - hw[m:],
        coef_upper=coef + hw[m:],
        dropped=dropped,
        n_battles=n_battles,
        converged=fit.converged,
        iterations=fit.iterations,
        clusters=clusters,
        effective_clusters=effective,
        floored=int(choice.floored),
        scale=scale,
        fitted_agents=m,
    )


def battle_meat(d: Design, mu: np.ndarray) -> np.ndarray:
    """Per battle, its weight in the battle-level meat Σ_b h_b x_b x_bᵀ: the board's
    rule (``intervals.pair_meat``) spread over each pair's battles. A pair's meat is
    n/(n + 1) · (s_p + φ v_p/n), s_p = Σ w²(y − μ)² and v_p = Σ w² μ(1 − μ) over its n
    battles, φ the share of Bernoulli variance the whole board shows (with the rule's
    imaginary coin flips); both sums are sums over battles, so each battle takes
    n/(n + 1) · (w²(y − μ)² + φ w² μ(1 − μ)/n). With no style feature μ is the pair's
    and this is the board's meat exactly."""
    square = d.w**2
    spread = square * (d.y - mu) ** 2
    bernoulli = square * mu * (1.0 - mu)
    n = d.pair_battles[d.pair]
    total = float(d.pair_battles.sum())
    prior = intervals.DISPERSION_PRIOR * float(bernoulli.sum()) / total if total > 0 else 0.0
    denominator = float(bernoulli.sum()) + prior
    phi = (float(spread.sum()) + prior) / denominator if denominator > 0 else 1.0
    return n / (n + 1.0) * (spread + phi * bernoulli / n)


def _shift_fixed(hessian: np.ndarray, m: int) -> np.ndarray:
    """A = H + 11ᵀ/m on the θ block: H on the differences and β, 1 on the shift."""
    hessian[:m, :m] += 1.0 / m
    return hessian


def _cluster_scores(d: Design, residual: np.ndarray, g_index: np.ndarray, clusters: int):
    """s_g = Σ_{b∈g} w_b (y_b − μ_b) x_b as a G × (m + k) matrix."""
    m = d.m
    size = clusters * m
    theta_part = np.bincount(g_index * m + d.a, residual, minlength=size) - np.bincount(
        g_index * m + d.b, residual, minlength=size
    )
    out = np.empty((clusters, m + d.k))
    out[:, :m] = theta_part.reshape(clusters, m)
    for c in range(d.k):
        out[:, m + c] = np.bincount(g_index, residual * d.z[:, c], minlength=clusters)
    return out
