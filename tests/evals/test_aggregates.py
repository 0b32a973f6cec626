"""Aggregates ("000" §4): weighted scores, win rates and the reference bootstrap, on hand-worked
tables, on random data for the win rates' complement rule, and against a verbatim copy of the
reference bootstrap."""

import math
import random

import pytest

from evals.aggregates import bootstrap_ci, criterion_means, weighted_score, win_rates


def reference_bootstrap_ci(values, n_iter=1000, alpha=0.05, seed=42):
    """The reference algorithm, copied verbatim (independent of the module's copy)."""
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(n_iter))
    return means[int(alpha / 2 * n_iter)], means[int((1 - alpha / 2) * n_iter) - 1]


# --- weighted score ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("judgements", "expected"),
    [
        ([(3, 5, 1.0)], 0.6),
        ([(5, 5, 1.0), (0, 5, 1.0)], 0.5),
        ([(4, 4, 3.0), (0, 2, 1.0)], 0.75),  # weights count: 3·1 + 1·0 over 4
        ([(1, 2, 1.0), (3, 4, 1.0)], 0.625),  # each score is a fraction of its own scale
        ([(2, 8, 2.0), (1, 1, 2.0)], 0.625),
        ([(0, 5, 0.0), (5, 5, 1.0)], 1.0),  # a zero weight leaves its judgement out
        ([(5, 5, 2.0), (10, 10, 0.5), (1, 1, 1.0)], 1.0),
        ([(0, 5, 2.0), (0, 10, 0.5)], 0.0),
        ([(2.5, 5, 1.0)], 0.5),
    ],
)
def test_weighted_score(judgements, expected):
    assert weighted_score(judgements) == expected


@pytest.mark.parametrize(
    ("judgements", "message"),
    [
        ([], "at least one judgement"),
        ([(1, 0, 1.0)], "scale 0; a scale must be positive"),
        ([(1, -5, 1.0)], "scale -5"),
        ([(6, 5, 1.0)], "score 6 outside 0..5"),
        ([(-1, 5, 1.0)], "score -1 outside 0..5"),
        ([(1, 5, 1.0), (1, 5, -0.5)], "judgement 1 has negative weight -0.5"),
        ([(1, 5, 0.0), (2, 5, 0.0)], "weights sum to zero"),
        ([(math.nan, 5, 1.0)], "non-finite"),
        ([(1, 5, math.inf)], "non-finite"),
    ],
)
def test_weighted_score_rejects(judgements, message):
    with pytest.raises(ValueError, match=message):
        weighted_score(judgements)


def test_weighted_score_stays_in_the_unit_interval_on_random_runs():
    rng = random.Random(7)
    for _ in range(300):
        judgements = []
        for _ in range(rng.randint(1, 8)):
            scale = rng.randint(1, 10)
            judgements.append((rng.randint(0, scale), scale, rng.choice([0.1, 0.3, 1.0, 2.5])))
        score = weighted_score(judgements)
        expected = sum(w * s / c for s, c, w in judgements) / sum(w for _, _, w in judgements)
        assert 0.0 <= score <= 1.0
        assert score == pytest.approx(expected, abs=1e-12)


# --- win rates --------------------------------------------------------------------------------


def test_win_rates_on_a_hand_worked_table():
    # given A beats B on t1 and t2 and ties on t3; C has scores on t1 only
    per_task = {
        "t1": {"A": 0.9, "B": 0.5, "C": 0.9},
        "t2": {"A": 0.7, "B": 0.6},
        "t3": {"A": 0.4, "B": 0.4},
    }
    rates = win_rates(per_task, ["A", "B", "C"])
    assert rates == {
        "A": {"A": 0.5, "B": 2.5 / 3, "C": 0.5},  # (2 wins + 0.5·1 tie) / 3; tie with C on t1
        "B": {"A": 0.5 / 3, "B": 0.5, "C": 0.0},
        "C": {"A": 0.5, "B": 1.0, "C": 0.5},
    }


