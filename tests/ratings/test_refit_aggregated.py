"""The refit reads its battles counted in the database (rows per agent pair, outcome and
weight, and per deciding judge and pair) instead of one row per battle: every figure it
publishes is the per-battle fit's, to 1e-9, and the bootstrap is the per-battle
bootstrap of the same battles listed group by group."""

import numpy as np
import pytest
from django.contrib.auth import get_user_model

from agents.models import Arena
from battles.models import Battle
from ratings.bradley_terry import ClusterSums, rate
from ratings.refit import (
    PAIR_ROW,
    UNSTAMPED_ROW,
    FitParams,
    arena_refit,
    fit,
    refit_input,
    refit_rows,
)
from tests.ratings.factories import decided_battle, judges
from tests.ratings.per_battle import per_battle_input

FIELDS = ("rating", "lower", "upper", "model_halfwidth", "robust_halfwidth", "weight")


def battles_with_repeats(seed: int, n: int = 1500, agents: int = 4, judges_: int = 6):
    """Bradley-Terry battles where many are identical (few weights, few judges)."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, 0.8, agents)
    a = rng.integers(0, agents, n)
    b = (a + rng.integers(1, agents, n)) % agents
    p = 1 / (1 + np.exp(-(theta[a] - theta[b])))
    roll = rng.random(n)
    y = np.where(roll < 0.15, 0.5, (rng.random(n) < p).astype(float))
    w = rng.choice([1.0, 0.5], n)
    cluster = rng.integers(0, judges_, n)
    return a, b, y, w, cluster


def grouped(a, b, y, w, cluster):
    """What the database gives: the distinct (a, b, y, w) rows with their counts, the
    sums per (cluster, a, b), and the battles in row order (each row's side by side)."""
    keys = np.stack([a, b, y, w], axis=1)
    rows, inverse, count = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    order = np.argsort(inverse.ravel(), kind="stable")
    agg = (rows[:, 0].astype(np.int64), rows[:, 1].astype(np.int64), rows[:, 2], rows[:, 3])
    cells, where = np.unique(np.stack([cluster, a, b], axis=1), axis=0, return_inverse=True)
    where = where.ravel()
    sums = ClusterSums(
        cluster=cells[:, 0], a=cells[:, 1], b=cells[:, 2],
        total=np.bincount(where, w), wins=np.bincount(where, w * y),
    )  # fmt: skip
    return (*agg, count, sums), order


def assert_same_fit(got, expected, *, bands: bool) -> None:
    assert (got.iterations, got.converged, got.clusters, got.robust_published) == (
        expected.iterations,
        expected.converged,
        expected.clusters,
        expected.robust_published,
    )
    assert got.fitted_agents == expected.fitted_agents
    for mine, theirs in zip(got.agents, expected.agents, strict=True):
        assert (mine.battles, mine.unavailable) == (theirs.battles, theirs.unavailable)
        for field in FIELDS:
            value, reference = getattr(mine, field), getattr(theirs, field)
            if reference is None:
                assert value is None, field
            else:
                assert value == pytest.approx(reference, abs=1e-9, rel=0), field
        if bands:
            assert (mine.rank_lower, mine.rank_upper) == (theirs.rank_lower, theirs.rank_upper)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rows_with_counts_fit_exactly_as_their_battles_one_by_one(seed):
    a, b, y, w, cluster = battles_with_repeats(seed)
    (ra, rb, ry, rw, count, sums), order = grouped(a, b, y, w, cluster)
    assert len(count) < len(a) / 2 and len(sums.a) < len(a) / 2  # rows stand for many
    got = rate(ra, rb, ry, n_agents=4, w=rw, count=count, clustered=sums, bootstrap=60, seed=9)
    listed = rate(
        a[order], b[order], y[order], n_agents=4, w=w[order], cluster=cluster[order],
        bootstrap=60, seed=9,
    )  # fmt: skip
    assert got.robust_published  # the judge-clustered interval is compared too
    assert_same_fit(got, listed, bands=True)
    # In any other order the fit and intervals are the same; only the bootstrap's draws
    # land on other battles (the same distribution, another sample).
    shuffled = rate(a, b, y, n_agents=4, w=w, cluster=cluster, bootstrap=0)
    assert_same_fit(rate(ra, rb, ry, n_agents=4, w=rw, count=count, clustered=sums), shuffled,
                    bands=False)  # fmt: skip


def test_counts_of_one_are_the_per_battle_fit_bit_for_bit():
    a, b, y, w, cluster = battles_with_repeats(4, n=300)
    ones = np.ones(len(a), dtype=np.int64)
    plain = rate(a, b, y, n_agents=4, w=w, cluster=cluster, bootstrap=40, seed=3)
    counted = rate(a, b, y, n_agents=4, w=w, cluster=cluster, count=ones, bootstrap=40, seed=3)
    for mine, theirs in zip(counted.agents, plain.agents, strict=True):
        assert mine == theirs


def test_labels_of_agents_the_fit_cannot_place_survive_the_counting():
    # agent 3 only ever wins (separated), agent 4 meets nobody in the main component
    a = np.array([0, 1, 2, 0, 3, 3, 4, 0, 1])
    b = np.array([1, 2, 0, 2, 0, 1, 5, 1, 2])  # agents 4 and 5 meet only each other
    y = np.array([1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.5, 1.0, 0.0])
    a, b, y = np.tile(a, 4), np.tile(b, 4), np.tile(y, 4)
    w, cluster = np.ones(len(a)), np.arange(len(a)) % 3
    (ra, rb, ry, rw, count, sums), order = grouped(a, b, y, w, cluster)
    got = rate(ra, rb, ry, n_agents=6, w=rw, count=count, clustered=sums, bootstrap=20, seed=1)
    listed = rate(a[order], b[order], y[order], n_agents=6, w=w[order], cluster=cluster[order],
                  bootstrap=20, seed=1)  # fmt: skip
    assert [e.unavailable for e in got.agents] == [e.unavailable for e in listed.agents]
    assert {e.unavailable for e in got.agents} >= {"separated", "disconnected"}
    assert_same_fit(got, listed, bands=True)


def test_counts_must_be_positive_integers():
    a, b, y = np.array([0]), np.array([1]), np.array([1.0])
    with pytest.raises(ValueError, match="positive integers"):
        rate(a, b, y, n_agents=2, count=np.array([0]))
    with pytest.raises(ValueError, match="one multiplicity per row"):
        rate(a, b, y, n_agents=2, count=np.array([1, 1]))


@pytest.fixture
def _few_replicates(settings):
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=40, n0=5)


