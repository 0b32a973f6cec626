"""Style control (issue 38, ``ratings.style``): a planted length effect is removed
within its interval while a planted skill effect is kept; features that cannot be
used are dropped with their reason; ties, weights, clusters and centring follow the
board (``bradley_terry.rate``), which it equals when no feature varies; nothing
published is NaN or infinite."""

import numpy as np
import pytest

from ratings import bradley_terry, intervals, style

NAMES = ("length", "markdown")


def arena(*, theta, verbosity, length_effect, battles, seed, ties=0.0, noise=0.3, judges=None):
    """Battles between agents of true strengths ``theta`` whose final messages are
    exp(6 + verbosity + noise) characters long; judges add ``length_effect`` times the
    normalised length difference to the winner's log-odds. Markdown is drawn the same
    for every agent and never matters."""
    rng = np.random.default_rng(seed)
    theta = np.asarray(theta, float)
    verbosity = np.asarray(verbosity, float)
    n = len(theta)
    a = rng.integers(0, n, battles)
    b = (a + rng.integers(1, n, battles)) % n
    la = np.exp(6.0 + verbosity[a] + rng.normal(0.0, noise, battles))
    lb = np.exp(6.0 + verbosity[b] + rng.normal(0.0, noise, battles))
    d = (la - lb) / (la + lb)
    mu = 1.0 / (1.0 + np.exp(-(theta[a] - theta[b] + length_effect * d)))
    p_tie = 4.0 * ties * mu * (1.0 - mu)
    tie = rng.random(battles) < p_tie
    won = rng.random(battles) < (mu - p_tie / 2.0) / np.maximum(1.0 - p_tie, 1e-12)
    y = np.where(tie, 0.5, won.astype(float))
    md_a = rng.poisson(3.0, battles).astype(float)
    md_b = rng.poisson(3.0, battles).astype(float)
    cluster = None if judges is None else rng.integers(0, judges, battles)
    return a, b, y, np.c_[la, md_a], np.c_[lb, md_b], cluster


def plain(a, b, y, n, **kwargs):
    fit = bradley_terry.rate(a, b, y, n_agents=n, r0=1500.0, **kwargs)
    rating = np.array([e.rating for e in fit.agents], float)
    lower = np.array([e.lower for e in fit.agents], float)
    upper = np.array([e.upper for e in fit.agents], float)
    return rating, lower, upper, fit


def elo(theta):
    theta = np.asarray(theta, float)
    return 1500.0 + intervals.ELO_SCALE * (theta - theta.mean())


# Agents 0 and 1 are equally strong, 1 writes e² ≈ 7× longer messages and judges like
# length; 2 is stronger than both and writes like 0; 3 is weaker and writes like 0.
THETA = [0.0, 0.0, 0.7, -0.7]
VERBOSE = [0.0, 2.0, 0.0, 0.0]
EFFECT = 2.0


ARENAS = 40  # seeded arenas: one arena's four intervals all cover only ~80 % of the time


@pytest.fixture(scope="module")
def planted():
    """(plain fit, style-controlled fit) of ``ARENAS`` seeded arenas."""
    out = []
    for seed in range(38, 38 + ARENAS):
        a, b, y, fa, fb, _ = arena(
            theta=THETA, verbosity=VERBOSE, length_effect=EFFECT, battles=3000, seed=seed, ties=0.3
        )
        fit = style.style_rate(a, b, y, n_agents=4, features_a=fa, features_b=fb, names=NAMES)
        out.append((plain(a, b, y, 4), fit))
    return out


def test_a_planted_length_effect_moves_the_plain_rating(planted):
    truth = elo(THETA)
    for (rating, lower, _, _), _ in planted:
        # the verbose agent is rated far above its equal, beyond its plain interval
        assert rating[1] - rating[0] > 100
        assert lower[1] > truth[1]


def test_style_control_removes_the_length_effect_within_its_intervals(planted):
    truth = elo(THETA)
    covered = coef_covered = markdown_covered = 0
    gap = []
    for _, fit in planted:
        assert fit.names == NAMES and fit.dropped == {}
        assert fit.interval == "battle" and fit.converged
        covered += int(np.sum((fit.lower <= truth) & (truth <= fit.upper)))
        planted_coef = intervals.ELO_SCALE * EFFECT * fit.scale[0]
        coef_covered += int(fit.coef_lower[0] <= planted_coef <= fit.coef_upper[0])
        # markdown never mattered: its interval holds 0
        markdown_covered += int(fit.coef_lower[1] <= 0.0 <= fit.coef_upper[1])
        gap.append(fit.rating[1] - fit.rating[0])
    assert covered >= 0.9 * 4 * ARENAS, covered
    assert coef_covered >= 0.85 * ARENAS, coef_covered
    assert markdown_covered >= 0.85 * ARENAS, markdown_covered
    # the verbose agent's edge over its equal is gone: about 0 on average (its sd over
    # arenas is about 17 Elo, so the mean's is about 3)
    assert abs(np.mean(gap)) < 10, np.mean(gap)


