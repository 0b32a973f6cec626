"""Bootstrap rank bands (SPEC §7.3): seeded and reproducible, percentile bands of the
rank over replicates resampled from the battles."""

import math

import numpy as np
import pytest

from ratings import bootstrap
from ratings.bradley_terry import aggregate, newton, rate


def sample(theta: np.ndarray, n: int, seed: int):
    rng = np.random.default_rng(seed)
    m = len(theta)
    a = rng.integers(0, m, n)
    b = (a + rng.integers(1, m, n)) % m
    y = (rng.random(n) < 1 / (1 + np.exp(-(theta[a] - theta[b])))).astype(float)
    return a, b, y


def bands(result) -> list[tuple[int, int]]:
    return [(e.rank_lower, e.rank_upper) for e in result.agents]


def test_same_seed_same_bands_and_another_seed_may_differ():
    a, b, y = sample(np.array([0.3, 0.2, 0.1, 0.0, -0.1]), 300, seed=1)
    first = rate(a, b, y, n_agents=5, bootstrap=200, seed=42)
    again = rate(a, b, y, n_agents=5, bootstrap=200, seed=42)
    assert bands(first) == bands(again)
    assert first.seed == 42 and first.bootstrap_replicates == 200

    pairs = aggregate(a, b, y, np.ones(len(a)), n_agents=5)
    theta = newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=5).theta
    y_lo = np.where(a < b, y, 1 - y)
    args = (pairs.i, pairs.j, pairs.inverse, np.ones(len(a)), y_lo)
    one = bootstrap.replicate_ranks(*args, n_agents=5, theta=theta, replicates=50, seed=1)
    same = bootstrap.replicate_ranks(*args, n_agents=5, theta=theta, replicates=50, seed=1)
    other = bootstrap.replicate_ranks(*args, n_agents=5, theta=theta, replicates=50, seed=2)
    assert np.array_equal(one, same)
    assert not np.array_equal(one, other)


def test_well_separated_agents_have_single_rank_bands():
    theta = np.array([3.0, 1.5, 0.0, -1.5])
    a, b, y = sample(theta, 2000, seed=2)
    result = rate(a, b, y, n_agents=4, bootstrap=300, seed=0)
    assert bands(result) == [(1, 1), (2, 2), (3, 3), (4, 4)]


def test_close_agents_share_a_wide_band():
    # agents 0 and 1 are equal, 2 is far below: 0 and 1 each span ranks 1–2
    theta = np.array([1.0, 1.0, -2.0])
    a, b, y = sample(theta, 400, seed=3)
    result = rate(a, b, y, n_agents=3, bootstrap=400, seed=5)
    assert bands(result)[:2] == [(1, 2), (1, 2)]
    assert bands(result)[2] == (3, 3)


def test_band_contains_the_point_estimates_rank():
    theta = np.linspace(0.6, -0.6, 8)
    a, b, y = sample(theta, 600, seed=4)
    result = rate(a, b, y, n_agents=8, bootstrap=300, seed=9)
    ratings = np.array([e.rating for e in result.agents])
    point_rank = bootstrap.ranks(ratings)
    for e, rank in zip(result.agents, point_rank, strict=True):
        assert e.rank_lower <= rank <= e.rank_upper
    # with eight close agents at least one band is wider than a single rank
    assert any(e.rank_upper > e.rank_lower for e in result.agents)


def test_no_bootstrap_no_bands():
    a, b, y = sample(np.array([0.5, 0.0, -0.5]), 100, seed=5)
    assert bands(rate(a, b, y, n_agents=3)) == [(None, None)] * 3


def test_progress_is_called_once_per_replicate():
    a, b, y = sample(np.array([0.5, 0.0, -0.5]), 100, seed=6)
    calls = []
    rate(a, b, y, n_agents=3, bootstrap=37, progress=calls.append)
    assert calls == [1] * 37


def test_ranks_and_percentile_bands():
    assert bootstrap.ranks(np.array([0.1, 2.0, -1.0, 2.0])).tolist() == [3, 1, 4, 2]
    # 40 replicates: the 2.5th percentile rounds down, the 97.5th up
    matrix = np.array([[1]] * 1 + [[2]] * 38 + [[3]] * 1)
    lower, upper = bootstrap.bands(matrix)
    assert (lower[0], upper[0]) == (1, 3)
    lower, upper = bootstrap.bands(np.array([[2]] * 40))
    assert (lower[0], upper[0]) == (2, 2)


def test_bands_follow_the_sampling_spread_of_the_gap():
    # two agents: the share of replicates in which the weaker one ranks first matches
    # the normal approximation Φ(−gap/sd) from the model-based standard error
    a, b, y = sample(np.array([0.15, 0.0]), 400, seed=8)
    pairs = aggregate(a, b, y, np.ones(len(a)), n_agents=2)
    theta = newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=2).theta
    ranks = bootstrap.replicate_ranks(
        pairs.i, pairs.j, pairs.inverse, np.ones(len(a)), np.where(a < b, y, 1 - y),
        n_agents=2, theta=theta, replicates=2000, seed=11,
    )  # fmt: skip
    gap = abs(theta[0] - theta[1])
    p = 1 / (1 + np.exp(-gap))
    sd = 1 / np.sqrt(len(a) * p * (1 - p))
    weaker = int(np.argmin(theta))
    expected = 0.5 * math.erfc(gap / sd / math.sqrt(2))
    assert np.mean(ranks[:, weaker] == 1) == pytest.approx(expected, abs=0.04)


@pytest.mark.parametrize("replicates", [1, 5])
def test_small_replicate_counts_work(replicates):
    a, b, y = sample(np.array([0.5, 0.0, -0.5]), 60, seed=7)
    result = rate(a, b, y, n_agents=3, bootstrap=replicates, seed=1)
    assert all(1 <= e.rank_lower <= e.rank_upper <= 3 for e in result.agents)
