"""Ratings of judged games with the task-clustered percentile bootstrap (003 "Ratings",
ratings.task_bootstrap): exact maximum-likelihood values, every unavailability reason,
and bounds that are the type-7 quantiles of replicates derived here in closed form."""

import math

import numpy as np
import pytest

from ratings import task_bootstrap
from ratings.bradley_terry import Fit, newton
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


def test_bounds_are_type7_quantiles_of_task_resamples():
    # Per task (a's wins, b's wins) — every resample keeps both sides winning somewhere.
    per_task = [(2, 1), (1, 1), (3, 1), (1, 2)]
    games = [(t, 1.0) for t, (wa, _) in enumerate(per_task) for _ in range(wa)]
    games += [(t, 0.0) for t, (_, wb) in enumerate(per_task) for _ in range(wb)]
    task, y = zip(*games, strict=True)
    result = rate_games(
        [0] * len(y), [1] * len(y), y, task, n_candidates=2, replicates=300, seed=11
    )
    rng = np.random.default_rng(11)
    replicate_a = []
    for _ in range(300):
        times = rng.multinomial(4, [0.25] * 4)
        wa = sum(k * w for k, (w, _) in zip(times, per_task, strict=True))
        wb = sum(k * w for k, (_, w) in zip(times, per_task, strict=True))
        replicate_a.append(two(wa, wb)[0])
    lower, upper = np.quantile(replicate_a, [0.025, 0.975], method="linear")
    a = result.candidates[0]
    assert a.rating == pytest.approx(two(7, 5)[0])
    assert (a.lower, a.upper) == (pytest.approx(lower, abs=1e-6), pytest.approx(upper, abs=1e-6))
    assert (result.ran, result.valid, result.unavailable, result.clusters) == (True, 300, None, 4)
    assert result.candidates[1].lower == pytest.approx(3000 - upper, abs=1e-6)


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
