"""What the evaluation pages show: who may open an evaluation, its progress (counts of
what is stored against what is expected, cheap enough for a live frame several times a
second), the results laid out for the page (from the run record; a tournament's in
``evals.tournament_presenters``), the figures, and one run's waterfall of spans."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from math import comb
from typing import Any

from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import Http404
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from battles.models import Span
from evals import plots, tournaments
from evals.models import Candidate, CriterionScore, EvalRun, EvalSpan, Evaluation, PairJudgement

TASKS_PER_PAGE = 50
FINISHED = (Evaluation.Status.DONE, Evaluation.Status.CANCELLED)


def access_evaluation(user, evaluation_id: int) -> Evaluation:
    """The evaluation when it belongs to one of the user's teams (as the API's tenant
    scope reads it); otherwise 404, exactly as for one that does not exist."""
    if not user.is_authenticated:
        raise Http404("No such evaluation.")
    evaluation = (
        Evaluation.objects.select_related("suite", "rubric", "judge")
        .filter(pk=evaluation_id, team__memberships__user=user)
        .first()
    )
    if evaluation is None:
        raise Http404("No such evaluation.")
    return evaluation


@dataclass(frozen=True)
class Progress:
    """Stored against expected, per kind. A failed run is done (it will not be asked
    again) and takes its criterion scores and its pairs out of what is expected, as the
    record counts them; a failed criterion score or pair judgement is done too. A
    tournament's pairs are its games, whose number is known only once it has finished:
    until then ``games_estimated`` and the expected games are 003's estimate."""

    evaluation_id: int
    status: str
    runs_done: int
    runs_expected: int
    runs_failed: int
    scores_done: int
    scores_expected: int
    pairs_done: int
    pairs_expected: int
    tournament: str = ""
    games_estimated: bool = False

    @property
    def done(self) -> int:
        return self.runs_done + self.scores_done + self.pairs_done

    @property
    def expected(self) -> int:
        return self.runs_expected + self.scores_expected + self.pairs_expected

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.expected) if self.expected else 100

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def parts(self) -> list[dict[str, Any]]:
        """The kinds this evaluation has, for the page: label, done, expected."""
        rows = [{"key": "runs", "label": "Answers", "done": self.runs_done,
                 "expected": self.runs_expected}]  # fmt: skip
        if self.scores_expected or self.scores_done:
            rows.append({"key": "scores", "label": "Criterion scores", "done": self.scores_done,
                         "expected": self.scores_expected})  # fmt: skip
        if self.pairs_expected or self.pairs_done:
            label = "Games" if self.tournament else "Pair judgements"
            rows.append({"key": "pairs", "label": label, "done": self.pairs_done,
                         "expected": self.pairs_expected})  # fmt: skip
        return rows


def games_expected(evaluation: Evaluation, *, candidates: int, tasks: int, played: int) -> int:
    """A tournament's games: once it has finished, the games it played; until then 003's
    estimate (the series each task schedules × tasks × best-of), raised to the games
    already played when tie-breaks outrun it. Series that end early play fewer games."""
    if evaluation.status in FINISHED:
        return played
    series = tournaments.scheduled_series(candidates, evaluation.tournament)
    return max(series * tasks * evaluation.best_of, played)


