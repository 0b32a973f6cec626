"""The tournaments' task bootstrap (ratings.task_bootstrap.rate_games) draws its replicates
through the board's resampler (ratings.bootstrap.cells_resampler over the games summed
per (task, pair)): the same seed gives the same replicates, draw for draw, as its own
multinomial loop did before. The loop is kept here as the reference it replaced. Since
issue 38 the replicates are the bounds' check (every one must rate every candidate);
the bounds are the CR2 sandwich (test_task_bootstrap.py), and the percentile bounds the
replicates gave before (``percentile_bounds``) stay pinned here as a check of the draws."""

import numpy as np
import pytest

from ratings import task_bootstrap
from ratings.task_bootstrap import CENTRE, ELO_SCALE, percentile_bounds, rate_games


def _reference_pair_sums(a, b, y, n, times=None):
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    wins_lo = np.where(a == lo, y, 1.0 - y)
    weight = np.ones(len(a)) if times is None else times
    key = lo * n + hi
    keys, index = np.unique(key, return_inverse=True)
    total = np.bincount(index, weight, minlength=len(keys))
    wins = np.bincount(index, wins_lo * weight, minlength=len(keys))
    return keys // n, keys % n, total, wins


def reference_samples(a, b, y, task, *, n, replicates, seed, full):
    """rate_games' replicate loop before it used ratings.bootstrap (a copy)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    y, task = np.asarray(y, float), np.asarray(task, np.int64)
    _, cluster = np.unique(task, return_inverse=True)
    clusters = int(cluster.max()) + 1
    theta0 = (full - CENTRE) / ELO_SCALE
    rng = np.random.default_rng(seed)
    uniform = np.full(clusters, 1.0 / clusters)
    samples = np.full((replicates, n), np.nan)
    for r in range(replicates):
        times = rng.multinomial(clusters, uniform)[cluster].astype(float)
        ri, rj, rtotal, rwins = _reference_pair_sums(a, b, y, n, times)
        rating, _, _ = task_bootstrap._fit(ri, rj, rtotal, rwins, n, theta0)
        if rating is not None:
            samples[r] = rating
    return samples


def dense(n: int, tasks: int, extra: int, seed: int) -> tuple:
    """Games of ``tasks`` tasks (ids listed out of order), each holding a cycle of wins
    over the n candidates (so every replicate rates everyone) and ``extra`` more games
    with draws among them, on the tasks in turn."""
    rng = np.random.default_rng(seed)
    ids = rng.permutation(tasks) * 3 + 1
    a, b, y, task = [], [], [], []
    for t in ids.tolist():
        for k in range(n):
            first, second = (k, (k + 1) % n) if rng.random() < 0.5 else ((k + 1) % n, k)
            a.append(first), b.append(second), y.append(1.0 if first == k else 0.0)
            task.append(t)
    for g in range(extra):
        first, second = rng.choice(n, 2, replace=False).tolist()
        a.append(first), b.append(second), y.append(float(rng.choice([0.0, 0.5, 1.0, 1.0])))
        task.append(int(ids[g % tasks]))
    return a, b, y, task, n


# (a, b, y, task, candidates)
GAMES = {
    "three candidates, six tasks": dense(3, 6, 20, seed=1),
    "five candidates, four tasks of unequal size": dense(5, 4, 31, seed=2),
    "replicates that cannot rate everyone": ([0, 0], [1, 1], [1, 0], [0, 1], 2),
}

# Percentile bounds the loop gave before it moved (computed with the reference above, seed 5, 200
# replicates): pinned, so a change of the draw cannot hide behind a changed reference.
PINNED = {
    "three candidates, six tasks": [
        (1426.096382629796, 1556.6563684217144),
        (1428.3055902909107, 1578.7832182179534),
        (1425.744414875266, 1566.391127962179),
    ],
    "five candidates, four tasks of unequal size": [
        (1449.4105523021044, 1543.6718720860767),
        (1507.9477654385082, 1565.1755509627392),
        (1397.7105591902273, 1543.956830623078),
        (1396.2270258595095, 1515.3344887947123),
        (1454.84071794357, 1671.8524290741273),
    ],
}


@pytest.mark.parametrize("name", list(GAMES))
@pytest.mark.parametrize("seed", [0, 5, 12345])
def test_replicates_are_those_of_the_loop_it_replaced(name, seed):
    a, b, y, task, n = GAMES[name]
    result = rate_games(a, b, y, task, n_candidates=n, replicates=200, seed=seed)
    full = np.array([c.rating for c in result.candidates], dtype=float)
    expected = reference_samples(a, b, y, task, n=n, replicates=200, seed=seed, full=full)
    assert result.ran
    assert np.array_equal(result.samples, expected, equal_nan=True)
    if result.unavailable is None:
        lower, upper = np.quantile(expected, (0.025, 0.975), axis=0, method="linear")
        assert percentile_bounds(result.samples).tolist() == [lower.tolist(), upper.tolist()]


@pytest.mark.parametrize("name", list(PINNED))
def test_pinned_bounds(name):
    a, b, y, task, n = GAMES[name]
    result = rate_games(a, b, y, task, n_candidates=n, replicates=200, seed=5)
    assert (result.valid, result.unavailable) == (200, None)
    bounds = percentile_bounds(result.samples).T.tolist()
    assert bounds == [pytest.approx(pair, abs=1e-9) for pair in PINNED[name]]


def test_a_replicate_that_cannot_rate_everyone_is_counted_invalid():
    a, b, y, task, n = GAMES["replicates that cannot rate everyone"]
    result = rate_games(a, b, y, task, n_candidates=n, replicates=200, seed=5)
    assert (result.ran, result.valid, result.unavailable) == (True, 104, "invalid_replicates")
