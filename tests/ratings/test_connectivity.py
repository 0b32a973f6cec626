"""Identifiability (SPEC §7.4): labels relative to the main strongly connected component
of the directed win graph, and never a number for a labelled agent."""

import numpy as np
import pytest

from ratings import connectivity
from ratings.bradley_terry import rate

TRIANGLE = ([0, 1, 2], [1, 2, 0], [1.0, 1.0, 1.0])  # 0 → 1 → 2 → 0: strongly connected


def run(a, b, y, n_agents, **kwargs):
    return rate(np.array(a), np.array(b), np.array(y, dtype=float), n_agents=n_agents, **kwargs)


def labels(result) -> list[str | None]:
    return [e.unavailable for e in result.agents]


def assert_no_number_for_labelled(result):
    for e in result.agents:
        if e.unavailable is not None:
            assert (e.rating, e.lower, e.upper, e.model_halfwidth) == (None,) * 4
            assert (e.robust_halfwidth, e.rank_lower, e.rank_upper) == (None,) * 3
        else:
            assert None not in (e.rating, e.lower, e.upper)


def test_strongly_connected_everyone_rated():
    result = run(*TRIANGLE, n_agents=3)
    assert labels(result) == [None, None, None]
    assert result.fitted_agents == 3


def test_an_agent_with_no_battles_has_no_comparisons():
    result = run(*TRIANGLE, n_agents=4, bootstrap=10)
    assert labels(result) == [None, None, None, "no_comparisons"]
    assert result.agents[3].battles == 0
    assert_no_number_for_labelled(result)


def test_only_zero_weight_battles_count_as_no_comparisons():
    a, b, y = TRIANGLE
    result = run([*a, 3], [*b, 0], [*y, 1.0], n_agents=4, w=np.array([1, 1, 1, 0.0]))
    assert labels(result)[3] == "no_comparisons"
    assert result.agents[3].battles == 1


def test_an_agent_that_only_wins_is_separated():
    # 3 beats 0 every time: in 0's undirected component, outside the main SCC; its
    # unpenalised MLE is +∞, so no number
    a, b, y = TRIANGLE
    result = run([*a, 3, 3], [*b, 0, 1], [*y, 1.0, 1.0], n_agents=4, bootstrap=10)
    assert labels(result) == [None, None, None, "separated"]
    assert_no_number_for_labelled(result)


def test_an_agent_that_only_loses_is_separated():
    a, b, y = TRIANGLE
    result = run([*a, 3], [*b, 0], [*y, 0.0], n_agents=4)
    assert labels(result)[3] == "separated"


def test_a_tie_links_both_ways():
    # 3 tied 0 once: win mass ½ each way, so 3 joins the strongly connected component
    a, b, y = TRIANGLE
    result = run([*a, 3], [*b, 0], [*y, 0.5], n_agents=4)
    assert labels(result) == [None, None, None, None]


def test_a_separate_group_is_disconnected():
    # 3 and 4 beat each other once each (their own SCC) but never met 0, 1, 2
    a, b, y = TRIANGLE
    result = run([*a, 3, 4], [*b, 4, 3], [*y, 1.0, 1.0], n_agents=5, cluster=np.arange(5))
    assert labels(result) == [None, None, None, "disconnected", "disconnected"]
    assert_no_number_for_labelled(result)
    # m counts only the fitted agents, and only their battles form clusters
    assert result.fitted_agents == 3
    assert result.clusters == 3


def test_separated_agents_do_not_move_the_main_component():
    # the fit covers the main SCC: the separated agent's battles change nothing
    rng = np.random.default_rng(1)
    a = rng.integers(0, 4, 200)
    b = (a + rng.integers(1, 4, 200)) % 4
    y = rng.integers(0, 2, 200) * 1.0
    base = rate(a, b, y, n_agents=5)
    extra = rate(
        np.concatenate([a, [4, 4, 4]]),
        np.concatenate([b, [0, 1, 2]]),
        np.concatenate([y, [0.0, 0.0, 0.0]]),
        n_agents=5,
    )
    assert labels(extra)[4] == "separated"
    for before, after in zip(base.agents[:4], extra.agents[:4], strict=True):
        assert after.rating == pytest.approx(before.rating, abs=1e-9)


def test_the_main_component_is_the_largest():
    # a 3-cycle and a 2-cycle joined by one one-way edge: the 3-cycle is the main SCC
    a, b, y = TRIANGLE
    result = run([*a, 3, 4, 3], [*b, 4, 3, 0], [*y, 1.0, 1.0, 1.0], n_agents=5)
    assert labels(result) == [None, None, None, "separated", "separated"]


