import math

import pytest

from ratings import elo

PARAMS = elo.EloParams(k_max=48, k_min=12, n0=30)


@pytest.mark.parametrize(
    ("n", "k"),
    [(0, 48.0), (30, 30.0), (90, 21.0), (10**12, 12.0)],
)
def test_k_schedule_falls_from_k_max_to_k_min(n, k):
    assert elo.k_factor(n, PARAMS) == pytest.approx(k, abs=1e-6)


@pytest.mark.parametrize(
    ("r_i", "r_j", "expected"),
    [(1000, 1000, 0.5), (1400, 1000, 1 / (1 + 10**-1)), (1000, 1400, 1 / (1 + 10**1))],
)
def test_expected_score(r_i, r_j, expected):
    assert elo.expected(r_i, r_j) == pytest.approx(expected)


def test_win_between_new_equals_moves_both_by_half_k_max():
    # given two new agents at R0, when i wins, then E = ½ and both move by K(0)/2 = 24
    assert elo.update(1000, 1000, 1.0, 0, 0, PARAMS) == (1024.0, 976.0)


def test_tie_moves_the_favourite_down():
    r_i, r_j = elo.update(1200, 1000, 0.5, 30, 30, PARAMS)
    e = 1 / (1 + 10 ** (-200 / 400))
    assert r_i == pytest.approx(1200 + 30 * (0.5 - e))
    assert r_j == pytest.approx(1000 - 30 * (0.5 - e))
    assert r_i < 1200 and r_j > 1000


def test_each_side_uses_its_own_k():
    # the veteran (n=1e9, K=12) loses to the newcomer (n=0, K=48): moves differ
    r_i, r_j = elo.update(1000, 1000, 0.0, 10**9, 0, PARAMS)
    assert r_i == pytest.approx(1000 - 6)
    assert r_j == pytest.approx(1000 + 24)


@pytest.mark.parametrize("y", [-1, 0.3, 2, math.nan])
def test_outcome_must_be_win_tie_or_loss(y):
    with pytest.raises(ValueError, match="outcome"):
        elo.update(1000, 1000, y, 0, 0, PARAMS)