@pytest.mark.parametrize(
    ("a", "b", "rate_a"),
    [
        (0.5, 0.5, 0.5),
        (0.5, 0.5 + 5e-10, 0.5),  # within 1e-9: a tie, not a win for b
        (0.5 + 5e-10, 0.5, 0.5),  # nor a win for a
        (0.0, 1e-9, 0.5),  # exactly 1e-9 apart still ties
        (0.0, 2e-9, 0.0),
        (2e-9, 0.0, 1.0),
        (0.3, 0.1 + 0.2, 0.5),  # float noise is a tie
        (0.61, 0.6, 1.0),
    ],
)
def test_win_rates_tie_tolerance(a, b, rate_a):
    rates = win_rates({"t": {"A": a, "B": b}}, ["A", "B"])
    assert rates["A"]["B"] == rate_a
    assert rates["B"]["A"] == 1.0 - rate_a


def test_win_rates_count_only_tasks_both_have_scores_for():
    # given B has no score on t2 (missing) or t3 (None), where A would otherwise lose
    per_task = {
        "t1": {"A": 1.0, "B": 0.0},
        "t2": {"A": 0.0},
        "t3": {"A": 0.0, "B": None},
        "t4": {"B": 1.0},
    }
    rates = win_rates(per_task, ["A", "B"])
    assert rates["A"]["B"] == 1.0
    assert rates["B"]["A"] == 0.0


def test_win_rates_none_without_a_common_task_and_self_always_one_half():
    per_task = {"t1": {"A": 1.0}, "t2": {"B": 0.0}}
    rates = win_rates(per_task, ["A", "B", "Z"])  # Z has no scores at all
    assert rates == {
        "A": {"A": 0.5, "B": None, "Z": None},
        "B": {"A": None, "B": 0.5, "Z": None},
        "Z": {"A": None, "B": None, "Z": 0.5},
    }


def test_win_rates_only_for_the_agents_asked_and_independent_of_their_order():
    per_task = {"t1": {"A": 0.2, "B": 0.8, "C": 0.5}, "t2": {"A": 0.9, "B": 0.1, "C": 0.5}}
    forward = win_rates(per_task, ["A", "B"])
    assert forward == {"A": {"A": 0.5, "B": 0.5}, "B": {"A": 0.5, "B": 0.5}}
    assert win_rates(per_task, ["C", "B", "A"]) == win_rates(per_task, ["A", "B", "C"])
    assert win_rates(per_task, []) == {}


def test_win_rates_of_a_pair_add_to_exactly_one_on_random_data():
    rng = random.Random(2024)
    # coarse scores make exact and near ties (within 1e-9) common, fine ones make them rare
    grids = [lambda: rng.randint(0, 4) / 4, lambda: rng.randint(0, 4) / 4 + rng.choice([0, 4e-10])]
    grids.append(rng.random)
    agents = ["A", "B", "C", "D"]
    for trial in range(150):
        draw = grids[trial % 3]
        per_task = {
            f"t{i}": {a: draw() for a in agents if rng.random() < 0.8}
            for i in range(rng.randint(0, 40))
        }
        rates = win_rates(per_task, agents)
        for a in agents:
            assert rates[a][a] == 0.5
            for b in agents:
                if rates[a][b] is None:
                    assert rates[b][a] is None
                else:
                    assert 0.0 <= rates[a][b] <= 1.0
                    assert rates[a][b] + rates[b][a] == 1.0


# --- bootstrap --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "kwargs"),
    [
        ([1, 2, 3, 4, 5], {}),
        ([0.13, 0.71, 0.42, 0.97, 0.05, 0.66, 0.38], {}),
        ([0.0, 0.25, 0.5, 1.0, 1.0, 0.75, 0.0, 1.0], {"seed": 7}),
        ([3, 1], {"n_iter": 200, "alpha": 0.1}),
        ([0.5] * 4 + [1.0] * 3, {"n_iter": 37, "alpha": 0.2, "seed": 0}),
        (list(range(30)), {"n_iter": 500, "seed": 123}),
        ((2.0, 4.0, 8.0), {}),  # any sequence, not only lists
    ],
)
def test_bootstrap_ci_equals_the_reference(values, kwargs):
    assert bootstrap_ci(values, **kwargs) == reference_bootstrap_ci(list(values), **kwargs)