def test_style_control_keeps_a_planted_skill_effect(planted):
    for _, fit in planted:
        # skill order kept: 2 (strong) above 0 and 1 (equal) above 3 (weak), all clearly
        assert fit.rating[2] > max(fit.rating[0], fit.rating[1])
        assert min(fit.rating[0], fit.rating[1]) > fit.rating[3]
        # and clearly for the agents whose style does not vary with their identity
        assert fit.lower[2] > fit.upper[0] and fit.lower[0] > fit.upper[3]


def test_without_a_style_effect_the_verbose_agent_keeps_its_rating():
    a, b, y, fa, fb, _ = arena(
        theta=THETA, verbosity=VERBOSE, length_effect=0.0, battles=6000, seed=7, ties=0.3
    )
    fit = style.style_rate(a, b, y, n_agents=4, features_a=fa, features_b=fb, names=NAMES)
    rating, *_ = plain(a, b, y, 4)
    assert fit.coef_lower[0] <= 0.0 <= fit.coef_upper[0]
    assert np.max(np.abs(fit.rating - rating)) < 25


def test_constant_and_unmeasured_features_are_dropped_with_their_reason():
    a, b, y, fa, fb, _ = arena(
        theta=THETA, verbosity=VERBOSE, length_effect=EFFECT, battles=2000, seed=3
    )
    n = len(a)
    same = np.full(n, 5.0)
    features_a = np.c_[fa[:, 0], same, 2.0 * fa[:, 0], np.full(n, np.nan), np.zeros(n)]
    features_b = np.c_[fb[:, 0], same, fa[:, 0], np.full(n, np.nan), np.zeros(n)]
    names = ("length", "equal", "double", "diff_size", "files")
    fit = style.style_rate(a, b, y, n_agents=4, features_a=features_a, features_b=features_b,
                           names=names)  # fmt: skip
    assert fit.names == ("length",)
    assert fit.dropped == {
        "equal": style.CONSTANT,
        "double": style.CONSTANT,  # always a third in a's favour: the side listed first
        "diff_size": style.NOT_MEASURED,
        "files": style.CONSTANT,  # 0 against 0 everywhere
    }
    only = style.style_rate(
        a, b, y, n_agents=4, features_a=fa[:, :1], features_b=fb[:, :1], names=("length",)
    )
    np.testing.assert_allclose(fit.rating, only.rating, atol=1e-9)
    np.testing.assert_allclose(fit.coef, only.coef, atol=1e-9)
    assert len(fit.coef) == len(fit.coef_lower) == len(fit.coef_upper) == len(fit.scale) == 1


def test_a_feature_unknown_for_one_side_counts_as_no_difference():
    d = np.array([[0.5], [np.nan], [-0.5], [0.0]])
    z, kept, scale, dropped = style.standardise(d, ("diff_size",))
    assert kept == ("diff_size",) and dropped == {}
    known = np.array([0.5, -0.5, 0.0])
    assert scale[0] == pytest.approx(np.std(known))
    np.testing.assert_allclose(z[:, 0], [0.5 / scale[0], 0.0, -0.5 / scale[0], 0.0])
    np.testing.assert_allclose(
        style.differences([[3.0, np.nan, 0.0]], [[1.0, 4.0, 0.0]]), [[0.5, np.nan, 0.0]]
    )


def test_bad_features_are_refused():
    a, b, y = np.array([0, 1]), np.array([1, 0]), np.array([1.0, 0.0])
    good = np.ones((2, 1))
    with pytest.raises(ValueError, match="non-negative"):
        style.style_rate(a, b, y, n_agents=2, features_a=-good, features_b=good, names=("x",))
    with pytest.raises(ValueError, match="finite"):
        style.style_rate(a, b, y, n_agents=2, features_a=good * np.inf, features_b=good,
                         names=("x",))  # fmt: skip
    with pytest.raises(ValueError, match="one column per name"):
        style.style_rate(a, b, y, n_agents=2, features_a=good, features_b=good)