def test_equal_sized_components_are_chosen_by_evidence_weight():
    # two disjoint 2-cycles; the second has more battles, so it is the main one
    result = run([0, 1, 2, 3, 2, 3], [1, 0, 3, 2, 3, 2], [1.0] * 6, n_agents=4)
    assert labels(result) == ["disconnected", "disconnected", None, None]


def test_nothing_identified_without_a_two_agent_component():
    # a chain of one-way wins: 0 → 1 → 2; no finite MLE for anyone
    result = run([0, 1], [1, 2], [1.0, 1.0], n_agents=4, cluster=np.array([0, 1]))
    assert labels(result) == ["separated", "separated", "separated", "no_comparisons"]
    assert result.fitted_agents == 0
    assert not result.robust_published
    assert_no_number_for_labelled(result)


def test_no_battles_at_all():
    result = run([], [], [], n_agents=2)
    assert labels(result) == ["no_comparisons", "no_comparisons"]
    assert result.iterations == 0


def test_diagnose_directly_from_win_masses():
    # pair (0, 1): 0 won 2, 1 won 0; pair (1, 2): both won; pair (3, 4): nobody (w = 0)
    d = connectivity.diagnose(
        np.array([0, 1, 3]),
        np.array([1, 2, 4]),
        np.array([2.0, 1.0, 0.0]),
        np.array([0.0, 1.5, 0.0]),
        n_agents=6,
    )
    assert d.labels == ["separated", None, None] + ["no_comparisons"] * 3
    assert d.fitted.tolist() == [False, True, True, False, False, False]
    assert d.identified == 2


@pytest.mark.parametrize("seed", range(20))
def test_components_match_scipy_on_random_graphs(seed):
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import breadth_first_order, connected_components

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    edges = int(rng.integers(0, 3 * n))
    src, dst = rng.integers(0, n, edges), rng.integers(0, n, edges)
    graph = coo_array((np.ones(edges), (src, dst)), shape=(n, n)).tocsr()
    _, theirs = connected_components(graph, directed=True, connection="strong")
    ours = connectivity.strong_components(src, dst, n)
    # the same partition, whatever the numbering
    pairs = set(zip(ours.tolist(), theirs.tolist(), strict=True))
    assert len(pairs) == len(set(ours.tolist())) == len(set(theirs.tolist()))
    # and reach() finds exactly the nodes reachable from node 0
    start = np.zeros(n, dtype=bool)
    start[0] = True
    expected = np.zeros(n, dtype=bool)
    expected[breadth_first_order(graph, 0, directed=True, return_predecessors=False)] = True
    assert np.array_equal(connectivity.reach(src, dst, start), expected)


@pytest.mark.parametrize("two_way", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_labels_match_a_scipy_reference_on_random_win_records(seed, two_way):
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import connected_components

    # sparse random records among up to 15 agents, so that over the seeds every label
    # and both search paths (one dominant component, or the full decomposition) turn up
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 16))
    k = int(rng.integers(n // 2, 2 * n))
    a = rng.integers(0, n, k)
    b = (a + rng.integers(1, n, k)) % n
    y = rng.choice([0.0, 0.5, 1.0], k, p=[0.45, 0.1, 0.45])
    w = rng.choice([0.0, 1.0, 2.0], k, p=[0.1, 0.6, 0.3])
    if two_way:  # every pair won both ways: the one-search path of ``diagnose``
        y, w = np.full(k, 0.5), rng.choice([1.0, 2.0], k)
    result = rate(a, b, y, n_agents=n, w=w)

    win = np.concatenate([w * y, w * (1 - y)])
    src, dst = np.concatenate([a, b])[win > 0], np.concatenate([b, a])[win > 0]
    graph = coo_array((np.ones(len(src)), (src, dst)), shape=(n, n)).tocsr()
    _, strong = connected_components(graph, directed=True, connection="strong")
    _, weak = connected_components(graph, directed=True, connection="weak")
    mass = np.bincount(a, w, minlength=n) + np.bincount(b, w, minlength=n)
    big = [c for c in set(strong.tolist()) if (strong == c).sum() >= 2]
    expected = ["no_comparisons" if mass[x] == 0 else "separated" for x in range(n)]
    if big:
        main = max(
            big,
            key=lambda c: ((strong == c).sum(), mass[strong == c].sum(), -np.argmax(strong == c)),
        )
        home = weak[np.argmax(strong == main)]
        for x in range(n):
            if mass[x] == 0:
                continue
            if strong[x] == main:
                expected[x] = None
            elif weak[x] != home:
                expected[x] = "disconnected"
    assert labels(result) == expected
