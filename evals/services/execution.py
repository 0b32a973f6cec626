"""Running an evaluation: what is missing of it, each result stored as it arrives (a
run, a criterion score or a pair judgement already stored is never asked again), so an
interrupted evaluation resumes where it stopped. A cancel takes effect before the next
call."""

import time
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import combinations

from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.models import Agent
from agents.services import AgentFailure, model_client_for
from evals import calls, scoring
from evals.models import CriterionScore, EvalRun, EvalSpan, Evaluation, PairJudgement


def _spans(records, *, evaluation: Evaluation, role: str, run=None, pair=None) -> None:
    EvalSpan.objects.bulk_create(
        EvalSpan(
            evaluation=evaluation,
            run=run,
            pair=pair,
            role=role,
            name=r.name[:200],
            input=r.input,
            output=r.output,
            error=r.error,
            started_at=datetime.fromtimestamp(r.started, UTC),
            latency_ms=r.latency_ms,
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            cost_usd=r.cost_usd,
        )
        for r in records
    )


def _store(build: Callable[[], object]) -> None:
    """Store one result; a concurrent executor that stored it first wins."""
    try:
        with transaction.atomic():
            build()
    except IntegrityError:
        pass


def evaluation_execute(
    *,
    evaluation_id: int,
    sleep: Callable[[float], None] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Evaluation:
    """Run what is missing of the evaluation: each (task, agent)'s answer, then the
    rubric judge's score per criterion, then the pairwise games; each result is stored
    as it arrives. ``progress`` is called with a short label after each step."""
    evaluation = Evaluation.objects.select_related("suite", "rubric", "judge").get(pk=evaluation_id)
    if evaluation.status == Evaluation.Status.CANCELLED:
        return evaluation
    Evaluation.objects.filter(pk=evaluation.pk, started_at=None).update(started_at=timezone.now())
    Evaluation.objects.filter(pk=evaluation.pk).exclude(status=Evaluation.Status.CANCELLED).update(
        status=Evaluation.Status.RUNNING
    )  # a cancel that came first stays
    agents = [c.agent for c in evaluation.candidates.select_related("agent")]
    tasks = evaluation.suite.tasks
    max_tokens = evaluation.settings.get("candidate_max_tokens", calls.MAX_TOKENS)
    clients: dict[int, object] = {}

    def client(agent: Agent):
        if agent.pk not in clients:
            clients[agent.pk] = model_client_for(agent, retries=0)
        return clients[agent.pk]

    def tick(label: str) -> None:
        if progress:
            progress(label)

    def cancelled() -> bool:
        return Evaluation.objects.filter(
            pk=evaluation.pk, status=Evaluation.Status.CANCELLED
        ).exists()

    for task in tasks:
        for agent in agents:
            if cancelled():
                return _finish(evaluation)
            if EvalRun.objects.filter(
                evaluation=evaluation, task_id=task["id"], agent=agent
            ).exists():
                tick(f"{task['id']} · {agent.slug}")
                continue
            started = timezone.now()
            t0 = time.monotonic()
            try:
                outcome = calls.candidate_answer(
                    client(agent),
                    prompt=task["prompt"],
                    system=agent.system_prompt,
                    params={
                        k: agent.params[k]
                        for k in ("temperature", "top_p")
                        if k in (agent.params or {})
                    },
                    max_tokens=max_tokens,
                    sleep=sleep,
                )
            except AgentFailure as failure:
                outcome = calls.Outcome(error=str(failure))

            def build(task=task, agent=agent, outcome=outcome, started=started, t0=t0):
                run = EvalRun.objects.create(
                    evaluation=evaluation,
                    task_id=task["id"],
                    agent=agent,
                    status=EvalRun.Status.DONE
                    if outcome.text is not None
                    else EvalRun.Status.ERROR,
                    output=outcome.text or "",
                    error=outcome.error,
                    exact_score=(
                        scoring.exact_match(outcome.text, task["expected"])
                        if outcome.text is not None and task.get("expected") is not None
                        else None
                    ),
                    started_at=started,
                    duration_ms=int((time.monotonic() - t0) * 1000),
                    attempts=max(outcome.attempts, 1),
                )
                _spans(outcome.spans, evaluation=evaluation, role="candidate", run=run)

            _store(build)
            tick(f"{task['id']} · {agent.slug}")

    runs = {
        (r.task_id, r.agent_id): r
        for r in EvalRun.objects.filter(evaluation=evaluation).select_related("agent")
    }
    judge = evaluation.judge
    if evaluation.rubric is not None and judge is not None and not cancelled():
        _judge_rubric(evaluation, tasks, agents, runs, judge, client(judge), sleep, tick, cancelled)
    if evaluation.pairwise and judge is not None and not cancelled():
        _judge_pairs(evaluation, tasks, agents, runs, judge, client(judge), sleep, tick, cancelled)
    Evaluation.objects.filter(pk=evaluation.pk, status=Evaluation.Status.RUNNING).update(
        status=Evaluation.Status.DONE, finished_at=timezone.now()
    )
    return _finish(evaluation)


def _finish(evaluation: Evaluation) -> Evaluation:
    evaluation.refresh_from_db()
    return evaluation


def _judge_rubric(
    evaluation, tasks, agents, runs, judge, judge_client, sleep, tick, cancelled
) -> None:
    rubric = evaluation.rubric
    for task in tasks:
        for agent in agents:
            run = runs.get((task["id"], agent.pk))
            if run is None or run.status != EvalRun.Status.DONE:
                continue  # a failed candidate has no reply to judge
            done = set(run.criterion_scores.values_list("criterion", flat=True))
            for criterion in rubric.criteria:
                if criterion["name"] in done:
                    continue
                if cancelled():
                    return
                judged = calls.rubric_criterion(
                    judge_client,
                    criterion=criterion["name"],
                    description=criterion["description"],
                    scale=criterion["scale"],
                    task_input=task["prompt"],
                    reference=task.get("reference"),
                    output=run.output,
                    sleep=sleep,
                )

                def build(run=run, criterion=criterion, judged=judged):
                    CriterionScore.objects.create(
                        run=run,
                        criterion=criterion["name"],
                        score=judged.score,
                        scale=criterion["scale"],
                        weight=criterion["weight"],
                        justification=judged.justification,
                        rubric_sha256=rubric.sha256,
                        judge_model=judge.model_id,
                        status=judged.status,
                        error=judged.error,
                        corrected=judged.corrected,
                        raw=judged.outcome.raw,
                    )
                    _spans(judged.outcome.spans, evaluation=evaluation, role="rubric", run=run)

                _store(build)
                tick(f"{task['id']} · {agent.slug} · {criterion['name']}")


def _judge_pairs(
    evaluation, tasks, agents, runs, judge, judge_client, sleep, tick, cancelled
) -> None:
    done = set(
        PairJudgement.objects.filter(evaluation=evaluation).values_list(
            "task_id", "agent_a_id", "agent_b_id"
        )
    )
    for task in tasks:
        for a, b in combinations(agents, 2):
            if (task["id"], a.pk, b.pk) in done:
                continue
            if cancelled():
                return
            run_a, run_b = runs.get((task["id"], a.pk)), runs.get((task["id"], b.pk))
            if not (run_a and run_b and run_a.status == run_b.status == EvalRun.Status.DONE):
                continue
            game = calls.pairwise_game(
                judge_client,
                task_prompt=task["prompt"],
                response_a=run_a.output,
                response_b=run_b.output,
                sleep=sleep,
            )

            def build(task=task, a=a, b=b, game=game):
                ab, ba = game.ab.verdict, game.ba.verdict
                pair = PairJudgement.objects.create(
                    evaluation=evaluation,
                    task_id=task["id"],
                    agent_a=a,
                    agent_b=b,
                    winner=game.resolved.winner if game.resolved else "",
                    agreement=game.resolved.agreement if game.resolved else None,
                    ab_winner=ab.winner if ab else "",
                    ba_winner=ba.winner if ba else "",
                    ab_reason=ab.reason if ab else "",
                    ba_reason=ba.reason if ba else "",
                    ab_raw=game.ab.outcome.raw,
                    ba_raw=game.ba.outcome.raw,
                    failure=game.failure,
                    judge_model=judge.model_id,
                    duration_ms=game.duration_ms,
                )
                _spans(
                    game.ab.outcome.spans + game.ba.outcome.spans,
                    evaluation=evaluation,
                    role="pairwise",
                    pair=pair,
                )

            _store(build)
            tick(f"{task['id']} · {a.slug} vs {b.slug}")