@pytest.fixture
def arena_battles(alice, roster, rng, _few_replicates):
    """Forty-odd decided battles among four agents, many of them alike (three judges,
    two weights), a null weight, and two decided by a judge whose account is gone."""
    agents = list(roster)[:4]
    crowd = judges(3)
    made = []
    strength = {agent.pk: i for i, agent in enumerate(agents)}
    for n in range(44):
        first, second = rng.sample(agents, 2)
        outcome = "A" if strength[first.pk] < strength[second.pk] else "B"
        if n % 7 == 0:
            outcome = "tie" if n % 2 else "both_bad"
        if n % 5 == 0:  # an upset now and then keeps every agent placeable
            outcome = {"A": "B", "B": "A"}.get(outcome, outcome)
        made.append(
            decided_battle(
                submitter=alice, a=first, b=second, outcome=outcome, judge=crowd[n % 3],
                weight=None if n == 3 else (0.5 if n % 4 == 0 else 1.0),
            )
        )  # fmt: skip
    gone = get_user_model().objects.create_user("gone", password="x")
    for _ in range(2):
        made.append(
            decided_battle(submitter=alice, a=agents[0], b=agents[1], outcome="A", judge=gone)
        )
    Battle.objects.filter(cluster_judge=gone).update(cluster_judge=None)
    return made


