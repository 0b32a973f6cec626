"""The open data carries the judges' reasons (``vote_reasons``): the tags of exactly the
votes the ``votes`` table publishes, per vote and side, under the same pseudonyms, with
whether each set counts in the arena's tallies; the free-text notes never leave."""

import pyarrow.parquet as pq
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from exports.schema import BY_NAME, row_problems
from judging.models import Vote, VoteReason
from tests.exports.factories import days_ago, export, old_battle, rows
from tests.ratings.factories import judges

pytestmark = pytest.mark.django_db

NOTE = "Side A mailed jane.doe@example.com the report; call me on +44 20 7946 0958"


@pytest.fixture
def agents(roster):
    return {a.slug: a for a in roster}


def tag(vote: Vote, side: str, tags: list[str], note: str = NOTE) -> VoteReason:
    return VoteReason.objects.create(
        vote=vote, side=side, tags=tags, note=note, updated_at=timezone.now()
    )


def test_the_export_carries_each_votes_tags_per_side_and_never_a_note(tmp_path, alice, agents):
    first, second = judges(2)
    battle = old_battle(alice, agents["rulebook"], agents["idle"], judge=first)
    vote = battle.votes.get()
    tag(vote, "A", ["completed", "efficient"])
    tag(vote, "B", ["gave_up"])
    # a second, inadmissible vote's tags: exported, flagged as not counted
    late = Vote.objects.create(
        judge=second, battle=battle, choice="B", served_at=days_ago(31), voted_at=days_ago(31),
        final_at=days_ago(31), admissible=False, inadmissible_reason="too_fast",
    )  # fmt: skip
    tag(late, "A", ["false_success"])
    tag(late, "B", [], note="only a note")  # no tag: no row
    # a retracted vote's tags: never a judgment, never published
    undone = Vote.objects.create(
        judge=second, battle=battle, choice="A", served_at=days_ago(32), voted_at=days_ago(32),
        final_at=days_ago(32), admissible=True, retracted=True, retracted_at=days_ago(32),
    )  # fmt: skip
    tag(undone, "A", ["unsafe"])
    # a battle inside the publication delay: nothing of it
    recent = old_battle(alice, agents["rulebook"], agents["idle"], judge=first, days=0.5)
    tag(recent.votes.get(), "A", ["planning"])

    out, manifest = export(tmp_path, formats=("jsonl", "parquet"))

    got = rows(out, "vote_reasons")
    judge_of = {v["judge"] for v in rows(out, "votes") if v["choice"] == "A"}
    assert [(r["battle_id"], r["side"], r["agent"], r["tags"], r["counted"]) for r in got] == [
        (battle.pk, "A", "rulebook", ["false_success"], False),
        (battle.pk, "A", "rulebook", ["completed", "efficient"], True),
        (battle.pk, "B", "idle", ["gave_up"], True),
    ]
    assert {got[1]["judge"]} == judge_of  # the same pseudonym as in votes
    assert got[0]["judge"] != got[1]["judge"]
    assert all(row_problems(BY_NAME["vote_reasons"], r) == [] for r in got)
    assert pq.read_table(out / "vote_reasons.parquet").num_rows == 3
    assert manifest["counts"]["vote_reasons"] == 3
    for path in out.rglob("*"):
        if path.is_file():
            body = path.read_bytes()
            assert b"jane.doe" not in body and b"only a note" not in body, path
    assert "free-text notes are never exported" in (out / "DATA_CARD.md").read_text()


def test_the_open_data_api_serves_the_table(tmp_path, alice, agents):
    (judge,) = judges(1)
    battle = old_battle(alice, agents["rulebook"], agents["idle"], judge=judge)
    tag(battle.votes.get(), "B", ["careful"])

    served = APIClient().get("/api/open-data/vote_reasons.jsonl")

    body = b"".join(served.streaming_content)
    assert served.status_code == 200
    assert b'"tags":["careful"]' in body and b"jane.doe" not in body
