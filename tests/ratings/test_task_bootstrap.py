"""Ratings of judged games with task-clustered intervals (003 "Ratings" corrected by
issue 38, ratings.task_bootstrap): exact maximum-likelihood values, every unavailability
reason, and bounds that are the CR2 sandwich with t(G* − 1) — derived here in closed form
for two candidates, and against the hat matrix written out game by game for more."""

import math

import numpy as np
import pytest
from scipy import stats

from ratings import intervals, task_bootstrap
from ratings.bradley_terry import Fit, newton
from ratings.cells import cluster_cells
from ratings.intervals import ELO_SCALE
from ratings.task_bootstrap import rate_games

HALF = ELO_SCALE / 2  # two candidates: a − 1500 = (ELO_SCALE / 2) · ln(Wa / Wb)


def two(wa: float, wb: float) -> tuple[float, float]:
    d = HALF * math.log(wa / wb)
    return 1500 + d, 1500 - d


@pytest.mark.parametrize(
    ("games", "expected"),
    [
        # (a, b, y) per game; all in tasks 0 and 1 alternately
        ([(0, 1, 1), (0, 1, 1), (0, 1, 1), (0, 1, 0)], two(3, 1)),
        ([(0, 1, 1), (0, 1, 0.5), (0, 1, 0.5)], two(2, 1)),  # draws are half-wins
        ([(1, 0, 0), (1, 0, 0), (1, 0, 1)], two(2, 1)),  # y is from the first one's view
        ([(0, 1, 0.5), (0, 1, 0.5)], (1500.0, 1500.0)),
    ],
)
def test_two_candidates_exact(games, expected):
    a, b, y = zip(*games, strict=True)
    result = rate_games(a, b, y, [k % 2 for k in range(len(a))], n_candidates=2, replicates=0)
    assert [c.rating for c in result.candidates] == pytest.approx(expected, abs=1e-6)
    assert [c.unavailable for c in result.candidates] == [None, None]


def test_three_candidates_centre_on_1500_and_match_the_likelihood():
    games = [(0, 1, 1), (0, 1, 1), (1, 0, 1), (1, 2, 1), (2, 1, 1), (1, 2, 1), (2, 0, 1), (0, 2, 1)]
    a, b, y = zip(*games, strict=True)
    result = rate_games(a, b, y, list(range(8)), n_candidates=3, replicates=0)
    ratings = np.array([c.rating for c in result.candidates])
    assert ratings.mean() == pytest.approx(1500, abs=1e-9)
    theta = (ratings - 1500) / ELO_SCALE
    # the score equations: each candidate's wins equal its expected wins
    for k in range(3):
        wins = sum(yy if aa == k else 1 - yy for aa, bb, yy in games if k in (aa, bb))
        expected = sum(
            1 / (1 + math.exp(theta[bb if aa == k else aa] - theta[k]))
            for aa, bb, _ in games
            if k in (aa, bb)
        )
        assert wins == pytest.approx(expected, abs=1e-8)


@pytest.mark.parametrize(
    ("games", "n", "reasons"),
    [
        ([(0, 1, 1), (0, 1, 1)], 2, ["separated", "separated"]),
        ([(0, 1, 1), (0, 1, 0)], 3, [None, None, "no_comparisons"]),
        (
            [(0, 1, 1), (0, 1, 0), (0, 1, 1), (2, 3, 1), (2, 3, 0)],
            4,
            [None, None, "disconnected", "disconnected"],
        ),
        ([(0, 1, 1), (1, 0, 1), (1, 2, 1)], 3, [None, None, "separated"]),
        ([], 2, ["no_comparisons", "no_comparisons"]),
    ],
)
def test_unrated_candidates_have_the_reason_and_no_bootstrap(games, n, reasons):
    a, b, y = zip(*games, strict=True) if games else ((), (), ())
    result = rate_games(a, b, y, list(range(len(a))), n_candidates=n, replicates=20)
    assert [c.unavailable for c in result.candidates] == reasons
    assert [c.rating is None for c in result.candidates] == [r is not None for r in reasons]
    assert (result.ran, result.valid, result.unavailable) == (False, None, "original_unrated")