def test_the_published_snapshot_is_the_per_battle_fit(arena_battles):
    arena_id = Arena.objects.public().pk
    unstamped = [row for row in refit_rows(arena_id=arena_id) if row[0] == UNSTAMPED_ROW]
    assert len(unstamped) == len(arena_battles)  # nothing is in a refit yet
    snapshot = arena_refit(arena_id=arena_id).snapshot
    assert snapshot.battles == len(arena_battles)
    data = refit_input(arena_id=arena_id, params=FitParams.from_settings())
    assert len(data.count) < len(arena_battles) and int(data.count.sum()) == snapshot.battles
    assert len(data.clustered.a) < len(arena_battles)
    # the battles one by one, listed group by group in the refit's row order
    old = per_battle_input(arena_id=arena_id)
    pair_rows = [row for row in refit_rows(arena_id=arena_id) if row[0] == PAIR_ROW]
    row_of = {tuple(row[1:5]): r for r, row in enumerate(pair_rows)}
    order = sorted(range(len(old["key"])), key=lambda i: row_of[old["key"][i][:4]])
    counts = np.bincount(np.concatenate([old["a"], old["b"]]), minlength=len(old["agent_ids"]))
    n0 = FitParams.from_settings().min_battles
    listed = rate(
        old["a"][order], old["b"][order], old["y"][order], n_agents=len(old["agent_ids"]),
        w=old["w"][order], cluster=old["cluster"][order], reference=counts >= n0,
        bootstrap=40, seed=snapshot.seed,
    )  # fmt: skip
    points = {p.agent_id: p for p in snapshot.points.all()}
    assert set(points) == set(old["agent_ids"])
    assert snapshot.clusters == listed.clusters == 5  # three judges, two lone battles
    for estimate in listed.agents:
        point = points[old["agent_ids"][estimate.index]]
        assert point.battles == estimate.battles
        assert point.weight == pytest.approx(estimate.weight, abs=1e-9)
        for field in ("rating", "lower", "upper"):
            assert getattr(point, field) == pytest.approx(getattr(estimate, field), abs=1e-9)
        assert (point.rank_lower, point.rank_upper) == (estimate.rank_lower, estimate.rank_upper)
    # and the pure fit of the aggregated input is the same again
    again = fit(data, FitParams.from_settings())
    by_agent = {data.agent_ids[e.index]: e for e in again.agents}
    for agent_id, point in points.items():
        assert point.rating == pytest.approx(by_agent[agent_id].rating, abs=1e-9)


def test_stamping_splits_no_group_and_changes_no_digest(arena_battles, alice, roster):
    arena_id = Arena.objects.public().pk
    params = FitParams.from_settings()
    fresh = refit_input(arena_id=arena_id, params=params)
    assert fresh.unstamped_ids == sorted(b.pk for b in arena_battles)
    result = arena_refit(arena_id=arena_id)
    assert result.stamped == len(arena_battles)
    stamped = refit_input(arena_id=arena_id, params=params)
    assert stamped.unstamped_ids == []
    assert stamped.digest == fresh.digest
    for name in ("a", "b", "y", "w", "count"):
        assert np.array_equal(getattr(stamped, name), getattr(fresh, name)), name
    for name in ("cluster", "a", "b", "total", "wins"):
        assert np.array_equal(getattr(stamped.clustered, name), getattr(fresh.clustered, name))
    # one more battle like an earlier one: counted into its group, listed as unstamped
    first = arena_battles[1]
    late = decided_battle(
        submitter=alice, a=first.agent_a, b=first.agent_b, outcome=first.outcome,
        judge=first.cluster_judge, weight=first.evidence_weight,
    )  # fmt: skip
    grown = refit_input(arena_id=arena_id, params=params)
    assert grown.unstamped_ids == [late.pk]
    assert len(grown.count) == len(stamped.count) and grown.battles == stamped.battles + 1
    assert grown.digest != stamped.digest
    assert arena_refit(arena_id=arena_id).stamped == 1
    assert Battle.objects.filter(pk=late.pk, incorporation__isnull=False).exists()
