"""Desktop tasks in evaluations: each (task, agent) a lane like a battle's in a real
bubblewrap sandbox, driven by a scaffold agent on the real SDK clients against fake
provider servers scripted to act (tests.evals.scripted), the task's attachments in
/work/attachments, and the success command run in the lane's final state.

The mixed suite is the chat suite's 20 tasks and three desktop tasks × three agents;
the record's success results, rates and intervals, scores and win rates are the ones the
scripts imply. Lanes run shell-only (``sandbox_desktop`` off: a desktop costs seconds)
except in the command-line test, which boots the desktop and stores screenshots."""

import base64
import hashlib
import io
import json
import random
from datetime import timedelta
from pathlib import Path

import jsonschema
import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from accounts.models import Team
from agents.models import Agent, Arena
from arena_site.exceptions import ApplicationError
from battles.models import Run, Span, Step
from evals import selectors, services, suites
from evals.models import CriterionScore, EvalAttachment, EvalRun
from evals.services import desktop
from tests.evals.scripted import (
    ATTACHMENTS,
    DESKTOP_SAYS,
    NUMBERS,
    README,
    RUBRIC,
    SAYS,
    desktop_rubric_score,
    first_user_text,
    mixed_suite_bytes,
    rubric_score,
)

pytestmark = pytest.mark.django_db(transaction=True)  # each lane has its own connection

SCHEMA = json.loads((Path(selectors.__file__).parent / "record.schema.json").read_text())
AGENTS = ("alpha", "beta", "gamma")
SHA = {path: hashlib.sha256(data).hexdigest() for path, data in ATTACHMENTS.items()}
SHA256SUM = f"{SHA['data/numbers.csv']}  numbers.csv\n{SHA['notes/readme.txt']}  readme.txt\n"


@pytest.fixture
def shell_only(settings):
    settings.ARENA = settings.ARENA.replace(sandbox_desktop=False)


def reference_bootstrap_ci(values, n_iter=1000, alpha=0.05, seed=42):
    """000 §4's code, copied independently of evals.aggregates."""
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(n_iter))
    return means[int(alpha / 2 * n_iter)], means[int((1 - alpha / 2) * n_iter) - 1]


def weighted(scores: tuple[int, int]) -> float:
    correctness, clarity = scores
    return (2 * correctness / 5 + clarity / 3) / 3


def expected_weighted(task_id: str, agent: str) -> float | None:
    if task_id.startswith("d"):
        reply = DESKTOP_SAYS[(agent, task_id)]
        if reply is None:
            return None
        return weighted(
            tuple(desktop_rubric_score(task_id, reply, c) for c in ("correctness", "clarity"))
        )
    n = int(task_id[1:])
    if (agent, n) == ("gamma", 5):
        return None  # its provider failed for good
    reply = SAYS[agent](n)
    return weighted(tuple(rubric_score(n, reply, c) for c in ("correctness", "clarity")))