def test_nonconvergence(monkeypatch):
    """The real Newton iteration with a budget of one step does not meet its tolerance."""
    monkeypatch.setattr(
        task_bootstrap, "newton", lambda *args, **kw: newton(*args, **kw, max_iterations=1)
    )
    result = rate_games([0, 0, 0, 1], [1, 1, 1, 0], [1, 1, 1, 1], [0, 1, 2, 3], n_candidates=2)
    assert [c.unavailable for c in result.candidates] == ["nonconvergence"] * 2
    assert result.unavailable == "original_unrated"


def test_nonfinite_result(monkeypatch):
    """A fit that converges to strengths whose exponential overflows (injected: no real
    data on this scale reaches it) is refused rather than published."""
    monkeypatch.setattr(
        task_bootstrap, "newton", lambda *a, **k: Fit(np.array([800.0, -800.0]), 3, True)
    )
    result = rate_games([0, 1], [1, 0], [1, 1], [0, 1], n_candidates=2)
    assert [c.unavailable for c in result.candidates] == ["nonfinite_result"] * 2


def test_too_few_tasks():
    result = rate_games([0, 0, 1], [1, 1, 0], [1, 0, 1], [4, 4, 4], n_candidates=2)
    assert result.candidates[0].rating == pytest.approx(two(1, 2)[0])
    assert (result.ran, result.clusters, result.unavailable) == (False, 1, "too_few_tasks")
    assert result.candidates[0].lower is None


def test_a_replicate_that_cannot_rate_everyone_withholds_every_bound():
    # task 0: a beat b; task 1: b beat a. A replicate of task 0 twice is separated.
    result = rate_games([0, 0], [1, 1], [1, 0], [0, 1], n_candidates=2, replicates=200, seed=3)
    rng = np.random.default_rng(3)
    mixed = sum(rng.multinomial(2, [0.5, 0.5])[0] == 1 for _ in range(200))
    assert (result.ran, result.valid, result.unavailable) == (True, mixed, "invalid_replicates")
    assert all(c.lower is None and c.upper is None for c in result.candidates)
    assert [c.rating for c in result.candidates] == pytest.approx([1500, 1500])


def test_bounds_are_the_cr2_sandwich_with_t_in_closed_form():
    # Per task (a's wins, b's wins) — every resample keeps both sides winning somewhere.
    per_task = [(2, 1), (1, 1), (3, 1), (1, 2)]
    games = [(t, 1.0) for t, (wa, _) in enumerate(per_task) for _ in range(wa)]
    games += [(t, 0.0) for t, (_, wb) in enumerate(per_task) for _ in range(wb)]
    task, y = zip(*games, strict=True)
    result = rate_games(
        [0] * len(y), [1] * len(y), y, task, n_candidates=2, replicates=300, seed=11
    )
    # Two candidates: d = θa − θb is the log-odds of a's share p = 7/12, task g's score
    # for d is w_g − n_g p, its information n_g p(1 − p) — the share n_g/N of the whole
    # (its leverage), so CR2 divides its squared score by 1 − n_g/N. a's rating is
    # 1500 + (ELO_SCALE/2) d, and t has G* − 1 degrees of freedom, G* = N²/Σn_g².
    n = [wa + wb for wa, wb in per_task]
    total, p = sum(n), 7 / 12
    wins = [wa for wa, _ in per_task]
    meat = sum((w - ng * p) ** 2 / (1 - ng / total) for w, ng in zip(wins, n, strict=True))
    se_d = math.sqrt(meat) / (total * p * (1 - p))
    effective = total**2 / sum(ng * ng for ng in n)
    critical = float(stats.t.ppf(0.975, effective - 1))
    half = critical * HALF * se_d
    a = result.candidates[0]
    assert a.rating == pytest.approx(two(7, 5)[0])
    assert (a.lower, a.upper) == (
        pytest.approx(a.rating - half, abs=1e-9), pytest.approx(a.rating + half, abs=1e-9)
    )  # fmt: skip
    assert (result.ran, result.valid, result.unavailable, result.clusters) == (True, 300, None, 4)
    assert (result.effective_clusters, result.critical_value) == (
        pytest.approx(effective), pytest.approx(critical)
    )  # fmt: skip
    assert result.candidates[1].lower == pytest.approx(3000 - a.upper, abs=1e-9)
    # the percentile bootstrap it replaced would have been narrower here
    old_lower, old_upper = task_bootstrap.percentile_bounds(result.samples)[:, 0]
    assert old_upper - old_lower < a.upper - a.lower


