"""The arrays ``python -m ratings fit`` hands ``ratings.bradley_terry.rate``, built from
the compact columns of ``ratings.cli_read`` with as little memory as the sums allow. No
Django.

The judges' (or tasks') clusters go in as sums per (cluster, pair), as the refit reads
them from the database (``ratings.refit``): Σ w and Σ w y (y from the lower index's
side), each sum taken over the battles in file order. ``rate`` gives the same figures
for these as for the battles one by one (its docstring), and the per-battle cluster
keys, which would cost an int64 and a sort per battle inside ``rate``, are gone before
it runs."""

import numpy as np

from ratings.bradley_terry import ClusterSums


def pair_sums(
    key: np.ndarray, a: np.ndarray, b: np.ndarray, y2: np.ndarray, w: np.ndarray, n: int
) -> ClusterSums:
    """Battles summed per (cluster ``key``, unordered pair): the cluster its key, the
    pair's lower index first, Σ w and Σ w·y from the lower index's side, each sum in
    the order of the battles."""
    lo = np.minimum(a, b).astype(np.int64)
    hi = np.maximum(a, b).astype(np.int64)
    flat = key.astype(np.int64) * (n * n)
    flat += lo * n
    flat += hi
    del hi
    # y from the lower index's side: 2y as read when a < b, 2 − 2y when a > b
    y_lo = np.where(a < b, y2, 2 - y2.astype(np.int16)) * 0.5
    wins = w * y_lo
    del y_lo, lo
    cells, inverse = np.unique(flat, return_inverse=True)
    del flat
    total = np.bincount(inverse, w, minlength=len(cells))
    wins = np.bincount(inverse, wins, minlength=len(cells))
    del inverse
    # The indices in the smallest integer type that holds them: ``rate`` holds these
    # sums for the whole fit and widens them to int64 only while it regroups them.
    return ClusterSums(
        cluster=_narrow(cells // (n * n)),
        a=_narrow((cells % (n * n)) // n),
        b=_narrow(cells % n),
        total=total,
        wins=wins,
    )


def _narrow(values: np.ndarray) -> np.ndarray:
    """Non-negative integers in int16 or int32 when they fit (the same numbers)."""
    top = int(values.max()) if len(values) else 0
    for dtype in (np.int16, np.int32):
        if top <= np.iinfo(dtype).max:
            return values.astype(dtype)
    return values


def task_numbers(task: np.ndarray, keys: list[str]) -> np.ndarray:
    """Each battle's task as a number: the key itself when every key is a whole number
    (the export's task ids, which the refit's task bootstrap draws in id order), else
    its place in order of first appearance."""
    try:
        numbered = np.array([int(key) for key in keys], dtype=np.int64)
    except ValueError:
        return task
    return numbered[task]


def cells(
    a: np.ndarray, b: np.ndarray, y2: np.ndarray, w: np.ndarray | None, n: int
) -> tuple[np.ndarray, ...]:
    """The battles as cells (``ratings.cells``): one row per distinct (unordered pair,
    outcome from the lower index's side, weight) with its number of battles, as
    (lo, hi, y, w or None, count). ``rate`` on these rows (``count=``) forms exactly the
    cells it would form from the battles one by one, and a row costs the fit nothing
    per battle: at a million battles of few distinct weights, a few thousand rows."""
    lo = np.minimum(a, b).astype(np.int64)
    key = lo * n
    key += np.maximum(a, b)
    key *= 3
    del lo
    key += np.where(a < b, y2, 2 - y2.astype(np.int16))
    if w is None or (len(w) and w.min() == w.max()):
        uniq, count = np.unique(key, return_counts=True)
        weight = None if w is None else np.full(len(uniq), w[0] if len(w) else 1.0)
    else:
        order = np.lexsort((w, key))
        key, weight = key[order], w[order]
        del order
        new = np.ones(len(key), dtype=bool)
        new[1:] = (key[1:] != key[:-1]) | (weight[1:] != weight[:-1])
        start = np.flatnonzero(new)
        del new
        count = np.diff(np.append(start, len(key)))
        uniq, weight = key[start], weight[start]
        del key
    pair, code = uniq // 3, uniq % 3
    return pair // n, pair % n, code * 0.5, weight, count.astype(np.int64)
