"""The intervals of SPEC §7.3 as revised (docs/intervals.md): the parity bound of the
information-based interval, the battle-level and the judge-clustered sandwiches written
out battle by battle, t(G − 1) critical values with the effective number of judges, the
floor, and the G ≥ m rule. Coverage is measured in tests/ratings/test_coverage.py."""

import math

import numpy as np
import pytest
from scipy import stats

from ratings import intervals
from ratings.bradley_terry import aggregate, neg_hessian, newton, rate

SCALE = 400 / math.log(10)


def parity(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Agents 0 and 1 after n games, n/2 wins each."""
    return np.zeros(n, dtype=int), np.ones(n, dtype=int), np.arange(n) % 2 * 1.0


@pytest.mark.parametrize(("n", "bound"), [(100, 68.1), (1000, 21.5), (400, 34.0)])
def test_parity_half_width_is_681_over_root_n(n, bound):
    # SPEC §7.3: two agents at parity after n games, 95% half-width ≈ 681/√n Elo (68 at
    # 100, 22 at 1,000) for one agent measured against the other (the other is the
    # reference); the tiny ridge makes it a hair smaller than the unpenalised bound
    a, b, y = parity(n)
    anchored = rate(a, b, y, n_agents=2, reference=np.array([False, True])).agents[0]
    info = anchored.information_halfwidth
    assert info == pytest.approx(681.0 / math.sqrt(n), rel=2e-3)
    assert info == pytest.approx(bound, abs=0.5)
    assert info <= 1.96 * SCALE * 2 / math.sqrt(n)
    # binary votes at μ = ½ vary by exactly ¼ each, so the board's measured share of
    # Bernoulli variance is 1 and the imaginary battle, one of the pair's n + 1, changes
    # nothing: the battle-level sandwich is the same variance times n/(n − 1) (HC1)
    assert anchored.model_halfwidth == pytest.approx(info * math.sqrt(n / (n - 1)), rel=1e-4)
    # centred on both, each agent carries half of the gap's uncertainty
    both = rate(a, b, y, n_agents=2).agents[0]
    assert both.model_halfwidth == pytest.approx(anchored.model_halfwidth / 2, rel=1e-9)


def test_parity_is_the_narrowest_case_and_ties_count_for_what_they_vary():
    # p(1 − p) is largest at ½: any imbalance widens the interval after the same n games
    n = 100
    a, b = np.zeros(n, dtype=int), np.ones(n, dtype=int)
    reference = np.array([False, True])
    widths = [
        rate(a, b, (np.arange(n) < wins) * 1.0, n_agents=2, reference=reference)
        .agents[0]
        .information_halfwidth
        for wins in (50, 60, 70, 90)
    ]
    assert widths == sorted(widths)
    assert widths[0] >= 681 / math.sqrt(n) * 0.999
    # the information-based interval counts a tie as a Bernoulli draw: as wide as 50/50
    ties = rate(a, b, np.full(n, 0.5), n_agents=2, reference=reference).agents[0]
    assert ties.information_halfwidth == pytest.approx(widths[0], rel=1e-9)
    # the battle-level one sees that ties at parity hardly vary: only the rule of
    # three's imaginary coin flips are left (φ = 3/(n + 3), the imaginary battle one of
    # n + 1 at that share), so it is far narrower — not zero
    phi = 3 / (n + 3)
    assert ties.model_halfwidth == pytest.approx(
        widths[0] * math.sqrt(phi / (n + 1) * n / (n - 1)), rel=1e-4
    )
    assert ties.model_halfwidth > 0
    # half ties, half decisive at parity: the variance of y is (½·¼) → √½ of the width
    half = rate(a, b, np.where(np.arange(n) % 2, 0.5, np.arange(n) % 4 / 2), n_agents=2,
                reference=reference).agents[0]  # fmt: skip
    assert half.model_halfwidth < 0.8 * half.information_halfwidth


def test_information_covariance_is_c_h_inverse_c_transposed():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 4, 200)
    b = (a + rng.integers(1, 4, 200)) % 4
    y = rng.integers(0, 2, 200) * 1.0
    reference = np.array([True, False, True, True])
    result = rate(a, b, y, n_agents=4, reference=reference)

    pairs = aggregate(a, b, y, np.ones(200), n_agents=4)
    theta = newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=4).theta
    # H written out battle by battle, C written out row by row
    h = 1e-3 * np.eye(4)
    for i, j in zip(a, b, strict=True):
        x = np.zeros(4)
        x[i], x[j] = 1, -1
        mu = 1 / (1 + math.exp(-(theta[i] - theta[j])))
        h += mu * (1 - mu) * np.outer(x, x)
    c = np.array([[float(r == k) - (reference[k] / 3) for k in range(4)] for r in range(4)])
    sigma = c @ np.linalg.inv(h) @ c.T
    expected = 1.96 * SCALE * np.sqrt(np.diag(sigma))
    got = [e.information_halfwidth for e in result.agents]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(neg_hessian(pairs.i, pairs.j, pairs.total, theta, 1e-3), h)


def test_battle_level_sandwich_written_out_battle_by_battle():
    rng = np.random.default_rng(14)
    n, m = 400, 4
    a = rng.integers(0, m, n)
    b = (a + rng.integers(1, m, n)) % m
    y = rng.choice([0.0, 0.5, 1.0], n, p=[0.3, 0.4, 0.3])
    w = rng.choice([0.25, 0.5, 1.0], n)
    result = rate(a, b, y, n_agents=m, w=w)

    pairs = aggregate(a, b, y, w, n_agents=m)
    theta = newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=m).theta
    h_inv = np.linalg.inv(neg_hessian(pairs.i, pairs.j, pairs.total, theta, 1e-3))
    spread: dict[tuple[int, int], float] = {}
    coin: dict[tuple[int, int], float] = {}  # Σ w² μ(1 − μ): as if every vote were a coin flip
    count: dict[tuple[int, int], int] = {}
    for i, j, outcome, weight in zip(a, b, y, w, strict=True):
        mu = 1 / (1 + math.exp(-(theta[i] - theta[j])))
        key = (min(i, j), max(i, j))
        spread[key] = spread.get(key, 0.0) + weight**2 * (outcome - mu) ** 2
        coin[key] = coin.get(key, 0.0) + weight**2 * mu * (1 - mu)
        count[key] = count.get(key, 0) + 1
    # the board's share of Bernoulli variance, with three imaginary coin flips
    mean_coin = sum(coin.values()) / n
    phi = (sum(spread.values()) + 3 * mean_coin) / (sum(coin.values()) + 3 * mean_coin)
    assert 0.3 < phi < 0.9  # 40% ties: well below a coin flip's variance
    meat = np.zeros((m, m))
    for (i, j), k in count.items():  # one imaginary battle among the pair's own
        x = np.zeros(m)
        x[i], x[j] = 1, -1
        pair = k / (k + 1) * (spread[(i, j)] + phi * coin[(i, j)] / k)
        meat += pair * np.outer(x, x)
    c = np.eye(m) - 1 / m
    v = n / (n - (m - 1)) * c @ h_inv @ meat @ h_inv @ c.T
    expected = 1.96 * SCALE * np.sqrt(np.diag(v))
    np.testing.assert_allclose([e.model_halfwidth for e in result.agents], expected, rtol=1e-6)
    assert result.interval == "battle" and not result.robust_published
    for e in result.agents:
        assert e.upper - e.rating == pytest.approx(e.model_halfwidth)


def test_model_based_interval_covers_the_truth_about_95_percent_of_the_time():
    # 400 seeded data sets of 300 battles among 5 agents of known strength
    rng = np.random.default_rng(2026)
    true_elo = np.array([1139.7, 1049.5, 1000.0, 950.0, 860.8])
    theta = (true_elo - 1000) / SCALE
    covered = total = 0
    for _ in range(400):
        a = rng.integers(0, 5, 300)
        b = (a + rng.integers(1, 5, 300)) % 5
        y = (rng.random(300) < 1 / (1 + np.exp(-(theta[a] - theta[b])))).astype(float)
        for e in rate(a, b, y, n_agents=5).agents:
            total += 1
            covered += e.lower <= true_elo[e.index] <= e.upper
    # binomial sd of the share over 2,000 cells ≈ 0.005 (cells within a set correlate)
    assert 0.93 <= covered / total <= 0.97


def test_clustered_sandwich_written_out_battle_by_battle():
    rng = np.random.default_rng(4)
    n, m, g = 300, 4, 7
    a = rng.integers(0, m, n)
    b = (a + rng.integers(1, m, n)) % m
    y = rng.choice([0.0, 0.5, 1.0], n)
    w = rng.uniform(0.1, 1, n)
    judge = rng.integers(0, g, n) * 10 + 3  # arbitrary ids
    result = rate(a, b, y, n_agents=m, w=w, cluster=judge)

    pairs = aggregate(a, b, y, w, n_agents=m)
    theta = newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=m).theta
    h_inv = np.linalg.inv(neg_hessian(pairs.i, pairs.j, pairs.total, theta, 1e-3))
    scores: dict = {}
    mass: dict = {}
    for i, j, outcome, weight, cl in zip(a, b, y, w, judge, strict=True):
        x = np.zeros(m)
        x[i], x[j] = 1, -1
        mu = 1 / (1 + math.exp(-(theta[i] - theta[j])))
        scores[cl] = scores.get(cl, 0) + weight * (outcome - mu) * x
        mass[cl] = mass.get(cl, 0) + weight
    meat = g / (g - 1) * sum(np.outer(s, s) for s in scores.values())
    c = np.eye(m) - 1 / m
    v = c @ h_inv @ meat @ h_inv @ c.T
    shares = np.array(list(mass.values()))
    effective = shares.sum() ** 2 / (shares @ shares)
    assert 5 < effective < g  # unequal judges count as fewer
    critical = stats.t.ppf(0.975, effective - 1)
    expected = critical * SCALE * np.sqrt(np.diag(v))

    assert result.clusters == g
    assert result.robust_published and result.interval == "clustered"
    assert result.critical_value == pytest.approx(critical)
    got = [e.robust_halfwidth for e in result.agents]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # the published interval is the robust one, floored at the battle-level one
    for e in result.agents:
        published = max(e.robust_halfwidth, e.model_halfwidth)
        assert e.upper - e.rating == pytest.approx(published)
        assert e.rating - e.lower == pytest.approx(published)


def test_a_clustered_interval_narrower_than_the_battle_level_one_is_floored():
    # 6 judges who vote alike by chance can make the clustered variance tiny; the
    # published half-width never drops below the battle-level one
    battle = np.array([10.0, 20.0, 30.0])
    robust = np.array([5.0, 25.0, 29.0])
    choice = intervals.publish(battle, robust, clusters=6)
    assert choice.halfwidth.tolist() == [10.0, 25.0, 30.0]
    assert choice.floored == 2 and choice.kind == intervals.CLUSTERED
    assert choice.critical == pytest.approx(stats.t.ppf(0.975, 5))
    plain = intervals.publish(battle, None, clusters=None)
    assert plain.kind == intervals.BATTLE and plain.halfwidth is battle


def test_t_critical_values_shrink_towards_z_with_more_judges():
    assert intervals.t95(5) == pytest.approx(2.776, abs=1e-3)
    assert intervals.t95(30) == pytest.approx(2.045, abs=1e-3)
    assert intervals.t95(10_000) == pytest.approx(intervals.Z95, abs=1e-3)
    assert intervals.effective_clusters(np.array([1.0, 1.0, 1.0, 1.0])) == pytest.approx(4)
    assert intervals.effective_clusters(np.array([97.0, 1.0, 1.0, 1.0])) < 1.1
    with pytest.raises(ValueError, match="more than one cluster"):
        intervals.t95(1)


def test_fewer_judges_than_agents_publishes_no_robust_interval():
    # the seed paper's case: 211 votes from 3 judges among 5 agents, G = 3 < m = 5
    rng = np.random.default_rng(211)
    a = rng.integers(0, 5, 211)
    b = (a + rng.integers(1, 5, 211)) % 5
    y = rng.integers(0, 2, 211) * 1.0
    judge = rng.integers(0, 3, 211)
    result = rate(a, b, y, n_agents=5, cluster=judge)
    assert result.clusters == 3
    assert not result.robust_published
    for e in result.agents:
        assert e.robust_halfwidth is None
        assert e.rating - e.lower == pytest.approx(e.model_halfwidth)  # battle-level instead
    # with a fifth judge G = m and the robust interval is published
    judge[:2] = [3, 4]
    assert rate(a, b, y, n_agents=5, cluster=judge).robust_published


def test_no_clusters_means_model_based_only():
    rng = np.random.default_rng(5)
    a = rng.integers(0, 3, 60)
    b = (a + rng.integers(1, 3, 60)) % 3
    result = rate(a, b, rng.integers(0, 2, 60) * 1.0, n_agents=3)
    assert result.clusters is None and not result.robust_published
    assert all(e.robust_halfwidth is None for e in result.agents)


def test_robust_and_model_agree_when_the_model_holds_and_votes_are_independent():
    # one judge per battle (G = n): the sandwich estimates the same variance
    rng = np.random.default_rng(6)
    theta = np.array([0.5, 0.0, -0.3, 0.2])
    a = rng.integers(0, 4, 20000)
    b = (a + rng.integers(1, 4, 20000)) % 4
    y = (rng.random(20000) < 1 / (1 + np.exp(-(theta[a] - theta[b])))).astype(float)
    result = rate(a, b, y, n_agents=4, cluster=np.arange(20000))
    for e in result.agents:
        assert e.robust_halfwidth == pytest.approx(e.model_halfwidth, rel=0.05)


def test_correlated_judges_widen_the_robust_interval():
    # each of 12 judges has a fixed favourite side: votes within a judge are correlated,
    # which the model-based interval ignores and the clustered one does not
    rng = np.random.default_rng(7)
    n, m = 1200, 4
    a = rng.integers(0, m, n)
    b = (a + rng.integers(1, m, n)) % m
    judge = rng.integers(0, 12, n)
    bias = rng.normal(0, 1.5, (12, m))
    p = 1 / (1 + np.exp(-(bias[judge, a] - bias[judge, b])))
    y = (rng.random(n) < p).astype(float)
    result = rate(a, b, y, n_agents=m, cluster=judge)
    assert result.robust_published
    assert all(e.robust_halfwidth > 1.5 * e.model_halfwidth for e in result.agents)


def test_centring_map_and_halfwidth_helpers():
    c = intervals.centring_map(np.array([True, False, True]))
    np.testing.assert_allclose(c @ np.array([1.0, 5.0, 3.0]), [-1.0, 3.0, 1.0])
    assert intervals.halfwidth(np.array([1.0, 0.0]))[0] == pytest.approx(1.96 * SCALE, rel=1e-4)
    with pytest.raises(ValueError, match="reference agent"):
        intervals.centring_map(np.zeros(3, dtype=bool))
    with pytest.raises(ValueError, match="two clusters"):
        intervals.robust_variance(np.eye(2), np.ones((1, 2)))


def test_the_caveat_is_one_rule_on_what_the_snapshot_records():
    # the battle-level interval with judges on record means G < m: say so
    words = intervals.caveat(interval="battle", judges=4, agents=8)
    assert "4 judges for 8 agents" in words and "larger than shown" in words
    assert "fewer than the agents" in intervals.caveat(interval="battle", judges=1)
    assert intervals.caveat(interval="clustered", judges=40) is None  # G ≥ m
    assert intervals.caveat(interval="battle", judges=None) is None  # no judges on record
    assert intervals.caveat(interval=None, judges=None) is None  # nothing published
    # a category board's document: its own fit decides
    category = {"enough": True, "robust_intervals": False, "clusters": 2}
    assert intervals.board_caveat({"category": category, "refit": {}}) is not None
    assert intervals.board_caveat({"category": {**category, "enough": False}}) is None
    assert intervals.board_caveat({"refit": {"interval": "clustered", "clusters": 9}}) is None


@pytest.mark.parametrize(("crowd_size", "shown"), [(2, True), (4, False)])
def test_the_board_says_so_beside_the_intervals_when_judges_are_fewer_than_agents(
    alice, roster, rng, settings, crowd_size, shown
):
    # 3 agents: 2 judges publish the battle-level interval (G < m) and its caveat; 4
    # judges publish the clustered one, and the board has nothing to add
    from django.test import Client

    from agents.models import Arena
    from ratings.refit import arena_refit
    from tests.ratings.factories import judges, round_robin

    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=20)
    round_robin(alice, roster, judges(crowd_size), rounds=12, rng=rng)
    arena_refit(arena_id=Arena.objects.public().pk)
    page = Client().get("/").content.decode()
    refit = Client().get("/api/leaderboard/").json()["refit"]
    assert refit["interval"] == ("battle" if shown else "clustered")
    assert ('id="interval-caveat"' in page) is shown
    assert (f"Only {crowd_size} judges, fewer than the agents" in page) is shown
    assert (refit["interval_caveat"] is not None) is shown


def test_one_battle_per_pair_is_counted_once_in_the_meat():
    # a board whose votes vary as coin flips (φ = 1), each pair seen once: each pair's
    # meat is its coin-flip variance, where the imaginary battle added to it doubled it
    coin = np.array([0.25, 0.16, 0.21, 0.09])
    once = np.ones(4)
    np.testing.assert_allclose(intervals.pair_meat(coin, coin, once), coin)
    # a pair seen a few times, all ties, on a board of decisive votes: one of its n + 1
    # battles at the board's variance, never nothing
    spread = np.array([0.0, 10 * 0.25, 10 * 0.25])
    bernoulli = np.array([3 * 0.25, 10 * 0.25, 10 * 0.25])
    meat = intervals.pair_meat(spread, bernoulli, np.array([3, 10, 10]))
    phi = (5.0 + 3 * 5.75 / 23) / (5.75 + 3 * 5.75 / 23)
    assert meat[0] == pytest.approx(3 / 4 * phi * 0.25)
    # a board of nothing but ties: the rule of three's coin flips, φ = 3/(B + 3)
    ties = intervals.pair_meat(np.zeros(2), np.array([5.0, 5.0]), np.array([20, 20]))
    assert ties == pytest.approx(20 / 21 * (3 / 43) * 0.25 * np.ones(2))
