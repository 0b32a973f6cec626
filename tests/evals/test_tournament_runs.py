"""Tournament evaluations end to end: candidates on the real OpenAI SDK and a pairwise
judge on the real Anthropic SDK, both against fake servers on 127.0.0.1 whose scripts
decide every reply (tests.evals.tournament_world); the database, the services, the
schedule and the record are real. Each test states the games the script plays and
asserts the brackets, coverage and record they imply, exactly.

Waits between a judge's attempts are recorded, not slept."""

import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.models import Agent
from arena_site.exceptions import ApplicationError
from evals import services, tournament_selectors
from evals.models import EvalSpan, Evaluation, PairJudgement
from evals.services import execution
from evals.tournaments import seeded_fallback
from tests.agents.fake_providers import HttpError
from tests.evals.tournament_world import (
    KEY,
    VALIDATOR,
    brief,
    candidate_policy,
    play,
    start,
    suite_bytes,
)

pytestmark = pytest.mark.django_db


def test_a_round_robin_of_best_of_three_series(acme, world):
    # Task 1: p sweeps q 2-0 (the third game is never played); p and r draw a game and
    # split one (orientations disagree: a draw), and with one game left neither can
    # reach two wins: drawn; r beats q 2-1. Task 2: the judge's (B, A) orientation never
    # answers for p-q: that game fails and ends its series (failed), the others play.
    world.judge.script = {
        (1, "p", "q"): ["AA", "AA"],
        (1, "p", "r"): ["tt", "AB"],
        (1, "q", "r"): ["BB", "AA", "BB"],
        (2, "p", "q"): ["A-"],
        (2, "p", "r"): ["AA", "tt", "AA"],
        (2, "q", "r"): ["BB", "BB"],
    }
    evaluation, record, sleeps = play(
        acme, agents=["p", "q", "r"], n_tasks=2, tournament="round-robin", best_of=3
    )
    assert brief(record) == {
        "t01": ("complete", None, ["p-q won p aa", "p-r drawn - tt", "q-r won r bab"]),
        "t02": ("incomplete", None, ["p-q failed - x", "p-r won p ata", "q-r won r bb"]),
    }
    run = record["run"]
    assert (run["expected_pairs"], run["resolved_pairs"], run["failed_pairs"]) == (13, 12, 1)
    assert run["complete"] is False and "coverage_error" not in run
    assert "unfinished_tasks" not in run
    assert run["orientation_agreement"] == {
        "resolved_pairs": 12, "orientation_agreeing_pairs": 11,
        "orientation_disagreeing_pairs": 1, "agreement_rate": 11 / 12,
    }  # fmt: skip
    assert record["statistics"] == [
        {"model": "p", "wins": 4, "losses": 0, "draws": 3, "agreement_count": 6,
         "disagreement_count": 1},
        {"model": "q", "wins": 1, "losses": 6, "draws": 0, "agreement_count": 7,
         "disagreement_count": 0},
        {"model": "r", "wins": 4, "losses": 3, "draws": 3, "agreement_count": 9,
         "disagreement_count": 1},
    ]  # fmt: skip
    assert record["tournament"]["status"] == "incomplete"
    # the failed game: its (A, B) verdict kept, the (B, A) orientation's three replies
    failure = record["judgment_failures"][0]
    assert (failure["task_id"], failure["model_a"], failure["model_b"], failure["game"]) == (
        "t02", "p", "q", 1,
    )  # fmt: skip
    assert failure["ab"]["winner"] == "p" and failure["ba"]["winner"] is None
    assert len(failure["ba"]["raw"]) == 3 and "not a single JSON object" in failure["failure"]
    assert sleeps == [1.0, 2.0]  # the failed orientation's backoff, nothing else
    # the disagreeing game is a draw that keeps both orientations' verdicts
    split = next(j for j in record["judgments"] if j["agreement"] is False)
    assert (split["task_id"], split["game"], split["winner"]) == ("t01", 2, "tie")
    assert (split["ab"]["winner"], split["ba"]["winner"]) == ("p", "r")
    # games in task-file then play order
    assert [(j["task_id"], j["model_a"], j["model_b"], j["game"]) for j in record["judgments"]][
        :4
    ] == [("t01", "p", "q", 1), ("t01", "p", "q", 2), ("t01", "p", "r", 1), ("t01", "p", "r", 2)]
    # p never lost, q lost most: every candidate rated (p→q, q→r, r→p through the draws),
    # in that order; with task 2 alone q is never rated, so replicates of only task 2
    # are invalid and the bounds are withheld
    ratings = {r["model"]: r for r in record["ratings"]}
    assert ratings["p"]["rating"] > ratings["r"]["rating"] > ratings["q"]["rating"]
    assert (run["bootstrap_ran"], run["bootstrap_clusters"]) == (True, 2)
    assert run["bootstrap_unavailable"] == "invalid_replicates"
    assert 0 < run["bootstrap_valid"] < 1000
    # every game's two orientations are spans of the judge, stored with the game
    assert EvalSpan.objects.filter(evaluation=evaluation, role="pairwise").count() == 12 * 2 + 4
    assert world.judge.requests == 12 * 2 + 4