def test_a_mixed_suite_runs_its_desktop_tasks_as_lanes_and_checks_them(
    alice, desktop_agents, shell_only
):
    team = Team.objects.get(name="Acme")
    suite = services.suite_store(team=team, name="mixed.yaml", data=mixed_suite_bytes())
    rubric = services.rubric_store(team=team, name="rubric.yaml", data=RUBRIC)
    evaluation = services.evaluation_create(
        team=team, suite=suite, agent_slugs=list(AGENTS), rubric=rubric, judge_slug="judge",
        pairwise=True, attachments=ATTACHMENTS, step_budget=5, wall_budget_s=60,
        success_timeout_s=2,
    )  # fmt: skip

    evaluation = services.evaluation_execute(evaluation_id=evaluation.pk, sleep=[].append)

    record = selectors.evaluation_record(evaluation)
    jsonschema.Draft202012Validator(SCHEMA).validate(record)
    assert len(record["tasks"]) == 23 and record["run"]["status"] == "done"
    assert record["run"]["desktop"] == {
        "step_budget": 5, "wall_budget_s": 60, "success_timeout_s": 2, "lanes": 2,
    }  # fmt: skip
    results = {(r["task_id"], r["agent"]): r for r in record["results"]}
    assert [r["kind"] for r in record["results"]] == ["chat"] * 60 + ["desktop"] * 9

    # the success command in each lane's final state
    success = {key: results[key]["success"] for key in results if key[0] in ("d1", "d2")}
    ok = lambda output: {  # noqa: E731
        "exit_code": 0, "output": output, "error": "", "timed_out": False, "score": 1.0,
    }  # fmt: skip
    for result in success.values():
        assert result["duration_ms"] >= 0
        del result["duration_ms"]
    assert success == {
        ("d1", "alpha"): ok("15\n"),
        # beta gave up without writing out.txt: `test -e` fails
        ("d1", "beta"): {"exit_code": 1, "output": "", "error": "", "timed_out": False,
                         "score": 0.0},
        # gamma made out.txt a FIFO: `cat` waits on it until the 2 s bound kills it
        ("d1", "gamma"): {"exit_code": None, "output": "", "timed_out": True, "score": 0.0,
                          "error": "command timed out after 2 s and was killed"},
        # the attachments reached every lane byte for byte, even the one whose agent erred
        ("d2", "alpha"): ok(SHA256SUM),
        ("d2", "beta"): ok(SHA256SUM),
        ("d2", "gamma"): ok(SHA256SUM),
    }  # fmt: skip
    assert [results[("d3", a)]["success"] for a in AGENTS] == [None, None, None]

    # the lanes: one battles.Run each, its end, steps, spans; the final message is the output
    lanes = {key: r["lane"] for key, r in results.items() if r["lane"] is not None}
    assert set(lanes) == {(t, a) for t in ("d1", "d2", "d3") for a in AGENTS}
    assert all(results[(f"t{n:02d}", a)]["lane"] is None for n in range(1, 21) for a in AGENTS)
    ends = {
        key: (lane["end_reason"], lane["steps"], lane["agent_fault"]) for key, lane in lanes.items()
    }
    assert ends == {
        ("d1", "alpha"): ("delivered", 2, False),
        ("d1", "beta"): ("gave_up", 0, False),
        ("d1", "gamma"): ("delivered", 2, False),
        ("d2", "alpha"): ("delivered", 2, False),
        ("d2", "beta"): ("delivered", 2, False),
        ("d2", "gamma"): ("error", 0, True),
        ("d3", "alpha"): ("delivered", 1, False),
        ("d3", "beta"): ("delivered", 1, False),
        ("d3", "gamma"): ("delivered", 1, False),
    }
    for key, says in DESKTOP_SAYS.items():
        result = results[(key[1], key[0])]
        if says is None:
            assert result["status"] == "error" and result["output"] == ""
            assert result["error"].startswith("agent error: ") and "400" in result["error"]
        else:
            assert (result["status"], result["output"], result["error"]) == ("done", says, "")
    assert Run.objects.filter(for_evaluation=True).count() == 9
    lane = Run.objects.get(pk=lanes[("d1", "alpha")]["id"])
    assert lane.battle_id is None and lane.test_drive_id is None and lane.heartbeat_at
    assert (lane.step_budget, lane.wall_budget_s) == (5, 60)
    assert list(lane.steps.values_list("tool", flat=True)) == ["shell", "deliver"]
    assert lane.steps.get(index=0).result["exit_code"] == 0
    assert list(lane.spans.order_by("pk").values_list("kind", flat=True)) == [
        "model", "tool", "model", "tool",
    ]  # fmt: skip
    assert lane.eval_run.evaluation_id == evaluation.pk

    # every provider call is accounted for: chat answers, then each lane's steps
    asked = {name: len(fake.requests) for name, fake in desktop_agents.items() if name != "judge"}
    assert asked == {"alpha": 20 + 2 + 2 + 1, "beta": 20 + 1 + 2 + 1, "gamma": 22 + 2 + 1 + 1}

    # the judges read the final messages; scores, win rates as the scripts imply
    judge_prompts = [first_user_text(r.json) for r in desktop_agents["judge"].requests]
    assert any("AGENT RESPONSE:\nThe sum is 15\n\nReply ONLY" in p for p in judge_prompts)
    for (task_id, agent), result in results.items():
        assert result["weighted_score"] == pytest.approx(expected_weighted(task_id, agent))
    assert CriterionScore.objects.filter(run__task_id__startswith="d").count() == 2 * 8
    rates = record["statistics"]["win_rates"]
    # alpha beats beta on d1 and ties d2, d3: with the chat tasks' 10 wins and 10 ties, 11
    # and 12 of 23; it beats gamma on all 21 common tasks (d2 is not common: gamma erred).
    # beta and gamma tie d1 (both wrong, no "!"), beta wins d3 ("ready" over "ready!")
    # and the 10 even chat tasks, gamma the 9 other common ones.
    assert (rates["alpha"]["beta"], rates["alpha"]["gamma"]) == ((11 + 0.5 * 12) / 23, 1.0)
    assert (rates["beta"]["gamma"], rates["gamma"]["beta"]) == (11.5 / 21, 9.5 / 21)
    assert {j["task_id"] for j in record["judgments"]} >= {"d1", "d2", "d3"}
    assert next(j for j in record["judgments"] if j["task_id"] == "d2")["a"] == "alpha"
    assert not [
        j for j in record["judgments"] if j["task_id"] == "d2" and "gamma" in (j["a"], j["b"])
    ]

    # the success rate per agent, with the 95 % bootstrap interval of 000 (seed 42)
    lower, upper = reference_bootstrap_ci([0.0, 1.0])  # d1 failed, d2 passed
    half = {"rate": 0.5, "lower": lower, "upper": upper, "n": 2, "unscored": 0}
    assert record["statistics"]["success"] == {
        "alpha": {"rate": 1.0, "lower": 1.0, "upper": 1.0, "n": 2, "unscored": 0},
        "beta": half,
        "gamma": half,
    }
    assert record["statistics"]["exact_match"] == {"alpha": 1.0, "beta": 0.5, "gamma": 0.0}
    assert record["run"]["failed_runs"] == 2 and record["run"]["complete"] is False

    # the attachments, content-addressed once per team, cited with their hashes
    assert record["run"]["attachments"] == [
        {"task_id": "d1", "path": "data/numbers.csv", "name": "numbers.csv",
         "sha256": SHA["data/numbers.csv"], "size": len(NUMBERS)},
        {"task_id": "d2", "path": "data/numbers.csv", "name": "numbers.csv",
         "sha256": SHA["data/numbers.csv"], "size": len(NUMBERS)},
        {"task_id": "d2", "path": "notes/readme.txt", "name": "readme.txt",
         "sha256": SHA["notes/readme.txt"], "size": len(README)},
    ]  # fmt: skip
    stored = Path(django_settings.PRIVATE_MEDIA_ROOT) / "evals" / "attachments" / str(team.pk)
    assert {p.name: p.read_bytes() for p in stored.iterdir()} == {
        SHA["data/numbers.csv"]: NUMBERS, SHA["notes/readme.txt"]: README,
    }  # fmt: skip

    # the pages: a Success column, the success rates, and a desktop run's lane spans
    client = Client()
    client.force_login(alice)
    page = client.get(f"/evaluations/{evaluation.pk}/live/").text
    assert '<th scope="col">Agent</th><th scope="col">Rate</th><th scope="col">95 %' in page
    assert page.count("exit 0") == 4 and page.count("exit 1") == 1 and "timed out" in page
    run_pk = EvalRun.objects.get(evaluation=evaluation, task_id="d1", agent__slug="alpha").pk
    run_page = client.get(f"/evaluations/{evaluation.pk}/runs/{run_pk}/").text
    lane_spans = Run.objects.get(pk=lanes[("d1", "alpha")]["id"]).spans.count()
    assert lane_spans > 0 and run_page.count("<td>step ") == lane_spans


