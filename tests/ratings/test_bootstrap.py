"""Bootstrap rank bands (SPEC §7.3, docs/intervals.md): seeded and reproducible,
percentile bands of the rank over replicates that resample battles (multinomial counts
over cells) or, when the clustered interval is published, clusters; equal strengths
give equal bands."""

import math

import numpy as np
import pytest

from ratings import bootstrap
from ratings.bradley_terry import newton, rate
from ratings.cells import count_cells


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

    cells = count_cells(a, b, y, None, n_agents=5)
    pairs = cells.pairs
    theta = newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=5).theta
    draw = bootstrap.battle_resampler(cells)
    args = (draw, pairs.i, pairs.j)
    one = bootstrap.replicate_ranks(*args, n_agents=5, theta=theta, replicates=50, seed=1)
    same = bootstrap.replicate_ranks(*args, n_agents=5, theta=theta, replicates=50, seed=1)
    other = bootstrap.replicate_ranks(*args, n_agents=5, theta=theta, replicates=50, seed=2)
    assert np.array_equal(one[0], same[0]) and np.array_equal(one[1], same[1])
    assert not np.array_equal(one[0], other[0])


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
    # equal strengths share the best rank of the tie, and span the tie's ranks
    assert bootstrap.ranks(np.array([0.1, 2.0, -1.0, 2.0])).tolist() == [3, 1, 4, 1]
    best, worst = bootstrap.tied_ranks(np.array([0.1, 2.0, -1.0, 2.0 + 1e-12]))
    assert best.tolist() == [3, 1, 4, 1] and worst.tolist() == [3, 2, 4, 2]
    # 40 replicates: the 2.5th percentile rounds down, the 97.5th up
    matrix = np.array([[1]] * 1 + [[2]] * 38 + [[3]] * 1)
    lower, upper = bootstrap.bands(matrix)
    assert (lower[0], upper[0]) == (1, 3)
    lower, upper = bootstrap.bands(np.array([[2]] * 40))
    assert (lower[0], upper[0]) == (2, 2)


def test_an_all_ties_file_gives_every_agent_every_rank():
    # three agents who only ever tie are equal: no order among them may be published
    a = np.array([0, 1, 2, 0, 1, 2] * 20)
    b = np.array([1, 2, 0, 2, 0, 1] * 20)
    result = rate(a, b, np.full(len(a), 0.5), n_agents=3, bootstrap=200, seed=3)
    assert bands(result) == [(1, 3), (1, 3), (1, 3)]
    # two equal agents above a clearly weaker one: tied bands for the two
    theta = np.array([1.0, 1.0, -3.0])
    a, b, y = sample(theta, 3000, seed=4)
    # make agents 0 and 1 exactly exchangeable: every battle also played with 0 and 1
    # swapped, so their strengths are equal to the last bit
    swap = np.array([1, 0, 2])
    a2, b2 = np.concatenate([a, swap[a]]), np.concatenate([b, swap[b]])
    y2 = np.concatenate([y, y])
    result = rate(a2, b2, y2, n_agents=3, bootstrap=200, seed=3)
    assert result.agents[0].rating == pytest.approx(result.agents[1].rating, abs=1e-9)
    assert bands(result)[:2] == [(1, 2), (1, 2)]
    assert bands(result)[2] == (3, 3)


def test_counted_cells_resample_exactly_like_the_battles_in_any_order():
    # the bootstrap's law is that of resampling battles, and rows standing for several
    # battles, or the same battles shuffled, give the same bands draw for draw
    a, b, y = sample(np.array([0.4, 0.2, 0.1, 0.0, -0.3]), 500, seed=12)
    listed = rate(a, b, y, n_agents=5, bootstrap=100, seed=9)
    order = np.random.default_rng(0).permutation(len(a))
    shuffled = rate(a[order], b[order], y[order], n_agents=5, bootstrap=100, seed=9)
    keys, count = np.unique(np.stack([a, b, y * 2]).T, axis=0, return_counts=True)
    counted = rate(
        keys[:, 0].astype(int), keys[:, 1].astype(int), keys[:, 2] / 2, n_agents=5,
        count=count, bootstrap=100, seed=9,
    )  # fmt: skip
    assert bands(listed) == bands(shuffled) == bands(counted)


