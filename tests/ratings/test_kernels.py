"""The compiled loops (``ratings.kernels``) against plain numpy, and the compiled
checks against every fault a battle can have, where it sits and with what it shares
the file."""

import math

import numpy as np
import pytest

from ratings import bradley_terry, cells, kernels
from ratings.bradley_terry import rate


def random_battles(seed: int, n_agents: int = 9, n: int = 4000):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n_agents, n)
    b = (a + rng.integers(1, n_agents, n)) % n_agents
    y = rng.choice([0.0, 0.5, 1.0], n, p=[0.4, 0.25, 0.35])
    return a, b, y


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_ordered_table_is_numpys_count_of_the_ordered_key(seed):
    a, b, y = random_battles(seed)
    count = np.random.default_rng(seed).integers(1, 5, len(a))
    key = (a * 9 + b) * 3 + (2 * y).astype(np.int64)
    for weights in (None, count):
        table, first = kernels.ordered_table(a, b, y, weights, 9)
        np.testing.assert_array_equal(table, np.bincount(key, weights, minlength=243))
        assert first.tolist() == [-1, -1, -1, -1]


@pytest.mark.parametrize("seed", [4, 5])
def test_folded_cells_are_those_of_the_sorted_path(seed, monkeypatch):
    # the dense table folded by the compiled loop and the sort over oriented keys (the
    # path for unequal weights or big tables) are two ways to the same cells
    a, b, y = random_battles(seed)
    count = np.random.default_rng(seed).integers(1, 5, len(a))
    table, _ = kernels.ordered_table(a, b, y, count, 9)
    folded = cells.count_cells(a, b, y, None, n_agents=9, count=count, table=table)
    unfolded = cells.count_cells(a, b, y, None, n_agents=9, count=count)
    monkeypatch.setattr(cells, "DENSE_TABLE", 0)
    sorted_ = cells.count_cells(a, b, y, None, n_agents=9, count=count)
    for got in (folded, unfolded):
        for field in ("i", "j", "y", "w", "count", "pair"):
            np.testing.assert_array_equal(getattr(got, field), getattr(sorted_, field))
        for field in ("i", "j", "total", "wins", "battles"):
            np.testing.assert_allclose(getattr(got.pairs, field), getattr(sorted_.pairs, field))


@pytest.mark.parametrize("seed", [7, 8])
def test_rows_that_are_cells_already_are_taken_as_they_are(seed, monkeypatch):
    # the CLI hands ``rate`` its battles reduced to cells in the canonical order: taken as
    # they are (no sorted copy), they are the cells the battles one by one make; rows in
    # another order, or not distinct, go the sorted way to the same cells
    from ratings import cli_fit

    a, b, y = random_battles(seed, n=6000)
    w = np.random.default_rng(seed).choice([0.25, 0.5, 1.0, 2.0], len(a))
    expected = cells.count_cells(a, b, y, w, n_agents=9)
    lo, hi, cy, cw, count = cli_fit.cells(a, b, (2 * y).astype(np.int8), w, 9)
    assert cells._canonical(lo, hi, cy, cw, 9)
    taken = cells.count_cells(lo, hi, cy, cw, n_agents=9, count=count)
    assert taken.i is lo and taken.w is cw and taken.count is count  # not copied
    flipped = np.arange(len(lo))[::-1]
    doubled = np.repeat(np.arange(len(lo)), 2)
    assert not cells._canonical(lo[flipped], hi[flipped], cy[flipped], cw[flipped], 9)
    assert not cells._canonical(lo[doubled], hi[doubled], cy[doubled], cw[doubled], 9)
    assert not cells._canonical(hi, lo, 1.0 - cy, cw, 9)
    resorted = cells.count_cells(
        lo[flipped], hi[flipped], cy[flipped], cw[flipped], n_agents=9, count=count[flipped]
    )
    for got in (taken, resorted):
        for field in ("i", "j", "y", "w", "count", "pair"):
            np.testing.assert_array_equal(getattr(got, field), getattr(expected, field))
        for field in ("i", "j", "total", "wins", "battles"):
            np.testing.assert_array_equal(getattr(got.pairs, field), getattr(expected.pairs, field))


