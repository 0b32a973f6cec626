"""A whole offline evaluation: 20 chat tasks (both reference shapes) × three roster
agents on the real SDK clients against fake provider servers on 127.0.0.1 whose scripts
decide every reply, judged by a rubric judge and a pairwise judge; the record's scores,
win rates, intervals and failure records are the ones the scripts imply.

The fakes stand where the remote LLM APIs cannot exist here; the database, the SDKs,
the services and the command are real. Waits between attempts are recorded, not slept."""

import contextlib
import json
import random
from pathlib import Path

import jsonschema
import pytest
from django.core.management import call_command

from accounts.models import Team
from agents.models import Agent
from arena_site.exceptions import ApplicationError
from evals import calls, selectors, services, suites
from evals.models import CriterionScore, EvalRun, EvalSpan, PairJudgement
from tests.evals.scripted import (
    BROKEN_GAME,
    CORRECTED,
    FAILING_TASK,
    KEY,
    N_TASKS,
    POSITION_BIASED,
    RUBRIC,
    SAYS,
    rubric_score,
    suite_bytes,
)

pytestmark = pytest.mark.django_db

SCHEMA = json.loads((Path(selectors.__file__).parent / "record.schema.json").read_text())


def reference_bootstrap_ci(values, n_iter=1000, alpha=0.05, seed=42):
    """000 §4's code, copied independently of evals.aggregates."""
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(n_iter))
    return means[int(alpha / 2 * n_iter)], means[int((1 - alpha / 2) * n_iter) - 1]


def expected_weighted(name: str, n: int) -> float:
    reply = SAYS[name](n)
    return (
        2 * rubric_score(n, reply, "correctness") / 5 + rubric_score(n, reply, "clarity") / 3
    ) / 3


def run_evaluation(team: Team, sleeps: list) -> dict:
    suite = services.suite_store(team=team, name="arith.yaml", data=suite_bytes())
    rubric = services.rubric_store(team=team, name="rubric.yaml", data=RUBRIC)
    evaluation = services.evaluation_create(
        team=team, suite=suite, agent_slugs=["alpha", "beta", "gamma"], rubric=rubric,
        judge_slug="judge", pairwise=True,
    )  # fmt: skip
    evaluation = services.evaluation_execute(evaluation_id=evaluation.pk, sleep=sleeps.append)
    return selectors.evaluation_record(evaluation)