def test_clustered_interval_brings_the_cluster_bootstrap():
    # 12 judges with strong views of their own: the clustered interval is published
    # and the bands resample judges, so they are wider than the battles' bands
    rng = np.random.default_rng(5)
    theta = np.array([0.6, 0.3, 0.0, -0.3])
    judge_view = rng.normal(0, 1.2, (12, 4))
    a = rng.integers(0, 4, 2400)
    b = (a + rng.integers(1, 4, 2400)) % 4
    judge = rng.integers(0, 12, 2400)
    d = theta[a] - theta[b] + judge_view[judge, a] - judge_view[judge, b]
    y = (rng.random(2400) < 1 / (1 + np.exp(-d))).astype(float)
    clustered = rate(a, b, y, n_agents=4, cluster=judge, bootstrap=300, seed=1)
    assert clustered.robust_published and clustered.bootstrap_resamples == "clusters"
    plain = rate(a, b, y, n_agents=4, bootstrap=300, seed=1)
    assert plain.bootstrap_resamples == "battles"
    width = lambda r: sum(e.rank_upper - e.rank_lower for e in r.agents)  # noqa: E731
    assert width(clustered) > width(plain)


def test_replicates_resample_clusters_with_replacement():
    draw = bootstrap.cluster_resampler(
        np.array([0, 1, 2]), np.array([0, 0, 0]), np.array([1.0, 10.0, 100.0]),
        np.array([1.0, 0.0, 50.0]), n_pairs=1, clusters=3,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    totals = {float(draw(rng)[0][0]) for _ in range(300)}
    # every total is k1·1 + k2·10 + k3·100 with k1 + k2 + k3 = 3 draws
    assert all(
        any(t == k1 + 10 * k2 + 100 * (3 - k1 - k2) for k1 in range(4) for k2 in range(4 - k1))
        for t in totals
    )
    assert len(totals) > 5  # and they vary


def test_bands_follow_the_sampling_spread_of_the_gap():
    # two agents: the share of replicates in which the weaker one ranks first matches
    # the normal approximation Φ(−gap/sd) from the model-based standard error
    a, b, y = sample(np.array([0.15, 0.0]), 400, seed=8)
    cells = count_cells(a, b, y, None, n_agents=2)
    pairs = cells.pairs
    theta = newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=2).theta
    ranks, _ = bootstrap.replicate_ranks(
        bootstrap.battle_resampler(cells), pairs.i, pairs.j,
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


# --- the compiled, blocked replicates against the loop they replaced (issue 38) -------


def loop_replicate_ranks(draw, i, j, *, n_agents, theta, replicates, seed, ridge=1e-3):
    """``bootstrap.replicate_ranks`` before issue 38 (a copy): one draw, one numpy
    Newton and one ``tied_ranks`` per replicate."""
    best = np.empty((replicates, n_agents), dtype=np.int64)
    worst = np.empty((replicates, n_agents), dtype=np.int64)
    for r, (total, wins) in enumerate(bootstrap.resamples(draw, replicates=replicates, seed=seed)):
        fit = newton(i, j, total, wins, n_agents=n_agents, ridge=ridge, theta0=theta)
        best[r], worst[r] = bootstrap.tied_ranks(fit.theta)
    return best, worst


def weighted_cells(seed: int, m: int, n: int, ties: float):
    rng = np.random.default_rng(seed)
    a, b, y = sample(rng.normal(0, 0.4, m), n, seed)
    y[rng.random(n) < ties] = 0.5
    w = rng.choice([0.5, 1.0, 1.25], n)  # evidence weights: the sorted path of cells
    return count_cells(a, b, y, w if seed % 2 else None, n_agents=m), a, b, y


@pytest.mark.parametrize(
    ("seed", "m", "n", "ties", "ridge"),
    [
        (1, 6, 400, 0.0, 1e-3),
        (2, 12, 3000, 0.3, 1e-3),
        (3, 30, 5000, 0.1, 1e-6),
        (4, 4, 80, 0.5, 1.0),
    ],
)
def test_battle_replicates_are_the_loops_rank_for_rank(seed, m, n, ties, ridge):
    cells, *_ = weighted_cells(seed, m, n, ties)
    pairs = cells.pairs
    theta = newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=m, ridge=ridge).theta
    draw = bootstrap.battle_resampler(cells)
    args = (draw, pairs.i, pairs.j)
    settings = dict(n_agents=m, theta=theta, replicates=70, seed=seed, ridge=ridge)
    expected = loop_replicate_ranks(*args, **settings)
    for threads in (0, 1, 2):
        got = bootstrap.replicate_ranks(*args, **settings, threads=threads)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])