def test_the_laplacian_is_the_sum_of_its_outer_products():
    rng = np.random.default_rng(6)
    i, j = np.triu_indices(7, 1)
    keep = rng.random(len(i)) < 0.6
    i, j = i[keep], j[keep]
    h = rng.random(len(i))
    expected = 0.25 * np.eye(7)
    for p, q, v in zip(i, j, h, strict=True):
        x = np.zeros(7)
        x[p], x[q] = 1.0, -1.0
        expected += v * np.outer(x, x)
    np.testing.assert_allclose(bradley_terry.laplacian(i, j, h, 7, 0.25), expected)


def test_an_empty_file_counts_nothing():
    empty = np.zeros(0, dtype=np.int64)
    table, first = kernels.ordered_table(empty, empty, np.zeros(0), None, 4)
    assert not table.any() and first.tolist() == [-1, -1, -1, -1]


@pytest.mark.parametrize(
    ("a", "b", "y", "message"),
    [
        (3, 1, 1.0, r"0\.\.2"),
        (-1, 1, 1.0, r"0\.\.2"),  # a negative index wraps past n in the unsigned test
        (0, -3, 1.0, r"0\.\.2"),
        (2, 2, 0.5, "battle 57 pits an agent against itself"),
        (0, 1, 0.25, "1, 0.5 or 0"),
        (0, 1, -0.5, "1, 0.5 or 0"),
        (0, 1, 1.5, "1, 0.5 or 0"),
        (0, 1, math.nan, "1, 0.5 or 0"),
        (0, 1, math.inf, "1, 0.5 or 0"),
    ],
)
def test_one_bad_battle_among_many_is_refused(a, b, y, message):
    good_a, good_b, good_y = random_battles(7, n_agents=3, n=100)
    good_a[57], good_b[57], good_y[57] = a, b, y
    with pytest.raises(ValueError, match=message):
        rate(good_a, good_b, good_y, n_agents=3)