def test_a_scripted_evaluation_gives_the_scores_the_scripts_imply(alice, arena_agents):
    team = Team.objects.get(name="Acme")
    sleeps: list[float] = []
    record = run_evaluation(team, sleeps)
    results = {(r["task_id"], r["agent"]): r for r in record["results"]}

    # results in task-file and candidate order; the failed run is an error with its message
    assert [(r["task_id"], r["agent"]) for r in record["results"]] == [
        (f"t{n:02d}", a) for n in range(1, N_TASKS + 1) for a in ("alpha", "beta", "gamma")
    ]
    failed = results[(FAILING_TASK, "gamma")]
    assert failed["status"] == "error" and "gave up after 3 attempts" in failed["error"]
    assert failed["criteria"] == [] and sleeps.count(1.0) >= 1 and sleeps.count(2.0) >= 1
    assert KEY not in json.dumps(record)

    # exact match on t01..t10: alpha all, beta the even ones, gamma none ("14!")
    for n in range(1, 11):
        row = lambda a: results[(f"t{n:02d}", a)]  # noqa: B023, E731
        assert row("alpha")["exact_score"] == 1.0
        assert row("beta")["exact_score"] == (1.0 if n % 2 == 0 else 0.0)
        if n != 5:
            assert row("gamma")["exact_score"] == 0.0
    assert all(results[(f"t{n}", a)]["exact_score"] is None for n in range(11, 21) for a in SAYS)
    exact = record["statistics"]["exact_match"]
    assert (exact["alpha"], exact["beta"], exact["gamma"]) == (1.0, 0.5, 0.0)

    # weighted scores per (task, agent), and the corrected judgement
    for (task_id, agent), row in results.items():
        if row["status"] == "error":
            continue
        assert row["weighted_score"] == pytest.approx(expected_weighted(agent, int(task_id[1:])))
    corrected = [
        c for c in results[(CORRECTED[1], CORRECTED[0])]["criteria"] if c["criterion"] == "clarity"
    ]
    assert corrected[0]["corrected"] and corrected[0]["status"] == "ok"
    assert corrected[0]["raw"][0] == "Three out of three."
    assert CriterionScore.objects.filter(corrected=True).count() == 1

    # win rates (000 §4): alpha beats beta on odd tasks, ties on even; beats gamma on every
    # task gamma answered; beta vs gamma: gamma wins odd, beta wins even
    rates = record["statistics"]["win_rates"]
    assert rates["alpha"]["alpha"] == 0.5
    assert rates["alpha"]["beta"] == (10 + 0.5 * 10) / 20
    assert rates["alpha"]["gamma"] == 1.0  # 19 common tasks, all won
    assert rates["beta"]["gamma"] == pytest.approx(10 / 19)  # even ones; t05 is not common
    assert rates["gamma"]["beta"] == pytest.approx(9 / 19)

    # per-criterion means with the reference bootstrap's 95 % interval (seed 42)
    means = record["statistics"]["criterion_means"]
    beta_correctness = [float(5 if n % 2 == 0 else 1) for n in range(1, 21)]
    assert means["beta"]["correctness"]["mean"] == 3.0
    lo, hi = reference_bootstrap_ci(beta_correctness)
    assert (means["beta"]["correctness"]["lower"], means["beta"]["correctness"]["upper"]) == (
        lo,
        hi,
    )
    assert means["gamma"]["clarity"]["n"] == 19 and means["gamma"]["clarity"]["mean"] == 2.0

    # pairwise: 20 tasks × 3 pairs, minus the 2 pairs gamma missed on t05, minus one failure
    judgments, failures = record["judgments"], record["judgment_failures"]
    assert len(judgments) + len(failures) == 20 * 3 - 2
    assert [(f["task_id"], f["a"], f["b"]) for f in failures] == [BROKEN_GAME]
    assert failures[0]["ab"]["raw"] == ["I prefer the first one."] * 3
    biased = [j for j in judgments if j["task_id"] == POSITION_BIASED]
    assert all((j["winner"], j["agreement"]) == ("tie", False) for j in biased) and len(biased) == 3
    t04 = {(j["a"], j["b"]): j["winner"] for j in judgments if j["task_id"] == "t04"}
    assert t04 == {("alpha", "beta"): "tie", ("alpha", "gamma"): "A", ("beta", "gamma"): "A"}
    t09 = {(j["a"], j["b"]): j["winner"] for j in judgments if j["task_id"] == "t09"}
    assert t09 == {("alpha", "beta"): "A", ("alpha", "gamma"): "A", ("beta", "gamma"): "B"}
    agreement = record["run"]["orientation_agreement"]
    assert agreement["resolved_pairs"] == 57 and agreement["orientation_disagreeing_pairs"] == 3

    # provenance, and the honest verdict: not complete
    run = record["run"]
    assert run["suite"]["sha256"] == suites.parse_suite(suite_bytes(), name="x").sha256
    assert run["judge"]["model"] == "judge-model" and run["judge_decoding"]["temperature"] == 0
    assert run["candidate_max_tokens"] == 4096 and run["attempts"] == 3
    assert (run["failed_runs"], run["failed_pair_judgements"], run["complete"]) == (1, 1, False)
    assert EvalSpan.objects.filter(role="candidate", error__gt="").count() == 3

    # the record validates against its published schema, and the schema has teeth
    validator = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    validator.validate(record)
    for broken in (
        {**record, "api_key": KEY},
        {
            **record,
            "run": {**record["run"], "judge_decoding": {"temperature": 0.7, "max_tokens": 1}},
        },
        {**record, "judgments": [{**record["judgments"][0], "winner": "draw"}]},
        {**record, "judgment_failures": [{**record["judgment_failures"][0], "failure": ""}]},
        {**record, "results": [{**record["results"][0], "exact_score": 0.5}]},
    ):
        assert not validator.is_valid(broken)


