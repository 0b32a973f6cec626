"""The client's commands, arguments and errors against the live test server (real
PostgreSQL, Redis, a real RQ worker; the providers are fakes on 127.0.0.1)."""

import json
import random

import pytest
from django.utils import timezone

from battles.models import Battle, Run, Step
from battles.services import task_submit
from evals.models import Evaluation
from tests.makerun import free_port

pytestmark = pytest.mark.django_db(transaction=True)

FAST = ("--interval", "0.2", "--timeout", "60")

SUITE = """tasks:
  - {id: capital, prompt: "What is the capital of France?"}
  - {id: sum, prompt: "What is 2+2?", evaluation: {type: exact, expected: "4"}}
"""


def suite_file(tmp_path, text: str = SUITE):
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    return str(path)


# -- the token and the address ---------------------------------------------------------


def test_without_a_token_it_says_how_to_give_one(arena):
    code, out, err = arena(None, "run", "--agent", "echo", "--prompt", "hi")
    assert code == 2 and out == ""
    assert "no API token: set ARENA_TOKEN or pass --token" in err


def test_a_wrong_token_is_named_as_such_and_never_printed(arena, alice):
    wrong = "arena_this-token-does-not-exist-0123456789"
    code, out, err = arena(wrong, "eval", "record", "1")
    assert code == 1 and out == ""
    assert "HTTP 401" in err and "Invalid or revoked API token" in err
    assert "the token was refused: check ARENA_TOKEN or --token" in err
    assert wrong not in err


def test_the_token_and_url_come_from_the_environment(
    arena, alice, token_of, monkeypatch, live_server
):
    monkeypatch.setenv("ARENA_TOKEN", token_of(alice))
    monkeypatch.setenv("ARENA_URL", live_server.url)
    from arena_client.cli import main

    code = main(["eval", "record", "999999"])
    assert code == 1  # reached the server with the token: a 404, not a 401


def test_an_unreachable_arena_and_a_bad_url_are_reported(arena, alice, token_of):
    token = token_of(alice)
    address = f"http://127.0.0.1:{free_port()}"
    code, _, err = arena(token, "eval", "record", "1", url=address)
    assert code == 1 and f"cannot reach the arena at {address}" in err
    code, _, err = arena(token, "eval", "record", "1", url="127.0.0.1:8000")
    assert code == 2 and "--url must start with http:// or https://" in err
    assert token not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", "watch", "0"], "must be more than 0, got 0"),
        (["eval", "watch", "x"], "not a number: 'x'"),
        (["run", "--agent", "echo", "--prompt", "hi", "--interval", "-1"], "more than 0"),
        (["run", "--prompt", "hi"], "the following arguments are required: --agent"),
        (["eval", "start", "--agent", "a"], "the following arguments are required: --suite"),
        (["task", "submit", "--prompt", "x", "--kind", "repo"], "--kind repo needs --repo-url"),
        (
            ["task", "submit", "--prompt", "x", "--repo-url", "https://example.com/r.git"],
            "--repo-url: a repo task's options; add --kind repo",
        ),
        (["battle", "follow", "1", "--until", "never"], "invalid choice: 'never'"),
    ],
)
def test_arguments_that_make_no_sense_are_refused_before_any_call(arena, argv, message):
    code, out, err = arena("arena_unused", *argv)
    assert code == 2 and out == ""
    assert message in err


# -- run -------------------------------------------------------------------------------


def test_run_prints_the_agent_s_reply(arena, alice, token_of, fake_agents, evals_worker):
    token = token_of(alice)
    code, out, err = arena(token, "run", "--agent", "echo", "--prompt", "Say hello", *FAST)
    assert (code, out) == (0, "[echo] Say hello\n"), err
    assert token not in out + err
    evaluation = Evaluation.objects.get()
    assert evaluation.team.name == "Acme" and evaluation.status == "done"
    assert fake_agents["echo"].last_request.json["messages"][-1]["content"] == "Say hello"


def test_run_json_and_the_run_s_own_endpoint(arena, alice, token_of, fake_agents, evals_worker):
    code, out, err = arena(
        token_of(alice), "run", "--agent", "parrot", "--prompt", "two", "--json", *FAST
    )
    assert code == 0, err
    body = json.loads(out)
    assert body["agent"] == "parrot" and body["prompt"] == "two"
    assert body["reply"] == "[parrot] two" and body["status"] == "done" and body["error"] == ""