def _hat_matrix_cr2(a, b, y, task, n, rating):
    """CR2 the long way: one row per game, W^½ X the weighted design, H the hat matrix,
    (I − H_gg)^(−½) on each task's Pearson residuals, then the centred sandwich."""
    theta = (np.asarray(rating) - 1500) / ELO_SCALE
    x = np.zeros((len(a), n))
    x[np.arange(len(a)), a], x[np.arange(len(a)), b] = 1.0, -1.0
    mu = 1 / (1 + np.exp(-(x @ theta)))
    w = mu * (1 - mu)
    z = np.sqrt(w)[:, None] * x
    a_inv = np.linalg.inv(z.T @ z + 1.0 / n)
    hat = z @ a_inv @ z.T
    pearson = (np.asarray(y) - mu) / np.sqrt(w)
    meat = np.zeros((n, n))
    for g in np.unique(task):
        rows = np.flatnonzero(np.asarray(task) == g)
        values, vectors = np.linalg.eigh(np.eye(len(rows)) - hat[np.ix_(rows, rows)])
        adjust = (vectors / np.sqrt(values)) @ vectors.T
        score = z[rows].T @ adjust @ pearson[rows]
        meat += np.outer(score, score)
    centre = np.eye(n) - 1.0 / n
    return np.diag(centre @ a_inv @ meat @ a_inv @ centre.T)


def test_cr2_matches_the_hat_matrix_on_unequal_tasks():
    """Tasks of unequal size and make-up (some pairs missing, draws): CR2 differs from
    the board's G/(G − 1) factor here, and equals the game-by-game computation."""
    rng = np.random.default_rng(4)
    a, b, y, task = [], [], [], []
    for t in range(7):
        for _ in range(int(rng.integers(3, 12))):
            first, second = rng.choice(4, 2, replace=False).tolist()
            a.append(first), b.append(second), task.append(t)
            y.append(float(rng.choice([0.0, 0.5, 1.0])))
    result = rate_games(a, b, y, task, n_candidates=4, replicates=0)
    rating = np.array([c.rating for c in result.candidates])
    expected = _hat_matrix_cr2(a, b, y, task, 4, rating)
    half = np.array([c.upper for c in result.candidates]) - rating
    variance = (half / (result.critical_value * ELO_SCALE)) ** 2
    assert variance == pytest.approx(expected, rel=1e-9)
    sizes = np.bincount(task)
    assert result.effective_clusters == pytest.approx(sizes.sum() ** 2 / (sizes @ sizes))
    assert result.ran is False and result.unavailable is None  # no check asked for
    cells = cluster_cells(task, a, b, np.ones(len(a)), y, n_agents=4)
    theta = (rating - 1500) / ELO_SCALE
    board = _board_cr1(cells, theta)
    assert not np.allclose(variance, board, rtol=1e-3)


def _board_cr1(cells, theta):
    """The board's task-clustered variance: G/(G − 1) Σ (C A⁻¹ s_g)² (intervals)."""
    n = len(theta)
    mu = 1 / (1 + np.exp(-(theta[cells.i] - theta[cells.j])))
    scores = intervals.cluster_scores(
        cells.cluster, cells.i, cells.j, cells.wins - cells.total * mu,
        n_clusters=cells.clusters, n_agents=n,
    )  # fmt: skip
    h = cells.total * mu * (1 - mu)
    hessian = np.zeros((n, n))
    np.add.at(hessian, (cells.i, cells.i), h), np.add.at(hessian, (cells.j, cells.j), h)
    np.add.at(hessian, (cells.i, cells.j), -h), np.add.at(hessian, (cells.j, cells.i), -h)
    bread = intervals.bread(np.linalg.inv(hessian + 1.0 / n), np.ones(n))
    return intervals.robust_variance(bread, scores)


