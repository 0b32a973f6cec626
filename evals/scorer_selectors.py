"""The evaluation record's scorers and epochs (issue 40; docs/evaluations.md "Scorers"
and "Epochs"): each run's scores, the runs of epochs the results do not list, and per
(agent, metric) the mean over tasks of the reduced per-task scores with its standard
error (the task is the cluster, ``evals.reducers.metric``).

A metric is a scorer's name in ``EvalRun.scores``, or one of the run kinds' own figures:
``success`` (a desktop task's success command, 1 iff exit 0), ``functional`` (a repo
task's hidden tests) and ``rubric`` (the weighted rubric score of a fully judged run).

A run that failed through its candidate's fault scores 0 on every metric of its task
(``candidate_failed``): leaving it out would let an agent that fails the tasks it would
lose look better. A failure that is not the candidate's (the arena could not run the
lane, the hidden tests could not be judged, a grader call failed) leaves the run out.
"""

from typing import Any

from battles.models import Run
from evals import aggregates, reducers, scorers
from evals.models import CriterionScore, EvalRun, Evaluation

KIND_METRICS = ("success", "functional", "rubric")


def _weighted(evaluation: Evaluation) -> dict[int, float]:
    """Each fully and successfully judged run's weighted rubric score, by run id."""
    if evaluation.rubric is None:
        return {}
    wanted = len(evaluation.rubric.criteria)
    judged: dict[int, list] = {}
    for s in CriterionScore.objects.filter(run__evaluation=evaluation, status="ok"):
        judged.setdefault(s.run_id, []).append((s.score, s.scale, s.weight))
    return {
        run_id: aggregates.weighted_score(rows)
        for run_id, rows in judged.items()
        if len(rows) == wanted
    }


def run_values(run: EvalRun, rubric: dict[int, float]) -> dict[str, float]:
    """Every metric's value on one done run (an unscored scorer is left out)."""
    values = {
        name: score["value"]
        for name, score in (run.scores or {}).items()
        if score.get("value") is not None
    }
    if run.success_score is not None:
        values["success"] = run.success_score
    coding = getattr(run.lane, "coding", None) if run.lane_id else None
    if coding is not None and coding.functional is not None:
        values["functional"] = coding.functional
    if run.pk in rubric:
        values["rubric"] = rubric[run.pk]
    return values


def candidate_failed(run: EvalRun) -> bool:
    """Whether the run failed through its candidate's fault: a chat call that got no
    reply (its provider or endpoint failed, or could not be set up: the arena's rule for
    lanes, ``battles.services.lanes``), or a lane that ended in the agent's error
    (``Run.agent_fault``). The arena's own failures and a judge's are not."""
    if run.status != EvalRun.Status.ERROR:
        return False
    if run.lane_id is None:
        return True
    return run.lane.end_reason == Run.EndReason.ERROR and run.lane.agent_fault


def task_metrics(evaluation: Evaluation, task: dict) -> set[str]:
    """The metrics the suite defines on a task: its scorers' names, ``success`` for a
    desktop task with a success command, ``functional`` for a repo task, ``rubric``
    for a chat or desktop task of an evaluation with a rubric."""
    found = set(scorers.names(scorers.task_scorers(task)))
    if task["kind"] == "desktop" and task.get("success_cmd"):
        found.add("success")
    if task["kind"] == "repo":
        found.add("functional")
    elif evaluation.rubric is not None:
        found.add("rubric")
    return found


def _failed_values(run: EvalRun, metrics: set[str]) -> dict[str, float]:
    """A run its candidate failed: 0 on every metric of its task, except the figures a
    check still made of what the agent left (its success command, its hidden tests)."""
    values = dict.fromkeys(metrics, 0.0)
    if run.success_score is not None:
        values["success"] = run.success_score
    coding = getattr(run.lane, "coding", None) if run.lane_id else None
    if coding is not None and coding.functional is not None:
        values["functional"] = coding.functional
    return values