def test_faults_are_reported_in_the_order_of_their_kinds_not_of_the_battles():
    # an out-of-range index is reported before an earlier self-battle or bad outcome,
    # a self-battle before an earlier bad outcome, as the numpy checks report them
    a, b, y = np.array([0, 1, 0, 2]), np.array([1, 1, 5, 0]), np.array([0.3, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"0\.\.2"):
        rate(a, b, y, n_agents=3)
    a, b = np.array([0, 1, 2]), np.array([1, 1, 0])
    with pytest.raises(ValueError, match="battle 1 pits"):
        rate(a, b, y[:3], n_agents=3)
    with pytest.raises(ValueError, match="positive integers"):
        rate(np.array([0, 1]), np.array([1, 2]), np.ones(2), n_agents=3, count=np.array([2, -1]))


def test_the_sorted_path_refuses_the_same_faults(monkeypatch):
    # the numpy checks (unequal weights, or too many agents for a dense table) say
    # what the compiled ones say
    monkeypatch.setattr(cells, "DENSE_TABLE", 0)
    for a, b, y, message in [
        ([0, 3], [1, 0], [1.0, 1.0], r"0\.\.2"),
        ([0, 2], [1, 2], [1.0, 1.0], "battle 1 pits"),
        ([0, 1], [1, 2], [1.0, math.nan], "1, 0.5 or 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            rate(np.array(a), np.array(b), np.array(y), n_agents=3)
    with pytest.raises(ValueError, match="positive integers"):
        rate(np.array([0]), np.array([1]), np.ones(1), n_agents=3, count=np.array([0]))


def test_the_compiled_and_numpy_paths_give_the_same_board(monkeypatch):
    a, b, y = random_battles(8)
    compiled = rate(a, b, y, n_agents=9, bootstrap=30, seed=3)
    monkeypatch.setattr(cells, "DENSE_TABLE", 0)
    sorted_ = rate(a, b, y, n_agents=9, bootstrap=30, seed=3)
    for x, z in zip(compiled.agents, sorted_.agents, strict=True):
        assert x.battles == z.battles and x.rank_lower == z.rank_lower
        assert x.rank_upper == z.rank_upper
        assert x.rating == pytest.approx(z.rating, abs=1e-9)
        assert x.lower == pytest.approx(z.lower, abs=1e-9)


def pair_sums(seed: int, m: int, n: int, spread: float):
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, spread, m)
    a = rng.integers(0, m, n)
    b = (a + rng.integers(1, m, n)) % m
    y = (rng.random(n) < 1 / (1 + np.exp(-(theta[a] - theta[b])))).astype(float)
    y[rng.random(n) < 0.1] = 0.5
    return cells.count_cells(a, b, y, None, n_agents=m).pairs


@pytest.mark.parametrize(
    ("seed", "m", "n", "spread", "ridge", "start"),
    [
        (1, 5, 300, 0.5, 1e-3, "fit"),  # a replicate's warm start
        (2, 20, 4000, 1.0, 1e-3, "zero"),
        (3, 50, 20000, 2.0, 1e-6, "log_odds"),
        (4, 8, 200, 4.0, 1e-6, "far"),  # far from the optimum: step control (Armijo)
        (5, 3, 30, 6.0, 1e-6, "far"),
        (6, 12, 600, 1.0, 10.0, "zero"),  # a strong ridge
    ],
)
def test_the_compiled_newton_is_numpys(seed, m, n, spread, ridge, start):
    p = pair_sums(seed, m, n, spread)
    args = (p.i, p.j, p.total, p.wins)
    theta0 = {
        "fit": bradley_terry.newton(*args, n_agents=m).theta + 0.01,
        "zero": np.zeros(m),
        "log_odds": bradley_terry.start(*args, m),
        "far": np.linspace(30, -30, m),
    }[start]
    expected = bradley_terry.newton(*args, n_agents=m, ridge=ridge, theta0=theta0)
    theta, iterations, status = kernels.newton_fit(
        *args, theta0, ridge, bradley_terry.TOLERANCE, bradley_terry.MAX_ITERATIONS,
        bradley_terry.ARMIJO,
    )  # fmt: skip
    np.testing.assert_allclose(theta, expected.theta, rtol=0, atol=1e-9)
    assert iterations == expected.iterations
    assert (status == kernels.FIT_CONVERGED) == expected.converged


def test_the_compiled_newton_stops_where_numpys_does_at_its_cap():
    p = pair_sums(7, 10, 2000, 1.0)
    args = (p.i, p.j, p.total, p.wins)
    expected = bradley_terry.newton(*args, n_agents=10, theta0=np.zeros(10), max_iterations=2)
    theta, iterations, status = kernels.newton_fit(
        *args, np.zeros(10), bradley_terry.RIDGE, bradley_terry.TOLERANCE, 2, bradley_terry.ARMIJO
    )
    assert not expected.converged and status == kernels.FIT_NOT_CONVERGED and iterations == 2
    np.testing.assert_allclose(theta, expected.theta, rtol=0, atol=1e-12)


@pytest.mark.parametrize("m", [1, 2, 5, 9, 50])  # four rows per pass and the rest
def test_the_compiled_cholesky_solves_and_refuses_what_is_not_positive_definite(m):
    rng = np.random.default_rng(m)
    root = rng.normal(size=(m, m))
    spd = root @ root.T + 0.1 * np.eye(m)
    rhs = rng.normal(size=m)
    x = np.empty(m)
    factor = spd.copy()
    assert kernels.cholesky_solve(factor, rhs, x)
    np.testing.assert_allclose(x, np.linalg.solve(spd, rhs), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.triu(factor), np.linalg.cholesky(spd).T, rtol=1e-10, atol=1e-12)
    indefinite = spd - (np.linalg.eigvalsh(spd)[0] + 1.0) * np.eye(m)  # one eigenvalue −1
    assert not kernels.cholesky_solve(indefinite, rhs, x)
    assert not kernels.cholesky_solve(np.full((2, 2), np.nan), rhs[:1].repeat(2), x[:1].repeat(2))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_compiled_tied_ranks_are_bootstraps(seed):
    from ratings import bootstrap

    rng = np.random.default_rng(seed)
    theta = rng.normal(size=30)
    theta[5] = theta[7]  # an exact tie
    theta[9] = theta[11] + 0.5e-8  # within TIE
    theta[12] = theta[13] + 2e-8  # beyond it
    best, worst = np.empty(30, np.int64), np.empty(30, np.int64)
    kernels.tied_ranks(theta, bootstrap.TIE, best, worst)
    expected = bootstrap.tied_ranks(theta)
    assert best.tolist() == expected[0].tolist() and worst.tolist() == expected[1].tolist()
