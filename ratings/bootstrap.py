"""Seeded bootstrap rank bands (SPEC §7.3). Pure: numpy, no ORM.

A replicate resamples the battles with replacement, as multinomial counts per battle
(``bincount`` of uniform draws; a row standing for c identical battles owns c
consecutive draw positions, so it gets exactly what its c battles would get),
re-aggregates the pair sums with those counts as weights and refits by Newton
warm-started from the full fit, which converges in a few
iterations. Each agent's band is the 2.5–97.5 percentile of its rank (1 = strongest)
over the replicates: the lower end rounds down, the upper end up.
"""

from collections.abc import Callable

import numpy as np

from ratings.bradley_terry import RIDGE, newton


def ranks(theta: np.ndarray) -> np.ndarray:
    """Rank 1 for the largest strength; equal strengths keep index order."""
    order = np.argsort(-theta, kind="stable")
    out = np.empty(len(theta), dtype=np.int64)
    out[order] = np.arange(1, len(theta) + 1)
    return out


def replicate_ranks(
    i: np.ndarray,
    j: np.ndarray,
    pair_of_battle: np.ndarray,
    w: np.ndarray,
    y: np.ndarray,
    *,
    n_agents: int,
    theta: np.ndarray,
    replicates: int,
    seed: int,
    ridge: float = RIDGE,
    progress: Callable[[int], None] | None = None,
    count: np.ndarray | None = None,
) -> np.ndarray:
    """A ``replicates × n_agents`` array of ranks. ``i``, ``j`` are the pairs (i < j),
    ``pair_of_battle`` each battle's pair row, ``y`` each battle's outcome from the
    pair's i; ``count`` how many identical battles each row stands for (one when None).
    Same inputs and seed give the same array, and rows with counts give the array of
    their battles listed one by one."""
    rng = np.random.default_rng(seed)
    n_rows, n_pairs = len(pair_of_battle), len(i)
    # Draw position → row: a row's copies are consecutive positions.
    row_of = None if count is None else np.repeat(np.arange(n_rows), count)
    n_battles = n_rows if row_of is None else len(row_of)
    won = w * y
    out = np.empty((replicates, n_agents), dtype=np.int64)
    for r in range(replicates):
        draws = rng.integers(0, n_battles, n_battles)
        counts = np.bincount(draws if row_of is None else row_of[draws], minlength=n_rows)
        total = np.bincount(pair_of_battle, w * counts, minlength=n_pairs)
        wins = np.bincount(pair_of_battle, won * counts, minlength=n_pairs)
        fit = newton(i, j, total, wins, n_agents=n_agents, ridge=ridge, theta0=theta)
        out[r] = ranks(fit.theta)
        if progress is not None:
            progress(1)
    return out


def bands(rank_matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(2.5th percentile rounded down, 97.5th rounded up) of each column."""
    lower = np.percentile(rank_matrix, 2.5, axis=0, method="lower")
    upper = np.percentile(rank_matrix, 97.5, axis=0, method="higher")
    return lower.astype(np.int64), upper.astype(np.int64)


def rank_bands(
    i: np.ndarray,
    j: np.ndarray,
    pair_of_battle: np.ndarray,
    w: np.ndarray,
    y: np.ndarray,
    *,
    n_agents: int,
    theta: np.ndarray,
    replicates: int,
    seed: int,
    ridge: float = RIDGE,
    progress: Callable[[int], None] | None = None,
    count: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-agent rank band (lower, upper) over ``replicates`` seeded resamples."""
    return bands(
        replicate_ranks(
            i,
            j,
            pair_of_battle,
            w,
            y,
            n_agents=n_agents,
            theta=theta,
            replicates=replicates,
            seed=seed,
            ridge=ridge,
            progress=progress,
            count=count,
        )
    )
