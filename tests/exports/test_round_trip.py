"""The round trip: battles decided through the arena's own services (serve, vote, the
one decision door), the refit publishes the board, the export writes it, and
`python -m ratings fit` (a subprocess, no Django) on the export's battles, with no flag
but --bootstrap 0 (the export says the rest), gives every published rating back to the
bit, from the JSON Lines and from the Parquet file alike (tests/exports/
test_reproducible_board.py checks intervals and rank bands too)."""

import datetime as dt
import json
import random
import shlex

import pytest

from agents.models import Arena
from battles.models import Battle
from ratings.models import RatingPoint
from ratings.refit import arena_refit
from tests.exports.factories import export, rows
from tests.judging.battle_factories import T0, ended_battle, judge_on, people
from tests.ratings.test_cli import cli

STRENGTH = {"rulebook": 2.0, "surveyor": 1.0, "idle": 0.0}  # who tends to win
PAIRS = [("rulebook", "surveyor"), ("surveyor", "idle"), ("rulebook", "idle")]


@pytest.fixture
def published(settings, alice, roster):
    """45 battles (15 per pair, sides at random) judged by 5 crowd judges through
    judge_next and vote_cast; n0 = 10 so every agent is rated; then the refit."""
    settings.ARENA = settings.ARENA.replace(n0=10, bootstrap_replicates=20)
    crowd = people(5)
    rng = random.Random(20)
    at = T0
    for round_ in range(15):
        for first, second in PAIRS:
            a, b = (first, second) if rng.random() < 0.5 else (second, first)
            battle = ended_battle(alice, a=a, b=b)
            gap = STRENGTH[a] - STRENGTH[b]
            roll = rng.random()
            p_a = 1 / (1 + 10 ** (-gap / 2))
            choice = (
                "tie"
                if roll < 0.1
                else "both_bad"
                if roll < 0.15
                else ("A" if rng.random() < p_a else "B")
            )
            judge_on(crowd[(round_ + len(a)) % 5], battle, choice, at=at)
            at += dt.timedelta(minutes=1)  # all in the past: T0 is an hour ago
    assert Battle.objects.filter(status=Battle.Status.DECIDED).count() == 45
    snapshot = arena_refit(arena_id=Arena.objects.public().pk).snapshot
    assert snapshot is not None and snapshot.battles == 45
    return snapshot


@pytest.mark.parametrize("file_name", ["battles.jsonl", "battles.parquet"])
def test_the_export_refits_to_the_published_board(tmp_path, published, file_name):
    out, manifest = export(tmp_path, delay_days=0)
    trip = manifest["round_trip"]
    assert trip["complete"] is True
    assert (trip["snapshot_battles"], trip["exported_battles"]) == (45, 45)
    # the decisions came through the door: weights are the judges' ω, not 1
    assert {r["weight"] for r in rows(out, "battles")} == {0.5}
    assert {r["decision_source"] for r in rows(out, "battles")} == {"crowd"}

    assert shlex.split(trip["command"]) == ["python", "-m", "ratings", "fit", "battles.jsonl"]
    done = cli(str(out / file_name), "--bootstrap", "0")
    assert done.returncode == 0, done.stderr
    fitted = {row["agent"]: row for row in json.loads(done.stdout)["agents"]}

    points = RatingPoint.objects.filter(snapshot=published).select_related("agent")
    board = {p.agent.slug: p for p in points}
    assert set(fitted) == set(board) == {"rulebook", "surveyor", "idle"}
    exported = {r["agent"]: r["rating"] for r in rows(out, "ratings")}
    for slug, point in board.items():
        assert point.rating is not None and not point.provisional
        assert fitted[slug]["provisional"] is False
        assert fitted[slug]["battles"] == point.battles
        assert exported[slug] == point.rating
        assert fitted[slug]["rating"] == point.rating  # every digit
    # the board is ordered, not flat: the round trip compares real differences
    assert board["rulebook"].rating > board["idle"].rating + 50
