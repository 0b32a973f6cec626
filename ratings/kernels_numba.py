"""Compiled loops of a fit, as numba source. Pure: numpy, numba.

numpy counted the ordered key ``(a·n + b)·3 + 2y`` in about ten passes over the battles
(checking the indices and outcomes, building the key, counting it), and at a million
battles those passes were most of a refit. ``ordered_table`` does it in one: it checks
each battle and counts it into the n × n × 3 table as it goes. ``fold`` turns the table
into cells and pair sums, and ``laplacian`` fills the dense Hessians and meats, each in
one loop where numpy needed several passes and temporaries (docs/performance.md has the
figures; the meat's per-pair sums are numpy's again, ``intervals.pair_meat``). The bootstrap's
replicates (``ratings.bootstrap``) are one compiled loop too: a block of drawn counts in,
each replicate's pair sums, Newton refit and tied ranks out (``replicate_ranks``).

Nothing calls this module directly: ``ratings.kernels`` is the door. It runs these loops
compiled ahead of time (``ratings.kernels_aot``, built by the setup from this very file),
and imports this module, numba's just-in-time compiler, only when that build is missing or
was made from another version of this file. numba takes about a second to import and
compiles each loop on first use (then caches it on disk).
"""

import numpy as np
from numba import njit

from ratings.kernel_codes import (
    COUNT,
    FIT_CONVERGED,
    FIT_NOT_CONVERGED,
    FIT_NOT_POSITIVE_DEFINITE,
    LOG2,
    OUT_OF_RANGE,
    OUTCOME,
    SELF,
)


@njit(cache=True, nogil=True)
def ordered_table(a, b, y, count, n):  # pragma: no cover - compiled; tested through callers
    """(table, first): ``table[(a·n + b)·3 + 2y]`` summed over the battles (``count[k]``
    for battle k, or 1 when ``count`` is None) and ``first[kind]`` the index of the
    first battle with that fault (−1 for none). A faulty battle is not counted.

    The common case (a valid battle) takes one branch-free test; only a faulty battle
    goes on to find out which fault it is."""
    table = np.zeros(3 * n * n, dtype=np.int64)
    first = np.full(4, -1, dtype=np.int64)
    un = np.uint64(n)
    for k in range(len(a)):
        ak, bk, yk = a[k], b[k], y[k]
        c = 1 if count is None else count[k]  # None compiles a loop of its own
        code = (yk == 0.5) + 2 * (yk == 1.0)  # NaN equals nothing: code 0 and not yk == 0
        # uint64 wraps a negative index past n
        ok = (np.uint64(ak) < un) & (np.uint64(bk) < un) & (ak != bk)
        ok = ok & ((code > 0) | (yk == 0.0)) & (c >= 1)
        if ok:
            table[(ak * n + bk) * 3 + code] += c
            continue
        if ak < 0 or ak >= n or bk < 0 or bk >= n:
            kind = OUT_OF_RANGE
        elif ak == bk:
            kind = SELF
        elif code == 0 and yk != 0.0:
            kind = OUTCOME
        else:
            kind = COUNT
        if first[kind] < 0:
            first[kind] = k
    return table, first


