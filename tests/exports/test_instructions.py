"""The open data publishes instructions redacted (exports.instructions): each task's
instruction redacted once and kept, made ahead for decided and excluded battles, and
any still missing made before an export writes; the instruction as submitted never
leaves, neither in a table file nor through the API."""

import pytest
from rest_framework.test import APIClient

from battles.models import Battle
from exports.instructions import instructions_redact_pending
from exports.jobs import instructions_redact_ahead
from exports.models import RedactedInstruction
from exports.schema import DATA_CARD_VERSION
from tests.exports.factories import days_ago, excluded_battle, export, old_battle, rows
from tests.ratings.factories import decided_battle, judges

pytestmark = pytest.mark.django_db

PERSONAL = "Email jane.doe@example.com or call +44 20 7946 0958 about the refund."


@pytest.fixture
def agents(roster):
    return {a.slug: a for a in roster}


def test_an_exported_instruction_is_redacted_and_the_raw_one_never_leaves(tmp_path, alice, agents):
    judge = judges(1)[0]
    battle = old_battle(alice, agents["rulebook"], agents["idle"], judge=judge,
                        instruction=PERSONAL)  # fmt: skip

    out, manifest = export(tmp_path)

    (row,) = rows(out, "battles")
    assert row["battle_id"] == battle.pk
    published = row["instruction"]
    assert "<EMAIL_ADDRESS_1>" in published and "<PHONE_NUMBER_1>" in published
    assert published.endswith(" about the refund.")
    assert manifest["data_card_version"] == DATA_CARD_VERSION
    for path in out.rglob("*"):
        if path.is_file():
            assert b"jane.doe" not in path.read_bytes(), path
    served = APIClient().get("/api/open-data/battles.jsonl")
    body = b"".join(served.streaming_content)
    assert served.status_code == 200 and b"jane.doe" not in body and b"<EMAIL_ADDRESS_1>" in body
    kept = RedactedInstruction.objects.get(task_id=battle.task_id)
    assert kept.entities["EMAIL_ADDRESS"] == 1 and kept.entities["PHONE_NUMBER"] == 1


def test_a_tasks_redaction_is_made_once_and_kept(tmp_path, alice, agents):
    judge = judges(1)[0]
    battle = old_battle(alice, agents["rulebook"], agents["idle"], judge=judge,
                        instruction=PERSONAL)  # fmt: skip
    export(tmp_path, name="first")
    # The kept text is what the next export publishes: it is not redacted again.
    RedactedInstruction.objects.filter(task_id=battle.task_id).update(text="kept text")
    out, _ = export(tmp_path, name="second")
    assert [r["instruction"] for r in rows(out, "battles")] == ["kept text"]
    assert RedactedInstruction.objects.count() == 1


def test_redactions_are_made_ahead_for_decided_and_excluded_battles_only(alice, agents):
    judge = judges(1)[0]
    decided = old_battle(alice, agents["rulebook"], agents["idle"], judge=judge,
                         instruction=PERSONAL)  # fmt: skip
    excluded = excluded_battle(alice, agents["rulebook"], agents["idle"])
    judging = decided_battle(
        submitter=alice, a=agents["rulebook"], b=agents["idle"], outcome="", judge=judge,
        status=Battle.Status.JUDGING, judged_at=days_ago(1), instruction="Call Bob Smith",
    )  # fmt: skip

    assert instructions_redact_ahead() == 2

    made = set(RedactedInstruction.objects.values_list("task_id", flat=True))
    assert made == {decided.task_id, excluded.task_id}
    assert judging.task_id not in made
    assert instructions_redact_pending() == 0  # nothing left to make