def test_single_elimination_with_tie_breaks_a_fallback_and_a_stopped_bracket(acme, world):
    # Opening matchups p-s and q-r. Task 1: p and s draw, the first tie-break goes to p;
    # r beats q; the final p-r is drawn and so are its three tie-breaks (one of them by
    # disagreeing orientations): the seeded fallback picks the champion. Task 2: the
    # (A, B) orientation of q-r never answers: the bracket stops, no champion. Task 3:
    # s and q advance, and q wins the final on its second tie-break.
    world.judge.script = {
        (1, "p", "s"): ["tt", "AA"],
        (1, "q", "r"): ["BB"],
        (1, "p", "r"): ["tt", "tt", "AB", "tt"],
        (2, "p", "s"): ["AA"],
        (2, "q", "r"): ["-A"],
        (3, "p", "s"): ["BB"],
        (3, "q", "r"): ["AA"],
        (3, "s", "q"): ["tt", "tt", "BB"],
    }
    _, record, _ = play(
        acme, agents=["p", "q", "r", "s"], n_tasks=3, tournament="single-elimination",
        seed=7, opening=[["p", "s"], ["q", "r"]],
    )  # fmt: skip
    champion = seeded_fallback(7, "p", "r")
    assert brief(record) == {
        "t01": ("complete", champion, [
            "p-s drawn →p ta*", "q-r won r b", f"p-r drawn →{champion} tt*t*t*",
        ]),
        "t02": ("stopped", None, ["p-s won p a", "q-r failed - x"]),
        "t03": ("complete", "q", ["p-s won s b", "q-r won q a", "s-q drawn →q tt*b*"]),
    }  # fmt: skip
    final = record["tournament"]["tasks"][0]["series"][2]
    assert final["seeded_fallback"] is True and final["winner"] is None
    assert record["tournament"]["opening_matchups"] == [["p", "s"], ["q", "r"]]
    run = record["run"]
    assert (run["expected_pairs"], run["resolved_pairs"], run["failed_pairs"]) == (14, 13, 1)
    assert run["complete"] is False
    # the fallback is no judged win: p and r have no win over each other in the stats
    stats = {s["model"]: s for s in record["statistics"]}
    assert (stats["p"]["wins"], stats["p"]["draws"], stats["p"]["losses"]) == (2, 5, 1)
    assert (stats["r"]["wins"], stats["r"]["draws"], stats["r"]["losses"]) == (1, 4, 1)


def test_king_of_the_hill_with_an_early_stop_and_a_tie_break(acme, world):
    # p holds against q 2-1; r and p split two games and draw the third: a drawn
    # series, whose first tie-break r wins: r is the final holder.
    world.judge.script = {
        (1, "p", "q"): ["AA", "BB", "AA"], (1, "p", "r"): ["BB", "AA", "tt", "BB"],
    }  # fmt: skip
    _, record, _ = play(
        acme, agents=["p", "q", "r"], n_tasks=1, tournament="king-of-the-hill", best_of=3
    )
    assert brief(record) == {
        "t01": ("complete", "r", ["p-q won p aba", "p-r drawn →r batb*"]),
    }
    run = record["run"]
    assert (run["expected_pairs"], run["resolved_pairs"], run["complete"]) == (7, 7, True)
    # every candidate rated (each won and lost a game), but one task is one cluster
    assert run["bootstrap_ran"] is False and run["bootstrap_unavailable"] == "too_few_tasks"
    assert "bootstrap_valid" not in run


