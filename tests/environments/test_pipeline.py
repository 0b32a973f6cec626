"""Failed runs become validated environments, end to end (issue 20): real battles in
bubblewrap sandboxes, the built-in agents and scaffold agents on the real Anthropic SDK
(against a fake Messages API on 127.0.0.1: a remote model is the one part that cannot
exist here), the candidate picker, consent, Presidio's redaction, the derived grader,
both replays in fresh sandboxes, and the exported package.

One test per failure mode: gave up, budget exhausted, a wrong result judged worse than
a correct opponent, and a coding battle whose tests failed."""

import io
import json
import tarfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone
from rq import SimpleWorker

from agents.models import Agent, Arena
from arena_site.media import media_delete
from arena_site.redis import queue
from battles.models import Battle
from battles.services import battle_run
from environments.building import candidates_collect, environment_build
from environments.jobs import environments_collect
from environments.models import BLOB_PREFIX, BattleScan, Environment
from environments.packages import environment_package, package_read
from environments.validation import ReplayUnavailable, environment_validate
from evals import services as eval_services
from evals.models import EvalRun
from judging.services import battle_screen
from tests.agents.conftest import LOOPBACK
from tests.agents.fake_providers import FakeAnthropic, tool_call
from tests.battles.pairing import submitted_between
from tests.coding import repos
from tests.coding.test_coding_battles import battle_between, scaffold
from tests.conftest import make_person
from tests.judging.battle_factories import judge_on

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-ant-test-environments-0123456789abcdef"
# Personal data the redaction must take out of everything exported.
EMAIL = "maria.garcia@example.com"


@pytest.fixture(autouse=True)
def _loopback_allowlisted(settings):
    """The fake Messages API lives on 127.0.0.1, which the worker's calls reach only
    when an operator allow-lists it (tests/agents/conftest.py)."""
    settings.ARENA = settings.ARENA.replace(internal_allowlist=LOOPBACK)


def between(user, instruction: str, a: str, b: str, *, step_budget: int | None = None):
    return submitted_between(user, instruction, a, b, step_budget=step_budget)


def run_and_screen(battle: Battle) -> Battle:
    battle_run(battle_id=battle.pk)
    battle.refresh_from_db()
    assert battle.status == "screening", battle.failure_reason
    battle_screen(battle_id=battle.pk)
    battle.refresh_from_db()
    assert battle.status == "judging"
    return battle


def convert(battle: Battle, side: str) -> Environment:
    """The pipeline's three steps, as its jobs call them; returns the run's environment."""
    created = candidates_collect()
    env = Environment.objects.get(run__battle=battle, run__side=side)
    assert env.pk in created
    assert environment_build(environment_id=env.pk) == "graded", Environment.objects.get(
        pk=env.pk
    ).status_detail
    status = environment_validate(environment_id=env.pk)
    env.refresh_from_db()
    assert status == "validated", (env.status_detail, env.replays)
    return env


def unpack(env: Environment) -> dict[str, bytes]:
    data = environment_package(env)
    package_read(data)  # verifies every hash
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def assert_replays(env: Environment, *mutations: str) -> None:
    failing, reference, *mutated = env.replays
    assert (failing["role"], failing["passed"], failing["error"]) == ("failing", False, "")
    assert (reference["role"], reference["passed"], reference["error"]) == ("reference", True, "")
    # The reference made wrong (its answer taken out, its files mutated) was refused.
    assert [(m["role"], m["mutation"], m["passed"]) for m in mutated] == [
        ("mutated", mutation, False) for mutation in mutations
    ]
    assert env.conversion_s is not None and env.conversion_s > 0
    assert env.validated_at is not None


def assert_no_personal_data(files: dict[str, bytes]) -> None:
    for name, data in files.items():
        assert EMAIL.encode() not in data, name


def test_a_run_that_gave_up_becomes_an_artifact_checked_environment(alice, roster):
    instruction = f"Create a file named notes.txt containing hello arena. Questions: {EMAIL}"
    battle = run_and_screen(between(alice, instruction, "rulebook", "idle"))
    a, b = battle.runs.order_by("side")
    assert (a.end_reason, b.end_reason) == ("delivered", "gave_up")

    env = convert(battle, "B")

    assert env.failure_mode == "gave_up" and env.reference_run_id == a.pk
    assert EMAIL not in env.state["instruction"] and "<EMAIL_ADDRESS_1>" in env.state["instruction"]
    assert {"where": "instruction", "entity_type": "EMAIL_ADDRESS",
            "placeholder": "<EMAIL_ADDRESS_1>"} in env.redactions  # fmt: skip
    checks = env.grader["checks"]
    assert {"type": "file_exists", "path": "notes.txt"} in checks
    assert {"type": "file_kind", "path": "notes.txt", "kind": "text"} in checks
    assert {"type": "text_contains", "path": "notes.txt", "text": "hello arena"} in checks
    assert_replays(env, "artifact")
    files = unpack(env)
    task = json.loads(files["task.json"])
    assert task["instruction"] == env.state["instruction"]
    assert task["evaluator"]["checks"] == checks
    assert json.loads(files["snapshot.json"]) == env.state
    assert_no_personal_data(files)

    # The package's suite runs as an evaluation: the agent that writes the file passes
    # the exported grader, the one that gives up fails it.
    team = alice.memberships.get().team
    suite = eval_services.suite_store(team=team, name="suite.json", data=files["suite.json"])
    evaluation = eval_services.evaluation_create(
        team=team, suite=suite, agent_slugs=["rulebook", "idle"]
    )
    eval_services.evaluation_execute(evaluation_id=evaluation.pk)
    scores = dict(
        EvalRun.objects.filter(evaluation=evaluation).values_list("agent__slug", "success_score")
    )
    assert scores == {"rulebook": 1.0, "idle": 0.0}


