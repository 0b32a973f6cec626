"""Battles counted into cells, and cells summed into pairs (SPEC §7.2). Pure: numpy.

A *cell* is every battle of one unordered pair (i < j) with the same outcome from i's
view and the same evidence weight: the battles of a cell are exchangeable, so the fit,
both sandwich meats and a bootstrap that resamples battles (multinomial counts over the
cells) are exactly those of the battles listed one by one. Cells come out in one
canonical order (pair, outcome, weight), whatever the order of the input.

With one weight for every battle (the common case: no evidence weights), the cells are
one count over an *ordered* key ``(a·n + b)·3 + 2y`` — one ``bincount`` over the
battles, no sort, no per-battle orientation — and the small n × n × 3 table is folded
into unordered pairs afterwards. Otherwise the battles are oriented and sorted once.
"""

from dataclasses import dataclass

import numpy as np

# Up to this many table entries the ordered key is counted into a dense table (one
# bincount pass); beyond it the keys are sorted instead.
DENSE_TABLE = 1 << 24


@dataclass(frozen=True)
class PairSums:
    """Battles summed per unordered pair (i < j), from i's view."""

    i: np.ndarray  # int64, lower agent index of the pair
    j: np.ndarray  # int64, higher agent index
    total: np.ndarray  # Σ w_b over the pair's battles
    wins: np.ndarray  # Σ w_b y_b, y from i's view (ties ½)
    battles: np.ndarray  # number of battles


