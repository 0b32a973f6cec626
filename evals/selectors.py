"""Reads of offline evaluations: a team's evaluation, and its run record — the one JSON
document that says what ran, with what, and what came of it (never a key)."""

from typing import Any

from django.db.models import Count

from accounts.models import Team
from agents.models import Agent
from arena_site.exceptions import ApplicationError
from battles.coding_models import CodingOutcome
from battles.models import Run, Span, Step
from evals import aggregates, provenance, scorer_selectors, usage
from evals.baseline_selectors import baseline_record_complete
from evals.models import (
    CriterionScore,
    EvalAttachment,
    EvalRun,
    EvalSpan,
    Evaluation,
    PairJudgement,
)

RECORD_SCHEMA = "agent-arena/evaluation-record/1"


def evaluation_for_team(*, team: Team, evaluation_id: int) -> Evaluation:
    """The team's evaluation; another team's is 404, as if it did not exist."""
    evaluation = Evaluation.objects.filter(team=team, pk=evaluation_id).first()
    if evaluation is None:
        raise ApplicationError("no such evaluation", code="not_found", status=404)
    return evaluation


def agent_provenance(agent: Agent) -> dict[str, Any]:
    params = agent.params or {}
    return {
        "slug": agent.slug,
        "provider": agent.provider,
        "model": agent.model_id,
        # where its calls went: the agent's own base URL, else the provider's default or
        # the operator's override (no key: keys are never in params)
        "base_url": params.get("base_url") or "",
    }


def iso(value) -> str | None:
    return value.isoformat() if value else None


def _lane(run: EvalRun, steps: dict[int, int]) -> dict[str, Any] | None:
    lane = run.lane
    if lane is None:
        return None
    return {
        "id": lane.pk,
        "end_reason": lane.end_reason,
        "steps": steps.get(lane.pk, 0),
        "agent_fault": lane.agent_fault,
        "delivered_files": [
            {"name": f["name"], "size": f["size"], "sha256": f["sha256"]}
            for f in lane.delivered_files
        ],
    }


CODING_SCORES = ("functional", "regression", "lint", "complexity", "cost_efficiency", "composite")


def coding_scores(run: EvalRun) -> dict[str, Any] | None:
    """A repo task's run as its judge sandbox scored it (docs/coding.md): the scores
    (None where not measured), the apply step, the diff's hash and size, the cost."""
    coding = getattr(run.lane, "coding", None) if run.lane_id else None
    if coding is None:
        return None
    return {
        **{name: getattr(coding, name) for name in CODING_SCORES},
        "applied": coding.applied,
        "diff_sha256": coding.diff_sha256,
        "diff_bytes": coding.diff_bytes,
        "cost_usd": (coding.usage or {}).get("cost_usd"),
        "judge_error": coding.judge_error,
    }


def lane_usage(lane: Run | None, *, kind: str) -> dict[str, Any]:
    """A desktop or repo run's usage from its lane: a coding CLI's own report (the
    figures the battle page shows) with the lane's directness, else the lane's model
    spans (the scaffold's calls, or the gateway's for a CLI that reported nothing)."""
    if lane is None:
        return usage.unknown(usage.NO_LANE)
    spans = Span.objects.filter(run=lane, kind=Span.Kind.MODEL).order_by("pk")
    coding = None
    if kind == "repo":
        coding = CodingOutcome.objects.filter(run=lane).only("usage", "directness").first()
    return _lane_usage_of(list(spans), coding, kind=kind)


def _lane_usage_of(spans: list[Span], coding: CodingOutcome | None, *, kind: str) -> dict:
    if kind != "repo":
        return usage.of_calls(
            spans, source=usage.LANE_SPANS, directness_reason=usage.DESKTOP_NO_DIRECTNESS
        )
    reported = (coding.usage if coding else None) or {}
    directness = (coding.directness if coding else None) or None
    if reported and reported.get("source") != "spans":
        return usage.cli_usage(reported, directness)
    return usage.of_calls(
        spans,
        source=usage.LANE_SPANS,
        directness=directness,
        directness_reason="" if directness else usage.NOT_MEASURED,
    )