def test_a_run_that_exhausted_its_budget_becomes_an_environment(alice, roster, monkeypatch):
    monkeypatch.setenv("ENV_TEST_ANTHROPIC_API_KEY", KEY)

    def wanderer(request: dict):  # never delivers: it lists the workspace, again and again
        return tool_call("shell", {"command": "ls -la /work"})

    with FakeAnthropic(api_key=KEY, policy=wanderer) as fake:
        looper = Agent.objects.create(
            arena=Arena.objects.public(), slug="wanderer", display_name="Wanderer",
            kind="scaffold", provider="anthropic", model_id="wanderer-model",
            params={"base_url": fake.base_url, "api_key_env": "ENV_TEST_ANTHROPIC_API_KEY",
                    "max_tokens": 256},
        )  # fmt: skip
        instruction = "Create a file named notes.txt containing hello arena"
        battle = run_and_screen(between(alice, instruction, "rulebook", looper.slug, step_budget=4))
    a, b = battle.runs.order_by("side")
    assert (a.end_reason, b.end_reason) == ("delivered", "step_budget")

    env = convert(battle, "B")

    assert env.failure_mode == "budget" and env.reference_run_id == a.pk
    assert [x["tool"] for x in env.failing_actions] == ["shell"] * 4
    assert {"type": "file_exists", "path": "notes.txt"} in env.grader["checks"]
    assert {"type": "text_contains", "path": "notes.txt", "text": "hello arena"} in env.grader[
        "checks"
    ]
    assert_replays(env, "artifact")
    files = unpack(env)
    assert json.loads(files["trajectories/failing.json"]) == env.failing_actions
    assert json.loads(files["trajectories/reference.json"]) == env.reference_actions


def wrong_answerer(fake) -> Agent:
    return Agent.objects.create(
        arena=Arena.objects.public(), slug="guesser", display_name="Guesser",
        kind="scaffold", provider="anthropic", model_id="guesser-model",
        params={"base_url": fake.base_url, "api_key_env": "ENV_TEST_ANTHROPIC_API_KEY",
                "max_tokens": 256},
    )  # fmt: skip


def test_a_wrong_result_judged_worse_than_a_correct_opponent(alice, roster, terms, monkeypatch):
    monkeypatch.setenv("ENV_TEST_ANTHROPIC_API_KEY", KEY)

    def guesser(request: dict):  # works a little, then delivers a wrong answer
        done = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if done == 0:
            return tool_call("shell", {"command": "echo thinking > scratch.txt"})
        return tool_call("deliver", {"message": "6*7 = 36"})

    with FakeAnthropic(api_key=KEY, policy=guesser) as fake:
        slug = wrong_answerer(fake).slug
        battle = run_and_screen(between(alice, "what is 6*7", "rulebook", slug))
    a, b = battle.runs.order_by("side")
    assert (a.end_reason, b.end_reason) == ("delivered", "delivered")
    assert "42" in a.final_message and b.final_message == "6*7 = 36"
    # Before the crowd decides, the picker finds nothing wrong with a delivered run.
    assert candidates_collect() == []
    assert BattleScan.objects.get(battle=battle).stage == "ended"
    judge_on(make_person("outsider", None, terms), battle, "A")
    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == ("decided", "A")

    env = convert(battle, "B")

    assert env.failure_mode == "judged_worse" and env.reference_run_id == a.pk
    assert env.failed_at == battle.decided_at
    assert {"type": "message_contains", "text": "42"} in env.grader["checks"]
    assert_replays(env, "message")
    files = unpack(env)
    assert json.loads(files["grader.json"]) == env.grader
    # The winner is no candidate: nothing else of the battle is picked, now or later.
    assert not Environment.objects.filter(run=a).exists()
    assert candidates_collect() == []