@njit(cache=True, nogil=True)
def fold(table, n):  # pragma: no cover - compiled; tested through callers
    """The ordered table's cells, unordered pair by pair (i < j, outcome from i's view):
    (i, j, code = 2y, count, pair row) per cell and (i, j, battles, twice the wins) per
    pair, in the canonical order (pair, outcome)."""
    cells = 0
    pairs = 0
    for i in range(n):
        for j in range(i + 1, n):
            seen = False
            for code in range(3):
                if table[(i * n + j) * 3 + code] + table[(j * n + i) * 3 + 2 - code] > 0:
                    cells += 1
                    seen = True
            pairs += seen
    ci = np.empty(cells, dtype=np.int64)
    cj = np.empty(cells, dtype=np.int64)
    ccode = np.empty(cells, dtype=np.int64)
    ccount = np.empty(cells, dtype=np.int64)
    cpair = np.empty(cells, dtype=np.int64)
    pi = np.empty(pairs, dtype=np.int64)
    pj = np.empty(pairs, dtype=np.int64)
    pbattles = np.zeros(pairs, dtype=np.int64)
    ptwice_wins = np.zeros(pairs, dtype=np.int64)
    c = 0
    p = 0
    for i in range(n):
        for j in range(i + 1, n):
            seen = False
            for code in range(3):
                k = table[(i * n + j) * 3 + code] + table[(j * n + i) * 3 + 2 - code]
                if k > 0:
                    ci[c], cj[c], ccode[c], ccount[c], cpair[c] = i, j, code, k, p
                    pbattles[p] += k
                    ptwice_wins[p] += code * k
                    c += 1
                    seen = True
            if seen:
                pi[p], pj[p] = i, j
                p += 1
    return ci, cj, ccode, ccount, cpair, pi, pj, pbattles, ptwice_wins


@njit(cache=True, nogil=True)
def laplacian(i, j, h, n, diagonal):  # pragma: no cover - compiled
    """Σ_pairs h (e_i − e_j)(e_i − e_j)ᵀ + diagonal · I, dense n × n (pairs unique)."""
    out = np.zeros((n, n))
    for k in range(n):
        out[k, k] = diagonal
    for p in range(len(i)):
        a, b, v = i[p], j[p], h[p]
        out[a, b] = -v
        out[b, a] = -v
        out[a, a] += v
        out[b, b] += v
    return out


# --- bootstrap replicates (``ratings.bootstrap``) ----------------------------------------
#
# One replicate: its pair sums from the drawn counts, Newton from the full fit's θ
# (``bradley_terry.newton``'s iteration, stop rule and step control, loop for loop), and
# its tied ranks. Each replicate reads only its own row of counts and writes only its own
# rows of the results, so a block of replicates gives the same figures whichever thread
# runs it, and in whatever order the blocks run.


@njit(cache=True, nogil=True)
def _log_sigmoid(d):  # pragma: no cover - compiled
    """log σ(d) = −logaddexp(0, −d), numpy's logaddexp loop written out."""
    x = -d
    if x == 0.0:
        return -LOG2
    if x > 0.0:
        return -(x + np.log1p(np.exp(-x)))
    return -np.log1p(np.exp(x))


@njit(cache=True, nogil=True)
def _objective(i, j, total, wins, theta, ridge):  # pragma: no cover - compiled
    """ℓ(θ) − (r/2)‖θ‖² over the pair sums (``bradley_terry.objective``)."""
    value = 0.0
    for p in range(len(i)):
        d = theta[i[p]] - theta[j[p]]
        value += wins[p] * _log_sigmoid(d) + (total[p] - wins[p]) * _log_sigmoid(-d)
    square = 0.0
    for k in range(len(theta)):
        square += theta[k] * theta[k]
    return value - 0.5 * ridge * square


@njit(cache=True, nogil=True)
def _projected_gradient(i, j, total, wins, theta, ridge, g, mu):  # pragma: no cover
    """g ← ∇(ℓ − r‖θ‖²/2) minus its mean, μ ← σ(θ_i − θ_j); returns g·g."""
    m = len(theta)
    for k in range(m):
        g[k] = -ridge * theta[k]
    for p in range(len(i)):
        # σ(d) = 1 / (1 + e^−d): libm's exp costs a third of its tanh (numpy's form); a
        # large gap gives e^−d = inf and μ = 0, never NaN
        mu[p] = 1.0 / (1.0 + np.exp(theta[j[p]] - theta[i[p]]))
        residual = wins[p] - total[p] * mu[p]
        g[i[p]] += residual
        g[j[p]] -= residual
    mean = 0.0
    for k in range(m):
        mean += g[k]
    mean /= m
    square = 0.0
    for k in range(m):
        g[k] -= mean
        square += g[k] * g[k]
    return square