class Interrupted(Exception):
    """The worker stopping mid-evaluation, after the first desktop lane."""


def stop_after_first_lane(label: str) -> None:
    if label.endswith("(desktop)"):
        raise Interrupted(label)


SMALL = b"""tasks:
  - id: d2
    kind: desktop
    input: 'Read /work/attachments/readme.txt and deliver its first line.'
    attachments: [notes/readme.txt]
    success_cmd: cat /work/attachments/readme.txt
  - {id: d3, kind: desktop, prompt: 'Say you are ready by delivering the word ready.'}
"""


def test_an_interrupted_evaluation_resumes_only_the_missing_desktop_runs(
    alice, desktop_agents, shell_only
):
    team = Team.objects.get(name="Acme")
    suite = services.suite_store(team=team, name="small.yaml", data=SMALL)
    evaluation = services.evaluation_create(
        team=team, suite=suite, agent_slugs=["alpha", "beta"], desktop_lanes=1,
        attachments={"notes/readme.txt": README},
    )  # fmt: skip
    with pytest.raises(Interrupted):
        services.evaluation_execute(evaluation_id=evaluation.pk, progress=stop_after_first_lane)
    assert list(EvalRun.objects.values_list("task_id", "agent__slug")) == [("d2", "alpha")]
    # and a lane its dead worker left mid-way: no run, its heartbeat long stale
    alpha = Agent.objects.get(slug="alpha")
    orphan = Run.objects.create(
        for_evaluation=True, side="A", agent=alpha, step_budget=20, wall_budget_s=300,
        status=Run.Status.RUNNING, heartbeat_at=timezone.now() - timedelta(hours=1),
    )  # fmt: skip
    before = {name: len(fake.requests) for name, fake in desktop_agents.items()}

    evaluation = services.evaluation_execute(evaluation_id=evaluation.pk)

    asked = {name: len(fake.requests) - before[name] for name, fake in desktop_agents.items()}
    assert asked == {"alpha": 1, "beta": 2 + 1, "gamma": 0, "judge": 0}  # d3; d2 and d3
    runs = {(r.task_id, r.agent.slug): r for r in EvalRun.objects.select_related("agent", "lane")}
    assert sorted(runs) == [("d2", "alpha"), ("d2", "beta"), ("d3", "alpha"), ("d3", "beta")]
    assert {key: (r.status, r.output) for key, r in runs.items()} == {
        ("d2", "alpha"): ("done", "hello from the suite"),
        ("d2", "beta"): ("done", "hello from the suite"),
        ("d3", "alpha"): ("done", "ready"),
        ("d3", "beta"): ("done", "ready"),
    }
    assert [runs[("d2", a)].success_output for a in ("alpha", "beta")] == [README.decode()] * 2
    assert Run.objects.filter(for_evaluation=True).count() == 5  # 4 lanes and the orphan
    orphan.refresh_from_db()
    assert (orphan.status, orphan.end_reason) == ("ended", "error")
    assert orphan.error == desktop.STUCK_REASON.format(seconds=300)
    record = selectors.evaluation_record(evaluation)
    assert record["run"]["complete"] is True and record["run"]["status"] == "done"
    assert record["statistics"]["success"]["beta"] == {
        "rate": 1.0, "lower": 1.0, "upper": 1.0, "n": 1, "unscored": 0,
    }  # fmt: skip


