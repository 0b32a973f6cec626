"""What judged games say in the record (evals.games): coverage in games, orientation
agreement counted once per game, per-candidate statistics, and the ratings rows with
their bootstrap metadata."""

import pytest

from evals.games import GameResult, coverage, orientation_agreement, ratings, statistics
from tests.ratings.test_task_bootstrap import two

G = GameResult


def test_coverage_counts_games_and_reports_a_mismatch():
    games = [G("t1", "a", "b", winner="A", agreement=True), G("t1", "a", "c", failure="x")]
    assert coverage(games) == {
        "expected_pairs": 2, "resolved_pairs": 1, "failed_pairs": 1, "complete": False
    }  # fmt: skip
    assert coverage(games[:1]) == {
        "expected_pairs": 1, "resolved_pairs": 1, "failed_pairs": 0, "complete": True
    }  # fmt: skip
    assert coverage(games, expected=3)["coverage_error"] == (
        "1 resolved + 1 failed games ≠ 3 expected"
    )
    assert coverage([]) == {
        "expected_pairs": 0, "resolved_pairs": 0, "failed_pairs": 0, "complete": True
    }  # fmt: skip


def test_orientation_agreement_counts_each_resolved_game_once():
    games = [
        G("t1", "a", "b", winner="A", agreement=True),
        G("t1", "a", "c", winner="tie", agreement=False),
        G("t2", "a", "b", winner="B", agreement=True),
        G("t2", "a", "c", failure="judge down"),
    ]
    assert orientation_agreement(games) == {
        "resolved_pairs": 3,
        "orientation_agreeing_pairs": 2,
        "orientation_disagreeing_pairs": 1,
        "agreement_rate": 2 / 3,
    }
    assert orientation_agreement([])["agreement_rate"] == 0.0


def test_statistics_by_model_id():
    games = [
        G("t1", "b", "a", winner="A", agreement=True),
        G("t1", "b", "c", winner="tie", agreement=False),
        G("t2", "c", "a", winner="B", agreement=True),
        G("t2", "a", "b", failure="x"),
    ]
    assert statistics(games, ["c", "b", "a"]) == [
        {"model": "a", "wins": 1, "losses": 1, "draws": 0, "agreement_count": 2,
         "disagreement_count": 0},
        {"model": "b", "wins": 1, "losses": 0, "draws": 1, "agreement_count": 1,
         "disagreement_count": 1},
        {"model": "c", "wins": 0, "losses": 1, "draws": 1, "agreement_count": 1,
         "disagreement_count": 1},
    ]  # fmt: skip


def test_ratings_rows_and_bootstrap_metadata():
    games = [
        G("t1", "y", "x", winner="A", agreement=True),
        G("t1", "y", "x", winner="A", agreement=True),
        G("t2", "x", "y", winner="A", agreement=True),
        G("t2", "x", "y", winner="tie", agreement=False),
        G("t2", "x", "y", failure="never"),
    ]
    rows, meta = ratings(games, ["y", "x", "z"], seed=4, replicates=50)
    y_wins, x_wins = 2.5, 1.5  # the draw is half a win each
    assert rows[0] == {"model": "x", "rating": pytest.approx(two(x_wins, y_wins)[0])}
    assert rows[1] == {"model": "y", "rating": pytest.approx(two(y_wins, x_wins)[0])}
    assert rows[2] == {"model": "z", "rating": None, "unavailable": "no_comparisons"}
    assert meta == {
        "bootstrap_seed": 4,
        "bootstrap_replicates": 50,
        "bootstrap_clusters": 2,
        "bootstrap_ran": False,
        "bootstrap_unavailable": "original_unrated",
    }


def test_ratings_with_bounds():
    # every task has wins for both sides: no resample can separate them
    games = [
        G(f"t{k}", "a", "b", winner=w, agreement=True)
        for k in range(9)
        for w in ("A", "B", "AB"[k % 2])
    ]
    rows, meta = ratings(games, ["a", "b"], seed=0, replicates=100)
    assert set(rows[0]) == {"model", "rating", "rating_lower", "rating_upper"}
    assert rows[0]["rating_lower"] <= rows[0]["rating"] <= rows[0]["rating_upper"]
    assert (meta["bootstrap_ran"], meta.get("bootstrap_unavailable")) == (True, None)
    assert meta["bootstrap_clusters"] == 9


def test_no_games_no_ratings():
    rows, meta = ratings([], ["a", "b"])
    assert rows == [
        {"model": "a", "rating": None, "unavailable": "no_comparisons"},
        {"model": "b", "rating": None, "unavailable": "no_comparisons"},
    ]
    assert (meta["bootstrap_clusters"], meta["bootstrap_ran"]) == (0, False)
