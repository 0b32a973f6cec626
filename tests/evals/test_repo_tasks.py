"""Repo tasks in offline evaluations and tournaments (issue 18, point 6): each (task,
agent, replicate) a coding lane in a real bubblewrap sandbox, driven by a scaffold agent
on the real Anthropic SDK against a fake Messages API (tests.agents.fake_providers),
its diff graded afterwards in a fresh judge sandbox by the real pytest, ruff and lizard.
The composite is the score; pass@k comes from the replicates' functional scores; a
tournament's game on a repo task is decided by the composites, with no judge at all.

The project is tests.coding.repos.FIX: ``add`` subtracts, ``test_add`` fails."""

import json
from pathlib import Path

import jsonschema
import pytest
from django.core.management import call_command

from accounts.models import Team
from agents.models import Agent, Arena
from arena_site.exceptions import ApplicationError
from battles.coding_models import CodingOutcome, RepoSource
from battles.models import Battle, Task
from battles.selectors import team_tasks
from evals import selectors, services, suites, tournament_selectors
from evals.models import EvalRepo, EvalRun, Evaluation, PairJudgement
from tests.agents.fake_providers import FakeAnthropic, tool_call
from tests.coding import repos

pytestmark = pytest.mark.django_db(transaction=True)  # each lane has its own connection

KEY = "sk-ant-test-eval-repo-0123456789abcdef"
SCHEMA = json.loads((Path(selectors.__file__).parent / "record.schema.json").read_text())
TOURNAMENT_SCHEMA = json.loads(
    (Path(selectors.__file__).parent / "tournament_record.schema.json").read_text()
)
FIX = "cd /work/repo && sed -i '0,/a - b/s//a + b/' calc.py"
LOOK = "cd /work/repo && cat calc.py"


@pytest.fixture(autouse=True)
def _loopback(settings):
    from tests.agents.conftest import LOOPBACK

    settings.ARENA = settings.ARENA.replace(internal_allowlist=LOOPBACK)


def lanes(decide):
    """A model that, per lane (a conversation with no assistant turn yet starts one),
    runs one shell command — ``decide(lane number from 1)`` says which — then delivers.
    The lanes run one at a time (``desktop_lanes=1``), so the count is the lane's."""
    started = {"lanes": 0, "command": ""}

    def policy(request: dict):
        done = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if done == 0:
            started["lanes"] += 1
            started["command"] = decide(started["lanes"])
            return tool_call("shell", {"command": started["command"]})
        return tool_call("deliver", {"message": f"ran {started['command']}"})

    return policy


def scaffold(slug: str, base_url: str) -> Agent:
    return Agent.objects.create(
        arena=Arena.objects.public(), slug=slug, display_name=slug.title(), kind="scaffold",
        provider="anthropic", model_id=f"{slug}-model", tool_set=["shell", "deliver"],
        params={"base_url": base_url, "api_key_env": "EVAL_REPO_TEST_API_KEY", "max_tokens": 512},
    )  # fmt: skip


def suite_file(tmp_path: Path) -> Path:
    repos.bundle(repos.FIX, tmp_path)  # writes tmp_path/fix.bundle
    path = tmp_path / "suite.yaml"
    path.write_text(
        "tasks:\n"
        "  - id: r1\n"
        "    kind: repo\n"
        "    prompt: Make the tests of calc pass.\n"
        "    repo: fix.bundle\n"
        "    ref: main\n"
        f"    success_cmd: {repos.FIX.success_cmd}\n"
        f"    test_cmd: {repos.FIX.test_cmd}\n"
        "    time_limit_s: 120\n"
    )
    return path