def test_ties_count_as_half_wins_and_weights_as_evidence():
    a, b, y, fa, fb, _ = arena(
        theta=THETA, verbosity=VERBOSE, length_effect=EFFECT, battles=1500, seed=5, ties=0.4
    )
    rng = np.random.default_rng(1)
    w = rng.choice([0.5, 1.0, 2.0], len(a))
    fit = style.style_rate(a, b, y, n_agents=4, w=w, features_a=fa, features_b=fb, names=NAMES)
    tie = y == 0.5
    assert tie.mean() > 0.1
    # every tie as a win and a loss of half its weight: the same likelihood
    a2 = np.r_[a[~tie], a[tie], a[tie]]
    b2 = np.r_[b[~tie], b[tie], b[tie]]
    y2 = np.r_[y[~tie], np.ones(tie.sum()), np.zeros(tie.sum())]
    w2 = np.r_[w[~tie], w[tie] / 2, w[tie] / 2]
    fa2, fb2 = (np.r_[f[~tie], f[tie], f[tie]] for f in (fa, fb))
    split = style.style_rate(a2, b2, y2, n_agents=4, w=w2, features_a=fa2, features_b=fb2,
                             names=NAMES)  # fmt: skip
    np.testing.assert_allclose(split.rating, fit.rating, atol=1e-7)
    np.testing.assert_allclose(split.coef, fit.coef, atol=1e-7)
    # a weight of 2 is the battle listed twice (point estimate)
    twice = w == 2.0
    a3, b3, y3 = (np.r_[v, v[twice]] for v in (a, b, y))
    fa3, fb3 = (np.r_[f, f[twice]] for f in (fa, fb))
    w3 = np.r_[np.where(twice, 1.0, w), np.ones(twice.sum())]
    listed = style.style_rate(a3, b3, y3, n_agents=4, w=w3, features_a=fa3, features_b=fb3,
                              names=NAMES)  # fmt: skip
    np.testing.assert_allclose(listed.rating, fit.rating, atol=1e-7)
    np.testing.assert_allclose(listed.coef, fit.coef, atol=1e-7)


def test_which_side_is_listed_first_changes_nothing():
    # the differences are antisymmetric and not centred: listing the longer message
    # first in every battle, or in a random half of them, gives the same board
    a, b, y, fa, fb, _ = arena(
        theta=THETA, verbosity=VERBOSE, length_effect=EFFECT, battles=1500, seed=11, ties=0.3
    )

    def listed(first):
        return (
            np.where(first, a, b),
            np.where(first, b, a),
            np.where(first, y, 1.0 - y),
            np.where(first[:, None], fa, fb),
            np.where(first[:, None], fb, fa),
        )

    longer = fa[:, 0] >= fb[:, 0]
    coin = np.random.default_rng(0).random(len(a)) < 0.5
    fits = [
        style.style_rate(a_, b_, y_, n_agents=4, features_a=fa_, features_b=fb_, names=NAMES)
        for a_, b_, y_, fa_, fb_ in (listed(longer), listed(~longer), listed(coin))
    ]
    for other in fits[1:]:
        for field in ("rating", "lower", "upper", "coef", "coef_lower", "coef_upper"):
            np.testing.assert_allclose(getattr(other, field), getattr(fits[0], field), atol=1e-7)


@pytest.mark.parametrize("judges", [None, 3, 40])
def test_without_varying_features_it_is_the_plain_board(judges):
    a, b, y, _, _, cluster = arena(
        theta=[0.3, -0.2, 0.5, -0.6, 0.0], verbosity=[0.0] * 5, length_effect=0.0,
        battles=900, seed=2, ties=0.4, judges=judges,
    )  # fmt: skip
    w = np.random.default_rng(4).choice([0.25, 1.0], len(a))
    reference = np.array([True, True, False, False, True])
    flat = np.ones((len(a), 2))
    fit = style.style_rate(a, b, y, n_agents=5, w=w, cluster=cluster, reference=reference,
                           features_a=flat, features_b=flat, names=NAMES)  # fmt: skip
    rating, lower, upper, board = plain(a, b, y, 5, w=w, cluster=cluster, reference=reference)
    assert fit.names == () and set(fit.dropped) == set(NAMES)
    assert fit.interval == board.interval
    assert fit.interval == ("clustered" if judges == 40 else "battle")
    assert fit.critical_value == pytest.approx(board.critical_value)
    np.testing.assert_allclose(fit.rating, rating, atol=1e-7)
    np.testing.assert_allclose(fit.lower, lower, atol=1e-7)
    np.testing.assert_allclose(fit.upper, upper, atol=1e-7)