def test_a_failed_call_is_exit_1_with_the_provider_s_message(
    arena, alice, token_of, fake_agents, evals_worker
):
    code, out, err = arena(token_of(alice), "run", "--agent", "broken", "--prompt", "x", *FAST)
    assert code == 1 and out == ""
    assert "(broken) has no reply:" in err and "400" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--agent", "nobody", "--prompt", "x"], "HTTP 404 unknown_agent: no agent 'nobody'"),
        (["--agent", "echo", "--prompt", "   "], "HTTP 400 invalid: prompt: The prompt is empty."),
        (
            ["--agent", "echo", "--prompt", "ring \x07 bell"],
            "HTTP 400 invalid: prompt: The prompt contains control characters",
        ),
    ],
)
def test_run_refusals_carry_the_status_and_the_server_s_message(
    arena, alice, token_of, fake_agents, argv, expected
):
    code, out, err = arena(token_of(alice), "run", *argv)
    assert code == 1 and out == ""
    assert expected in err
    assert Evaluation.objects.count() == 0


def test_run_gives_up_at_its_timeout_and_says_the_work_goes_on(arena, alice, token_of, fake_agents):
    code, _, err = arena(
        token_of(alice), "run", "--agent", "echo", "--prompt", "x",
        "--interval", "0.1", "--timeout", "0.3",
    )  # fmt: skip
    assert code == 1
    assert "gave up after 0.3 s; run" in err and "goes on on the server" in err


def test_another_team_s_run_is_not_found(api, alice, charlie, token_of, arena, fake_agents):
    created = api(alice).post("/api/runs/", {"agent": "echo", "prompt": "x"}, format="json")
    assert created.status_code == 201, created.content
    run_id = created.json()["id"]
    outsider = api(charlie)
    for url in (
        f"/api/runs/{run_id}/",
        f"/api/evaluations/{run_id}/progress/",
        f"/api/evaluations/{run_id}/report.html",
    ):
        response = outsider.get(url)
        assert response.status_code == 404, url
        assert response.json()["error"]["code"] == "not_found"
    code, _, err = arena(token_of(charlie), "eval", "watch", str(run_id), *FAST)
    assert code == 1 and "HTTP 404 not_found: Not found." in err


def test_an_evaluation_is_not_a_run(api, alice, fake_agents, tmp_path):
    client = api(alice)
    body = {"suite": {"name": "s.yaml", "content": SUITE}, "agents": ["echo"]}
    evaluation = client.post("/api/evaluations/", body, format="json").json()
    response = client.get(f"/api/runs/{evaluation['id']}/")
    assert response.status_code == 404
    assert response.json()["error"] == {
        "code": "not_a_run",
        "message": f"evaluation {evaluation['id']} is not a one-prompt run (2 tasks, 1 "
        f"agents); read it at /api/evaluations/{evaluation['id']}/",
    }


# -- evaluations -----------------------------------------------------------------------


def test_start_watch_record_and_no_report_without_a_tournament(
    arena, api, alice, token_of, fake_agents, evals_worker, tmp_path
):
    token = token_of(alice)
    code, out, err = arena(
        token, "eval", "start", "--suite", suite_file(tmp_path), "--agent", "echo",
        "--agent", "parrot", "--judge", "judge", "--pairwise", "--max-tokens", "50",
        "--epochs", "1", "--reducer", "max",
    )  # fmt: skip
    assert code == 0, err
    evaluation_id = int(out)
    assert f"evaluation {evaluation_id} started (pending): echo, parrot on suite.yaml" in err

    code, out, err = arena(token, "eval", "watch", str(evaluation_id), *FAST)
    assert code == 0, err
    assert out == f"evaluation {evaluation_id} done: Answers 4/4, Pair judgements 2/2\n"
    assert f"evaluation {evaluation_id}" in err  # the bar
    assert api(alice).get(f"/api/evaluations/{evaluation_id}/progress/").json() == {
        "id": evaluation_id,
        "status": "done",
        "finished": True,
        "done": 6,
        "expected": 6,
        "percent": 100,
        "parts": [
            {"key": "runs", "label": "Answers", "done": 4, "expected": 4},
            {"key": "pairs", "label": "Pair judgements", "done": 2, "expected": 2},
        ],
    }

    record_path = tmp_path / "run.json"
    code, _, err = arena(token, "eval", "record", str(evaluation_id), "-o", str(record_path))
    assert code == 0 and f"wrote {record_path}" in err
    record = json.loads(record_path.read_text())
    assert record["run"]["status"] == "done"
    replies = {(r["task_id"], r["agent"]): r["output"] for r in record["results"]}
    assert replies[("capital", "parrot")] == "[parrot] What is the capital of France?"
    chosen = Evaluation.objects.get(pk=evaluation_id).settings
    assert (chosen["candidate_max_tokens"], chosen["epochs"]) == (50, 1)
    assert chosen["reducer"] == {"name": "max", "k": None}

    code, out, err = arena(token, "eval", "report", str(evaluation_id), "-o", "x.html")
    assert code == 1 and out == ""
    assert f"HTTP 404 no_report: evaluation {evaluation_id} has no tournament" in err