def test_cluster_replicates_are_the_loops_rank_for_rank():
    rng = np.random.default_rng(21)
    a, b, y = sample(rng.normal(0, 0.5, 9), 4000, seed=21)
    judge = rng.integers(0, 40, len(a))
    from ratings.cells import cluster_cells

    groups = cluster_cells(judge, a, b, np.ones(len(a)), y, n_agents=9)
    pairs = count_cells(a, b, y, None, n_agents=9).pairs
    theta = newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=9).theta
    draw = bootstrap.cells_resampler(groups, pairs.i, pairs.j)
    settings = dict(n_agents=9, theta=theta, replicates=100, seed=4)
    expected = loop_replicate_ranks(draw, pairs.i, pairs.j, **settings)
    for threads in (0, 2):
        got = bootstrap.replicate_ranks(draw, pairs.i, pairs.j, **settings, threads=threads)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])


def test_a_block_of_draws_is_the_draws_one_by_one():
    # the premise of drawing blocks: size=k draws what k calls in a row draw, and a
    # drawn replicate's pair sums are those of Cells.resummed, to the last bit
    cells, *_ = weighted_cells(5, 7, 900, 0.2)
    draw = bootstrap.battle_resampler(cells)
    block = draw.counts(np.random.default_rng(3), 9)
    rng = np.random.default_rng(3)
    for row in block:
        total, wins = draw(rng)
        expected = cells.resummed(row)
        assert np.array_equal(total, expected[0]) and np.array_equal(wins, expected[1])
    again = np.random.default_rng(3)
    assert all(np.array_equal(row, again.multinomial(draw.size, draw.p)) for row in block)


def test_same_seed_same_ranks_bit_for_bit_with_any_threads_and_block():
    cells, *_ = weighted_cells(6, 10, 2000, 0.1)
    pairs = cells.pairs
    theta = newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=10).theta
    draw = bootstrap.battle_resampler(cells)
    run = lambda threads: bootstrap.replicate_ranks(  # noqa: E731
        draw, pairs.i, pairs.j, n_agents=10, theta=theta, replicates=150, seed=8,
        threads=threads,
    )  # fmt: skip
    first = run(2)
    for threads in (2, 1, 0, 2):
        again = run(threads)
        assert np.array_equal(first[0], again[0]) and np.array_equal(first[1], again[1])
    other = bootstrap.replicate_ranks(
        draw, pairs.i, pairs.j, n_agents=10, theta=theta, replicates=150, seed=9
    )
    assert not np.array_equal(first[0], other[0])


def test_blocks_of_any_size_give_the_same_ranks(monkeypatch):
    cells, *_ = weighted_cells(7, 8, 1500, 0.0)
    pairs = cells.pairs
    theta = newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=8).theta
    draw = bootstrap.battle_resampler(cells)
    args = (draw, pairs.i, pairs.j)
    settings = dict(n_agents=8, theta=theta, replicates=45, seed=2, threads=1)
    expected = bootstrap.replicate_ranks(*args, **settings)
    for block in (1, 7, 64):
        monkeypatch.setattr(bootstrap, "BLOCK", block)
        got = bootstrap.replicate_ranks(*args, **settings)
        assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
    # many cells: blocks cut to a byte budget (here 3 replicates of 8-byte counts)
    monkeypatch.setattr(bootstrap, "BLOCK", 32)
    monkeypatch.setattr(bootstrap, "BLOCK_BYTES", 3 * 8 * len(draw.p))
    sizes = [len(drawn[0]) for _, drawn in bootstrap._blocks(draw, replicates=10, seed=2)]
    assert sizes == [3, 3, 3, 1]
    got = bootstrap.replicate_ranks(*args, **settings)
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])


def test_any_resampler_runs_and_a_refused_cholesky_falls_back_to_numpys_newton():
    # a resampler that is not a Multinomial gives pair sums; one replicate's sums are
    # no likelihood (a pair's total negative: its Hessian is not positive definite):
    # the compiled Cholesky refuses it, numpy's Newton fits it as the loop did, and the
    # others stay the compiled ones
    cells, *_ = weighted_cells(8, 5, 600, 0.1)
    pairs = cells.pairs
    theta = newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=5).theta
    battles = bootstrap.battle_resampler(cells)
    calls = []

    def draw(rng):
        total, wins = battles(rng)
        calls.append(1)
        if len(calls) % 40 == 3:
            total = total.copy()
            total[0] = -50 * total[0]
        return total, wins

    settings = dict(n_agents=5, theta=theta, replicates=40, seed=3)
    expected = loop_replicate_ranks(draw, pairs.i, pairs.j, **settings)
    calls.clear()
    got = bootstrap.replicate_ranks(draw, pairs.i, pairs.j, **settings, threads=1)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    assert len(calls) == 80  # the draws once for all, and once more for the stray one
