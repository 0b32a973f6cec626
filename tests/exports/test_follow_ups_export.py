"""The open data carries the submitter's follow-ups (``follow_ups``): one row per
follow-up of the published battles (rated or excluded), redacted as instructions are,
with the step at which each side received it; never the text as sent, nothing of a
battle still inside the publication delay."""

import pyarrow.parquet as pq
import pytest
from rest_framework.test import APIClient

from battles.models import Battle, FollowUp, FollowUpReceipt
from exports.instructions import instructions_redact_pending
from exports.models import RedactedFollowUp
from exports.schema import BY_NAME, row_problems
from tests.exports.factories import excluded_battle, export, old_battle, rows, with_steps
from tests.ratings.factories import judges

pytestmark = pytest.mark.django_db

PERSONAL = "Send the report to jane.doe@example.com, she is on +44 20 7946 0958"


@pytest.fixture
def agents(roster):
    return {a.slug: a for a in roster}


def follow_up(battle: Battle, seq: int, text: str, *, steps: dict[str, int]) -> FollowUp:
    made = FollowUp.objects.create(
        battle=battle, team=battle.task.team, author=battle.task.submitter, seq=seq, text=text
    )
    for run in battle.runs.all():
        if run.side in steps:
            FollowUpReceipt.objects.create(run=run, follow_up=made, step_index=steps[run.side])
    return made


def test_the_export_carries_follow_ups_redacted_with_each_sides_step(tmp_path, alice, agents):
    (judge,) = judges(1)
    battle = old_battle(alice, agents["rulebook"], agents["idle"], judge=judge)
    with_steps(battle, steps=3)
    follow_up(battle, 1, "Use the second sheet, please.", steps={"A": 1, "B": 2})
    follow_up(battle, 2, PERSONAL, steps={"A": 2})  # B's lane ended before it
    excluded = excluded_battle(alice, agents["rulebook"], agents["idle"])
    with_steps(excluded)
    follow_up(excluded, 1, "Stop after saving.", steps={"A": 0, "B": 0})
    recent = old_battle(alice, agents["rulebook"], agents["idle"], judge=judge, days=0.5)
    with_steps(recent)
    follow_up(recent, 1, "Not yet published.", steps={"A": 0, "B": 0})

    out, manifest = export(tmp_path, formats=("jsonl", "parquet"))

    got = rows(out, "follow_ups")
    assert [
        (r["battle_id"], r["seq"], r["received_at_step_a"], r["received_at_step_b"]) for r in got
    ] == [(battle.pk, 1, 1, 2), (battle.pk, 2, 2, None), (excluded.pk, 1, 0, 0)]
    assert got[0]["text"] == "Use the second sheet, please."
    assert "jane.doe" not in got[1]["text"] and "<EMAIL_ADDRESS_1>" in got[1]["text"]
    assert all(row_problems(BY_NAME["follow_ups"], r) == [] for r in got)
    assert pq.read_table(out / "follow_ups.parquet").num_rows == 3
    assert manifest["counts"]["follow_ups"] == 3
    for path in out.rglob("*"):
        if path.is_file():
            body = path.read_bytes()
            assert b"jane.doe" not in body and b"Not yet published" not in body, path
    # each follow-up was redacted once, and is kept for the next export
    assert RedactedFollowUp.objects.count() == 3


def test_redactions_are_made_ahead_and_the_api_serves_the_table(alice, agents):
    (judge,) = judges(1)
    battle = old_battle(alice, agents["rulebook"], agents["idle"], judge=judge)
    with_steps(battle)
    made = follow_up(battle, 1, PERSONAL, steps={"A": 0, "B": 1})

    assert instructions_redact_pending() >= 1  # the task's instruction and the follow-up
    assert "jane.doe" not in RedactedFollowUp.objects.get(follow_up=made).text

    served = APIClient().get("/api/open-data/follow_ups.jsonl")
    body = b"".join(served.streaming_content)
    assert served.status_code == 200
    assert b'"received_at_step_b":1' in body and b"jane.doe" not in body