def test_a_tournament_s_report_comes_with_the_token(
    arena, api, alice, token_of, fake_agents, evals_worker, tmp_path
):
    token = token_of(alice)
    code, out, err = arena(
        token, "eval", "start", "--suite", suite_file(tmp_path), "--agent", "echo",
        "--agent", "parrot", "--judge", "judge", "--tournament", "round-robin",
        "--seed", "3", "--watch", *FAST,
    )  # fmt: skip
    assert code == 0, err
    evaluation_id, finished = out.splitlines()
    assert finished.startswith(f"evaluation {evaluation_id} done: Answers 4/4, Games ")
    report = tmp_path / "report.html"
    code, _, err = arena(token, "eval", "report", evaluation_id, "-o", str(report))
    assert code == 0, err
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and "echo" in html and "parrot" in html
    response = api(alice).get(f"/api/evaluations/{evaluation_id}/report.html")
    assert response.content.decode() == html
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert response["Content-Disposition"] == (
        f'attachment; filename="evaluation-{evaluation_id}-report.html"'
    )
    assert "default-src 'none'" in response["Content-Security-Policy"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set", "epochs"], "--set takes FIELD=VALUE, got 'epochs'"),
        (["--set", "judge=x", "--judge", "y"], "--set judge: the field is given twice"),
        (["--opening", "echo"], "--opening takes two slugs as A:B"),
        (["--attach", "missing.txt"], "cannot read the attachment"),
    ],
)
def test_start_refuses_bad_options_before_any_call(
    arena, alice, token_of, fake_agents, tmp_path, extra, message
):
    code, out, err = arena(
        token_of(alice), "eval", "start", "--suite", suite_file(tmp_path), "--agent", "echo",
        *extra,
    )  # fmt: skip
    assert code == 2 and out == "" and message in err
    assert Evaluation.objects.count() == 0


def test_start_passes_the_server_s_refusal_through(arena, alice, token_of, fake_agents, tmp_path):
    token = token_of(alice)
    code, _, err = arena(token, "eval", "start", "--suite", str(tmp_path / "nope.yaml"),
                         "--agent", "echo")  # fmt: skip
    assert code == 2 and "cannot read the suite" in err
    bad = suite_file(tmp_path, "tasks:\n  - {id: t1, promt: hi}\n")
    code, _, err = arena(token, "eval", "start", "--suite", bad, "--agent", "echo")
    assert code == 1
    assert "HTTP 400 invalid_suite: suite.yaml: task 't1': field 'promt'" in err
    code, _, err = arena(
        token, "eval", "start", "--suite", suite_file(tmp_path), "--agent", "echo",
        "--set", "best_of=3",
    )  # fmt: skip
    assert code == 1 and "HTTP 400 not_a_tournament" in err
    assert Evaluation.objects.count() == 0


def test_cancel(arena, alice, token_of, fake_agents, tmp_path):
    token = token_of(alice)
    code, out, _ = arena(token, "eval", "start", "--suite", suite_file(tmp_path),
                         "--agent", "echo")  # fmt: skip
    assert code == 0
    code, cancelled, _ = arena(token, "eval", "cancel", out.strip())
    assert (code, cancelled) == (0, f"evaluation {out.strip()}: cancelled\n")
    code, watched, _ = arena(token, "eval", "watch", out.strip(), *FAST)
    assert code == 1 and watched.startswith(f"evaluation {out.strip()} cancelled:")


# -- tasks and battles -----------------------------------------------------------------