def test_a_sandbox_that_never_started_is_an_error_without_a_success_result(
    alice, desktop_agents, shell_only, settings, tmp_path
):
    not_a_dir = tmp_path / "root"
    not_a_dir.write_text("a file where the sandbox root should be")
    settings.ARENA = settings.ARENA.replace(sandbox_root=not_a_dir)
    team = Team.objects.get(name="Acme")
    suite = services.suite_store(team=team, name="small.yaml", data=SMALL)
    evaluation = services.evaluation_create(
        team=team, suite=suite, agent_slugs=["alpha"], attachments={"notes/readme.txt": README}
    )

    services.evaluation_execute(evaluation_id=evaluation.pk)

    runs = list(EvalRun.objects.order_by("task_id").select_related("lane"))
    assert [(r.task_id, r.status, r.lane.end_reason) for r in runs] == [
        ("d2", "error", "error"), ("d3", "error", "error"),
    ]  # fmt: skip
    assert all(r.success_duration_ms is None and r.success_score is None for r in runs)
    assert runs[0].error == f"FileExistsError: [Errno 17] File exists: '{not_a_dir}'"
    assert len(desktop_agents["alpha"].requests) == 0  # the agent was never asked
    record = selectors.evaluation_record(evaluation)
    assert record["statistics"]["success"]["alpha"] == {
        "rate": None, "lower": None, "upper": None, "n": 0, "unscored": 1,
    }  # fmt: skip