def test_bootstrap_ci_pinned_numbers():
    # given a fixed input and the defaults, the interval is these two numbers (the reference's)
    values = [0.13, 0.71, 0.42, 0.97, 0.05, 0.66, 0.38]
    assert bootstrap_ci(values) == (0.2614285714285714, 0.687142857142857)
    assert bootstrap_ci([1, 2, 3, 4, 5], n_iter=200, alpha=0.1, seed=7) == (1.8, 4.0)


def test_bootstrap_ci_uses_its_seed():
    values = [0.13, 0.71, 0.42, 0.97, 0.05, 0.66, 0.38]
    assert bootstrap_ci(values, seed=43) != bootstrap_ci(values)
    assert bootstrap_ci(values, seed=43) == reference_bootstrap_ci(values, seed=43)


@pytest.mark.parametrize("value", [0.0, 0.75, 3, -2.5])
def test_bootstrap_ci_of_one_value_is_that_value(value):
    assert bootstrap_ci([value]) == (value, value)
    assert bootstrap_ci([value], seed=1, n_iter=10) == (value, value)


def test_bootstrap_ci_leaves_its_input_alone():
    values = [3.0, 1.0, 2.0]
    bootstrap_ci(values)
    assert values == [3.0, 1.0, 2.0]


@pytest.mark.parametrize(
    ("values", "kwargs", "message"),
    [
        ([], {}, "at least one value"),
        ((), {}, "at least one value"),
        ([1.0], {"n_iter": 0}, "n_iter must be a positive integer"),
        ([1.0], {"n_iter": 10.0}, "n_iter must be a positive integer"),
        ([1.0], {"alpha": 0.0}, "alpha must lie strictly between 0 and 1"),
        ([1.0], {"alpha": 1.0}, "alpha must lie strictly between 0 and 1"),
    ],
)
def test_bootstrap_ci_rejects(values, kwargs, message):
    with pytest.raises(ValueError, match=message):
        bootstrap_ci(values, **kwargs)


# --- criterion means --------------------------------------------------------------------------


def test_criterion_means_groups_by_agent_and_criterion():
    rows = [
        ("A", "correct", 1.0),
        ("A", "clear", 0.5),
        ("B", "correct", 0.25),
        ("A", "correct", 0.0),
        ("A", "correct", 0.5),
        ("B", "clear", 1.0),
    ]
    result = criterion_means(iter(rows))  # any iterable, read once
    assert result == {
        "A": {
            "correct": dict(zip(("lower", "upper"), bootstrap_ci([1.0, 0.0, 0.5]), strict=True))
            | {"mean": 0.5, "n": 3},
            "clear": {"mean": 0.5, "lower": 0.5, "upper": 0.5, "n": 1},
        },
        "B": {
            "correct": {"mean": 0.25, "lower": 0.25, "upper": 0.25, "n": 1},
            "clear": {"mean": 1.0, "lower": 1.0, "upper": 1.0, "n": 1},
        },
    }
    assert list(result) == ["A", "B"]
    assert list(result["A"]) == ["correct", "clear"]


def test_criterion_means_interval_is_the_reference_bootstrap_of_the_group():
    scores = [0.13, 0.71, 0.42, 0.97, 0.05, 0.66, 0.38]
    result = criterion_means([("A", "c", s) for s in scores] + [("B", "c", 0.0)])
    assert result["A"]["c"] == {
        "mean": sum(scores) / len(scores),
        "lower": 0.2614285714285714,
        "upper": 0.687142857142857,
        "n": 7,
    }


def test_criterion_means_of_nothing_is_empty():
    assert criterion_means([]) == {}