def test_a_resumed_tournament_plays_only_the_games_it_lacks(acme, world):
    script = {
        (1, "p", "s"): ["tt", "AA"],
        (1, "q", "r"): ["BB"],
        (1, "p", "r"): ["tt", "tt", "AB", "BB"],
        (2, "p", "s"): ["BB"],
        (2, "q", "r"): ["AA"],
        (2, "s", "q"): ["AA"],
    }
    world.judge.script = script
    evaluation, whole, _ = play(
        acme, agents=["p", "q", "r", "s"], n_tasks=2, tournament="single-elimination",
        opening=[["p", "s"], ["q", "r"]],
    )  # fmt: skip
    asked = world.judge.requests
    # an interruption lost task 1's final (its four games): resuming judges those only
    PairJudgement.objects.filter(
        evaluation=evaluation, task_id="t01", agent_a__slug="p", agent_b__slug="r"
    ).delete()
    partial = tournament_selectors.record_of(evaluation)
    VALIDATOR.validate(partial)
    assert partial["run"]["complete"] is False and partial["run"]["unfinished_tasks"] == ["t01"]
    assert brief(partial)["t01"] == ("unfinished", None, [
        "p-s drawn →p ta*", "q-r won r b", "p-r pending - ",
    ])  # fmt: skip
    world.judge.games[(1, "p", "r")] = 0  # the fake judge replays the final's script
    services.evaluation_execute(evaluation_id=evaluation.pk, sleep=lambda s: None)
    assert world.judge.requests - asked == 4 * 2
    again = tournament_selectors.record_of(Evaluation.objects.get(pk=evaluation.pk))

    def stable(record):  # what the replay must reproduce (durations and times differ)
        games = [{k: v for k, v in j.items() if k != "duration_ms"} for j in record["judgments"]]
        return record["tournament"], games, record["statistics"], record["ratings"]

    assert stable(again) == stable(whole)
    assert again["run"]["complete"] is True


def test_a_cancel_stops_the_tournament_before_its_next_game(acme, world, monkeypatch):
    monkeypatch.setattr(execution, "CANCEL_POLL_S", 0.0)
    world.judge.script = {
        (1, "p", "q"): ["AA"], (1, "r", "s"): ["BB"], (1, "p", "s"): ["AA"],
        (2, "p", "q"): ["AA"], (2, "r", "s"): ["AA"], (2, "p", "r"): ["AA"],
    }  # fmt: skip
    evaluation = start(acme, agents=["p", "q", "r", "s"], n_tasks=2,
                       tournament="single-elimination")  # fmt: skip
    ticks = []

    def progress(label):
        ticks.append(label)
        if label == "t01 · r vs s · game 1":
            services.evaluation_cancel(evaluation=evaluation)

    services.evaluation_execute(evaluation_id=evaluation.pk, progress=progress)
    record = tournament_selectors.record_of(Evaluation.objects.get(pk=evaluation.pk))
    VALIDATOR.validate(record)
    assert record["run"]["status"] == "cancelled"
    assert brief(record) == {
        "t01": ("unfinished", None, ["p-q won p a", "r-s won s b", "p-s pending - "]),
        "t02": ("unfinished", None, ["p-q pending - "]),
    }
    run = record["run"]
    assert (run["expected_pairs"], run["resolved_pairs"], run["complete"]) == (2, 2, False)
    assert run["unfinished_tasks"] == ["t01", "t02"]
    assert ticks[-2:] == ["t01 · p vs q · game 1", "t01 · r vs s · game 1"]