def runs_usage(runs: list[EvalRun], kinds: dict[str, str]) -> dict[int, dict[str, Any]]:
    """Each run's usage as the record carries it, by run id: what was stored with the
    run, else (a run stored before issue 40) derived now from its stored calls or lane
    (``derived``), in three reads whatever the number of such runs (their calls, their
    lanes' model spans, their coding outcomes)."""
    found = {run.pk: usage.copied(run.usage) for run in runs if run.usage}
    old = [run for run in runs if not run.usage]
    if not old:
        return found
    chat = [run.pk for run in old if kinds[run.task_id] == "chat"]
    lanes = [run.lane_id for run in old if kinds[run.task_id] != "chat" and run.lane_id]
    calls: dict[int, list[EvalSpan]] = {}
    for span in EvalSpan.objects.filter(run_id__in=chat, role=EvalSpan.Role.CANDIDATE):
        calls.setdefault(span.run_id, []).append(span)
    spans: dict[int, list[Span]] = {}
    for span in Span.objects.filter(run_id__in=lanes, kind=Span.Kind.MODEL).order_by("pk"):
        spans.setdefault(span.run_id, []).append(span)
    outcomes = CodingOutcome.objects.filter(run_id__in=lanes)
    codings = {c.run_id: c for c in outcomes.only("run_id", "usage", "directness")}
    for run in old:
        kind = kinds[run.task_id]
        if kind == "chat":
            derived = usage.chat_usage(calls.get(run.pk, []))
        elif run.lane_id is None:
            derived = usage.unknown(usage.NO_LANE)
        else:
            lane = run.lane_id
            derived = _lane_usage_of(spans.get(lane, []), codings.get(lane), kind=kind)
        found[run.pk] = usage.copied({**derived, "derived": True})
    return found


def judge_usage(evaluation: Evaluation) -> dict[str, Any] | None:
    """The judge's calls (rubric, pairwise, its own answers, model-graded scorers: every
    attempt) added up from the evaluation's spans, and by role; None without a judge."""
    if evaluation.judge_id is None:
        return None
    calls = EvalSpan.objects.filter(evaluation=evaluation).exclude(role=EvalSpan.Role.CANDIDATE)
    return usage.calls_totals((c.role, c) for c in calls)


def usage_section(
    evaluation: Evaluation, candidates: list[Agent], runs: list[EvalRun], usages: dict[int, dict]
) -> dict[str, Any]:
    """The record's ``usage``: each candidate's runs added up (every epoch, failed runs
    too: they were paid; ``usages`` from ``runs_usage``), and the judge's calls
    (``judge_usage``)."""
    per_agent: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        per_agent.setdefault(run.agent_id, []).append(usages[run.pk])
    return {
        "candidates": {a.slug: usage.totals(per_agent.get(a.pk, [])) for a in candidates},
        "judge": judge_usage(evaluation),
    }


def _pass_at_k(evaluation, tasks, candidates, all_runs) -> dict[str, Any] | None:
    """Per agent, pass@k over each repo task's judged runs (c: functional 1), and
    averaged over the tasks; None without repo tasks."""
    repo_tasks = [t["id"] for t in tasks if t["kind"] == "repo"]
    if not repo_tasks:
        return None
    ks = aggregates.pass_at_ks((evaluation.settings.get("repo") or {}).get("replicates", 1))
    per_agent: dict[str, Any] = {}
    for agent in candidates:
        functional: dict[str, list[float]] = {t: [] for t in repo_tasks}
        for (task_id, agent_id, _), run in sorted(all_runs.items(), key=lambda kv: kv[0][2]):
            scored = coding_scores(run) if agent_id == agent.pk and task_id in functional else None
            if scored and scored["functional"] is not None:
                functional[task_id].append(scored["functional"])
        per_agent[agent.slug] = aggregates.pass_at_k_table(functional, ks)
    return {"ks": ks, "agents": per_agent}


def _success(run: EvalRun) -> dict[str, Any] | None:
    if run.success_duration_ms is None:
        return None
    return {
        "exit_code": run.success_exit_code,
        "output": run.success_output,
        "error": run.success_error,
        "timed_out": bool(run.success_timed_out),
        "duration_ms": run.success_duration_ms,
        "score": run.success_score,
    }


def _or_zero(run: EvalRun | None, field: str) -> float | None:
    """The run's score in ``field``; 0 for a run its candidate failed that has none
    (``scorer_selectors.candidate_failed``); None when it has none through no fault of
    the candidate's (or was never made)."""
    if run is None:
        return None
    value = getattr(run, field)
    if value is None and scorer_selectors.candidate_failed(run):
        return 0.0
    return value


