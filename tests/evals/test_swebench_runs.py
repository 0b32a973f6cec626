"""The bundled SWE-bench sample instance, imported (evals.importers.swebench), run for
real: as a suite task of an offline evaluation and as a coding battle. Scaffold agents
on the real Anthropic SDK against a fake Messages API (tests.agents.fake_providers,
scripted as tests.evals.test_repo_tasks's lanes) work in real bubblewrap sandboxes; the
judge sandbox runs the real pytest on the instance's test lists. The gold patch scores
functional 1 and regression 1; no patch, functional 0. The agents never see the
instance's test patch (its hidden tests)."""

import base64
import contextlib
import json
import random
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command

from battles.coding_models import CodingOutcome
from battles.models import Battle, Run, Step
from battles.services import battle_run, task_submit
from battles.services.repo_admission import RepoRequest
from evals import suites
from tests.agents.fake_providers import FakeAnthropic
from tests.evals.test_repo_tasks import (
    KEY,
    _loopback,  # noqa: F401 - the fakes are on loopback
    lanes,
    scaffold,
)

pytestmark = pytest.mark.django_db(transaction=True)  # each lane has its own connection

SAMPLES = Path(__file__).resolve().parents[2] / "examples" / "swebench"
INSTANCE = "arena-samples__textkit-1"
GOLD = next(
    json.loads(line)
    for line in (SAMPLES / "instances.jsonl").read_text().splitlines()
    if json.loads(line)["instance_id"] == INSTANCE
)["patch"]
APPLY_GOLD = (
    f"cd /work/repo && printf %s {base64.b64encode(GOLD.encode()).decode()} | base64 -d | git apply"
)
# What the agent can see of the tests and of the history: never the hidden test.
LOOK = "cd /work/repo && cat tests/test_slug.py && git log --all --oneline | wc -l"


def imported_suite(tmp_path: Path) -> Path:
    suite = tmp_path / "imported" / "suite.yaml"
    call_command(
        "eval_import", "swebench", str(SAMPLES / "instances.jsonl"), "--repos",
        str(SAMPLES / "repos"), "--instance", INSTANCE, "--time-limit", "120",
        "--output", str(suite),
    )  # fmt: skip
    return suite


@contextlib.contextmanager
def gold_and_idle():
    """Two agents: 'gold' applies the instance's gold patch, 'idle' only looks."""
    with (
        FakeAnthropic(api_key=KEY, policy=lanes(lambda n: APPLY_GOLD)) as gold,
        FakeAnthropic(api_key=KEY, policy=lanes(lambda n: LOOK)) as idle,
    ):
        yield scaffold("gold", gold.base_url), scaffold("idle", idle.base_url)


def looked(run: Run) -> str:
    return "".join(step.result.get("stdout", "") for step in Step.objects.filter(run=run))


def test_the_sample_instance_runs_as_a_suite_task_graded_by_its_test_lists(
    alice, monkeypatch, tmp_path
):
    monkeypatch.setenv("EVAL_REPO_TEST_API_KEY", KEY)
    suite = imported_suite(tmp_path)
    out = tmp_path / "record.json"
    with gold_and_idle():
        call_command(
            "eval", "run", "--team", "Acme", "--suite", str(suite), "--agent", "gold",
            "--agent", "idle", "--desktop-lanes", "1", "--step-budget", "4",
            "--output", str(out),
        )  # fmt: skip

    record = json.loads(out.read_text())
    assert record["run"]["complete"] is True, record["run"]
    (task,) = record["tasks"]
    assert (task["id"], task["ref"], task["judge_ref"]) == (INSTANCE, "task", "judge")
    scores = {
        r["agent"]: (r["coding"]["functional"], r["coding"]["regression"], r["coding"]["applied"])
        for r in record["results"]
    }
    assert scores == {"gold": (1.0, 1.0, "apply"), "idle": (0.0, 1.0, "empty")}
    # The idle agent's lane saw the base tree only: no hidden test, one commit.
    idle_run = Run.objects.get(eval_run__agent__slug="idle")
    seen = looked(idle_run)
    assert "def test_lowercase" in seen and "test_collapses_spaces" not in seen
    assert seen.rstrip().endswith("1")
    # The judge ran exactly the FAIL_TO_PASS test as the gate.
    outcome = CodingOutcome.objects.get(run__eval_run__agent__slug="gold")
    assert outcome.checks["success"]["verdict"] == "passed"


def test_the_sample_instance_runs_as_a_coding_battle(alice, monkeypatch, tmp_path):
    """A battle task made from the imported instance: its bundle, refs and commands as
    the API's fields (docs/evaluations.md, "Importing task sets")."""
    monkeypatch.setenv("EVAL_REPO_TEST_API_KEY", KEY)
    suite = imported_suite(tmp_path)
    (task,) = suites.load_suite(suite).tasks
    request = RepoRequest(
        upload=SimpleUploadedFile("instance.bundle", (suite.parent / task.repo).read_bytes()),
        ref=task.ref, judge_ref=task.judge_ref, success_cmd=task.success_cmd,
        test_cmd=task.test_cmd, time_limit_s=task.time_limit_s,
    )  # fmt: skip
    with gold_and_idle() as (a, b):
        battle = task_submit(
            user=alice, instruction=task.prompt, repo=request, rng=random.Random(0)
        )
        Battle.objects.filter(pk=battle.pk).update(agent_a=a, agent_b=b)
        Run.objects.filter(battle=battle, side="A").update(agent=a)
        Run.objects.filter(battle=battle, side="B").update(agent=b)
        battle_run(battle_id=battle.pk)

    battle.refresh_from_db()
    assert battle.status == "screening", battle.failure_reason
    run_a, run_b = battle.runs.order_by("side")
    ca, cb = CodingOutcome.objects.get(run=run_a), CodingOutcome.objects.get(run=run_b)
    assert (ca.functional, ca.regression, ca.applied) == (1.0, 1.0, "apply")
    assert (cb.functional, cb.regression, cb.applied) == (0.0, 1.0, "empty")
    assert "test_collapses_spaces" not in looked(run_b)
    assert battle.task.instruction.startswith("slugify keeps runs of spaces")