@dataclass(frozen=True)
class Cells:
    i: np.ndarray  # int64, i < j
    j: np.ndarray
    y: np.ndarray  # 0, ½ or 1 from i's view
    w: np.ndarray  # the cell's evidence weight
    count: np.ndarray  # int64 ≥ 1: its battles
    pair: np.ndarray  # int64: the cell's row in ``pairs``
    pairs: PairSums

    def keep(self, pair_mask: np.ndarray) -> "Cells":
        """The cells of the pairs ``pair_mask`` selects, pairs renumbered in order."""
        if pair_mask.all():
            return self
        row = np.cumsum(pair_mask) - 1
        mine = pair_mask[self.pair]
        p = self.pairs
        return Cells(
            i=self.i[mine],
            j=self.j[mine],
            y=self.y[mine],
            w=self.w[mine],
            count=self.count[mine],
            pair=row[self.pair[mine]],
            pairs=PairSums(
                i=p.i[pair_mask],
                j=p.j[pair_mask],
                total=p.total[pair_mask],
                wins=p.wins[pair_mask],
                battles=p.battles[pair_mask],
            ),
        )

    def resummed(self, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(Σ w, Σ w y) per pair with ``count`` battles in each cell instead."""
        mass = self.w * count
        n_pairs = len(self.pairs.i)
        return (
            np.bincount(self.pair, mass, minlength=n_pairs),
            np.bincount(self.pair, mass * self.y, minlength=n_pairs),
        )


def orient(a: np.ndarray, b: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """(lo, hi, y from lo's view) for each battle."""
    swap = a > b
    return np.where(swap, b, a), np.where(swap, a, b), np.where(swap, 1.0 - y, y)


def dense_uniform(w: np.ndarray | None, n_agents: int) -> bool:
    """Whether cells are one count over the ordered key into a dense table: one weight
    for every battle, and a table of at most ``DENSE_TABLE`` entries."""
    uniform = w is None or not len(w) or bool(w.min() == w.max())
    return uniform and 3 * n_agents * n_agents <= DENSE_TABLE


def count_cells(
    a: np.ndarray,
    b: np.ndarray,
    y: np.ndarray,
    w: np.ndarray | None,
    *,
    n_agents: int,
    count: np.ndarray | None = None,
    table: np.ndarray | None = None,
) -> Cells:
    """The cells of battles (a, b, y from a's view, weight w; ``count`` identical
    battles per row, one when None). ``w`` None means weight 1 for every battle.
    ``table`` is the ordered-key count when the caller has it already (where
    ``dense_uniform`` holds: ``kernels.ordered_table``)."""
    n = n_agents
    weight = 1.0 if w is None or not len(w) else float(w[0])
    if dense_uniform(w, n):
        if table is None:
            key = a * (3 * n)
            key += b * 3
            key += (y * 2.0).astype(np.int64)
            table = np.bincount(key, count, minlength=3 * n * n)
            if count is not None:
                table = np.rint(table).astype(np.int64)
        from ratings import kernels  # the compiled loops: loaded where a fit runs

        ci, cj, code, cell_count, pair, pi, pj, battles, twice_wins = kernels.fold(table, n)
        cy = code * 0.5
        pairs = PairSums(
            i=pi,
            j=pj,
            total=battles * weight,
            wins=twice_wins * (0.5 * weight),
            battles=battles,
        )
        cw = np.full(len(ci), weight)
        return Cells(i=ci, j=cj, y=cy, w=cw, count=cell_count, pair=pair, pairs=pairs)
    elif _canonical(a, b, y, w, n):
        # rows that are cells already, in the canonical order (``python -m ratings fit``
        # reduces its battles so): the cells are the rows themselves, not a sorted copy
        ci, cj, cy = a, b, y
        cw = np.full(len(a), weight) if w is None else w
        cell_count = np.ones(len(a), dtype=np.int64) if count is None else count
    else:
        lo, hi, y_lo = orient(a, b, y)
        code = (y_lo * 2.0).astype(np.int64)
        key = (lo * n + hi) * 3 + code
        wv = np.full(len(key), weight) if w is None else w
        order = np.lexsort((wv, key))
        key, wv = key[order], wv[order]
        counts = np.ones(len(key), dtype=np.int64) if count is None else count[order]
        new_cell = np.ones(len(key), dtype=bool)
        new_cell[1:] = (key[1:] != key[:-1]) | (wv[1:] != wv[:-1])
        start = np.flatnonzero(new_cell)
        cell_count = np.add.reduceat(counts, start) if len(key) else counts
        key, cw = key[start], wv[start]
        ci, cj = (key // 3) // n, (key // 3) % n
        cy = (key % 3) * 0.5
    pair_key = ci * n + cj
    new_pair = np.ones(len(ci), dtype=bool)
    new_pair[1:] = pair_key[1:] != pair_key[:-1]
    pair = np.cumsum(new_pair, dtype=np.int64) - 1
    first = np.flatnonzero(new_pair)
    n_pairs = len(first)
    mass = cw * cell_count
    pairs = PairSums(
        i=ci[first],
        j=cj[first],
        total=np.bincount(pair, mass, minlength=n_pairs),
        wins=np.bincount(pair, mass * cy, minlength=n_pairs),
        battles=np.bincount(pair, cell_count, minlength=n_pairs).astype(np.int64),
    )
    return Cells(i=ci, j=cj, y=cy, w=cw, count=cell_count, pair=pair.astype(np.int64), pairs=pairs)


def _canonical(a, b, y, w, n: int) -> bool:
    """Whether the rows are distinct cells in the canonical order: a < b, and
    (pair, outcome, weight) strictly increasing from row to row (int64 agent indices; the
    outcomes checked by the caller)."""
    if not len(a) or a.dtype != np.int64 or b.dtype != np.int64 or not np.all(a < b):
        return False
    key = a * n
    key += b
    key *= 3
    key += (y * 2.0).astype(np.int64)
    later, earlier = key[1:], key[:-1]
    if w is None:
        return bool(np.all(later > earlier))
    return bool(np.all((later > earlier) | ((later == earlier) & (w[1:] > w[:-1]))))


def aggregate(
    a: np.ndarray,
    b: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    *,
    n_agents: int,
    count: np.ndarray | None = None,
) -> PairSums:
    """Per-pair sums of weights and win mass of battles (see ``count_cells``)."""
    return count_cells(a, b, y, w, n_agents=n_agents, count=count).pairs


@dataclass(frozen=True)
class ClusterCells:
    """Battles summed per (cluster, pair i < j): all a cluster-robust interval and a
    cluster bootstrap need of them. ``cluster`` is 0..clusters−1."""

    cluster: np.ndarray
    i: np.ndarray
    j: np.ndarray
    total: np.ndarray  # Σ w
    wins: np.ndarray  # Σ w y, y from i's view
    clusters: int


def cluster_cells(
    cluster: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    total: np.ndarray,
    wins: np.ndarray,
    *,
    n_agents: int,
) -> ClusterCells:
    """Rows (cluster key, a, b, Σ w, Σ w y from a's view) — one per battle, or already
    summed — summed per (cluster, unordered pair); cluster keys renumbered 0..G−1."""
    _, cluster_index = np.unique(cluster, return_inverse=True)
    swap = a > b
    lo, hi = np.where(swap, b, a), np.where(swap, a, b)
    wins_lo = np.where(swap, total - wins, wins)
    n = n_agents
    key = cluster_index.astype(np.int64) * (n * n) + lo * n + hi
    cells, inverse = np.unique(key, return_inverse=True)
    return ClusterCells(
        cluster=cells // (n * n),
        i=(cells % (n * n)) // n,
        j=cells % n,
        total=np.bincount(inverse, total, minlength=len(cells)),
        wins=np.bincount(inverse, wins_lo, minlength=len(cells)),
        clusters=int(cluster_index.max()) + 1 if len(cluster_index) else 0,
    )
