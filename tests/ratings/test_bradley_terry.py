"""The batch refit (SPEC §7.2) against two independent references, choix and
scikit-learn, plus the aggregation, weighting, centring and input rules."""

import math

import choix
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from ratings import bradley_terry, cells
from ratings.bradley_terry import rate

SCALE = 400 / math.log(10)
TRUE_ELO_5 = np.array([1139.7, 1049.5, 1000.0, 950.0, 860.8])


def battles(n_agents: int, n: int, seed: int, *, ties: float = 0.0, spread: float = 1.0):
    """Seeded random battles from the Bradley-Terry model, a share ``ties`` drawn as ½."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, spread, n_agents)
    a = rng.integers(0, n_agents, n)
    b = (a + rng.integers(1, n_agents, n)) % n_agents
    y = (rng.random(n) < 1 / (1 + np.exp(-(theta[a] - theta[b])))).astype(float)
    y[rng.random(n) < ties] = 0.5
    return a, b, y


def centred_elo(theta: np.ndarray) -> np.ndarray:
    return 1000 + SCALE * (theta - theta.mean())


def ratings_of(result) -> np.ndarray:
    return np.array([e.rating for e in result.agents])


@pytest.mark.parametrize("ridge", [1e-3, 0.5])
def test_agrees_with_choix_to_a_millionth_of_an_elo_point(ridge):
    # given wins and ties; choix has no ties or weights, so every win enters twice and
    # every tie once each way: that doubles the log-likelihood, and choix's objective
    # −ℓ + α‖θ‖² then matches ours, −ℓ + (r/2)‖θ‖², at α = r
    a, b, y = battles(6, 400, seed=1, ties=0.2)
    data = []
    for i, j, outcome in zip(a.tolist(), b.tolist(), y.tolist(), strict=True):
        if outcome == 1:
            data += [(i, j), (i, j)]
        elif outcome == 0:
            data += [(j, i), (j, i)]
        else:
            data += [(i, j), (j, i)]
    reference = choix.opt_pairwise(6, data, alpha=ridge, method="Newton-CG", tol=1e-14)

    ours = rate(a, b, y, n_agents=6, ridge=ridge)

    assert ours.converged
    np.testing.assert_allclose(ratings_of(ours), centred_elo(reference), rtol=0, atol=1e-6)


def test_agrees_with_weighted_logistic_regression_to_a_millionth_of_an_elo_point():
    # given weighted battles with ties: the design row is x_b = e_a − e_b, no intercept,
    # C = 1/r; a tie becomes one win each way at half the weight
    a, b, y = battles(8, 600, seed=2, ties=0.15)
    w = np.random.default_rng(3).uniform(0.1, 1.0, len(a))
    rows, labels, weights = [], [], []
    for i, j, outcome, weight in zip(a, b, y, w, strict=True):
        x = np.zeros(8)
        x[i], x[j] = 1.0, -1.0
        for label, share in ((1, outcome), (0, 1 - outcome)):
            if share:
                rows.append(x)
                labels.append(label)
                weights.append(weight * share)
    ridge = 1e-3
    model = LogisticRegression(
        C=1 / ridge, fit_intercept=False, solver="newton-cholesky", tol=1e-12, max_iter=1000
    )
    model.fit(np.array(rows), np.array(labels), sample_weight=np.array(weights))

    ours = rate(a, b, y, n_agents=8, w=w, ridge=ridge)

    np.testing.assert_allclose(ratings_of(ours), centred_elo(model.coef_[0]), rtol=0, atol=1e-6)


def test_five_agent_case_converges_from_zero_within_eight_newton_iterations():
    # SPEC §9: 5 agents, Newton from θ = 0, r = 1e−3, ≤ 8 iterations
    rng = np.random.default_rng(5)
    theta = (TRUE_ELO_5 - 1000) / SCALE
    for n in (100, 300, 600, 5000):
        a = rng.integers(0, 5, n)
        b = (a + rng.integers(1, 5, n)) % 5
        y = (rng.random(n) < 1 / (1 + np.exp(-(theta[a] - theta[b])))).astype(float)
        result = rate(a, b, y, n_agents=5)
        assert result.converged
        assert result.iterations <= 8, (n, result.iterations)


def test_newton_stops_at_the_penalised_optimum():
    a, b, y = battles(5, 300, seed=6, ties=0.1)
    pairs = bradley_terry.aggregate(a, b, y, np.ones(len(a)), n_agents=5)
    fit = bradley_terry.newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=5)
    g = bradley_terry.gradient(pairs.i, pairs.j, pairs.total, pairs.wins, fit.theta, 1e-3)
    assert np.max(np.abs(g)) < 1e-9
    # one more step moves no coordinate by more than the tolerance
    again = bradley_terry.newton(
        pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=5, theta0=fit.theta
    )
    assert again.iterations == 1
    assert np.max(np.abs(again.theta - fit.theta)) <= 1e-10


def test_aggregation_matches_a_per_battle_loop():
    a, b, y = battles(7, 500, seed=7, ties=0.2)
    w = np.random.default_rng(8).uniform(0, 2, len(a))

    pairs = bradley_terry.aggregate(a, b, y, w, n_agents=7)

    expected: dict[tuple[int, int], list[float]] = {}
    for i, j, outcome, weight in zip(a, b, y, w, strict=True):
        lo, hi, y_lo = (i, j, outcome) if i < j else (j, i, 1 - outcome)
        row = expected.setdefault((int(lo), int(hi)), [0.0, 0.0, 0])
        row[0] += weight
        row[1] += weight * y_lo
        row[2] += 1
    got = {
        (int(i), int(j)): [t, s, int(c)]
        for i, j, t, s, c in zip(
            pairs.i, pairs.j, pairs.total, pairs.wins, pairs.battles, strict=True
        )
    }
    assert got.keys() == expected.keys()
    for key, (total, wins, count) in expected.items():
        assert got[key][0] == pytest.approx(total)
        assert got[key][1] == pytest.approx(wins)
        assert got[key][2] == count


def test_sorted_pair_path_equals_the_dense_table(monkeypatch):
    a, b, y = battles(9, 700, seed=9, ties=0.1)
    dense = rate(a, b, y, n_agents=9, cluster=np.arange(len(a)) % 11, bootstrap=20, seed=1)
    monkeypatch.setattr(cells, "DENSE_TABLE", 0)
    sparse = rate(a, b, y, n_agents=9, cluster=np.arange(len(a)) % 11, bootstrap=20, seed=1)
    assert sparse == dense


def test_side_order_does_not_matter():
    a, b, y = battles(5, 300, seed=10, ties=0.2)
    flipped = rate(b, a, 1 - y, n_agents=5)
    np.testing.assert_allclose(ratings_of(flipped), ratings_of(rate(a, b, y, n_agents=5)))


def test_weights_matter():
    a, b, y = battles(5, 300, seed=11)
    base = rate(a, b, y, n_agents=5)

    # weight 2 is the same evidence as the battle played twice
    w = np.ones(len(a))
    w[:50] = 2.0
    doubled = rate(a, b, y, n_agents=5, w=w)
    repeated = rate(
        np.concatenate([a, a[:50]]), np.concatenate([b, b[:50]]),
        np.concatenate([y, y[:50]]), n_agents=5,
    )  # fmt: skip
    np.testing.assert_allclose(ratings_of(doubled), ratings_of(repeated), atol=1e-9)
    assert np.max(np.abs(ratings_of(doubled) - ratings_of(base))) > 1

    # weight 0 is no evidence: the same fit as without those battles
    w = np.ones(len(a))
    w[:50] = 0.0
    zeroed = rate(a, b, y, n_agents=5, w=w)
    dropped = rate(a[50:], b[50:], y[50:], n_agents=5)
    np.testing.assert_allclose(ratings_of(zeroed), ratings_of(dropped), atol=1e-9)
    assert zeroed.agents[0].battles == base.agents[0].battles  # battles still counted

    # a calibration-like down-weight (γ = 0.25) of agent 0's wins lowers agent 0
    w = np.where((a == 0) & (y == 1), 0.25, 1.0)
    assert rate(a, b, y, n_agents=5, w=w).agents[0].rating < base.agents[0].rating


def test_centres_on_the_reference_agents_mean():
    a, b, y = battles(6, 500, seed=12)
    everyone = rate(a, b, y, n_agents=6)
    assert np.mean(ratings_of(everyone)) == pytest.approx(1000, abs=1e-9)

    reference = np.array([True, True, False, False, True, False])
    some = rate(a, b, y, n_agents=6, reference=reference, r0=1500)
    assert np.mean(ratings_of(some)[reference]) == pytest.approx(1500, abs=1e-9)
    # centring is a translation: every gap is unchanged
    np.testing.assert_allclose(np.diff(ratings_of(some)), np.diff(ratings_of(everyone)), atol=1e-9)
    assert some.reference_agents == 3


def test_no_reference_agent_in_the_fit_falls_back_to_all_fitted():
    a, b, y = battles(4, 200, seed=13)
    nobody = rate(a, b, y, n_agents=4, reference=np.zeros(4, dtype=bool))
    assert nobody.reference_agents == 4
    np.testing.assert_allclose(ratings_of(nobody), ratings_of(rate(a, b, y, n_agents=4)))


def test_a_cycle_of_equal_records_rates_everyone_at_r0():
    # 0 beats 1 beats 2 beats 0, twice each, plus a tie between 0 and 2
    a = np.array([0, 0, 1, 1, 2, 2, 0])
    b = np.array([1, 1, 2, 2, 0, 0, 2])
    y = np.array([1, 1, 1, 1, 1, 1, 0.5])
    np.testing.assert_allclose(ratings_of(rate(a, b, y, n_agents=3)), 1000, atol=1e-9)


def test_the_stronger_record_rates_higher():
    # as above, and 3 beats each of them twice while losing once to 0
    a = np.array([0, 0, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3, 0])
    b = np.array([1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 2, 2, 3])
    r = ratings_of(rate(a, b, np.ones(13), n_agents=4))
    assert r[3] > r[0] > r[1]
    assert r[3] - r[2] > 200


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"a": [0, 1], "b": [1]}, "same length"),
        ({"a": [0.0], "b": [1.0]}, "integer"),
        ({"a": [0], "b": [3]}, "0..2"),
        ({"a": [-1], "b": [1]}, "0..2"),
        ({"a": [1], "b": [1]}, "against itself"),
        ({"y": [0.3]}, "1, 0.5 or 0"),
        ({"y": [math.nan]}, "1, 0.5 or 0"),
        ({"w": [-1.0]}, "non-negative"),
        ({"w": [math.inf]}, "finite"),
        ({"w": [1.0, 1.0]}, "one weight per battle"),
        ({"cluster": [1, 2]}, "one id per battle"),
        ({"reference": [True]}, "mask over the agents"),
    ],
)
def test_bad_input_is_refused(kwargs, message):
    args = {"a": [0], "b": [1], "y": [1.0]} | kwargs
    a, b, y = (np.array(args.pop(k)) for k in ("a", "b", "y"))
    extra = {k: np.array(v) for k, v in args.items()}
    with pytest.raises(ValueError, match=message):
        rate(a, b, y, n_agents=3, **extra)


@pytest.mark.parametrize("ridge", [1e-12, 0.0])
def test_a_tiny_or_zero_ridge_converges_on_identified_data(ridge):
    # Newton on the differences: the unidentified common shift (eigenvalue r) neither
    # stops the iteration nor blows up; the fit agrees with the default ridge's to
    # within what the ridge itself moves
    a, b, y = battles(6, 800, seed=21, ties=0.2)
    fit = rate(a, b, y, n_agents=6, ridge=ridge)
    assert fit.converged and fit.iterations < 20
    default = rate(a, b, y, n_agents=6)
    np.testing.assert_allclose(ratings_of(fit), ratings_of(default), atol=0.5)
    assert all(e.model_halfwidth > 0 for e in fit.agents)


def test_ridge_zero_is_the_unpenalised_mle_where_the_gradient_vanishes():
    a, b, y = battles(5, 600, seed=22)
    pairs = bradley_terry.aggregate(a, b, y, np.ones(len(a)), n_agents=5)
    fit = bradley_terry.newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=5, ridge=0.0)
    g = bradley_terry.gradient(pairs.i, pairs.j, pairs.total, pairs.wins, fit.theta, 0.0)
    assert fit.converged and np.max(np.abs(g)) < 1e-8
    assert abs(fit.theta.mean()) < 1e-12


def test_a_negative_or_non_finite_ridge_is_refused():
    a, b, y = battles(3, 30, seed=23)
    for ridge in (-1e-3, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ridge"):
            rate(a, b, y, n_agents=3, ridge=ridge)