def test_a_candidate_without_a_reply_fails_its_games_and_others_play(acme, world):
    # s's provider refuses every request for good (400): its runs fail, so every game of
    # s fails with the reason, asking the judge nothing; p and q still play.
    def refuse_s(request):
        if request["model"] == "s-model":
            return HttpError(400, message="model s-model is not available")
        return candidate_policy(request)

    world.candidates.policy = refuse_s
    world.judge.script = {(1, "p", "q"): ["AB"]}
    _, record, _ = play(acme, agents=["p", "q", "s"], n_tasks=1, tournament="round-robin")
    assert brief(record)["t01"] == (
        "incomplete", None, ["p-q drawn - t", "p-s failed - x", "q-s failed - x"],
    )  # fmt: skip
    failures = record["judgment_failures"]
    assert [f["failure"][:35] for f in failures] == ["no reply to judge: s's run failed ("] * 2
    assert all("400" in f["failure"] for f in failures)
    assert all(f["ab"]["raw"] == [] and f["ba"]["raw"] == [] for f in failures)
    assert world.judge.requests == 2
    assert [r["status"] for r in record["results"]] == ["done", "done", "error"]


def test_a_judge_that_cannot_be_built_fails_every_game_with_the_reason(acme, world, monkeypatch):
    Agent.objects.filter(slug="judge").update(
        params={"base_url": world.judge_fake.base_url, "api_key_env": "NO_SUCH_API_KEY"}
    )
    monkeypatch.delenv("NO_SUCH_API_KEY", raising=False)
    _, record, _ = play(acme, agents=["p", "q", "r", "s"], n_tasks=1,
                        tournament="single-elimination")  # fmt: skip
    assert brief(record)["t01"] == ("stopped", None, ["p-q failed - x"])
    (failure,) = record["judgment_failures"]
    assert failure["failure"].startswith("the judge cannot be asked: ")
    assert "NO_SUCH_API_KEY" in failure["failure"] and KEY not in json.dumps(record)
    assert world.judge.requests == 0


def test_a_tournament_without_a_judge_is_not_judged(acme, world):
    _, record, _ = play(acme, agents=["p", "q"], n_tasks=2, judge=None, tournament="round-robin")
    assert record["run"]["judge"] is None
    assert record["tournament"] == {
        "format": "round-robin", "candidates": ["p", "q"], "best_of": 1,
        "status": "not_judged", "tasks": [],
    }  # fmt: skip
    assert not {"judgments", "judgment_failures", "statistics", "ratings"} & record.keys()
    assert [r["output"] for r in record["results"]] == [
        "p answers task 1", "q answers task 1", "p answers task 2", "q answers task 2",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("agents", "schedule", "code", "message"),
    [
        (["p", "q"], {"tournament": "round-robin", "best_of": 2}, "invalid_tournament",
         "best-of must be an odd positive integer, got 2"),
        (["p", "q"], {"tournament": "round-robin", "best_of": 101}, "invalid_tournament",
         "best-of must be at most 99, got 101"),
        (["p", "q", "r"], {"tournament": "single-elimination"}, "invalid_tournament",
         "single elimination needs a power-of-two field (2, 4, 8, ...), got 3 candidates"),
        (["p", "q", "r", "s"],
         {"tournament": "single-elimination", "opening": [["p", "q"], ["p", "s"]]},
         "invalid_tournament", "opening matchups must use every candidate exactly once"),
        (["p", "q"], {"tournament": "round-robin", "opening": [["p", "q"]]},
         "invalid_tournament", "opening matchups are for single elimination only"),
        (["p", "q"], {"best_of": 3}, "not_a_tournament",
         "best-of, seed and opening matchups belong to a tournament"),
        (["p", "q"], {"seed": 5}, "not_a_tournament", "belong to a tournament"),
        (["p", "q"], {"tournament": "round-robin", "seed": -1}, "invalid_seed",
         "the seed must lie in 0..2^63-1"),
        (["p", "q"], {"tournament": "swiss"}, "invalid_tournament",
         "format must be one of round-robin, single-elimination, king-of-the-hill"),
    ],
)  # fmt: skip
def test_a_bad_schedule_is_refused_before_anything_is_stored(
    acme, world, agents, schedule, code, message
):
    with pytest.raises(ApplicationError) as refused:
        start(acme, agents=agents, n_tasks=1, **schedule)
    assert refused.value.code == code and message in refused.value.message
    assert not Evaluation.objects.exists()