def test_task_submit_prints_the_battle_and_follow_reports_it(
    arena, alice, token_of, roster, tmp_path
):
    token = token_of(alice)
    notes = tmp_path / "notes.txt"
    notes.write_text("the plan\n")
    code, out, err = arena(
        token, "task", "submit", "--prompt", "Summarise the notes in the attached file",
        "--attach", str(notes),
    )  # fmt: skip
    assert code == 0, err
    battle = Battle.objects.get(pk=int(out))
    assert battle.task.team.name == "Acme"
    assert [a.name for a in battle.task.attachments.all()] == ["notes.txt"]
    assert f"battle {battle.pk} (queued)" in err

    code, out, err = arena(token, "battle", "follow", str(battle.pk), "--interval", "0.1",
                           "--timeout", "0.3")  # fmt: skip
    assert code == 1 and out.startswith(f"battle {battle.pk}: queued\n")
    assert "gave up after 0.3 s" in err

    Battle.objects.filter(pk=battle.pk).update(status=Battle.Status.FAILED)
    code, out, _ = arena(token, "battle", "follow", str(battle.pk), *FAST)
    assert code == 1 and out.startswith(f"battle {battle.pk}: failed\n")


def test_follow_stops_once_judging_when_asked(arena, alice, token_of, roster):
    battle = task_submit(
        user=alice, instruction="Create a file named one.txt containing 1", rng=random.Random(1)
    )
    lane = battle.runs.get(side="A")
    for index, (args, result) in enumerate(
        [
            ({"command": "echo 1 > one.txt"}, {"ok": True, "exit_code": 0}),
            ({"command": "cat two.txt"}, {"ok": False, "exit_code": 1}),
            ({"path": "x" * 200}, {"ok": False, "error": "no such file"}),
        ]
    ):
        Step.objects.create(
            run=lane, index=index, tool="shell", args=args, result=result,
            started_at=timezone.now(), duration_ms=5,
        )  # fmt: skip
    Run.objects.filter(pk=lane.pk).update(status=Run.Status.ENDED, end_reason="delivered")
    Battle.objects.filter(pk=battle.pk).update(status=Battle.Status.JUDGING)
    code, out, _ = arena(
        token_of(alice), "battle", "follow", str(battle.pk), "--until", "judging", *FAST
    )
    assert code == 0
    assert out.splitlines() == [
        f"battle {battle.pk}: judging",
        'A step 0: shell {"command":"echo 1 > one.txt"} -> exit 0',
        'A step 1: shell {"command":"cat two.txt"} -> exit 1',
        'A step 2: shell {"path":"' + "x" * 90 + "… -> error: no such file",
        "A: ended (delivered)",
        "B: pending",
        f"battle {battle.pk}: Waiting for judges.",
    ]


def test_a_conversation_starts_nothing_and_says_so(arena, alice, token_of, roster):
    code, out, err = arena(token_of(alice), "task", "submit", "--prompt", "hello, how are you?")
    assert code == 1 and out.strip()
    assert "nothing started: the arena read this as conversation, not a task" in err
    assert Battle.objects.count() == 0


def test_start_sends_each_named_attachment_and_any_field_set(
    arena, alice, token_of, fake_agents, tmp_path
):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "numbers.csv").write_text("4\n5\n6\n")
    suite = suite_file(
        tmp_path,
        "tasks:\n  - {id: d1, kind: desktop, prompt: Sum the numbers in the attached file,"
        " attachments: [data/numbers.csv]}\n",
    )
    code, out, err = arena(
        token_of(alice), "eval", "start", "--suite", suite, "--agent", "echo",
        "--attach", "data/numbers.csv", "--set", "max_tokens=77", "--set", "step_budget=5",
    )  # fmt: skip
    assert code == 0, err
    evaluation = Evaluation.objects.get(pk=int(out))
    assert [(a.path, a.size) for a in evaluation.attachments.all()] == [("data/numbers.csv", 6)]
    assert evaluation.settings["candidate_max_tokens"] == 77
    assert evaluation.settings["desktop"]["step_budget"] == 5

    code, _, err = arena(token_of(alice), "eval", "start", "--suite", suite, "--agent", "echo")
    assert code == 1 and "HTTP 400 missing_attachment" in err and "data/numbers.csv" in err


def test_start_with_a_baseline_names_it(arena, alice, token_of, fake_agents, tmp_path):
    code, out, err = arena(
        token_of(alice), "eval", "start", "--suite", suite_file(tmp_path), "--agent", "echo",
        "--agent", "parrot", "--judge", "judge", "--baseline", "echo", "--epochs", "2",
    )  # fmt: skip
    assert code == 0, err
    evaluation = Evaluation.objects.get(pk=int(out))
    assert (evaluation.baseline.slug, evaluation.settings["epochs"]) == ("echo", 2)
    code, _, err = arena(
        token_of(alice), "eval", "start", "--suite", suite_file(tmp_path), "--agent", "echo",
        "--agent", "parrot", "--reducer", "best",
    )  # fmt: skip
    assert code == 1 and "HTTP 400 invalid_epochs: " in err and "'best'" in err