def test_a_coding_run_whose_tests_failed_becomes_a_test_graded_environment(
    alice, monkeypatch, tmp_path
):
    monkeypatch.setenv("CODING_TEST_ANTHROPIC_API_KEY", "sk-ant-test-coding-0123456789abcdef0123")

    def fixer(request: dict):
        done = sum(1 for m in request["messages"] if m["role"] == "assistant")
        fix = {"command": "str_replace", "path": "calc.py",
               "old_str": "def add(a, b):\n    return a - b",
               "new_str": "def add(a, b):\n    return a + b"}  # fmt: skip
        if done == 0:
            return tool_call("edit", fix)
        return tool_call("deliver", {"message": "fixed add"})

    def breaker(request: dict):
        done = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if done == 0:
            return tool_call("shell", {"command": "cd /work/repo && echo '# todo' >> calc.py"})
        return tool_call("deliver", {"message": "looked"})

    key = "sk-ant-test-coding-0123456789abcdef0123"
    with (
        FakeAnthropic(api_key=key, policy=fixer) as fa,
        FakeAnthropic(api_key=key, policy=breaker) as fb,
    ):
        arena = Arena.objects.public()
        a, b = scaffold(arena, "fixer", fa.base_url), scaffold(arena, "breaker", fb.base_url)
        battle = battle_between(alice, a, b, repos.FIX, tmp_path)
        battle_run(battle_id=battle.pk)
    battle.refresh_from_db()
    assert battle.status == "screening", battle.failure_reason
    run_a, run_b = battle.runs.order_by("side")
    assert (run_a.coding.functional, run_b.coding.functional) == (1.0, 0.0)

    env = convert(battle, "B")

    assert env.failure_mode == "tests_failed" and env.reference_run_id == run_a.pk
    assert env.grader["checks"] == [
        {"type": "command", "run": repos.FIX.success_cmd, "cwd": "repo",
         "timeout_s": 120, "expect_exit": 0}
    ]  # fmt: skip
    assert [x["tool"] for x in env.failing_actions] == ["apply_patch"]
    assert [x["tool"] for x in env.reference_actions] == ["apply_patch"]
    assert_replays(env)
    files = unpack(env)
    state = json.loads(files["snapshot.json"])
    assert state["kind"] == "repo" and f"files/{state['repo']['sha256']}" in files
    assert files[f"files/{state['repo']['sha256']}"].startswith(b"# v2 git bundle")
    task = json.loads(files["task.json"])
    assert task["evaluator"]["checks"] == env.grader["checks"]
    assert timezone.now() >= env.validated_at


def test_a_replay_that_cannot_run_is_retried_then_the_environment_is_invalid(alice, roster):
    """The arena's side fails (an attachment's file gone from storage): the validation
    raises for its job to retry, counting attempts, and the third attempt gives up with
    the reason instead of looping."""
    upload = SimpleUploadedFile("names.txt", b"hello arena\n", content_type="text/plain")
    battle = submitted_between(
        alice, "Create a file named notes.txt containing hello arena", "rulebook", "idle",
        attachments=[upload],
    )  # fmt: skip
    battle = run_and_screen(battle)
    candidates_collect()
    env = Environment.objects.get(run__battle=battle, run__side="B")
    assert environment_build(environment_id=env.pk) == "graded"
    env.refresh_from_db()
    media_delete(BLOB_PREFIX + env.state["attachments"][0]["sha256"])

    for attempt in (1, 2):
        with pytest.raises(ReplayUnavailable, match="missing from storage"):
            environment_validate(environment_id=env.pk)
        env.refresh_from_db()
        assert (env.status, env.validation_attempts) == ("graded", attempt)
    assert environment_validate(environment_id=env.pk) == "invalid"
    env.refresh_from_db()
    assert env.validation_attempts == 3
    assert "could not run in 3 attempts" in env.status_detail
    # Nothing re-enqueues an invalid environment.
    assert environment_validate(environment_id=env.pk) == "invalid"


def test_the_jobs_carry_a_failure_to_validated_on_real_workers(alice, roster):
    """The cron's collect enqueues the build on the default queue; the build enqueues
    the replays on the battles queue, whose workers own the sandboxes."""
    instruction = "Create a file named todo.txt containing buy milk"
    battle = run_and_screen(between(alice, instruction, "rulebook", "idle"))
    created = environments_collect()
    env = Environment.objects.get(run__battle=battle, run__side="B")
    assert created == [env.pk]
    default, battles = queue("default"), queue("battles")

    SimpleWorker([default], connection=default.connection).work(burst=True)
    env.refresh_from_db()
    assert env.status == "graded"
    assert battles.fetch_job(f"environment-validate-{env.pk}") is not None

    SimpleWorker([battles], connection=battles.connection).work(burst=True)
    env.refresh_from_db()
    assert env.status == "validated", env.status_detail
    assert environments_collect() == []  # nothing new, nothing re-enqueued