def _success_rates(tasks, candidates, runs) -> dict[str, dict[str, Any] | None]:
    """Per agent, over its runs of tasks with a success command: the success rate (the
    mean score; a run its agent failed with no result counts 0) with the 95 % bootstrap
    interval of 000 (seed 42), how many runs it counts and how many have no result
    through no fault of the agent's (the arena's failure before the sandbox started, or
    not run); None when the suite has no such task."""
    checked = [t["id"] for t in tasks if t["kind"] == "desktop" and t.get("success_cmd")]
    if not checked:
        return {a.slug: None for a in candidates}
    rates: dict[str, dict[str, Any] | None] = {}
    for agent in candidates:
        scores = [
            score
            for t in checked
            if (score := _or_zero(runs.get((t, agent.pk)), "success_score")) is not None
        ]
        lower, upper = aggregates.bootstrap_ci(scores) if scores else (None, None)
        rates[agent.slug] = {
            "rate": sum(scores) / len(scores) if scores else None,
            "lower": lower,
            "upper": upper,
            "n": len(scores),
            "unscored": len(checked) - len(scores),
        }
    return rates


def evaluation_record(evaluation: Evaluation) -> dict[str, Any]:
    """The run record: provenance (``run``), the tasks, each (task, agent)'s result in
    task-file and candidate order, the pairwise judgements and failures, and the
    aggregates of 000 §4 (weighted scores, win rates, per-criterion means with 95 %
    bootstrap intervals, seed 42)."""
    candidates = [c.agent for c in evaluation.candidates.select_related("agent")]
    tasks = evaluation.suite.tasks
    all_runs = {
        (r.task_id, r.agent_id, r.replicate): r
        for r in EvalRun.objects.filter(evaluation=evaluation).select_related("lane__coding")
    }
    runs = {(t, a): r for (t, a, replicate), r in all_runs.items() if replicate == 0}
    replicates = (evaluation.settings.get("repo") or {}).get("replicates", 1)
    steps = dict(
        Step.objects.filter(run__eval_run__evaluation=evaluation)
        .values("run_id")
        .annotate(n=Count("pk"))
        .values_list("run_id", "n")
    )
    kinds = {t["id"]: t["kind"] for t in tasks}
    usages = runs_usage(list(all_runs.values()), kinds)
    scores: dict[int, list[CriterionScore]] = {}
    for s in CriterionScore.objects.filter(run__evaluation=evaluation).order_by("pk"):
        scores.setdefault(s.run_id, []).append(s)
    order = {
        c["name"]: i for i, c in enumerate(evaluation.rubric.criteria if evaluation.rubric else [])
    }

    results, per_task, criterion_rows = [], {}, []
    each = [
        (t, agent, replicate)
        for t in tasks
        for agent in candidates
        for replicate in range(replicates if t["kind"] == "repo" else 1)
    ]
    for task, agent, replicate in each:
        run = all_runs.get((task["id"], agent.pk, replicate))
        repo_row = {"replicate": replicate} if task["kind"] == "repo" else {}
        if run is None:
            results.append(
                {"task_id": task["id"], "agent": agent.slug, "status": "missing", **repo_row}
            )
            continue
        judged = sorted(scores.get(run.pk, []), key=lambda s: order.get(s.criterion, 0))
        ok = [s for s in judged if s.status == CriterionScore.Status.OK]
        weighted = None
        if evaluation.rubric and ok and len(ok) == len(evaluation.rubric.criteria):
            weighted = aggregates.weighted_score([(s.score, s.scale, s.weight) for s in ok])
            per_task.setdefault(task["id"], {})[agent.slug] = weighted
        criterion_rows += [(agent.slug, s.criterion, float(s.score)) for s in ok]
        results.append(
            {
                "task_id": task["id"],
                "agent": agent.slug,
                "kind": kinds[task["id"]],
                "status": run.status,
                "output": run.output,
                "error": run.error,
                "exact_score": run.exact_score,
                "duration_ms": run.duration_ms,
                "attempts": run.attempts,
                "weighted_score": weighted,
                "criteria": [
                    {
                        "criterion": s.criterion,
                        "score": s.score,
                        "scale": s.scale,
                        "weight": s.weight,
                        "justification": s.justification,
                        "status": s.status,
                        "error": s.error,
                        "corrected": s.corrected,
                        "raw": s.raw,
                    }
                    for s in judged
                ],
                "lane": _lane(run, steps),
                "success": _success(run),
                "usage": usages[run.pk],
                **repo_row,
                **({"coding": coding_scores(run)} if repo_row else {}),
            }
        )

    judgments, failures = [], []
    for p in (
        PairJudgement.objects.filter(evaluation=evaluation)
        .select_related("agent_a", "agent_b")
        .order_by("pk")
    ):
        row = {
            "task_id": p.task_id,
            "a": p.agent_a.slug,
            "b": p.agent_b.slug,
            "ab": {"winner": p.ab_winner, "reason": p.ab_reason, "raw": p.ab_raw},
            "ba": {"winner": p.ba_winner, "reason": p.ba_reason, "raw": p.ba_raw},
            "duration_ms": p.duration_ms,
            "judge_model": p.judge_model,
        }
        if p.winner:
            judgments.append({**row, "winner": p.winner, "agreement": p.agreement})
        else:
            failures.append({**row, "failure": p.failure})

    slugs = [a.slug for a in candidates]
    exact = {}
    for agent in candidates:
        values = [
            value
            for t in tasks
            if t.get("expected") is not None and t["kind"] != "repo"
            if (value := _or_zero(runs.get((t["id"], agent.pk)), "exact_score")) is not None
        ]
        exact[agent.slug] = sum(values) / len(values) if values else None
    # What was expected, against what is stored: a run never made (cancelled, or not yet)
    # counts as failed; a done run's criterion never scored, or a pair of done runs never
    # judged, counts as missing. ``complete`` only when nothing failed or is missing.
    failed_runs = sum(1 for r in results if r["status"] != EvalRun.Status.DONE)
    failed_scores = sum(1 for r in results for c in r.get("criteria", []) if c["status"] != "ok")
    done = {(r["task_id"], r["agent"]) for r in results if r["status"] == EvalRun.Status.DONE}
    missing_scores = 0
    if evaluation.rubric:
        criteria = {c["name"] for c in evaluation.rubric.criteria}
        missing_scores = sum(
            len(criteria - {c["criterion"] for c in r["criteria"]})
            for r in results
            if r["status"] == EvalRun.Status.DONE
        )
    expected_pairs = 0
    if evaluation.pairwise:
        slugs_in_order = [a.slug for a in candidates]
        expected_pairs = sum(
            1
            for task in tasks
            for i, a in enumerate(slugs_in_order)
            for b in slugs_in_order[i + 1 :]
            if (task["id"], a) in done and (task["id"], b) in done
        )
    judge = evaluation.judge
    record: dict[str, Any] = {
        "schema": RECORD_SCHEMA,
        "run": {
            "app_version": provenance.app_version(),
            "evaluation_id": evaluation.pk,
            "status": evaluation.status,
            "created_at": iso(evaluation.created_at),
            "started_at": iso(evaluation.started_at),
            "finished_at": iso(evaluation.finished_at),
            "suite": {
                "name": evaluation.suite.name,
                "sha256": evaluation.suite.sha256,
                "tasks": len(tasks),
            },
            "rubric": (
                {"name": evaluation.rubric.name, "sha256": evaluation.rubric.sha256}
                if evaluation.rubric
                else None
            ),
            "agents": [agent_provenance(a) for a in candidates],
            "judge": agent_provenance(judge) if judge else None,
            "pairwise": evaluation.pairwise,
            "desktop": None,  # the settings of an evaluation without desktop tasks
            **evaluation.settings,
            "attachments": [
                {
                    "task_id": a.task_id,
                    "path": a.path,
                    "name": a.name,
                    "sha256": a.sha256,
                    "size": a.size,
                }
                for a in EvalAttachment.objects.filter(evaluation=evaluation).order_by("pk")
            ],
            "failed_runs": failed_runs,
            "failed_criterion_scores": failed_scores,
            "failed_pair_judgements": len(failures),
            "missing_criterion_scores": missing_scores,
            "expected_pairs": expected_pairs,
            "resolved_pairs": len(judgments),
            "complete": failed_runs == 0
            and failed_scores == 0
            and missing_scores == 0
            and not failures
            and len(judgments) == expected_pairs,
        },
        "tasks": tasks,
        "results": results,
        "statistics": {
            "exact_match": exact,
            "weighted_scores": per_task,
            "win_rates": aggregates.win_rates(per_task, slugs) if evaluation.rubric else None,
            "criterion_means": aggregates.criterion_means(criterion_rows),
            "success": _success_rates(tasks, candidates, runs),
            "pass_at_k": _pass_at_k(evaluation, tasks, candidates, all_runs),
        },
    }
    record["usage"] = usage_section(evaluation, candidates, list(all_runs.values()), usages)
    scorer_selectors.record_scores(record, evaluation, candidates, all_runs)
    if evaluation.pairwise:
        agreeing = sum(1 for j in judgments if j["agreement"])
        record["judgments"] = judgments
        record["judgment_failures"] = failures
        record["run"]["orientation_agreement"] = {
            "resolved_pairs": len(judgments),
            "orientation_agreeing_pairs": agreeing,
            "orientation_disagreeing_pairs": len(judgments) - agreeing,
            "agreement_rate": agreeing / len(judgments) if judgments else 0.0,
        }
    if evaluation.baseline_id:
        baseline_record_complete(record, evaluation)
    return record