def test_a_rubric_has_no_place_in_a_tournament(acme, world):
    suite = services.suite_store(team=acme, name="lines.json", data=suite_bytes(1))
    rubric = services.rubric_store(
        team=acme, name="r.yaml",
        data=b"name: r\ncriteria:\n  - {name: c, description: d, scale: 3, weight: 1}\n",
    )  # fmt: skip
    with pytest.raises(ApplicationError) as refused:
        services.evaluation_create(
            team=acme, suite=suite, agent_slugs=["p", "q"], rubric=rubric, judge_slug="judge",
            tournament="round-robin",
        )  # fmt: skip
    assert refused.value.code == "rubric_in_tournament"


def test_the_command_runs_a_tournament_and_reports_it(acme, world, tmp_path, capsys):
    world.judge.script = {
        (1, "p", "q"): ["AA"], (1, "r", "s"): ["tt", "BB"], (1, "p", "s"): ["BB"],
        (2, "p", "q"): ["BB"], (2, "r", "s"): ["AA"], (2, "q", "r"): ["A-"],
    }  # fmt: skip
    out = tmp_path / "run.json"
    with pytest.raises(SystemExit) as exited:  # a failed game: the record, then exit 1
        call_command(
            "eval", "run", "--team", acme.name, "--suite", str(_suite_file(tmp_path)),
            "--agent", "p", "--agent", "q", "--agent", "r", "--agent", "s", "--judge", "judge",
            "--tournament", "single-elimination", "--seed", "3", "--opening", "p,q",
            "--opening", "r,s", "--output", str(out),
        )  # fmt: skip
    assert exited.value.code == 1
    record = json.loads(out.read_text())
    VALIDATOR.validate(record)
    assert brief(record) == {
        "t01": ("complete", "s", ["p-q won p a", "r-s drawn →s tb*", "p-s won s b"]),
        "t02": ("stopped", None, ["p-q won q b", "r-s won r a", "q-r failed - x"]),
    }
    err = capsys.readouterr().err
    assert "single-elimination best of 1: 6 of 7 games resolved, 1 failed; incomplete" in err
    report = tmp_path / "report.html"
    call_command("eval", "report", "--input", str(out), "--output", str(report))
    html = report.read_text()
    assert "<script" not in html and "champion <b>s</b>" in html
    assert "Task t02 · stopped · no champion" in html


def _suite_file(where: Path) -> Path:
    path = where / "lines.json"
    path.write_bytes(suite_bytes(2))
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"schema": "agent-arena/tournament-record/1", "run": ', "not JSON (line 1, column"),
        (b'{"schema": "agent-arena/evaluation-record/1"}',
         "not a tournament record (schema agent-arena/tournament-record/1), found "
         "'agent-arena/evaluation-record/1'"),
        (b"[1, 2]",
         "not a tournament record (schema agent-arena/tournament-record/1), found 'list'"),
        (b'{"schema": "agent-arena/tournament-record/1", "run": {}}',
         "not a valid tournament record at "),
        (b"\xff\xfe", "not UTF-8 text"),
    ],
)  # fmt: skip
def test_the_report_refuses_a_file_that_is_not_a_tournament_record(tmp_path, content, message):
    source = tmp_path / "run.json"
    source.write_bytes(content)
    with pytest.raises(CommandError) as refused:
        call_command("eval", "report", "--input", str(source), "--output", str(tmp_path / "r.html"))
    assert refused.value.returncode == 2 and message in str(refused.value)
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--best-of", "3"], "best-of, seed and opening matchups belong to a tournament"),
        (["--tournament", "round-robin", "--opening", "p"],
         "--opening takes two agent slugs separated by a comma (a,b), got 'p'"),
        (["--tournament", "single-elimination", "--best-of", "4"],
         "best-of must be an odd positive integer, got 4"),
    ],
)  # fmt: skip
def test_the_command_says_what_is_wrong_with_a_schedule(acme, world, tmp_path, flags, message):
    with pytest.raises(CommandError) as refused:
        call_command(
            "eval", "run", "--team", acme.name, "--suite", str(_suite_file(tmp_path)),
            "--agent", "p", "--agent", "q", "--judge", "judge", *flags,
        )  # fmt: skip
    assert refused.value.returncode == 2 and message in str(refused.value)