def test_clustered_intervals_need_a_cluster_per_free_parameter():
    a, b, y, fa, fb, cluster = arena(
        theta=THETA, verbosity=VERBOSE, length_effect=EFFECT, battles=3000, seed=9, judges=5
    )
    battle = style.style_rate(a, b, y, n_agents=4, features_a=fa, features_b=fb, names=NAMES)
    # 5 judges ≥ 4 agents, but < m + k = 6 parameters: battle-level
    few = style.style_rate(a, b, y, n_agents=4, features_a=fa, features_b=fb, names=NAMES,
                           cluster=cluster)  # fmt: skip
    assert few.interval == "battle" and few.clusters == 5
    np.testing.assert_allclose(few.upper, battle.upper)
    many = np.random.default_rng(0).integers(0, 30, len(a))
    clustered = style.style_rate(a, b, y, n_agents=4, features_a=fa, features_b=fb,
                                 names=NAMES, cluster=many)  # fmt: skip
    assert clustered.interval == "clustered" and clustered.clusters == 30
    assert clustered.critical_value == pytest.approx(intervals.t95(clustered.effective_clusters))
    assert clustered.critical_value > intervals.Z95
    np.testing.assert_allclose(clustered.rating, battle.rating)
    # never narrower than the battle-level interval
    ratio = 1.0  # intervals.publish floors at the battle-level half-width
    assert np.all(
        clustered.upper - clustered.rating >= (battle.upper - battle.rating) * ratio - 1e-9
    )
    assert np.all(
        clustered.coef_upper - clustered.coef >= (battle.coef_upper - battle.coef) * ratio - 1e-9
    )


def test_judges_who_like_length_widen_the_clustered_coefficient_interval():
    # half the judges like length a lot, half not at all: the coefficient varies by
    # judge, which the clustered interval sees and the battle-level one does not
    rng = np.random.default_rng(21)
    parts = [
        arena(theta=THETA, verbosity=VERBOSE, length_effect=e, battles=150, seed=100 + g)
        for g, e in enumerate([0.0, 4.0] * 20)
    ]
    a, b, y, fa, fb = (np.concatenate([p[k] for p in parts]) for k in range(5))
    judge = np.repeat(np.arange(40), 150)
    order = rng.permutation(len(a))
    a, b, y, fa, fb, judge = a[order], b[order], y[order], fa[order], fb[order], judge[order]
    battle = style.style_rate(a, b, y, n_agents=4, features_a=fa, features_b=fb, names=NAMES)
    clustered = style.style_rate(a, b, y, n_agents=4, features_a=fa, features_b=fb,
                                 names=NAMES, cluster=judge)  # fmt: skip
    assert clustered.interval == "clustered" and clustered.floored < 6
    wide = (clustered.coef_upper[0] - clustered.coef[0]) / (battle.coef_upper[0] - battle.coef[0])
    assert wide > 1.3


def test_published_values_are_finite_and_unrated_agents_nan():
    # agent 3 never wins (separated), agent 4 never plays
    a = np.array([0, 1, 2, 0, 1, 2, 3, 3, 0, 1])
    b = np.array([1, 2, 0, 2, 0, 1, 0, 1, 1, 2])
    y = np.array([1, 1, 1, 0, 0.5, 0, 0, 0, 0, 1])
    fa = np.array([[3.0], [1], [2], [5], [1], [0], [2], [2], [1], [4]])
    fb = np.array([[1.0], [2], [2], [1], [3], [1], [2], [1], [0], [1]])
    fit = style.style_rate(a, b, y, n_agents=5, features_a=fa, features_b=fb, names=("length",))
    assert fit.fitted_agents == 3 and fit.n_battles == 8
    assert np.isnan(fit.rating[3:]).all() and np.isnan(fit.lower[3:]).all()
    for values in (fit.rating[:3], fit.lower[:3], fit.upper[:3], fit.coef, fit.coef_lower,
                   fit.coef_upper, fit.scale):  # fmt: skip
        assert np.isfinite(values).all()
    assert np.mean(fit.rating[:3]) == pytest.approx(1500.0)
    # too few battles for the HC1 factor (3 battles, 3 free parameters): no interval
    # (NaN), never an infinite one
    tiny = style.style_rate(a[:3], b[:3], y[:3], n_agents=5, features_a=fa[:3],
                            features_b=fb[:3], names=("length",))  # fmt: skip
    assert tiny.fitted_agents == 3 and tiny.names == ("length",)
    assert np.isfinite(tiny.rating[:3]).all() and np.isfinite(tiny.coef).all()
    assert np.isnan(np.r_[tiny.lower, tiny.upper, tiny.coef_lower, tiny.coef_upper]).all()
    # nobody connected: everything NaN, every feature dropped with a reason
    none = style.style_rate(a[:1], b[:1], y[:1], n_agents=5, features_a=fa[:1],
                            features_b=fb[:1], names=("length",))  # fmt: skip
    assert np.isnan(none.rating).all() and none.dropped == {"length": style.NO_BATTLES}