def test_who_may_run_which_kind_of_task_is_decided_at_creation(alice, desktop_agents):
    team = Team.objects.get(name="Acme")
    arena = Arena.objects.public()
    Agent.objects.create(
        arena=arena, slug="house-rulebook", display_name="Rulebook", kind="builtin",
        builtin_policy="rulebook",
    )  # fmt: skip
    Agent.objects.create(arena=arena, slug="far", display_name="Far", kind="remote", params={})
    mixed = services.suite_store(team=team, name="mixed.yaml", data=mixed_suite_bytes())
    only_desktop = services.suite_store(
        team=team, name="d.yaml", data=mixed_suite_bytes(chat=False)
    )

    with pytest.raises(ApplicationError) as chat:
        services.evaluation_create(
            team=team, suite=mixed, agent_slugs=["alpha", "house-rulebook"], attachments=ATTACHMENTS
        )
    assert (chat.value.code, chat.value.message) == (
        "not_a_model",
        "agent 'house-rulebook' cannot answer chat task 't01': it is not a model agent (kind "
        "builtin); chat tasks need a provider and a model",
    )
    with pytest.raises(ApplicationError) as lane:
        services.evaluation_create(
            team=team, suite=only_desktop, agent_slugs=["far"], attachments=ATTACHMENTS
        )
    assert (lane.value.code, lane.value.message) == (
        "cannot_drive",
        "agent 'far' cannot drive desktop task 'd1': it has no endpoint (params.endpoint)",
    )
    # a built-in drives a desktop: a desktop-only suite may have it
    evaluation = services.evaluation_create(
        team=team,
        suite=only_desktop,
        agent_slugs=["house-rulebook", "alpha"],
        attachments=ATTACHMENTS,
    )
    assert evaluation.settings["desktop"]["success_timeout_s"] == 20  # the shell bound
    with pytest.raises(ApplicationError) as bound:
        services.evaluation_create(
            team=team, suite=only_desktop, agent_slugs=["alpha"], attachments=ATTACHMENTS,
            success_timeout_s=60,
        )  # fmt: skip
    assert bound.value.message == (
        "success_timeout_s must lie in 1..20 (the sandbox's shell bound, "
        "ARENA_SHELL_TIMEOUT_S), got 60"
    )
    twice = b"- {id: d1, kind: desktop, prompt: p, attachments: [a.txt, b.txt, a.txt]}\n"
    with pytest.raises(suites.SuiteError) as named_twice:
        suites.parse_suite(twice, name="s.yaml")
    assert (
        str(named_twice.value) == "s.yaml: task 'd1': field 'attachments[2]': names 'a.txt' twice"
    )


def encoded(files: dict[str, bytes]) -> list[dict[str, str]]:
    return [
        {"path": path, "content_base64": base64.b64encode(data).decode()}
        for path, data in files.items()
    ]


def body(files: dict[str, bytes], **extra) -> dict:
    return {
        "suite": {"name": "d.yaml", "content": mixed_suite_bytes(chat=False).decode()},
        "agents": ["alpha"],
        "attachments": encoded(files),
        **extra,
    }


