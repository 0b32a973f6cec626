"""Compiled loops of a fit (numba). Pure: numpy, numba.

numpy counted the ordered key ``(a·n + b)·3 + 2y`` in about ten passes over the battles
(checking the indices and outcomes, building the key, counting it), and at a million
battles those passes were most of a refit. ``ordered_table`` does it in one: it checks
each battle and counts it into the n × n × 3 table as it goes. ``fold`` turns the table
into cells and pair sums, ``laplacian`` fills the dense Hessians and meats, and
``battle_meat`` sums the cells' squared residuals, each in one loop where numpy needed
several passes and temporaries (docs/performance.md has the figures).

numba takes about a second to import and compiles each loop on first use (then caches
it on disk), so this module is imported only inside the functions that fit (the rating
worker, the CLI), never at the import of a module a web request reaches.
"""

import numpy as np
from numba import njit

# Fault kinds, in the order ``bradley_terry`` reports them.
OUT_OF_RANGE, SELF, OUTCOME, COUNT = 0, 1, 2, 3


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


@njit(cache=True, nogil=True)
def battle_meat(pair, count, w, y, mu, battles):  # pragma: no cover - compiled
    """Per pair, Σ over its cells count · w² (y − μ)² plus the pair's mean w² times
    μ(1 − μ) (``bradley_terry.battle_meat`` says why)."""
    n_pairs = len(mu)
    spread = np.zeros(n_pairs)
    square = np.zeros(n_pairs)
    for c in range(len(pair)):
        p = pair[c]
        mass = count[c] * w[c] * w[c]
        d = y[c] - mu[p]
        spread[p] += mass * d * d
        square[p] += mass
    for p in range(n_pairs):
        spread[p] += square[p] / max(battles[p], 1) * mu[p] * (1.0 - mu[p])
    return spread