@njit(cache=True, nogil=True)
def _cholesky_solve(a, b, x):  # pragma: no cover - compiled
    """x ← a⁻¹ b by the Cholesky factor a = UᵀU, overwriting a's upper triangle with U
    (the lower one with scratch); False when a is not numerically positive definite.
    Right-looking, four rows of the trailing matrix updated per pass over row k (each
    entry still gets its updates one at a time, in the order of k): one fixed order of
    operations, the same bits whichever thread runs it."""
    m = len(b)
    for k in range(m):
        pivot = a[k, k]
        if not pivot > 0.0:  # also NaN
            return False
        d = np.sqrt(pivot)
        rk = a[k]
        rk[k] = d
        for c in range(k + 1, m):
            rk[c] /= d
        r = k + 1
        while r + 3 < m:
            # rows r..r+3 from column r: the entries left of their diagonals are scratch
            f0, f1, f2, f3 = rk[r], rk[r + 1], rk[r + 2], rk[r + 3]
            r0, r1, r2, r3 = a[r], a[r + 1], a[r + 2], a[r + 3]
            for c in range(r, m):
                v = rk[c]
                r0[c] -= f0 * v
                r1[c] -= f1 * v
                r2[c] -= f2 * v
                r3[c] -= f3 * v
            r += 4
        while r < m:
            f0 = rk[r]
            r0 = a[r]
            for c in range(r, m):
                r0[c] -= f0 * rk[c]
            r += 1
    for r in range(m):  # Uᵀ z = b
        s = b[r]
        for k in range(r):
            s -= a[k, r] * x[k]
        x[r] = s / a[r, r]
    for r in range(m - 1, -1, -1):  # U x = z
        s = x[r]
        for c in range(r + 1, m):
            s -= a[r, c] * x[c]
        x[r] = s / a[r, r]
    return True


@njit(cache=True, nogil=True)
def newton_fit(i, j, total, wins, theta0, ridge, tol, max_iterations, armijo):  # pragma: no cover
    """(θ, iterations, status): ``bradley_terry.newton`` from θ0 (m ≥ 2), the Newton
    step solved by Cholesky instead of LU. Status FIT_CONVERGED, FIT_NOT_CONVERGED (the
    iteration cap, or no step along Newton's direction helps: θ is the last point, as
    there) or FIT_NOT_POSITIVE_DEFINITE (the caller refits with ``bradley_terry.newton``)."""
    m = len(theta0)
    n_pairs = len(i)
    theta = theta0.copy()
    mean = 0.0
    for k in range(m):
        mean += theta[k]
    mean /= m
    for k in range(m):
        theta[k] -= mean
    g = np.empty(m)
    mu = np.empty(n_pairs)
    g_trial = np.empty(m)
    mu_trial = np.empty(n_pairs)
    trial = np.empty(m)
    step = np.empty(m)
    hessian = np.empty((m, m))
    gg = _projected_gradient(i, j, total, wins, theta, ridge, g, mu)
    previous = np.inf
    for iteration in range(1, max_iterations + 1):
        # H + 11ᵀ/m: the Hessian on the differences, 1 on the common shift
        shift = 1.0 / m
        for r in range(m):
            for c in range(m):
                hessian[r, c] = shift
            hessian[r, r] += ridge
        for p in range(n_pairs):
            a, b = i[p], j[p]
            v = total[p] * mu[p] * (1.0 - mu[p])
            hessian[a, b] -= v
            hessian[b, a] -= v
            hessian[a, a] += v
            hessian[b, b] += v
        if not _cholesky_solve(hessian, g, step):
            return theta, iteration, FIT_NOT_POSITIVE_DEFINITE
        mean = 0.0
        for k in range(m):
            mean += step[k]
        mean /= m
        moved = 0.0
        for k in range(m):
            step[k] -= mean
            moved = max(moved, abs(step[k]))
            trial[k] = theta[k] + step[k]
        gg_trial = _projected_gradient(i, j, total, wins, trial, ridge, g_trial, mu_trial)
        if moved > 1e-6 and gg_trial > gg:
            # the full step did not bring the gradient down: halve it until the
            # penalised log-likelihood rises enough (Armijo)
            current = _objective(i, j, total, wins, theta, ridge)
            slope = 0.0
            for k in range(m):
                slope += g[k] * step[k]
            t = 1.0
            while _objective(i, j, total, wins, trial, ridge) < current + armijo * t * slope:
                t *= 0.5
                if t < 1e-12:
                    return theta, iteration, FIT_NOT_CONVERGED
                for k in range(m):
                    trial[k] = theta[k] + t * step[k]
            gg_trial = _projected_gradient(i, j, total, wins, trial, ridge, g_trial, mu_trial)
            moved *= t
        theta, trial = trial, theta
        g, g_trial = g_trial, g
        mu, mu_trial = mu_trial, mu
        gg = gg_trial
        if moved <= tol or (moved < 1e-4 and moved**3 / previous**2 <= tol):
            return theta, iteration, FIT_CONVERGED
        previous = moved
    return theta, max_iterations, FIT_NOT_CONVERGED


