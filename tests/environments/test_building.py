"""Building a candidate (environments.building, environments.derive): consent, files
that cannot be redacted, a failure without a reference, and the graders derived from a
reference's delivered files and message. Battles are written straight into the
database (tests.judging.battle_factories); files go through the real storage."""

import hashlib
import json

import pytest
from django.utils import timezone

from accounts.services import consent_terms_publish
from arena_site.media import media_save
from battles.media import delivery_name
from battles.models import Battle, Run, RunSnapshot, Step
from battles.snapshots import blob_name
from environments import derive
from environments.building import candidates_collect, environment_build
from environments.graders import canonical_json_sha256, normalised_text_sha256
from environments.models import Environment
from tests.judging.battle_factories import T0, ended_battle

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32


def with_snapshot(battle: Battle, attachments: dict[str, bytes] | None = None) -> Battle:
    entries = []
    for name, data in (attachments or {}).items():
        sha = hashlib.sha256(data).hexdigest()
        media_save(blob_name(sha), data)
        entries.append({"name": name, "sha256": sha, "size": len(data)})
    manifest = {"version": 1, "kind": "desktop", "instruction": battle.task.instruction,
                "start_url": "", "simulated_web": None, "screen": None, "tools": ["shell"],
                "step_budget": 20, "wall_budget_s": 300, "attachments": entries,
                "repo": None}  # fmt: skip
    snapshot = RunSnapshot.objects.create(
        digest=hashlib.sha256(json.dumps(manifest).encode()).hexdigest(),
        manifest=manifest,
        last_used_at=timezone.now(),
    )
    battle.runs.update(snapshot=snapshot, started_at=T0, ended_at=T0)
    return battle


def built(battle: Battle, side: str) -> Environment:
    candidates_collect()
    env = Environment.objects.get(battle=battle, run__side=side)
    environment_build(environment_id=env.pk)
    env.refresh_from_db()
    return env


def test_a_submitter_whose_consent_is_stale_holds_the_environment(alice, roster):
    battle = with_snapshot(ended_battle(alice))
    consent_terms_publish(text="New terms: you agree to more.")
    env = built(battle, "B")
    assert env.status == "held"
    assert "accepted version 1" in env.status_detail and env.state is None


def test_an_attachment_that_cannot_be_redacted_holds_the_environment(alice, roster):
    battle = with_snapshot(ended_battle(alice), {"face.png": PNG})
    env = built(battle, "B")
    assert env.status == "held"
    assert "attachments/face.png cannot be redacted" in env.status_detail


def test_an_attachments_text_is_redacted_into_a_file_of_its_own(alice, roster):
    text = b"Call Maria Garcia at maria.garcia@example.com about the order.\n"
    battle = with_snapshot(ended_battle(alice), {"note.txt": text})
    env = built(battle, "B")
    (entry,) = env.state["attachments"]
    assert entry["name"] == "note.txt" and entry["sha256"] != hashlib.sha256(text).hexdigest()
    kinds = {(r["where"], r["entity_type"]) for r in env.redactions}
    assert ("attachments/note.txt", "EMAIL_ADDRESS") in kinds
    assert all("maria" not in json.dumps(r).lower() for r in env.redactions)


def test_both_sides_failing_leaves_a_draft_grader_for_an_operator(alice, roster):
    battle = ended_battle(alice, end_reasons=("gave_up", "gave_up"))
    battle.task.instruction = "Save the totals as totals.csv"
    battle.task.save()
    battle = with_snapshot(battle)
    env = built(battle, "A")
    assert env.status == "needs_grader"
    assert "no reference run" in env.status_detail
    assert env.grader["checks"] == [{"type": "file_exists", "path": "totals.csv"}]


def test_a_wrong_result_is_graded_by_the_references_files_and_numbers(alice, roster):
    battle = with_snapshot(
        ended_battle(alice, end_reasons=("delivered", "delivered"), status="decided",
                     messages=("The total is 1234 over 3 rows", "The total is 99"))
    )  # fmt: skip
    Battle.objects.filter(pk=battle.pk).update(outcome="A", decided_at=timezone.now())
    run_a = battle.runs.get(side="A")
    csv, js = b"item,qty\r\npens,3  \r\n", b'{"b": 2, "a": [1]}'
    files = [("out/totals.csv", csv), ("report.json", js)]
    for name, data in files:
        media_save(delivery_name(run_a.pk, name.rsplit("/", 1)[-1]), data)
    Step.objects.create(
        run=run_a, index=5, tool="deliver", started_at=T0, duration_ms=1,
        args={"message": run_a.final_message, "files": [n for n, _ in files]},
        result={"ok": True, "data": {"files": [
            {"name": n.rsplit("/", 1)[-1], "size": len(d), "sha256": ""} for n, d in files
        ]}},
    )  # fmt: skip
    env = built(battle, "B")
    assert env.status == "graded" and env.failure_mode == "judged_worse"
    assert env.grader["checks"] == [
        {"type": "file_exists", "path": "out/totals.csv"},
        {"type": "file_kind", "path": "out/totals.csv", "kind": "csv"},
        {"type": "text_equals", "path": "out/totals.csv", "sha256": normalised_text_sha256(csv)},
        {"type": "file_exists", "path": "report.json"},
        {"type": "file_kind", "path": "report.json", "kind": "json"},
        {"type": "json_equals", "path": "report.json", "sha256": canonical_json_sha256(js)},
        {"type": "message_contains", "text": "1234"},
        {"type": "message_contains", "text": "3"},
    ]
    assert Run.objects.get(pk=env.reference_run_id).side == "A"


@pytest.mark.parametrize(
    ("instruction", "named"),
    [
        ("Save it as report.csv and a copy as out/report.json.", ["report.csv", "out/report.json"]),
        ("Write notes.txt, then notes.txt again.", ["notes.txt"]),
        ("See https://example.com/page.html or /etc/passwd.txt", []),
        ("version 1.2 is out; no files here", []),
    ],
)
def test_the_files_an_instruction_names(instruction, named):
    assert derive.files_named(instruction) == named


@pytest.mark.parametrize(
    ("path", "data", "kind"),
    [
        ("a.png", PNG, "png"),
        ("a.pdf", b"%PDF-1.7 ...", "pdf"),
        ("a.json", b'{"x": 1}', "json"),
        ("a.json", b"{not json", "text"),
        ("a.csv", b"x,y\n1,2\n", "csv"),
        ("a.txt", b"caf\xc3\xa9\n", "text"),
        ("a.bin", b"\xff\xfe\x00", None),
    ],
)
def test_the_kind_a_file_check_expects(path, data, kind):
    assert derive.kind_of(path, data) == kind


def test_a_build_that_breaks_holds_the_environment_with_the_reason(alice, roster):
    """A coding battle whose task lost its repository row: the build cannot finish; the
    environment is held with what broke, for an operator, instead of staying a
    candidate no job will look at again."""
    battle = with_snapshot(ended_battle(alice))
    RunSnapshot.objects.filter(runs__battle=battle).update(
        manifest={"version": 1, "kind": "repo", "instruction": "fix it", "attachments": [],
                  "repo": {"sha256": "0" * 64, "size": 1}},
    )  # fmt: skip
    media_save(blob_name("0" * 64), b"x")
    env = built(battle, "B")
    assert env.status == "held"
    assert env.status_detail == "the build failed: DoesNotExist"