def test_running_an_evaluation_again_does_only_what_is_missing(alice, arena_agents):
    team = Team.objects.get(name="Acme")
    record = run_evaluation(team, [])
    evaluation_id = record["run"]["evaluation_id"]
    calls_before = {name: len(fake.requests) for name, fake in arena_agents.items()}
    runs_before = EvalRun.objects.count()
    # an interruption: the last task's runs and judgements were never stored
    EvalRun.objects.filter(task_id="t20").delete()
    PairJudgement.objects.filter(task_id="t20").delete()

    services.evaluation_execute(evaluation_id=evaluation_id, sleep=[].append)

    asked = {name: len(fake.requests) - calls_before[name] for name, fake in arena_agents.items()}
    # one answer per candidate for t20; 2 criteria × 3 runs + 3 games × 2 orientations
    assert asked == {"alpha": 1, "beta": 1, "gamma": 1, "judge": 6 + 6}
    assert EvalRun.objects.count() == runs_before


def test_the_judge_must_not_be_a_candidate(alice, arena_agents):
    team = Team.objects.get(name="Acme")
    suite = services.suite_store(team=team, name="arith.yaml", data=suite_bytes())
    rubric = services.rubric_store(team=team, name="rubric.yaml", data=RUBRIC)
    with pytest.raises(ApplicationError, match="must not be one of the candidates"):
        services.evaluation_create(
            team=team, suite=suite, agent_slugs=["alpha", "judge"], rubric=rubric,
            judge_slug="judge",
        )  # fmt: skip


def test_another_teams_agent_cannot_be_evaluated_on_its_key(alice, charlie, arena_agents):
    acme, umbrella = Team.objects.get(name="Acme"), Team.objects.get(name="Umbrella")
    Agent.objects.filter(slug="beta").update(team=umbrella)
    suite = services.suite_store(team=acme, name="arith.yaml", data=suite_bytes())
    with pytest.raises(ApplicationError, match="no agent 'beta' this team may evaluate"):
        services.evaluation_create(team=acme, suite=suite, agent_slugs=["alpha", "beta"])
    with pytest.raises(ApplicationError) as outsider:
        selectors.evaluation_for_team(team=umbrella, evaluation_id=10**9)
    assert outsider.value.status == 404


def test_another_teams_evaluation_is_not_found(alice, charlie, arena_agents):
    acme, umbrella = Team.objects.get(name="Acme"), Team.objects.get(name="Umbrella")
    suite = services.suite_store(team=acme, name="arith.yaml", data=suite_bytes())
    evaluation = services.evaluation_create(team=acme, suite=suite, agent_slugs=["alpha"])
    with pytest.raises(ApplicationError) as error:
        selectors.evaluation_for_team(team=umbrella, evaluation_id=evaluation.pk)
    assert error.value.status == 404


def test_a_bad_suite_is_refused_naming_file_task_and_field(alice):
    team = Team.objects.get(name="Acme")
    with pytest.raises(ApplicationError, match=r"bad\.yaml: task 't1': field 'promt'"):
        services.suite_store(team=team, name="bad.yaml", data=b"- {id: t1, promt: hi}\n")


def test_the_command_writes_the_record_and_exits_1_when_something_failed(
    alice, arena_agents, tmp_path, monkeypatch
):
    waits: list[float] = []
    monkeypatch.setattr(calls, "_sleep", waits.append)
    suite, rubric, out = tmp_path / "suite.yaml", tmp_path / "rubric.yaml", tmp_path / "run.json"
    suite.write_bytes(suite_bytes())
    rubric.write_bytes(RUBRIC)
    with pytest.raises(SystemExit) as exit_:
        call_command(
            "eval", "run", "--team", "Acme", "--suite", str(suite), "--agent", "alpha",
            "--agent", "gamma", "--rubric", str(rubric), "--judge", "judge",
            "--output", str(out), "--plots", str(tmp_path / "figures"),
        )  # fmt: skip
    assert exit_.value.code == 1
    record = json.loads(out.read_text())
    assert record["run"]["failed_runs"] == 1 and record["run"]["complete"] is False
    assert len(record["results"]) == 40 and waits == [1.0, 2.0]
    failed = [r for r in record["results"] if r["status"] == "error"]
    assert failed[0]["error"].count("gave up") == 1, failed[0]["error"]
    radar = (tmp_path / "figures" / "radar.svg").read_text()
    matrix = (tmp_path / "figures" / "win_rates.svg").read_text()
    assert radar.count('class="mean"') == 4 and "correctness (0–5)" in radar  # 2 × 2
    assert "alpha vs gamma: win rate 1.000" in matrix