def test_the_api_takes_attachments_as_base64_and_says_what_is_wrong(
    alice, charlie, api, desktop_agents, settings
):
    client = api(alice)
    created = client.post("/api/evaluations/", body(ATTACHMENTS, step_budget=7), format="json")
    assert created.status_code == 201, created.content
    evaluation_id = created.json()["id"]
    record = client.get(f"/api/evaluations/{evaluation_id}/").json()
    assert [(a["task_id"], a["path"], a["sha256"]) for a in record["run"]["attachments"]] == [
        ("d1", "data/numbers.csv", SHA["data/numbers.csv"]),
        ("d2", "data/numbers.csv", SHA["data/numbers.csv"]),
        ("d2", "notes/readme.txt", SHA["notes/readme.txt"]),
    ]
    assert record["run"]["desktop"]["step_budget"] == 7
    assert api(charlie).get(f"/api/evaluations/{evaluation_id}/").status_code == 404

    settings.ARENA = settings.ARENA.replace(attachment_max_bytes=8)
    refusals = [
        (body({"data/numbers.csv": NUMBERS}), 400, "missing_attachment",
         "task 'd2' needs the attachment 'notes/readme.txt', which was not given (the command "
         "line reads it beside the suite file; the API takes it in 'attachments')"),
        (body({**ATTACHMENTS, "../etc/passwd": b"x"}), 400, "unknown_attachment",
         "attachment '../etc/passwd' is not named by any desktop task of the suite"),
        ({**body({}), "attachments": [{"path": "data/numbers.csv", "content_base64": "%%%"}]},
         400, "invalid_attachment", "attachment 'data/numbers.csv': content_base64 is not "
         "valid base64"),
        ({**body({}), "attachments": encoded(ATTACHMENTS) + encoded({"data/numbers.csv": b"1"})},
         400, "duplicate_attachment", "attachment 'data/numbers.csv' is given twice"),
        (body({"data/numbers.csv": NUMBERS, "notes/readme.txt": README}), 413,
         "attachment_too_large", "task 'd2': 'notes/readme.txt' is 33 bytes; each attachment "
         "may be at most 8 bytes."),
        (body({"data/numbers.csv": b"\xff\xfe\n", "notes/readme.txt": b"ok"}), 400,
         "attachment_content_mismatch",
         "task 'd1': 'numbers.csv' does not contain UTF-8 text, as its name says."),
    ]  # fmt: skip
    for payload, status, code, message in refusals:
        refused = client.post("/api/evaluations/", payload, format="json")
        assert (refused.status_code, refused.json()["error"]) == (
            status, {"code": code, "message": message},
        ), payload  # fmt: skip
    assert EvalAttachment.objects.filter(evaluation_id__gt=evaluation_id).count() == 0


def test_the_command_reads_attachments_beside_the_suite_and_prints_the_success_rate(
    alice, desktop_agents, tmp_path
):
    suite = tmp_path / "suite.yaml"
    suite.write_bytes(
        b"tasks:\n  - id: d1\n    kind: desktop\n"
        b"    prompt: 'Add the numbers in /work/attachments/numbers.csv, write the sum to "
        b"/work/out.txt, deliver.'\n    attachments: [data/numbers.csv]\n"
        b"    success_cmd: test -e /work/out.txt && cat /work/out.txt\n"
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "numbers.csv").write_bytes(NUMBERS)
    out, err = tmp_path / "run.json", io.StringIO()

    call_command(
        "eval", "run", "--team", "Acme", "--suite", str(suite), "--agent", "alpha",
        "--output", str(out), "--step-budget", "4", stderr=err,
    )  # fmt: skip

    record = json.loads(out.read_text())
    (result,) = record["results"]
    assert (result["status"], result["output"]) == ("done", "The sum is 15")
    assert (result["success"]["exit_code"], result["success"]["output"]) == (0, "15\n")
    assert record["run"]["attachments"][0]["sha256"] == SHA["data/numbers.csv"]
    assert err.getvalue().splitlines()[-1] == (
        "alpha: 1 runs, 0 failed · success 1.00 [1.00, 1.00] over 1"
    )
    # a desktop lane: every step has its screenshot, stored as a battle's
    steps = Step.objects.filter(run_id=result["lane"]["id"]).order_by("index")
    assert [s.tool for s in steps] == ["shell", "deliver"]
    media = Path(django_settings.PRIVATE_MEDIA_ROOT)
    assert all((media / s.screenshot).read_bytes().startswith(b"\x89PNG") for s in steps)
    assert Span.objects.filter(run_id=result["lane"]["id"], kind="model").count() == 2

    # an attachment path may not lead out of the suite's directory
    (tmp_path / "data" / "numbers.csv").unlink()
    (tmp_path / "data" / "numbers.csv").symlink_to("/etc/hostname")
    with pytest.raises(CommandError) as escaped:
        call_command("eval", "run", "--team", "Acme", "--suite", str(suite), "--agent", "alpha")
    assert str(escaped.value) == (
        f"attachment 'data/numbers.csv' leads out of the suite's directory {tmp_path.resolve()}"
    )