@njit(cache=True, nogil=True)
def tied_ranks(theta, tie, best, worst):  # pragma: no cover - compiled
    """``bootstrap.tied_ranks`` by counting: best = 1 + #{θ_k > θ + tie}, worst =
    #{θ_k ≥ θ − tie}."""
    m = len(theta)
    for a in range(m):
        above = theta[a] + tie
        below = theta[a] - tie
        stronger = 0
        at_least = 0
        for k in range(m):
            stronger += theta[k] > above
            at_least += theta[k] >= below
        best[a] = 1 + stronger
        worst[a] = at_least


@njit(cache=True, nogil=True)
def replicate_ranks(
    counts,
    unit,
    pair,
    total,
    wins,
    i,
    j,
    theta0,
    ridge,
    tol,
    max_iterations,
    armijo,
    tie,
    best,
    worst,
    status,
):  # pragma: no cover - compiled; tested through ratings.bootstrap
    """For each row r of ``counts`` (draws per resampled unit): the pair sums
    Σ_rows total·k, Σ_rows wins·k (k the count of the row's ``unit``, rows summed in
    order into ``pair``), Newton from θ0, and its tied ranks into ``best[r]``,
    ``worst[r]``; the fit's status into ``status[r]``."""
    n_pairs = len(i)
    sum_total = np.empty(n_pairs)
    sum_wins = np.empty(n_pairs)
    for r in range(counts.shape[0]):
        sum_total[:] = 0.0
        sum_wins[:] = 0.0
        for c in range(len(pair)):
            k = np.float64(counts[r, unit[c]])
            sum_total[pair[c]] += total[c] * k
            sum_wins[pair[c]] += wins[c] * k
        theta, _, status[r] = newton_fit(
            i, j, sum_total, sum_wins, theta0, ridge, tol, max_iterations, armijo
        )
        tied_ranks(theta, tie, best[r], worst[r])


@njit(cache=True, nogil=True)
def summed_replicate_ranks(
    sum_total,
    sum_wins,
    i,
    j,
    theta0,
    ridge,
    tol,
    max_iterations,
    armijo,
    tie,
    best,
    worst,
    status,
):  # pragma: no cover - compiled; tested through ratings.bootstrap
    """``replicate_ranks`` for replicates given as pair sums (one row each)."""
    for r in range(sum_total.shape[0]):
        theta, _, status[r] = newton_fit(
            i, j, sum_total[r], sum_wins[r], theta0, ridge, tol, max_iterations, armijo
        )
        tied_ranks(theta, tie, best[r], worst[r])