def test_a_random_draw_is_reproducible_from_its_persisted_seed(
    alice, arena_agents, tmp_path, monkeypatch
):
    monkeypatch.setattr(calls, "_sleep", [].append)
    team = Team.objects.get(name="Acme")
    fresh = services.random_selection(team=team, candidates=2, judge=True, seed=None)
    again = services.random_selection(team=team, candidates=2, judge=True, seed=fresh.seed)
    assert (again.agents, again.judge) == (fresh.agents, fresh.judge)
    assert len({*fresh.agents, fresh.judge}) == 3  # one agent per model, judge apart
    assert {*fresh.agents, fresh.judge} <= {"alpha", "beta", "gamma", "judge"}
    with pytest.raises(ApplicationError, match="only 4 models to draw from, 5 needed"):
        services.random_selection(team=team, candidates=4, judge=True, seed=1)

    drawn = services.random_selection(team=team, candidates=2, judge=False, seed=7)
    suite, out = tmp_path / "suite.yaml", tmp_path / "run.json"
    suite.write_bytes(suite_bytes())
    with contextlib.suppress(SystemExit):  # incomplete when gamma is drawn (its t05)
        call_command(
            "eval", "run", "--team", "Acme", "--suite", str(suite), "--random", "2",
            "--selection-seed", "7", "--output", str(out),
        )  # fmt: skip
    record = json.loads(out.read_text())
    assert record["run"]["selection_seed"] == 7
    assert [a["slug"] for a in record["run"]["agents"]] == drawn.agents


def test_what_was_never_judged_makes_the_record_incomplete(alice, arena_agents):
    # the record counts what was expected, not only what failed: a criterion score or a
    # pair judgement that is missing (a cancel, an interruption) is not "complete"
    team = Team.objects.get(name="Acme")
    suite = services.suite_store(team=team, name="arith.yaml", data=suite_bytes())
    rubric = services.rubric_store(team=team, name="rubric.yaml", data=RUBRIC)
    evaluation = services.evaluation_create(
        team=team, suite=suite, agent_slugs=["alpha", "beta"], rubric=rubric,
        judge_slug="judge", pairwise=True,
    )  # fmt: skip
    evaluation = services.evaluation_execute(evaluation_id=evaluation.pk, sleep=[].append)
    record = selectors.evaluation_record(evaluation)
    run = record["run"]
    assert (run["expected_pairs"], run["resolved_pairs"], run["missing_criterion_scores"]) == (
        20, 19, 0,
    )  # fmt: skip
    assert run["complete"] is False  # the broken game of t10

    PairJudgement.objects.filter(evaluation=evaluation, failure__gt="").delete()
    assert selectors.evaluation_record(evaluation)["run"]["complete"] is False  # 19 of 20

    CriterionScore.objects.filter(run__evaluation=evaluation, run__task_id="t01").delete()
    run = selectors.evaluation_record(evaluation)["run"]
    assert run["missing_criterion_scores"] == 4 and run["complete"] is False

    # running again fills in what is missing; the judge still breaks t10's game
    done = services.evaluation_execute(evaluation_id=evaluation.pk, sleep=[].append)
    run = selectors.evaluation_record(done)["run"]
    assert (run["missing_criterion_scores"], run["resolved_pairs"]) == (0, 19)
    assert (run["failed_pair_judgements"], run["complete"]) == (1, False)
