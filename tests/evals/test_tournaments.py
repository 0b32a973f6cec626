"""The tournament schedules of 003 (evals.tournaments), on scripted games: each format,
early series stops, drawn series, each tie-break outcome, the seeded fallback, and a
failed game stopping a series or a bracket."""

import pytest

from evals.tournaments import (
    KING_OF_THE_HILL,
    ROUND_ROBIN,
    SINGLE_ELIMINATION,
    Series,
    TournamentError,
    Unplayed,
    check,
    play_series,
    run_task,
    scheduled_series,
    seeded_fallback,
)


def scripted(games: dict[tuple[str, str], str], default: str = "A"):
    """play() from a script: (a, b) → one outcome letter per game ("A", "B", "t" tie,
    "f" failed), in the order the series plays them. Records every call."""
    calls = []
    codes = {"A": "A", "B": "B", "t": "tie", "f": "failed"}

    def play(task_id, a, b, number):
        calls.append((task_id, a, b, number))
        script = games.get((a, b), default * 20)
        return codes[script[number - 1]]

    play.calls = calls
    return play


@pytest.mark.parametrize(
    ("best_of", "script", "tie_breaks", "status", "winner", "advanced", "games", "fallback"),
    [
        (1, "A", False, "won", "x", "x", 1, False),
        (1, "B", False, "won", "y", "y", 1, False),
        (1, "t", False, "drawn", None, None, 1, False),
        (3, "AA", False, "won", "x", "x", 2, False),  # stops early at 2 wins
        (3, "ABB", False, "won", "y", "y", 3, False),
        (3, "tAt", False, "drawn", None, None, 3, False),  # 1 win of 2 needed
        (3, "tt", False, "drawn", None, None, 2, False),  # neither can still reach 2
        (5, "ttt", False, "drawn", None, None, 3, False),  # 2 left, 3 needed
        (5, "AtBt", False, "drawn", None, None, 4, False),  # 1 game left, 3 needed
        (3, "Af", False, "failed", None, None, 2, False),
        (1, "tB", True, "drawn", None, "y", 2, False),  # first tie-break decides
        (1, "ttA", True, "drawn", None, "x", 3, False),
        (1, "tttB", True, "drawn", None, "y", 4, False),
        (3, "tt" + "ttt", True, "drawn", None, seeded_fallback(7, "x", "y"), 5, True),
        (1, "tf", True, "failed", None, None, 2, False),  # a failed tie-break
    ],
)
def test_series(best_of, script, tie_breaks, status, winner, advanced, games, fallback):
    series = Series("x", "y", 1)
    play = scripted({("x", "y"): script})
    play_series("t1", series, best_of=best_of, tie_breaks=tie_breaks, seed=7, play=play)
    assert (series.status, series.winner, series.advanced) == (status, winner, advanced)
    assert len(series.games) == games == len(play.calls)
    assert series.seeded_fallback is fallback
    assert [g.number for g in series.games] == list(range(1, games + 1))
    kinds = [g.kind for g in series.games]
    regulation = kinds.count("regulation")
    assert kinds == ["regulation"] * regulation + ["tie_break"] * (games - regulation)
    assert regulation <= best_of and (tie_breaks or regulation == games)


def test_seeded_fallback_is_a_function_of_seed_and_pair_only():
    picks = {seeded_fallback(seed, "m1", "m2") for seed in range(40)}
    assert picks == {"m1", "m2"}  # the seed matters
    for seed in range(40):
        assert seeded_fallback(seed, "m1", "m2") == seeded_fallback(seed, "m2", "m1")
    assert seeded_fallback(3, "m1", "m2") == seeded_fallback(3, "m1", "m2")


