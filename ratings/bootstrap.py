"""Seeded bootstrap rank bands (SPEC §7.3, as revised in docs/intervals.md). Pure: numpy
(and the compiled replicate loop of ``ratings.kernels``).

A replicate resamples what the published interval treats as independent, or whole
tasks when the arena chose them:

- battles (``battle_resampler``): multinomial counts over the cells of
  ``ratings.cells`` — the battles of a cell are exchangeable, so this is exactly the law
  of resampling the battles one by one, at O(cells) per replicate instead of O(battles);
- clusters (``cluster_resampler``, ``cells_resampler`` from sums per (cluster, pair)):
  G clusters drawn with replacement, each bringing all its battles: judges when the
  board's clustered interval is the published one, tasks when the arena chose to
  resample tasks (``agents.models.Arena.bootstrap_unit``), and tasks for the
  tournaments' ratings of judged games (``ratings.task_bootstrap``).

``resamples`` is the one seeded sequence of draws every bootstrap here runs on. Each
replicate is refitted by Newton warm-started from the full fit. Agents whose
strengths are equal (within ``TIE``) share their ranks: each gets the best and the worst
rank of the tie, so equal agents get equal bands. An agent's band runs from the 2.5th
percentile of its best rank (rounded down) to the 97.5th of its worst (rounded up).

How the replicates run (docs/performance.md): the draws come from the one generator,
in order, in blocks of ``BLOCK`` replicates (``rng.multinomial(..., size=k)`` draws
exactly what k calls in a row draw); each block's pair sums, Newton refits and ranks are
one compiled loop (``kernels.replicate_ranks``) that releases the GIL, so worker
threads fit block b while the generator draws block b + 1. A replicate's figures
depend on its draws only, never on the thread that fitted it or on when: the same seed
gives the same bands, bit for bit, with any number of threads.
"""

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ratings.bradley_terry import ARMIJO, MAX_ITERATIONS, RIDGE, TOLERANCE, newton
from ratings.cells import ClusterCells

TIE = 1e-8  # strengths closer than this (θ scale, 2·10⁻⁶ Elo) are equal
BLOCK = 32  # replicates drawn, then fitted, at a time, at most
BLOCK_BYTES = 1 << 20  # and at most this many bytes of counts per block


def _cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# Threads fitting blocks beside the one that draws (0: it fits them itself). Two: when
# the draws are cheap (a few clusters) both cores fit; when they are not (multinomials
# over thousands of cells), one core draws and the other fits.
THREADS = min(_cpus(), 2) if _cpus() > 1 else 0

