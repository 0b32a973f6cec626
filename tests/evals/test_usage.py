"""What every run of an evaluation used — tokens in/out/cache, cost and directness — stored
with the run (``EvalRun.usage``), in the evaluation record per result and added up per
candidate and for the judge, and in the tournament record and its audit report.

The chat, desktop and repo runs are real (SDK clients against the fake provider servers
on 127.0.0.1, real sandboxes for the lanes): the figures in the record are the ones the
fakes reported (100 tokens in and 20 out per reply) at the prices the test sets. A run
stored before usage was recorded (its ``usage`` empty) still makes a valid record, its
figures derived from its stored calls or lane."""

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Team
from agents.models import Agent
from agents.scaffold import SpanRecord
from battles.coding_models import CodingOutcome
from battles.models import Run, Span
from evals import selectors, services, usage
from evals.models import EvalRun, EvalSpan
from evals.report import audit_report_html
from evals.tournament_record import RecordError
from evals.tournaments import ROUND_ROBIN
from tests.agents.fake_providers import FakeAnthropic
from tests.evals.scripted import KEY, RUBRIC
from tests.evals.test_repo_tasks import FIX, lanes, scaffold, suite_file
from tests.evals.test_report import Page
from tests.evals.test_tournament_record import RR, RR_RESULTS, RR_SCRIPT, RR_TASKS, Judge, build

