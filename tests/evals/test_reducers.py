"""Epoch reducers (evals.reducers): each reducer on a table of epoch scores, the
parsing of a reducer's name and K, and the per-agent metric whose standard error
treats the task as the cluster (k identical epochs give the error of one)."""

import math
from itertools import combinations

import pytest

from evals import reducers
from evals.reducers import Reducer, ReducerError, metric, parse_reducer, reduce


def brute_pass_at_k(values, k):
    """The share of k-subsets of the epochs with at least one 1 (what pass@k estimates)."""
    subsets = list(combinations(values, k))
    return sum(1 for s in subsets if 1.0 in s) / len(subsets)


@pytest.mark.parametrize(
    ("reducer", "values", "expected"),
    [
        (Reducer("mean"), [1.0, 0.0, 0.5], 0.5),
        (Reducer("max"), [0.0, 0.25, 0.5], 0.5),
        (Reducer("mode"), [1.0, 0.0, 1.0], 1.0),
        (Reducer("mode"), [1.0, 0.0, 0.0, 1.0], 0.0),  # a tie goes to the smaller value
        (Reducer("pass_at_k", 1), [1.0, 0.0, 0.0, 0.0], 0.25),
        (Reducer("pass_at_k", 2), [1.0, 0.0, 0.0, 0.0], 0.5),
        (Reducer("pass_at_k", 2), [0.0, 0.0, 0.0], 0.0),
        (Reducer("pass_at_k", 3), [0.0, 1.0, 0.0], 1.0),
        (Reducer("pass_at_k", 2), [0.9, 0.9, 1.0], 2 / 3),  # only a 1 counts as a pass
        (Reducer("at_least_k", 2), [1.0, 0.0, 1.0], 1.0),
        (Reducer("at_least_k", 2), [1.0, 0.0, 0.9], 0.0),
        (Reducer("at_least_k", 1), [0.0], 0.0),
    ],
)
def test_each_reducer(reducer, values, expected):
    assert reduce(reducer, values) == pytest.approx(expected)


@pytest.mark.parametrize("values", [[1, 0, 0, 1, 0], [0, 0, 1, 1, 1, 0, 1], [1, 1, 1]])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_pass_at_k_is_the_unbiased_estimate(values, k):
    values = [float(v) for v in values]
    assert reduce(Reducer("pass_at_k", k), values) == pytest.approx(brute_pass_at_k(values, k))


def test_nothing_to_reduce_is_none():
    assert reduce(Reducer("mean"), []) is None
    assert reduce(Reducer("pass_at_k", 3), [1.0, 1.0]) is None  # fewer scored epochs than K


@pytest.mark.parametrize(
    ("text", "epochs", "expected"),
    [
        ("mean", 1, Reducer("mean")),
        (" max ", 3, Reducer("max")),
        ("pass_at_k:2", 3, Reducer("pass_at_k", 2)),
        ("at_least_k:3", 3, Reducer("at_least_k", 3)),
    ],
)
def test_parse_reducer(text, epochs, expected):
    assert parse_reducer(text, epochs=epochs) == expected


@pytest.mark.parametrize(
    ("text", "epochs", "problem"),
    [
        ("median", 3, "unknown reducer 'median'"),
        ("pass_at_k", 3, "pass_at_k needs a whole K"),
        ("pass_at_k:4", 3, "K must lie in 1..3 (the epochs), got 4"),
        ("at_least_k:0", 3, "K must lie in 1..3"),
        ("at_least_k:x", 3, "needs a whole K"),
        ("mean:2", 3, "the mean reducer takes no K"),
        ("mean", 0, "epochs must be a whole number in 1..20, got 0"),
        ("mean", 21, "epochs must be a whole number in 1..20, got 21"),
        ("mean", True, "epochs must be a whole number"),
    ],
)
def test_a_bad_reducer_or_epoch_count_is_refused(text, epochs, problem):
    with pytest.raises(ReducerError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        parse_reducer(text, epochs=epochs)


def test_the_metric_reduces_each_task_then_averages_over_tasks():
    per_task = {"t1": [1.0, 1.0, 0.0], "t2": [0.0, 0.0, 0.0], "t3": [1.0, 0.0, 1.0], "t4": []}
    got = metric(Reducer("mean"), per_task)
    reduced = [2 / 3, 0.0, 2 / 3]
    mean = sum(reduced) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in reduced) / 2)
    assert got["mean"] == pytest.approx(mean)
    assert got["stderr"] == pytest.approx(sd / math.sqrt(3))
    assert (got["tasks"], got["unscored_tasks"], got["epochs_scored"]) == (3, 1, 9)
    assert metric(Reducer("max"), per_task)["mean"] == pytest.approx(2 / 3)


def test_identical_epochs_do_not_shrink_the_standard_error():
    one_epoch = {f"t{i}": [float(i % 2)] for i in range(10)}
    k_epochs = {task: values * 5 for task, values in one_epoch.items()}
    for name in ("mean", "max", "mode"):
        once, five = metric(Reducer(name), one_epoch), metric(Reducer(name), k_epochs)
        assert five["stderr"] == pytest.approx(once["stderr"]) and five["stderr"] > 0
        assert five["mean"] == once["mean"] == 0.5
    # what treating the 50 epochs as independent samples would have claimed: √5 smaller
    flat = [v for values in k_epochs.values() for v in values]
    _, naive = reducers.mean_and_stderr(flat)
    assert naive < metric(Reducer("mean"), k_epochs)["stderr"] / 2


def test_one_task_has_no_standard_error():
    assert metric(Reducer("mean"), {"t": [1.0, 0.0]}) == {
        "mean": 0.5, "stderr": None, "tasks": 1, "unscored_tasks": 0, "epochs_scored": 2
    }  # fmt: skip
    assert metric(Reducer("mean"), {})["mean"] is None


def test_epochs_and_reducer_of_settings():
    assert reducers.epochs_of({}) == 1
    assert reducers.epochs_of({"repo": {"replicates": 4}}) == 4  # before issue 40
    assert reducers.epochs_of({"epochs": 3, "repo": {"replicates": 3}}) == 3
    assert reducers.reducer_of({}) == Reducer("mean")
    assert reducers.reducer_of({"reducer": {"name": "pass_at_k", "k": 2}}) == Reducer(
        "pass_at_k", 2
    )
    assert str(Reducer("pass_at_k", 2)) == "pass_at_k:2" and str(Reducer("max")) == "max"