def test_round_robin_plays_every_pair_once_in_candidate_order_and_a_draw_stays_drawn():
    play = scripted({("a", "b"): "t", ("a", "c"): "B", ("b", "c"): "A"})
    result = run_task("t1", ["a", "b", "c"], format=ROUND_ROBIN, play=play)
    assert [(s.a, s.b, s.status, s.winner, s.advanced) for s in result.series] == [
        ("a", "b", "drawn", None, None),  # no tie-break in round robin
        ("a", "c", "won", "c", "c"),
        ("b", "c", "won", "b", "b"),
    ]
    assert (result.status, result.champion, result.games_played) == ("complete", None, 3)


def test_round_robin_failed_series_leaves_the_others_to_play():
    play = scripted({("a", "b"): "f"})
    result = run_task("t1", ["a", "b", "c"], format=ROUND_ROBIN, play=play)
    assert [s.status for s in result.series] == ["failed", "won", "won"]
    assert result.status == "incomplete"


def test_single_elimination_bracket_in_order():
    # round 1: a-b (b), c-d (c), e-f (e), g-h drawn then tie-break h; round 2: b-c, e-h
    play = scripted(
        {("a", "b"): "B", ("g", "h"): "tB", ("b", "c"): "A", ("e", "h"): "B", ("b", "h"): "A"}
    )
    result = run_task("t1", list("abcdefgh"), format=SINGLE_ELIMINATION, play=play)
    assert [(s.round, s.a, s.b, s.advanced) for s in result.series] == [
        (1, "a", "b", "b"),
        (1, "c", "d", "c"),
        (1, "e", "f", "e"),
        (1, "g", "h", "h"),
        (2, "b", "c", "b"),
        (2, "e", "h", "h"),
        (3, "b", "h", "b"),
    ]
    assert (result.status, result.champion, result.games_played) == ("complete", "b", 8)


def test_single_elimination_opening_matchups():
    play = scripted({})
    result = run_task(
        "t1", list("abcd"), format=SINGLE_ELIMINATION, play=play, opening=[("a", "d"), ("b", "c")]
    )
    assert [(s.a, s.b) for s in result.series] == [("a", "d"), ("b", "c"), ("a", "b")]
    assert result.champion == "a"


def test_single_elimination_seeded_fallback_advances_without_a_judged_win():
    play = scripted({("a", "b"): "tttt"}, default="A")
    result = run_task("t1", list("abcd"), format=SINGLE_ELIMINATION, seed=5, play=play)
    first = result.series[0]
    assert first.seeded_fallback and first.winner is None and first.status == "drawn"
    assert first.advanced == seeded_fallback(5, "a", "b")
    assert result.series[2].a == first.advanced


def test_single_elimination_failed_game_stops_the_bracket_without_a_champion():
    play = scripted({("c", "d"): "f"})
    result = run_task("t1", list("abcd"), format=SINGLE_ELIMINATION, play=play)
    assert [(s.a, s.b, s.status) for s in result.series] == [
        ("a", "b", "won"),
        ("c", "d", "failed"),
    ]
    assert (result.status, result.champion) == ("stopped", None)
    assert len(play.calls) == 2  # nothing after the failure


def test_king_of_the_hill_holder_stays_on_a_win_and_the_last_holder_is_champion():
    play = scripted({("a", "b"): "A", ("a", "c"): "B", ("c", "d"): "tA"})
    result = run_task("t1", list("abcd"), format=KING_OF_THE_HILL, play=play)
    assert [(s.round, s.a, s.b, s.advanced) for s in result.series] == [
        (1, "a", "b", "a"),
        (2, "a", "c", "c"),
        (3, "c", "d", "c"),  # drawn, the first tie-break keeps c
    ]
    assert result.champion == "c"


def test_king_of_the_hill_stops_on_a_failure():
    play = scripted({("a", "c"): "f"})
    result = run_task("t1", list("abcd"), format=KING_OF_THE_HILL, best_of=3, play=play)
    assert [s.status for s in result.series] == ["won", "failed"]
    assert (result.status, result.champion) == ("stopped", None)