def scorer_statistics(
    evaluation: Evaluation, candidates, all_runs: dict[tuple[str, int, int], EvalRun]
) -> dict[str, Any]:
    """``{epochs, reducer, agents: {slug: {metric: {mean, stderr, tasks, unscored_tasks,
    epochs_scored, failed_counted_zero}}}}``. A metric counts on the tasks the suite
    defines it on and those where some run has it. A run its candidate failed counts 0
    (``failed_counted_zero`` of the epochs scored); an agent's task with no scored
    epoch of a metric (never run, or failed through no fault of the candidate's) is
    an unscored task."""
    reducer = reducers.reducer_of(evaluation.settings)
    rubric = _weighted(evaluation)
    defined = {t["id"]: task_metrics(evaluation, t) for t in evaluation.suite.tasks}
    values: dict[tuple[str, int], list[dict[str, float]]] = {}
    zeroed: dict[tuple[int, str], int] = {}
    tasks_of: dict[str, set[str]] = {}
    for task_id, metrics in defined.items():
        for name in metrics:
            tasks_of.setdefault(name, set()).add(task_id)
    for (task_id, agent_id, _), run in sorted(all_runs.items(), key=lambda kv: kv[0][2]):
        if run.status == EvalRun.Status.DONE:
            scored = run_values(run, rubric)
        elif candidate_failed(run):
            scored = _failed_values(run, defined.get(task_id, set()))
            for name, value in scored.items():
                if value == 0.0:
                    zeroed[(agent_id, name)] = zeroed.get((agent_id, name), 0) + 1
        else:
            scored = {}
        values.setdefault((task_id, agent_id), []).append(scored)
        for name in scored:
            tasks_of.setdefault(name, set()).add(task_id)
    tasks_in_order = [t["id"] for t in evaluation.suite.tasks]
    agents: dict[str, Any] = {}
    for agent in candidates:
        agents[agent.slug] = {}
        for name in sorted(tasks_of):
            per_task = {
                task_id: [v[name] for v in values.get((task_id, agent.pk), []) if name in v]
                for task_id in tasks_in_order
                if task_id in tasks_of[name]
            }
            figures = reducers.metric(reducer, per_task)
            figures["failed_counted_zero"] = zeroed.get((agent.pk, name), 0)
            agents[agent.slug][name] = figures
    return {
        "epochs": reducers.epochs_of(evaluation.settings),
        "reducer": reducer.as_json(),
        "agents": agents,
    }


def record_scores(
    record: dict[str, Any],
    evaluation: Evaluation,
    candidates,
    runs: dict[tuple[str, int, int], EvalRun],
) -> None:
    """Adds to the record: each result's ``scores`` (and ``epoch``), the runs of later
    epochs its results do not list (``epoch_runs``) and ``statistics.scorers``."""
    slug = {a.pk: a.slug for a in candidates}
    by_row = {(task, slug.get(agent), epoch): (task, agent, epoch) for task, agent, epoch in runs}
    listed = set()
    for row in record["results"]:
        key = by_row.get((row["task_id"], row["agent"], row.get("replicate", 0)))
        if key is None or row["status"] == "missing":
            continue
        listed.add(key)
        row["scores"] = runs[key].scores or {}
    record["epoch_runs"] = [
        {
            "task_id": run.task_id,
            "agent": slug[run.agent_id],
            "epoch": run.replicate,
            "status": run.status,
            "output": run.output,
            "error": run.error,
            "duration_ms": run.duration_ms,
            "scores": run.scores or {},
        }
        for key, run in sorted(runs.items(), key=lambda kv: (kv[0][2], kv[1].pk))
        if key not in listed and run.agent_id in slug
    ]
    record["statistics"]["scorers"] = scorer_statistics(evaluation, candidates, runs)
    _count_later_epochs(record, evaluation, candidates)


def _count_later_epochs(record: dict[str, Any], evaluation: Evaluation, candidates) -> None:
    """The record's counts and ``complete`` over every epoch: the results list epoch 0,
    so a later epoch's run that failed or was never made counts as a failed run, its
    rubric criteria never scored as missing, and its pairs of done runs as expected
    pairwise games (``complete`` by the same rule as the results' own)."""
    epochs = reducers.epochs_of(evaluation.settings)
    if epochs == 1:
        return
    run = record["run"]
    later = record["epoch_runs"]
    chat_or_desktop = [t["id"] for t in evaluation.suite.tasks if t["kind"] != "repo"]
    made = len(later)
    run["failed_runs"] += (epochs - 1) * len(chat_or_desktop) * len(candidates) - made
    run["failed_runs"] += sum(1 for r in later if r["status"] != EvalRun.Status.DONE)
    done = [r for r in later if r["status"] == EvalRun.Status.DONE]
    if evaluation.rubric:
        judged = CriterionScore.objects.filter(
            run__evaluation=evaluation, run__replicate__gt=0, run__status=EvalRun.Status.DONE
        )
        run["failed_criterion_scores"] += judged.exclude(status="ok").count()
        wanted = len(evaluation.rubric.criteria) * len(done)
        run["missing_criterion_scores"] += wanted - judged.count()
    if evaluation.pairwise and not evaluation.tournament:
        slugs = [a.slug for a in candidates]
        present = {(r["task_id"], r["agent"], r["epoch"]) for r in done}
        run["expected_pairs"] += sum(
            1
            for task_id, epoch in {(r["task_id"], r["epoch"]) for r in done}
            for i, a in enumerate(slugs)
            for b in slugs[i + 1 :]
            if (task_id, a, epoch) in present and (task_id, b, epoch) in present
        )
    run["complete"] = (
        run["failed_runs"] == 0
        and run["failed_criterion_scores"] == 0
        and run["missing_criterion_scores"] == 0
        and run["failed_pair_judgements"] == 0
        and run["resolved_pairs"] == run["expected_pairs"]
    )