def test_in_a_round_robin_cr2_is_the_boards_clustered_variance():
    """Every task the same pairs once: each task's information is 1/G of the whole, so
    CR2's correction is exactly the board's G/(G − 1)."""
    rng = np.random.default_rng(9)
    i, j = np.triu_indices(5, 1)
    a, b = np.tile(i, 12), np.tile(j, 12)
    task = np.repeat(np.arange(12), len(i))
    y = rng.choice([0.0, 0.5, 1.0], len(a), p=[0.4, 0.2, 0.4])
    result = rate_games(a, b, y, task, n_candidates=5, replicates=0)
    rating = np.array([c.rating for c in result.candidates])
    half = np.array([c.upper for c in result.candidates]) - rating
    cells = cluster_cells(task, a, b, np.ones(len(a)), y, n_agents=5)
    board = _board_cr1(cells, (rating - 1500) / ELO_SCALE)
    assert half == pytest.approx(intervals.t95(12) * ELO_SCALE * np.sqrt(board), rel=1e-9)
    assert (result.effective_clusters, result.degrees_of_freedom) == (12.0, 11.0)


def test_too_few_effective_tasks():
    # Two tasks, one with nine games and one with one: G* = 100/82 < 2, t would have
    # under one degree of freedom
    a, b = [0] * 10, [1] * 10
    y = [1, 0, 1, 0, 1, 0.5, 1, 0, 1, 0]
    task = [0] * 9 + [1]
    result = rate_games(a, b, y, task, n_candidates=2, replicates=0)
    assert result.effective_clusters == pytest.approx(100 / 82)
    assert (result.unavailable, result.critical_value) == ("too_few_effective_tasks", None)
    assert all(c.rating is not None and c.lower is None for c in result.candidates)
    # A candidate seen in one task only: that task alone decides its rating (leverage 1)
    a, b = [0, 1, 0, 1, 2, 0, 1, 0, 1], [1, 0, 1, 0, 0, 2, 0, 1, 0]
    y = [1, 1, 1, 1, 1, 1, 0.5, 1, 0]
    task = [0, 0, 1, 1, 1, 1, 2, 2, 3]
    result = rate_games(a, b, y, task, n_candidates=3, replicates=0)
    assert result.critical_value is not None
    assert result.unavailable == "too_few_effective_tasks"
    assert all(c.rating is not None and c.lower is None for c in result.candidates)
    # with the check, the resampling sees it first: a resample without task 1 cannot
    # rate the candidate
    checked = rate_games(a, b, y, task, n_candidates=3, replicates=50, seed=1)
    assert (checked.ran, checked.unavailable) == (True, "invalid_replicates")


def test_same_seed_same_bounds_other_seed_other_bounds():
    a, b = [0, 0, 1, 1, 0, 2, 2, 1], [1, 2, 2, 0, 2, 1, 0, 2]
    y, t = [1, 1, 1, 1, 0, 1, 1, 0], [0, 0, 1, 1, 2, 2, 3, 3]
    first = rate_games(a, b, y, t, n_candidates=3, replicates=100, seed=1)
    again = rate_games(a, b, y, t, n_candidates=3, replicates=100, seed=1)
    other = rate_games(a, b, y, t, n_candidates=3, replicates=100, seed=2)
    assert first.candidates == again.candidates
    assert np.array_equal(first.samples, again.samples, equal_nan=True)
    assert not np.array_equal(first.samples, other.samples, equal_nan=True)


@pytest.mark.parametrize(
    ("a", "b", "y", "t", "message"),
    [
        ([0], [0], [1], [0], "distinct"),
        ([0], [2], [1], [0], "in range"),
        ([0], [1], [0.7], [0], "0.5"),
        ([0, 1], [1], [1], [0], "one entry per game"),
    ],
)
def test_bad_games_are_refused(a, b, y, t, message):
    with pytest.raises(ValueError, match=message):
        rate_games(a, b, y, t, n_candidates=2)