def progress_of(evaluations: Sequence[Evaluation]) -> dict[int, Progress]:
    """Each evaluation's progress, in five queries however many there are. The
    evaluations come with their suite and rubric loaded (their task and criterion
    lists are read here)."""
    ids = [e.pk for e in evaluations]
    if not ids:
        return {}
    candidates = dict(
        Candidate.objects.filter(evaluation_id__in=ids)
        .values("evaluation_id")
        .annotate(n=Count("id"))
        .values_list("evaluation_id", "n")
    )
    runs = {
        row["evaluation_id"]: row
        for row in EvalRun.objects.filter(evaluation_id__in=ids)
        .values("evaluation_id")
        .annotate(n=Count("id"), failed=Count("id", filter=Q(status=EvalRun.Status.ERROR)))
    }
    failed_per_task: dict[int, list[int]] = {}
    for evaluation_id, n in (
        EvalRun.objects.filter(evaluation_id__in=ids, status=EvalRun.Status.ERROR)
        .values("evaluation_id", "task_id")
        .annotate(n=Count("id"))
        .values_list("evaluation_id", "n")
    ):
        failed_per_task.setdefault(evaluation_id, []).append(n)
    scores = dict(
        CriterionScore.objects.filter(run__evaluation_id__in=ids)
        .values("run__evaluation_id")
        .annotate(n=Count("id"))
        .values_list("run__evaluation_id", "n")
    )
    pairs = dict(
        PairJudgement.objects.filter(evaluation_id__in=ids)
        .values("evaluation_id")
        .annotate(n=Count("id"))
        .values_list("evaluation_id", "n")
    )
    result = {}
    for e in evaluations:
        k, tasks = candidates.get(e.pk, 0), len(e.suite.tasks)
        ran = runs.get(e.pk, {"n": 0, "failed": 0})
        runs_expected = tasks * k
        scores_expected = pairs_expected = 0
        if e.rubric_id is not None and e.judge_id is not None:
            scores_expected = (runs_expected - ran["failed"]) * len(e.rubric.criteria)
        estimated = False
        if e.tournament and e.judge_id is not None:
            pairs_expected = games_expected(e, candidates=k, tasks=tasks, played=pairs.get(e.pk, 0))
            estimated = e.status not in FINISHED
        elif e.pairwise and e.judge_id is not None:
            # every task's pairs, less those of a failed run (as the record counts them)
            pairs_expected = tasks * comb(k, 2) - sum(
                comb(k, 2) - comb(k - f, 2) for f in failed_per_task.get(e.pk, [])
            )
        result[e.pk] = Progress(
            evaluation_id=e.pk,
            status=e.status,
            runs_done=ran["n"],
            runs_expected=runs_expected,
            runs_failed=ran["failed"],
            scores_done=scores.get(e.pk, 0),
            scores_expected=scores_expected,
            pairs_done=pairs.get(e.pk, 0),
            pairs_expected=pairs_expected,
            tournament=e.tournament,
            games_estimated=estimated,
        )
    return result


def _loaded(evaluation_id: int) -> Evaluation:
    return (
        Evaluation.objects.select_related("suite", "rubric")
        .defer("suite__source", "rubric__source")
        .get(pk=evaluation_id)
    )


def progress_group(evaluation_id: int) -> str:
    """The Channels group of the evaluation's live pages."""
    return f"evaluation-{evaluation_id}"


def render_progress(evaluation_id: int) -> str:
    """The progress fragment as the live socket sends it: it replaces the page's
    ``#eval-progress`` (htmx's websocket extension swaps by id)."""
    evaluation = _loaded(evaluation_id)
    progress = progress_of([evaluation])[evaluation.pk]
    return render_to_string("evals/_progress.html", {"progress": progress})


# -- results ---------------------------------------------------------------------