HERE = Path(selectors.__file__).parent
SCHEMA = json.loads((HERE / "record.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
TOURNAMENT = jsonschema.Draft202012Validator(
    json.loads((HERE / "tournament_record.schema.json").read_text())
)
# USD per million tokens (in, out); every fake reply reports 100 in and 20 out.
PRICES = {"alpha-model": [3.0, 15.0], "beta-model": [1.0, 5.0], "judge-model": [2.0, 10.0],
          "fixer-model": [3.0, 15.0]}  # fmt: skip
REPLY_COST = {m: (100 * p_in + 20 * p_out) / 1e6 for m, (p_in, p_out) in PRICES.items()}
CHAT = b"""tasks:
  - {id: t01, prompt: 'Compute 1+1. Answer with the number only.',
     evaluation: {type: exact, expected: '2'}}
  - {id: t02, prompt: 'Compute 2+2. Answer with the number only.',
     evaluation: {type: exact, expected: '4'}}
"""
DESKTOP = b"""tasks:
  - {id: d3, kind: desktop, prompt: 'Say you are ready by delivering the word ready.'}
"""


@pytest.fixture
def priced(settings):
    settings.ARENA = settings.ARENA.replace(model_prices=PRICES)


def call(inp=0, out=0, cost=0.0, error="", **output):
    return SimpleNamespace(input_tokens=inp, output_tokens=out, cost_usd=cost, output=output,
                           error=error)  # fmt: skip


def blank(evaluation) -> None:
    """As if stored before issue 40: no usage on any run."""
    EvalRun.objects.filter(evaluation=evaluation).update(usage={})


# -- pure: evals.usage -----------------------------------------------------------------


@pytest.mark.parametrize(
    "calls, expected",
    [
        ([], (0, 0, 0, 0, 0.0)),
        ([call(100, 20, 0.0006, cache_read_tokens=30, cache_write_tokens=5)],
         (100, 20, 30, 5, 0.0006)),
        # a failed call used nothing, and says nothing of the cache
        ([call(100, 20, 0.1, cache_read_tokens=1, cache_write_tokens=0), call(error="503")],
         (100, 20, 1, 0, 0.1)),
        # an answered call that does not carry the cache figures: unknown, not 0
        ([call(100, 20, 0.1, cache_read_tokens=1, cache_write_tokens=0), call(7, 3)],
         (107, 23, None, None, 0.1)),
        # costs are added exactly (Decimal), then rounded to the micro-dollar
        ([call(cost=Decimal("0.1")), call(cost=0.2, cache_read_tokens=0, cache_write_tokens=0)],
         (0, 0, None, None, 0.3)),
    ],
)  # fmt: skip
def test_calls_are_added_up(calls, expected):
    got = usage.chat_usage(calls)
    assert tuple(got[f] for f in usage.FIGURES) == expected
    assert got["directness"] is None and got["directness_reason"] == usage.CHAT_NO_DIRECTNESS
    assert got["source"] == "calls"


def test_a_span_record_without_cache_fields_is_unknown_cache():
    record = SpanRecord(kind="model", name="m", input={}, output={"text": "4"}, started=0.0,
                        latency_ms=3, input_tokens=100, output_tokens=20, cost_usd=0.5)  # fmt: skip
    got = usage.chat_usage([record])
    assert (got["input_tokens"], got["cache_read_tokens"], got["cost_usd"]) == (100, None, 0.5)


def test_a_cli_report_counts_its_cache_back_into_the_input():
    directness = {"score": 0.6, "trajectory_efficiency": 1.0, "early_edit": 1.0,
                  "repeat_penalty": 0.0, "loop_penalty": 0.0, "stall_rate": 0.0}  # fmt: skip
    reported = {"input_tokens": 1000, "output_tokens": 300, "cache_read_tokens": 200,
                "cache_creation_tokens": 50, "cost_usd": 0.05, "source": "claude-json"}  # fmt: skip
    got = usage.cli_usage(reported, directness)
    assert got == {
        "input_tokens": 1250, "output_tokens": 300, "cache_read_tokens": 200,
        "cache_write_tokens": 50, "cost_usd": 0.05, "directness": directness,
        "directness_reason": "", "source": "cli_report",
    }  # fmt: skip
    unpriced = usage.cli_usage({**reported, "cost_usd": None}, {})
    assert unpriced["cost_usd"] is None
    assert (unpriced["directness"], unpriced["directness_reason"]) == (None, usage.NOT_MEASURED)


def test_no_directness_without_its_reason():
    with pytest.raises(ValueError, match="needs the reason"):
        usage.usage(source="calls", input_tokens=1)


def test_totals_say_what_they_leave_out():
    known = usage.chat_usage([call(100, 20, 0.25, cache_read_tokens=4, cache_write_tokens=0)])
    unpriced = usage.cli_usage({"input_tokens": 10, "output_tokens": 2}, {"score": 0.5, **{
        k: 0.0 for k in usage.DIRECTNESS[1:]}})  # fmt: skip
    nothing = usage.unknown(usage.NO_LANE)
    got = usage.totals([known, unpriced, nothing])
    assert got == {
        "runs": 3, "input_tokens": 110, "output_tokens": 22, "cache_read_tokens": 4,
        "cache_write_tokens": 0, "cost_usd": 0.25, "unknown_runs": 2, "directness_runs": 1,
        "directness_mean": 0.5,
    }  # fmt: skip
    assert usage.totals([]) == {
        "runs": 0, **dict.fromkeys(usage.FIGURES), "unknown_runs": 0, "directness_runs": 0,
        "directness_mean": None,
    }  # fmt: skip


def test_a_copied_usage_carries_its_fields_only():
    row = {**usage.chat_usage([call(1, 1)]), "api_key": KEY, "derived": True}
    row["directness"] = None
    copied = usage.copied(row)
    assert "api_key" not in copied and copied["derived"] is True
    assert set(copied) == {*usage.FIGURES, "directness", "directness_reason", "source", "derived"}


# -- chat ------------------------------------------------------------------------------


def chat_evaluation(team: Team):
    suite = services.suite_store(team=team, name="two.yaml", data=CHAT)
    rubric = services.rubric_store(team=team, name="rubric.yaml", data=RUBRIC)
    evaluation = services.evaluation_create(
        team=team, suite=suite, agent_slugs=["alpha", "beta"], rubric=rubric,
        judge_slug="judge", pairwise=True,
    )  # fmt: skip
    return services.evaluation_execute(evaluation_id=evaluation.pk, sleep=[].append)


@pytest.mark.django_db
def test_a_chat_run_carries_the_tokens_and_cost_its_provider_reported(
    alice, charlie, arena_agents, priced
):
    # Given another team's evaluation of the same agents on the same fakes
    chat_evaluation(Team.objects.get(name="Umbrella"))
    evaluation = chat_evaluation(Team.objects.get(name="Acme"))

    record = selectors.evaluation_record(evaluation)

    VALIDATOR.validate(record)
    spans = EvalSpan.objects.filter(evaluation=evaluation, role="candidate")
    assert {(s.output["cache_read_tokens"], s.output["cache_write_tokens"]) for s in spans} == {
        (0, 0)
    }  # each call records the cache figures its reply carried
    for r in record["results"]:
        model = f"{r['agent']}-model"
        assert r["usage"] == {
            "input_tokens": 100, "output_tokens": 20,
            "cache_read_tokens": 0, "cache_write_tokens": 0,  # the fakes report none cached
            "cost_usd": round(REPLY_COST[model], 6), "directness": None,
            "directness_reason": usage.CHAT_NO_DIRECTNESS, "source": "calls", "derived": False,
        }  # fmt: skip
    # stored with the run, as the record shows it
    stored = EvalRun.objects.get(evaluation=evaluation, task_id="t01", agent__slug="alpha")
    assert (stored.usage["input_tokens"], stored.usage["output_tokens"]) == (100, 20)

    # totals: each candidate's two replies, none of the other team's
    totals = record["usage"]["candidates"]
    assert (totals["alpha"]["runs"], totals["alpha"]["input_tokens"]) == (2, 200)
    assert totals["alpha"]["cost_usd"] == pytest.approx(2 * REPLY_COST["alpha-model"])
    assert totals["beta"]["output_tokens"] == 40
    assert totals["beta"]["unknown_runs"] == 0
    assert all(r.spans.filter(role="candidate").count() == 1 for r in evaluation.runs.all())
    # the judge: 2 criteria × 2 tasks × 2 candidates, and both orders of 2 games
    judge = record["usage"]["judge"]
    assert (judge["calls"], judge["input_tokens"], judge["output_tokens"]) == (12, 1200, 240)
    assert judge["cost_usd"] == pytest.approx(12 * REPLY_COST["judge-model"])
    assert {r: v["calls"] for r, v in judge["by_role"].items()} == {"pairwise": 4, "rubric": 8}
    assert EvalSpan.objects.exclude(role="candidate").count() == 24  # both teams' judges

    # Given the runs stored before usage was recorded: derived from their spans
    blank(evaluation)
    old = selectors.evaluation_record(evaluation)
    VALIDATOR.validate(old)
    assert [r["usage"] for r in old["results"]] == [
        {**r["usage"], "derived": True} for r in record["results"]
    ]
    assert old["usage"] == record["usage"]
    # in reads that do not grow with the old runs: a second epoch of every run, as old
    with CaptureQueriesContext(connection) as before:
        selectors.evaluation_record(evaluation)
    for run in EvalRun.objects.filter(evaluation=evaluation, replicate=0):
        spans = list(run.spans.all())
        run.pk, run.replicate = None, 1
        run.save()
        for span in spans:
            span.pk, span.run = None, run
            span.save()
    with CaptureQueriesContext(connection) as after:
        doubled = selectors.evaluation_record(evaluation)
    assert len(after) == len(before)
    assert doubled["usage"]["candidates"]["alpha"]["input_tokens"] == 2 * 200
    EvalRun.objects.filter(evaluation=evaluation, replicate=1).delete()

    # every epoch is paid for: a second run of t01 counts, though results list epoch 0
    again = EvalRun.objects.get(evaluation=evaluation, task_id="t01", agent__slug="alpha")
    again.pk, again.replicate, again.usage = None, 1, {**record["results"][0]["usage"]}
    again.save()
    epochs = selectors.evaluation_record(evaluation)["usage"]["candidates"]["alpha"]
    assert (epochs["runs"], epochs["input_tokens"]) == (3, 300)
    assert epochs["cost_usd"] == pytest.approx(3 * REPLY_COST["alpha-model"])

    # the schema has teeth
    row = record["results"][0]
    for broken in (
        {**row, "usage": {**row["usage"], "input_tokens": -1}},
        {**row, "usage": {**row["usage"], "cost_usd": "0.1"}},
        {**row, "usage": {**row["usage"], "directness_reason": ""}},
        {**row, "usage": {**row["usage"], "api_key": KEY}},
        {k: v for k, v in row.items() if k != "usage"},
    ):
        assert not VALIDATOR.is_valid({**record, "results": [broken]})
    assert not VALIDATOR.is_valid({k: v for k, v in record.items() if k != "usage"})
    assert KEY not in json.dumps(record)


@pytest.mark.django_db
def test_a_run_whose_calls_all_failed_used_nothing(alice, arena_agents, priced):
    team = Team.objects.get(name="Acme")
    suite = services.suite_store(team=team, name="five.yaml", data=b"tasks:\n"
        b"  - {id: t05, prompt: 'Compute 5+5. Answer with the number only.'}\n")  # fmt: skip
    evaluation = services.evaluation_create(team=team, suite=suite, agent_slugs=["gamma"])
    evaluation = services.evaluation_execute(evaluation_id=evaluation.pk, sleep=[].append)

    (result,) = selectors.evaluation_record(evaluation)["results"]

    # gamma's provider answered 503 three times on t05: three calls, no tokens
    assert result["status"] == "error" and result["attempts"] == 3
    assert {f: result["usage"][f] for f in usage.FIGURES} == {
        "input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
        "cache_write_tokens": 0, "cost_usd": 0.0,
    }  # fmt: skip


# -- desktop and repo lanes ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_desktop_run_carries_its_lanes_model_calls(alice, desktop_agents, priced, settings):
    settings.ARENA = settings.ARENA.replace(sandbox_desktop=False)
    team = Team.objects.get(name="Acme")
    suite = services.suite_store(team=team, name="d3.yaml", data=DESKTOP)
    evaluation = services.evaluation_create(team=team, suite=suite, agent_slugs=["alpha"])

    evaluation = services.evaluation_execute(evaluation_id=evaluation.pk)

    record = selectors.evaluation_record(evaluation)
    VALIDATOR.validate(record)
    (result,) = record["results"]
    assert result["output"] == "ready"  # one call: it delivered at once
    spans = list(Span.objects.filter(run_id=result["lane"]["id"], kind=Span.Kind.MODEL))
    assert len(spans) == 1
    assert result["usage"] == {
        "input_tokens": 100, "output_tokens": 20,
        "cache_read_tokens": 0, "cache_write_tokens": 0,  # what the scaffold's spans carry
        "cost_usd": round(REPLY_COST["alpha-model"], 6), "directness": None,
        "directness_reason": usage.DESKTOP_NO_DIRECTNESS, "source": "lane_spans",
        "derived": False,
    }  # fmt: skip
    assert record["usage"] == {
        "candidates": {"alpha": {**usage.totals([result["usage"]])}}, "judge": None,
    }  # fmt: skip

    blank(evaluation)
    (old,) = selectors.evaluation_record(evaluation)["results"]
    assert old["usage"] == {**result["usage"], "derived": True}


@pytest.mark.django_db(transaction=True)
def test_a_repo_run_carries_its_tokens_cost_and_the_battle_pages_directness(
    alice, monkeypatch, tmp_path, settings
):
    from tests.agents.conftest import LOOPBACK

    settings.ARENA = settings.ARENA.replace(internal_allowlist=LOOPBACK, model_prices=PRICES)
    monkeypatch.setenv("EVAL_REPO_TEST_API_KEY", "sk-ant-test-eval-repo-0123456789abcdef")
    out = tmp_path / "record.json"
    with FakeAnthropic(api_key="sk-ant-test-eval-repo-0123456789abcdef",
                       policy=lanes(lambda n: FIX)) as fixer:  # fmt: skip
        scaffold("fixer", fixer.base_url)
        call_command(
            "eval", "run", "--team", "Acme", "--suite", str(suite_file(tmp_path)),
            "--agent", "fixer", "--desktop-lanes", "1", "--step-budget", "5",
            "--output", str(out),
        )  # fmt: skip

    record = json.loads(out.read_text())
    VALIDATOR.validate(record)
    (result,) = record["results"]
    outcome = CodingOutcome.objects.get(run_id=result["lane"]["id"])
    spans = list(Span.objects.filter(run_id=result["lane"]["id"], kind=Span.Kind.MODEL))
    # the scaffold's two calls (the shell command, then deliver), as its model spans
    assert [s.output["cache_read_tokens"] for s in spans] == [0, 0]
    assert result["usage"] == {
        "input_tokens": 200, "output_tokens": 40,
        "cache_read_tokens": 0, "cache_write_tokens": 0,  # what the scaffold's spans carry
        "cost_usd": round(2 * REPLY_COST["fixer-model"], 6),
        "directness": outcome.directness, "directness_reason": "", "source": "lane_spans",
        "derived": False,
    }  # fmt: skip
    assert set(outcome.directness) == set(usage.DIRECTNESS)  # the battle page's figures
    assert result["coding"]["cost_usd"] == pytest.approx(result["usage"]["cost_usd"])
    totals = record["usage"]["candidates"]["fixer"]
    assert (totals["directness_runs"], totals["directness_mean"]) == (
        1, round(outcome.directness["score"], 4),
    )  # fmt: skip

    evaluation = EvalRun.objects.get().evaluation
    blank(evaluation)
    (old,) = selectors.evaluation_record(evaluation)["results"]
    assert old["usage"] == {**result["usage"], "derived": True}


@pytest.mark.django_db
def test_a_coding_clis_own_report_is_the_runs_usage(alice, arena_agents):
    alpha = Agent.objects.get(slug="alpha")
    lane = Run.objects.create(for_evaluation=True, side="A", agent=alpha, step_budget=5,
                              wall_budget_s=60, heartbeat_at=timezone.now())  # fmt: skip
    Span.objects.create(run=lane, kind=Span.Kind.MODEL, name="gateway", started_at=timezone.now(),
                        latency_ms=5, input_tokens=999, output_tokens=999)  # fmt: skip
    directness = {"score": 0.425, "trajectory_efficiency": 0.5, "early_edit": 1.0,
                  "repeat_penalty": 0.0, "loop_penalty": 0.0, "stall_rate": 0.0}  # fmt: skip
    CodingOutcome.objects.create(
        run=lane, directness=directness,
        usage={"input_tokens": 1000, "output_tokens": 300, "cache_read_tokens": 200,
               "cache_creation_tokens": 50, "cost_usd": None, "source": "claude-json"},
    )  # fmt: skip

    got = selectors.lane_usage(lane, kind="repo")

    # the CLI's report, not the gateway's spans; no price known: no cost
    assert (got["input_tokens"], got["cache_read_tokens"], got["cache_write_tokens"]) == (
        1250, 200, 50,
    )  # fmt: skip
    assert (got["cost_usd"], got["directness"], got["source"]) == (None, directness, "cli_report")
    # a run with no lane at all tells nothing
    assert selectors.lane_usage(None, kind="repo") == usage.unknown(usage.NO_LANE)
    lone = jsonschema.Draft202012Validator({"$defs": SCHEMA["$defs"], "$ref": "#/$defs/usage"})
    lone.validate(usage.copied(got))
    lone.validate(usage.copied(usage.unknown(usage.NO_LANE)))


# -- the tournament record and the audit report -----------------------------------------


def with_usage(result: dict, inp: int, cost: float | None) -> dict:
    u = usage.chat_usage([call(inp, 20, cost or 0, cache_read_tokens=0, cache_write_tokens=0)])
    return {**result, "usage": {**u, "cost_usd": cost, "token": KEY}}


JUDGE_USAGE = {
    "calls": 12, "input_tokens": 1200, "output_tokens": 240, "cache_read_tokens": None,
    "cache_write_tokens": None, "cost_usd": 0.0048, "secret": KEY,
    "by_role": {"pairwise": {"calls": 12, "input_tokens": 1200, "output_tokens": 240,
                             "cache_read_tokens": None, "cache_write_tokens": None,
                             "cost_usd": 0.0048}},
}  # fmt: skip


def test_the_tournament_record_and_its_report_carry_usage():
    results = [with_usage(r, 100 + i, 0.001 if r["model"] != "beta" else None)
               for i, r in enumerate(RR_RESULTS)]  # fmt: skip
    record = build(RR, RR_TASKS, results, Judge(RR_SCRIPT), format=ROUND_ROBIN, seed=5,
                   judge_usage=JUDGE_USAGE)  # fmt: skip

    assert [e.message for e in TOURNAMENT.iter_errors(record)] == []
    assert KEY not in json.dumps(record)  # copied by name: nothing else passes
    first = next(r for r in record["results"] if (r["task_id"], r["model"]) == ("t1", "alpha"))
    assert (first["usage"]["input_tokens"], first["usage"]["cost_usd"]) == (100, 0.001)
    candidates = record["usage"]["candidates"]
    assert candidates["alpha"] == {
        "runs": 2, "input_tokens": 100 + 104, "output_tokens": 40, "cache_read_tokens": 0,
        "cache_write_tokens": 0, "cost_usd": 0.002, "unknown_runs": 0, "directness_runs": 0,
        "directness_mean": None,
    }  # fmt: skip
    assert (candidates["beta"]["cost_usd"], candidates["beta"]["unknown_runs"]) == (None, 2)
    assert candidates["gamma"]["runs"] == 1  # its t2 is missing
    assert record["usage"]["judge"]["by_role"]["pairwise"]["calls"] == 12

    page = Page(audit_report_html(record))
    assert [a["id"] for t, a in page.tags if t == "section"][3:5] == ["replies", "usage"]
    assert not {t for t, _ in page.tags} & {"script", "link", "img", "iframe", "object"}
    assert all("://" not in (v or "") for _, attrs in page.tags for v in attrs.values())
    words = page.words
    assert ("Tokens in 100 · out 20 · cache read 0 · cache write 0 · cost $0.001000 · "
            "directness — (a chat run is one reply") in words  # fmt: skip
    assert "alpha 2 204 40 0 0 $0.002000 0 — (0)" in words
    assert "beta 2 204 40 0 0 — 2 — (0)" in words
    assert "all 12 1200 240 — — $0.004800 pairwise 12 1200 240 — — $0.004800" in words


def test_an_old_tournament_record_has_no_usage_and_says_so():
    record = build(RR, RR_TASKS, RR_RESULTS, Judge(RR_SCRIPT), format=ROUND_ROBIN, seed=5)
    assert "usage" not in record and TOURNAMENT.is_valid(record)
    words = Page(audit_report_html(record)).words
    assert "This record carries no tokens or cost (written before they were recorded)." in words
    assert "Tokens in" not in words


def test_a_judge_usage_lacking_a_figure_is_refused():
    broken = {k: v for k, v in JUDGE_USAGE.items() if k != "cost_usd"}
    with pytest.raises(RecordError, match="judge usage lacks cost_usd"):
        build(RR, RR_TASKS, RR_RESULTS, Judge(RR_SCRIPT), format=ROUND_ROBIN, seed=5,
              judge_usage=broken)  # fmt: skip


def test_spans_are_the_judges_whatever_their_role():
    at = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [(role, SimpleNamespace(input_tokens=10, output_tokens=1, cost_usd=Decimal("0.01"),
                                   output={}, error="", started_at=at))
            for role in ("rubric", "answer", "scorer", "rubric")]  # fmt: skip
    got = usage.calls_totals(rows)
    assert (got["calls"], got["input_tokens"], got["cost_usd"]) == (4, 40, 0.04)
    assert {r: v["calls"] for r, v in got["by_role"].items()} == {
        "answer": 1, "rubric": 2, "scorer": 1,
    }  # fmt: skip