Resampler = Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True, eq=False)
class Multinomial:
    """A resampler drawing ``size`` units with replacement, with probabilities ``p``:
    multinomial counts k over the units. Row r of the sums (``unit[r]``, ``pair[r]``,
    ``total[r]``, ``wins[r]``) adds total[r]·k and wins[r]·k to its pair. Called with a
    generator, it draws one replicate's (Σ w, Σ w y) per pair; ``replicate_ranks``
    draws and fits blocks of them instead."""

    size: int
    p: np.ndarray
    unit: np.ndarray  # int64, row → unit
    pair: np.ndarray  # int64, row → pair
    total: np.ndarray  # float64, per row
    wins: np.ndarray
    n_pairs: int

    def counts(self, rng: np.random.Generator, replicates: int) -> np.ndarray:
        """``replicates × units`` counts: what that many calls in a row would draw."""
        return rng.multinomial(self.size, self.p, size=replicates)

    def __call__(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        times = rng.multinomial(self.size, self.p)[self.unit]
        return (
            np.bincount(self.pair, self.total * times, minlength=self.n_pairs),
            np.bincount(self.pair, self.wins * times, minlength=self.n_pairs),
        )


def tied_ranks(theta: np.ndarray, tie: float = TIE) -> tuple[np.ndarray, np.ndarray]:
    """(best, worst) rank per agent, 1 = strongest; an agent tied with k others spans
    k + 1 ranks."""
    ordered = np.sort(theta)
    n = len(theta)
    # agents strictly stronger: above θ + tie; at least as strong: above θ − tie
    best = 1 + n - np.searchsorted(ordered, theta + tie, side="right")
    worst = n - np.searchsorted(ordered, theta - tie, side="left")
    return best.astype(np.int64), worst.astype(np.int64)


def ranks(theta: np.ndarray) -> np.ndarray:
    """Rank 1 for the largest strength; equal strengths share the best rank of the tie."""
    return tied_ranks(theta)[0]


def battle_resampler(cells) -> Multinomial:
    """Battles drawn with replacement, as multinomial counts over ``cells``."""
    n = int(cells.count.sum())
    return Multinomial(
        size=n,
        p=cells.count / n,
        unit=np.arange(len(cells.count), dtype=np.int64),
        pair=np.asarray(cells.pair, dtype=np.int64),
        total=np.asarray(cells.w, dtype=np.float64),
        # w·y, y ∈ {0, ½, 1}: (w y)·k is (w k)·y to the last bit (a power of two)
        wins=np.asarray(cells.w * cells.y, dtype=np.float64),
        n_pairs=len(cells.pairs.i),
    )


def cluster_resampler(
    cluster: np.ndarray,
    pair: np.ndarray,
    total: np.ndarray,
    wins: np.ndarray,
    *,
    n_pairs: int,
    clusters: int,
) -> Multinomial:
    """Clusters drawn with replacement: rows are (cluster 0..G−1, pair row, Σw, Σwy)."""
    return Multinomial(
        size=clusters,
        p=np.full(clusters, 1.0 / clusters),
        unit=np.asarray(cluster, dtype=np.int64),
        pair=np.asarray(pair, dtype=np.int64),
        total=np.asarray(total, dtype=np.float64),
        wins=np.asarray(wins, dtype=np.float64),
        n_pairs=n_pairs,
    )


def cells_resampler(cells: ClusterCells, pair_i: np.ndarray, pair_j: np.ndarray) -> Multinomial:
    """``cluster_resampler`` over battles summed per (cluster, pair): the sums per pair
    come out in the order of the fit's pairs (``pair_i`` < ``pair_j``, sorted by
    (i, j)), which hold every pair of ``cells``."""
    n = int(max(pair_i.max(), pair_j.max())) + 1 if len(pair_i) else 0
    return cluster_resampler(
        cells.cluster,
        np.searchsorted(pair_i * n + pair_j, cells.i * n + cells.j),
        cells.total,
        cells.wins,
        n_pairs=len(pair_i),
        clusters=cells.clusters,
    )


def resamples(
    draw: Resampler, *, replicates: int, seed: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``replicates`` draws of (Σ w, Σ w y) per pair from one generator seeded with
    ``seed``: the same seed, the same draws."""
    rng = np.random.default_rng(seed)
    for _ in range(replicates):
        yield draw(rng)


def _blocks(draw: Resampler, *, replicates: int, seed: int) -> Iterator[tuple[int, tuple]]:
    """(first replicate, the block's draws) for blocks of up to ``BLOCK`` replicates
    (fewer when their counts would pass ``BLOCK_BYTES``), drawn in order from the one
    generator of ``resamples``: a ``Multinomial``'s counts, any other resampler's pair
    sums stacked."""
    rng = np.random.default_rng(seed)
    size = BLOCK
    if isinstance(draw, Multinomial):
        size = max(1, min(BLOCK, BLOCK_BYTES // (8 * max(len(draw.p), 1))))
    for start in range(0, replicates, size):
        k = min(size, replicates - start)
        if isinstance(draw, Multinomial):
            yield start, (draw.counts(rng, k),)
        else:
            sums = [draw(rng) for _ in range(k)]
            yield start, (np.stack([s[0] for s in sums]), np.stack([s[1] for s in sums]))


def replicate_ranks(
    draw: Resampler,
    i: np.ndarray,
    j: np.ndarray,
    *,
    n_agents: int,
    theta: np.ndarray,
    replicates: int,
    seed: int,
    ridge: float = RIDGE,
    progress: Callable[[int], None] | None = None,
    threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Two ``replicates × n_agents`` arrays: each replicate's best and worst ranks.
    Same inputs and seed, same arrays, whatever ``threads`` (the threads fitting beside
    the drawing one; default ``THREADS``)."""
    from ratings import kernels  # the compiled loops: loaded where a fit runs

    threads = THREADS if threads is None else threads
    best = np.empty((replicates, n_agents), dtype=np.int64)
    worst = np.empty((replicates, n_agents), dtype=np.int64)
    status = np.zeros(replicates, dtype=np.int64)
    i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
    theta0 = np.asarray(theta, dtype=np.float64)
    if n_agents < 2:  # nothing to order: every agent is rank 1
        best[:], worst[:] = 1, n_agents
        if progress is not None:
            for _ in range(replicates):
                progress(1)
        return best, worst
    settings = (theta0, float(ridge), TOLERANCE, MAX_ITERATIONS, ARMIJO, TIE)

    def fit(start: int, drawn: tuple) -> int:
        rows = slice(start, start + len(drawn[0]))
        if len(drawn) == 1:
            kernels.replicate_ranks(
                drawn[0], draw.unit, draw.pair, draw.total, draw.wins, i, j, *settings,
                best[rows], worst[rows], status[rows],
            )  # fmt: skip
        else:
            kernels.summed_replicate_ranks(
                drawn[0], drawn[1], i, j, *settings, best[rows], worst[rows], status[rows]
            )
        return len(drawn[0])

    def report(done: int) -> None:
        if progress is not None:
            for _ in range(done):
                progress(1)

    if threads <= 0 or replicates <= BLOCK:  # a block or so: not worth a thread
        for start, drawn in _blocks(draw, replicates=replicates, seed=seed):
            report(fit(start, drawn))
    else:
        pending: list[Future] = []
        with ThreadPoolExecutor(max_workers=threads) as pool:
            for start, drawn in _blocks(draw, replicates=replicates, seed=seed):
                pending.append(pool.submit(fit, start, drawn))
                # drawn blocks waiting for a thread stay few: the memory of a block or
                # two per thread, however far the draws run ahead of the fits
                while pending and (pending[0].done() or len(pending) > 2 * threads):
                    report(pending.pop(0).result())
            for future in pending:
                report(future.result())
    stray = np.flatnonzero(status == kernels.FIT_NOT_POSITIVE_DEFINITE)
    if len(stray):  # a Hessian Cholesky refused: numpy's Newton decides, as it did
        redo = set(stray.tolist())
        for r, (total, wins) in enumerate(resamples(draw, replicates=replicates, seed=seed)):
            if r in redo:
                fit_r = newton(i, j, total, wins, n_agents=n_agents, ridge=ridge, theta0=theta0)
                best[r], worst[r] = tied_ranks(fit_r.theta)
    return best, worst


def bands(best: np.ndarray, worst: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(2.5th percentile of the best ranks rounded down, 97.5th of the worst rounded up)
    of each column; ``worst`` defaults to ``best`` (no ties)."""
    worst = best if worst is None else worst
    lower = np.percentile(best, 2.5, axis=0, method="lower")
    upper = np.percentile(worst, 97.5, axis=0, method="higher")
    return lower.astype(np.int64), upper.astype(np.int64)


def rank_bands(
    draw: Resampler,
    i: np.ndarray,
    j: np.ndarray,
    *,
    n_agents: int,
    theta: np.ndarray,
    replicates: int,
    seed: int,
    ridge: float = RIDGE,
    progress: Callable[[int], None] | None = None,
    threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-agent rank band (lower, upper) over ``replicates`` seeded resamples."""
    return bands(
        *replicate_ranks(
            draw,
            i,
            j,
            n_agents=n_agents,
            theta=theta,
            replicates=replicates,
            seed=seed,
            ridge=ridge,
            progress=progress,
            threads=threads,
        )
    )
