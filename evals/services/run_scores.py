"""Scoring an evaluation's runs by their tasks' scorers (``evals.scorers``), after the
candidates' phase: every done run of a chat or desktop task that has scorers (a task
with only ``evaluation: exact`` counts as one exact scorer) gets ``EvalRun.scores``.
A run's scores are written once, all together (a run whose scores are stored is never
scored again, so a resumed evaluation scores only what is missing); a run that failed
has no reply and no scores.

Deterministic scorers need no call: ``runs_score`` scores those runs at once. A task
with a model-graded scorer is scored by a work item per run on the judge's endpoint
(``fact_work``): one grader call per model-graded scorer, each attempt a span of role
``scorer`` on the run.
"""

import time
from collections.abc import Callable

from django.db import transaction

from agents.models import Agent
from agents.services import AgentFailure
from evals import calls, scorers
from evals.models import EvalRun, EvalSpan, Evaluation
from evals.scorers import task_scorers
from evals.services.spans import spans_store


def _unscored(evaluation: Evaluation, tasks) -> list[tuple[dict, EvalRun]]:
    by_id = {t["id"]: t for t in tasks if task_scorers(t)}
    runs = EvalRun.objects.filter(
        evaluation=evaluation, status=EvalRun.Status.DONE, task_id__in=list(by_id), scores={}
    ).order_by("pk")
    return [(by_id[run.task_id], run) for run in runs]


def _save(run: EvalRun, scores: dict, spans=()) -> None:
    """The run's scores, unless another executor stored them first (then nothing)."""
    with transaction.atomic():
        if EvalRun.objects.filter(pk=run.pk, scores={}).update(scores=scores) != 1:
            return
        spans_store(spans, evaluation_id=run.evaluation_id, role=EvalSpan.Role.SCORER, run=run)


def runs_score(*, evaluation: Evaluation, tasks) -> int:
    """Scores every unscored done run whose task's scorers need no model call; returns
    how many it scored."""
    scored = 0
    for task, run in _unscored(evaluation, tasks):
        specs = task_scorers(task)
        if scorers.needs_judge(specs):
            continue
        _save(run, scorers.score_all(specs, run.output, choices=task.get("choices") or ()))
        scored += 1
    return scored


def fact_work(
    *,
    evaluation: Evaluation,
    tasks,
    judge: Agent | None,
    client,
    sleep: Callable[[float], None] | None,
) -> list[tuple[str, Callable[[], None]]]:
    """(label, do) per unscored done run whose task has a model-graded scorer: ``do``
    asks the grader (the evaluation's judge) once per such scorer and stores all the
    run's scores. A grader that cannot be built or fails for good leaves that scorer
    unscored (value None, the reason as its explanation)."""
    work = []
    for task, run in _unscored(evaluation, tasks):
        specs = task_scorers(task)
        if not scorers.needs_judge(specs):
            continue

        def do(task=task, run=run, specs=specs) -> None:
            spans: list = []

            def grade(spec: dict) -> scorers.Score:
                if judge is None or isinstance(client, AgentFailure):
                    why = f": {client}" if isinstance(client, AgentFailure) else ""
                    return scorers.Score(None, "", f"the grader cannot be asked{why}")
                t0 = time.monotonic()
                graded = calls.fact_grade(client, question=task["prompt"], target=spec["target"],
                                          reply=run.output, sleep=sleep)  # fmt: skip
                spans.extend(graded.outcome.spans)
                if graded.grade is None:
                    return scorers.Score(None, "", f"not graded: {graded.outcome.error}"[:2000])
                took = int((time.monotonic() - t0) * 1000)
                verdict = "correct" if graded.grade == "C" else "incorrect"
                why = f"{judge.model_id} graded it {verdict} ({took} ms)"
                return scorers.Score(float(graded.grade == "C"), graded.grade, why)

            choices = task.get("choices") or ()
            _save(run, scorers.score_all(specs, run.output, choices=choices, grade=grade), spans)

        work.append((f"{task['id']} · run {run.pk} · grader", do))
    return work