def test_the_api_starts_a_tournament_and_serves_its_record_to_the_team_only(
    alice, charlie, api, world
):
    world.judge.script = {(1, "q", "p"): ["BB"], (1, "p", "r"): ["AA"]}
    client = api(alice)
    body = {
        "suite": {"name": "lines.json", "content": suite_bytes(1).decode()},
        "agents": ["q", "p", "r"], "judge": "judge", "tournament": "king-of-the-hill",
        "seed": 11,
    }  # fmt: skip
    created = client.post("/api/evaluations/", body, format="json")
    assert created.status_code == 201, created.content
    row = created.json()
    assert (row["agents"], row["tournament"], row["best_of"], row["seed"], row["pairwise"]) == (
        ["q", "p", "r"], "king-of-the-hill", 1, 11, True,
    )  # fmt: skip
    services.evaluation_execute(evaluation_id=row["id"])
    record = client.get(f"/api/evaluations/{row['id']}/").json()
    VALIDATOR.validate(record)
    # the challenge order is the candidates' order: p takes the hill from q, holds against r
    assert brief(record) == {"t01": ("complete", "p", ["q-p won p b", "p-r won p a"])}
    assert record["tournament"]["candidates"] == ["q", "p", "r"]
    assert record["run"]["bootstrap_seed"] == 11
    assert api(charlie).get(f"/api/evaluations/{row['id']}/").status_code == 404


@pytest.mark.parametrize(
    ("extra", "status", "code"),
    [
        ({"tournament": "round-robin", "best_of": 2}, 400, "invalid_tournament"),
        ({"tournament": "single-elimination"}, 400, "invalid_tournament"),
        ({"best_of": 3}, 400, "not_a_tournament"),
        ({"tournament": "round-robin", "opening": [["p", "q", "r"]]}, 400, "invalid"),
        ({"tournament": "knockout"}, 400, "invalid"),
        ({"tournament": "round-robin", "seed": -3}, 400, "invalid"),
    ],
)  # fmt: skip
def test_the_api_says_what_is_wrong_with_a_schedule(alice, api, world, extra, status, code):
    body = {
        "suite": {"name": "lines.json", "content": suite_bytes(1).decode()},
        "agents": ["p", "q", "r"], "judge": "judge", **extra,
    }  # fmt: skip
    refused = api(alice).post("/api/evaluations/", body, format="json")
    assert refused.status_code == status, refused.content
    error = refused.json()["error"]
    assert error["code"].startswith(code) and error["message"]
    assert not Evaluation.objects.exists()


def test_the_command_draws_a_tournament_at_random_and_keeps_the_seed(acme, world, tmp_path):
    world.judge.default = lambda n, a, b, game: "AA"  # the first side always wins
    out = tmp_path / "run.json"
    args = ["eval", "run", "--team", acme.name, "--suite", str(_suite_file(tmp_path)),
            "--random", "4", "--selection-seed", "5", "--tournament", "single-elimination",
            "--output", str(out)]  # fmt: skip
    call_command(*args)
    record = json.loads(out.read_text())
    VALIDATOR.validate(record)
    drawn = record["tournament"]["candidates"]
    assert sorted([*drawn, record["run"]["judge"]["slug"]]) == ["judge", "p", "q", "r", "s"]
    assert record["run"]["selection_seed"] == 5
    # the first candidate wins every series: it is every task's champion
    assert [t["champion"] for t in record["tournament"]["tasks"]] == [drawn[0]] * 2
    call_command(*args[:-1], str(tmp_path / "again.json"))  # the same seed, the same draw
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["tournament"]["candidates"] == drawn
    assert again["run"]["judge"] == record["run"]["judge"]