def test_repo_task_runs_three_times_per_agent_scored_by_composite_with_pass_at_k(
    alice, monkeypatch, tmp_path
):
    monkeypatch.setenv("EVAL_REPO_TEST_API_KEY", KEY)
    path = suite_file(tmp_path)
    out = tmp_path / "record.json"
    with (
        FakeAnthropic(api_key=KEY, policy=lanes(lambda n: FIX)) as fixer,
        FakeAnthropic(api_key=KEY, policy=lanes(lambda n: LOOK)) as reader,
        FakeAnthropic(api_key=KEY, policy=lanes(lambda n: FIX if n % 2 else LOOK)) as odd,
    ):
        scaffold("fixer", fixer.base_url)
        scaffold("reader", reader.base_url)
        scaffold("odd", odd.base_url)
        call_command(
            "eval", "run", "--team", "Acme", "--suite", str(path), "--agent", "fixer",
            "--agent", "reader", "--agent", "odd", "--replicates", "3", "--desktop-lanes", "1",
            "--step-budget", "5", "--output", str(out),
        )  # fmt: skip

    record = json.loads(out.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(record)
    assert record["run"]["repo"] == {"step_budget": 5, "lanes": 1, "replicates": 3}
    assert record["run"]["complete"] is True and record["run"]["failed_runs"] == 0
    assert record["tasks"][0]["repo"] == "fix.bundle" and record["tasks"][0]["ref"] == "main"
    rows = [(r["agent"], r["replicate"], r["coding"]["composite"]) for r in record["results"]]
    # fixer: functional, regression, lint, complexity 1.0 and $0 (cost efficiency 1.0);
    # reader: the gate fails; odd: lanes 1 and 3 of its three fix the bug.
    assert rows == [
        ("fixer", 0, 1.0), ("fixer", 1, 1.0), ("fixer", 2, 1.0),
        ("reader", 0, 0.0), ("reader", 1, 0.0), ("reader", 2, 0.0),
        ("odd", 0, 1.0), ("odd", 1, 0.0), ("odd", 2, 1.0),
    ]  # fmt: skip
    fixed = record["results"][0]["coding"]
    assert {k: fixed[k] for k in ("functional", "regression", "lint", "complexity")} == {
        "functional": 1.0, "regression": 1.0, "lint": 1.0, "complexity": 1.0
    }  # fmt: skip
    assert (fixed["cost_efficiency"], fixed["applied"]) == (1.0, "apply")
    looked = record["results"][3]["coding"]
    assert (looked["functional"], looked["regression"], looked["applied"]) == (0.0, 0.5, "empty")

    passes = record["statistics"]["pass_at_k"]
    assert passes["ks"] == [1, 3]
    assert passes["agents"]["fixer"]["tasks"] == [
        {"task_id": "r1", "n": 3, "c": 3, "pass_at_k": {"1": 1.0, "3": 1.0}}
    ]
    assert passes["agents"]["reader"]["mean"] == {"1": 0.0, "3": 0.0}
    odd_task = passes["agents"]["odd"]["tasks"][0]
    assert (odd_task["n"], odd_task["c"]) == (3, 2)
    assert odd_task["pass_at_k"]["1"] == pytest.approx(2 / 3, abs=1e-12)
    assert odd_task["pass_at_k"]["3"] == 1.0
    assert passes["agents"]["odd"]["mean"]["1"] == pytest.approx(2 / 3, abs=1e-12)

    # Each run: its agent's sandbox destroyed before its judge sandbox was created.
    outcomes = CodingOutcome.objects.filter(run__eval_run__isnull=False)
    assert outcomes.count() == 9
    assert all(o.agent_destroyed_at < o.judge_created_at for o in outcomes)
    # The source: one hidden repo task of the team, prepared once, never a battle.
    (link,) = EvalRepo.objects.all()
    task = Task.objects.get(pk=link.source_task_id)
    assert (task.kind, task.team.name, task.category) == ("repo", "Acme", "coding")
    assert RepoSource.objects.get(task=task).prepared_at is not None
    assert not Battle.objects.exists()
    # It is the evaluation's: the team's task list and the tasks API do not show it.
    assert not team_tasks([task.team_id]).exists()


def test_repo_fields_are_checked_with_the_file_task_and_field_named():
    def error(task: dict) -> str:
        base = {"id": "r", "kind": "repo", "prompt": "fix", "repo": "x.bundle",
                "success_cmd": "true"}  # fmt: skip
        with pytest.raises(suites.SuiteError) as caught:
            suites.parse_suite(json.dumps([{**base, **task}]).encode(), name="s.json")
        return str(caught.value)

    assert error({"repo": None}) == "s.json: task 'r': field 'repo': must be a string, got null"
    assert error({"repo": "../up.bundle"}) == (
        "s.json: task 'r': field 'repo': must not contain '..' parts, got '../up.bundle'"
    )
    assert error({"repo": "ftp://h/x"}) == (
        "s.json: task 'r': field 'repo': must be an http(s) git URL or a path to a bundle or "
        "tarball, got 'ftp://h/x'"
    )
    assert "must not carry credentials" in error({"repo": "https://u:p@h/x.git"})
    assert error({"ref": "-evil"}).startswith(
        "s.json: task 'r': field 'ref': must be a branch, tag or HEAD"
    )
    assert error({"success_cmd": None}) == (
        "s.json: task 'r': field 'success_cmd': must be a string, got null"
    )
    assert error({"time_limit_s": 5}) == (
        "s.json: task 'r': field 'time_limit_s': must be a whole number of seconds from 10 to "
        "3600, got 5"
    )
    assert error({"start_url": "https://example.com"}) == (
        "s.json: task 'r': field 'start_url': only desktop tasks take it (a repo task works "
        "on its repository)"
    )
    assert error({"kind": "chat", "success_cmd": None}) == (
        "s.json: task 'r': field 'repo': only repo tasks take it"
    )
    assert error({"kind": "desktop", "repo": None, "test_cmd": "pytest"}) == (
        "s.json: task 'r': field 'test_cmd': only repo tasks take it"
    )
    parsed = suites.parse_suite(
        b'[{"id": "r", "kind": "repo", "prompt": "fix", "repo": "https://h/x.git", '
        b'"success_cmd": "true"}]',
        name="s.json",
    )
    task = parsed.tasks[0]
    assert (task.repo, task.ref, task.judge_ref, task.test_cmd, task.time_limit_s) == (
        "https://h/x.git", "HEAD", "", None, 600
    )  # fmt: skip


def test_replicates_are_epochs_of_any_task(alice, tmp_path):
    team = Team.objects.get(name="Acme")
    scaffold("p", "http://127.0.0.1:9")
    chat = services.suite_store(team=team, name="c.json", data=b'[{"id": "c", "prompt": "hi"}]')
    epochs = services.evaluation_create(team=team, suite=chat, agent_slugs=["p"], replicates=2)
    assert (epochs.settings["epochs"], epochs.settings["repo"]) == (2, None)
    epochs.delete()
    path = suite_file(tmp_path)
    repo = services.suite_store(team=team, name="s.yaml", data=path.read_bytes())
    with pytest.raises(ApplicationError, match=r"needs the repository 'fix\.bundle'"):
        services.evaluation_create(team=team, suite=repo, agent_slugs=["p"])
    assert not Evaluation.objects.exists() and not Task.objects.exists()


def test_a_tournament_on_a_repo_task_is_decided_by_composite_without_a_judge(
    alice, monkeypatch, tmp_path
):
    monkeypatch.setenv("EVAL_REPO_TEST_API_KEY", KEY)
    team = Team.objects.get(name="Acme")
    path = suite_file(tmp_path)
    suite = services.suite_store(team=team, name="suite.yaml", data=path.read_bytes())
    with (
        FakeAnthropic(api_key=KEY, policy=lanes(lambda n: LOOK)) as reader,
        FakeAnthropic(api_key=KEY, policy=lanes(lambda n: FIX)) as fixer,
    ):
        scaffold("reader", reader.base_url)
        scaffold("fixer", fixer.base_url)
        evaluation = services.evaluation_create(
            team=team, suite=suite, agent_slugs=["reader", "fixer"], tournament="round-robin",
            step_budget=5, desktop_lanes=1,
            repos={"fix.bundle": (tmp_path / "fix.bundle").read_bytes()},
        )  # fmt: skip
        evaluation = services.evaluation_execute(evaluation_id=evaluation.pk)

    assert evaluation.status == "done" and evaluation.judge is None
    record = tournament_selectors.record_of(evaluation)
    jsonschema.Draft202012Validator(TOURNAMENT_SCHEMA).validate(record)
    run = record["run"]
    assert run["judge"] is None and run["composite_tasks"] == ["r1"]
    assert "judge_decoding" not in run
    assert (run["expected_pairs"], run["resolved_pairs"], run["complete"]) == (1, 1, True)
    (game,) = record["judgments"]
    assert (game["model_a"], game["model_b"], game["winner"]) == ("reader", "fixer", "fixer")
    assert game["ab"]["reason"] == "composite 0.0000 vs 1.0000"
    (stored,) = PairJudgement.objects.all()
    assert (stored.judge_model, stored.ab_raw, stored.ba_raw) == ("composite (tests)", [], [])
    assert [r["coding"]["composite"] for r in record["results"]] == [0.0, 1.0]
    (task,) = record["tournament"]["tasks"]
    assert task["status"] == "complete"
    by_slug = {s["model"]: s for s in record["statistics"]}
    assert (by_slug["fixer"]["wins"], by_slug["reader"]["losses"]) == (1, 1)
    # one run per agent: two lanes, each judged after its sandbox was gone
    assert EvalRun.objects.count() == 2
    assert all(o.agent_destroyed_at < o.judge_created_at for o in CodingOutcome.objects.all())