@pytest.mark.parametrize(
    ("candidates", "kwargs", "message"),
    [
        (["a", "b", "c"], {"format": SINGLE_ELIMINATION, "best_of": 1}, "power-of-two"),
        (["a", "b"], {"format": ROUND_ROBIN, "best_of": 2}, "odd positive"),
        (["a", "b"], {"format": ROUND_ROBIN, "best_of": 0}, "odd positive"),
        (["a", "b"], {"format": ROUND_ROBIN, "best_of": True}, "odd positive"),
        (["a"], {"format": ROUND_ROBIN, "best_of": 1}, "at least two"),
        (["a", "a"], {"format": ROUND_ROBIN, "best_of": 1}, "distinct"),
        (["a", "b"], {"format": "swiss", "best_of": 1}, "format must be one of"),
        (
            ["a", "b", "c", "d"],
            {"format": SINGLE_ELIMINATION, "best_of": 1, "opening": [("a", "b"), ("a", "c")]},
            "every candidate exactly once",
        ),
        (
            ["a", "b", "c", "d"],
            {"format": SINGLE_ELIMINATION, "best_of": 1, "opening": [("a", "b")]},
            "2 pairs",
        ),
        (
            ["a", "b"],
            {"format": KING_OF_THE_HILL, "best_of": 1, "opening": [("a", "b")]},
            "single elimination only",
        ),
    ],
)
def test_bad_schedules_are_refused_with_the_reason(candidates, kwargs, message):
    with pytest.raises(TournamentError, match=message):
        check(candidates, **kwargs)


@pytest.mark.parametrize(
    ("n", "format", "series"),
    [
        (8, ROUND_ROBIN, 28),
        (8, SINGLE_ELIMINATION, 7),
        (5, KING_OF_THE_HILL, 4),
        (2, ROUND_ROBIN, 1),
    ],
)
def test_scheduled_series(n, format, series):
    assert scheduled_series(n, format) == series


@pytest.mark.parametrize("format", [ROUND_ROBIN, SINGLE_ELIMINATION, KING_OF_THE_HILL])
def test_an_unplayed_game_leaves_the_task_unfinished_with_what_was_played(format):
    # The third game is not played (a cancel, or a replay reaching a game never stored):
    # the task stops there, its series stays pending, and no champion is named.
    played = []

    def play(task_id, a, b, number):
        if len(played) == 2:
            raise Unplayed
        played.append((a, b))
        return "A"

    result = run_task("t1", ["p", "q", "r", "s"], format=format, play=play)
    assert result.status == "unfinished" and result.champion is None
    assert result.games_played == 2
    assert [s.status for s in result.series] == ["won", "won", "pending"]


def test_a_replay_of_the_stored_games_rebuilds_the_same_tournament():
    # A resumed task replays its stored games through the same schedule and goes on
    # from the first one missing, as if it had never stopped.
    script = {("p", "q"): "tttB", ("r", "s"): "B", ("q", "s"): "tA"}
    whole = run_task("t1", ["p", "q", "r", "s"], format=SINGLE_ELIMINATION, seed=3,
                     play=scripted(script))  # fmt: skip
    stored: dict = {}

    def stop_after(n):
        def play(task_id, a, b, number):
            if len(stored) == n:
                raise Unplayed
            stored[(a, b, number)] = scripted(script)(task_id, a, b, number)
            return stored[(a, b, number)]

        return play

    first = run_task("t1", ["p", "q", "r", "s"], format=SINGLE_ELIMINATION, seed=3,
                     play=stop_after(5))  # fmt: skip
    assert first.status == "unfinished" and first.games_played == 5
    fresh = []

    def resume(task_id, a, b, number):
        if (a, b, number) in stored:
            return stored[(a, b, number)]
        fresh.append((a, b, number))
        return scripted(script)(task_id, a, b, number)

    again = run_task("t1", ["p", "q", "r", "s"], format=SINGLE_ELIMINATION, seed=3, play=resume)
    assert again.as_dict() == whole.as_dict()
    assert fresh == [("q", "s", 1), ("q", "s", 2)]  # only what was missing