def _shown(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def measures_of(evaluation: Evaluation, tasks: Sequence[dict]) -> list[dict[str, str]]:
    """The columns of each agent in the results table, in order. A new measure (a
    desktop task's success exit code, say) is one more entry here and one more value
    in ``_cell``."""
    measures = []
    if any(t.get("expected") is not None for t in tasks):
        measures.append({"key": "exact", "label": "Exact", "title": "exact match: 1 or 0"})
    if evaluation.rubric_id is not None:
        measures.append(
            {"key": "weighted", "label": "Rubric", "title": "weighted rubric score in [0, 1]"}
        )
    if any(t.get("kind") == "desktop" and t.get("success_cmd") for t in tasks):
        measures.append(
            {"key": "success", "label": "Success", "title": "the success command's exit code"}
        )
    if any(t.get("kind") == "repo" for t in tasks):
        measures.append(
            {"key": "composite", "label": "Composite", "title": "the tests' composite score "
             "of the first run (docs/coding.md)"}
        )  # fmt: skip
    measures.append({"key": "status", "label": "Status", "title": "the run, and why it failed"})
    return measures


def _cell(
    agent: str, result: dict | None, measures: list[dict], run_id: int | None
) -> dict[str, Any]:
    status = result["status"] if result else "missing"
    success = (result or {}).get("success")
    coding = (result or {}).get("coding") or {}
    values = {
        "composite": _shown(coding.get("composite")),
        "exact": _shown(result.get("exact_score"), 0) if result else "–",
        "weighted": _shown(result.get("weighted_score")) if result else "–",
        "success": "–"
        if not success
        else ("timed out" if success["timed_out"] else f"exit {success['exit_code']}"),
    }
    return {
        "agent": agent,
        "status": status,
        "error": (result or {}).get("error", ""),
        "run_id": run_id,
        "values": [{"key": m["key"], "value": values.get(m["key"], "")} for m in measures],
    }


def answer_rows(
    evaluation: Evaluation,
    tasks_page: Sequence[dict],
    by_key: dict[tuple[str, str], dict],
    agents: list[str],
    measures: list[dict],
) -> list[dict[str, Any]]:
    """The table's rows of one page of tasks: per agent its cells, linked to its run."""
    run_ids = {
        (task_id, slug): pk
        for task_id, slug, pk in EvalRun.objects.filter(
            evaluation=evaluation, task_id__in=[t["id"] for t in tasks_page], replicate=0
        ).values_list("task_id", "agent__slug", "pk")
    }
    return [
        {
            "task": task,
            "cells": [
                _cell(
                    slug,
                    by_key.get((task["id"], slug)),
                    measures,
                    run_ids.get((task["id"], slug)),
                )
                for slug in agents
            ],
        }
        for task in tasks_page
    ]


def _scorer_table(scorers: dict[str, Any] | None, agents: Sequence[str]) -> dict | None:
    """The scorers' figures (``statistics.scorers``), one row per (agent, metric); None
    when no run was scored."""
    rows = [
        {"agent": slug, "metric": name, **figure}
        for slug in agents
        for name, figure in ((scorers or {}).get("agents", {}).get(slug) or {}).items()
    ]
    if not rows:
        return None
    reducer = scorers["reducer"]
    named = f"{reducer['name']}:{reducer['k']}" if reducer["k"] else reducer["name"]
    return {"rows": rows, "epochs": scorers["epochs"], "reducer": named}


def results_view(
    evaluation: Evaluation, record: dict[str, Any], *, page: int | str | None = 1
) -> dict[str, Any]:
    """Everything the results part of the run page shows, from the record: the
    per-task × agent table (one page of tasks), the figures, the per-criterion means
    with their intervals, exact-match rates, and the pairwise judgements of the page's
    tasks."""
    agents = [a["slug"] for a in record["run"]["agents"]]
    tasks_page = Paginator(record["tasks"], TASKS_PER_PAGE).get_page(page)
    task_ids = [t["id"] for t in tasks_page]
    # a repo task's table cell shows its first run; pass@k speaks for all of them
    by_key = {(r["task_id"], r["agent"]): r for r in record["results"] if not r.get("replicate")}
    measures = measures_of(evaluation, record["tasks"])
    rows = answer_rows(evaluation, tasks_page, by_key, agents, measures)
    statistics = record["statistics"]
    passes = statistics.get("pass_at_k")
    criteria = [
        (c["name"], c["scale"]) for c in (evaluation.rubric.criteria if evaluation.rubric else [])
    ]
    means = statistics["criterion_means"]
    radar = matrix = None
    if criteria and means:
        radar = mark_safe(plots.radar(means, criteria=criteria, agents=agents))  # noqa: S308 - plots escapes every text
    if statistics.get("win_rates") and statistics["weighted_scores"]:
        matrix = mark_safe(plots.win_rate_matrix(statistics["win_rates"], agents=agents))  # noqa: S308
    criterion_rows = [
        {"agent": slug, "criterion": name, "scale": scale, **means[slug][name]}
        for slug in agents
        for name, scale in criteria
        if name in means.get(slug, {})
    ]
    pages_tasks = set(task_ids)
    judgements = [
        {**j, "winner_agent": {"A": j["a"], "B": j["b"]}.get(j["winner"], "tie")}
        for j in record.get("judgments", [])
        if j["task_id"] in pages_tasks
    ]
    failures = [f for f in record.get("judgment_failures", []) if f["task_id"] in pages_tasks]
    exact = statistics["exact_match"]
    return {
        "agents": agents,
        "measures": measures,
        "rows": rows,
        "tasks_page": tasks_page,
        "radar": radar,
        "matrix": matrix,
        "criterion_rows": criterion_rows,
        "exact_rates": [{"agent": s, "rate": exact.get(s)} for s in agents]
        if any(v is not None for v in exact.values())
        else [],
        "scorers": _scorer_table(statistics.get("scorers"), agents),
        "success_rates": [
            {"agent": s, **statistics["success"][s]}
            for s in agents
            if (statistics.get("success") or {}).get(s)
        ],
        "pass_at_k": {
            "ks": passes["ks"],
            "rows": [
                {
                    "agent": s,
                    "means": [passes["agents"][s]["mean"][str(k)] for k in passes["ks"]],
                    "runs": sum(t["n"] for t in passes["agents"][s]["tasks"]),
                }
                for s in agents
            ],
        }
        if passes
        else None,
        "pairwise": evaluation.pairwise,
        "baseline": record.get("baseline"),
        "baseline_strong": (record.get("baseline") or {}).get("weights", {}).get("A>>B"),
        "judgements": judgements,
        "judgement_failures": failures,
        "orientation": record["run"].get("orientation_agreement"),
        "run": record["run"],
    }


# -- one run ---------------------------------------------------------------------


def span_rows(spans: Iterable[EvalSpan | Span]) -> dict[str, Any]:
    """The spans on their common time axis, for templates/_waterfall.html: per span its
    offset and width in percent of the whole, plus totals of tokens and cost. A desktop
    run's lane spans (``battles.Span``: its model calls and tool actions, by step) and
    the evaluation's own (the rubric judge's calls) share the axis."""
    spans = sorted(spans, key=lambda s: s.started_at)
    if not spans:
        return {"rows": [], "totals": {}, "duration_ms": 0}
    start = min(s.started_at for s in spans)
    end = max(s.started_at.timestamp() * 1000 + s.latency_ms for s in spans)
    duration = max(1.0, end - start.timestamp() * 1000)
    rows = [
        {
            "span": s,
            # every span of an evaluation is a model call; a lane's says what it was
            "kind": getattr(s, "kind", "model"),
            "label": s.role if isinstance(s, EvalSpan) else f"step {s.step_index}",
            "offset_pct": round(100 * (s.started_at - start).total_seconds() * 1000 / duration, 2),
            "width_pct": max(0.3, round(100 * s.latency_ms / duration, 2)),
        }
        for s in spans
    ]
    totals = {
        "input_tokens": sum(s.input_tokens for s in spans),
        "output_tokens": sum(s.output_tokens for s in spans),
        "cost_usd": sum(float(s.cost_usd) for s in spans),
    }
    return {"rows": rows, "totals": totals, "duration_ms": int(duration)}


def run_view(evaluation: Evaluation, run_id: int) -> dict[str, Any]:
    """One run of the evaluation (404 for a run of another): its task, the reply, the
    criterion scores with their justifications, and its spans (the candidate's call
    and the rubric judge's calls on it)."""
    run = (
        EvalRun.objects.select_related("agent", "lane")
        .filter(evaluation=evaluation, pk=run_id)
        .first()
    )
    if run is None:
        raise Http404("No such run.")
    task = next((t for t in evaluation.suite.tasks if t["id"] == run.task_id), None)
    order = {
        c["name"]: i for i, c in enumerate(evaluation.rubric.criteria if evaluation.rubric else [])
    }
    scores = sorted(run.criterion_scores.all(), key=lambda s: order.get(s.criterion, len(order)))
    return {
        "run": run,
        "task": task or {"id": run.task_id},
        "scores": scores,
        **span_rows([*run.spans.all(), *(run.lane.spans.all() if run.lane else [])]),
    }
