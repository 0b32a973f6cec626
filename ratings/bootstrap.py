"""Seeded bootstrap rank bands (SPEC §7.3, as revised in docs/intervals.md). Pure: numpy.

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
"""

from collections.abc import Callable, Iterator

import numpy as np

from ratings.bradley_terry import RIDGE, newton
from ratings.cells import ClusterCells

TIE = 1e-8  # strengths closer than this (θ scale, 2·10⁻⁶ Elo) are equal

Resampler = Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]


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


def battle_resampler(cells) -> Resampler:
    """Battles drawn with replacement, as multinomial counts over ``cells``."""
    n = int(cells.count.sum())
    p = cells.count / n

    def draw(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return cells.resummed(rng.multinomial(n, p))

    return draw


def cluster_resampler(
    cluster: np.ndarray,
    pair: np.ndarray,
    total: np.ndarray,
    wins: np.ndarray,
    *,
    n_pairs: int,
    clusters: int,
) -> Resampler:
    """Clusters drawn with replacement: rows are (cluster 0..G−1, pair row, Σw, Σwy)."""
    uniform = np.full(clusters, 1.0 / clusters)

    def draw(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        times = rng.multinomial(clusters, uniform)[cluster]
        return (
            np.bincount(pair, total * times, minlength=n_pairs),
            np.bincount(pair, wins * times, minlength=n_pairs),
        )

    return draw


def cells_resampler(cells: ClusterCells, pair_i: np.ndarray, pair_j: np.ndarray) -> Resampler:
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
) -> tuple[np.ndarray, np.ndarray]:
    """Two ``replicates × n_agents`` arrays: each replicate's best and worst ranks.
    Same inputs and seed, same arrays."""
    best = np.empty((replicates, n_agents), dtype=np.int64)
    worst = np.empty((replicates, n_agents), dtype=np.int64)
    for r, (total, wins) in enumerate(resamples(draw, replicates=replicates, seed=seed)):
        fit = newton(i, j, total, wins, n_agents=n_agents, ridge=ridge, theta0=theta)
        best[r], worst[r] = tied_ranks(fit.theta)
        if progress is not None:
            progress(1)
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
        )
    )
