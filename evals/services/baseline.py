"""Baseline-anchored judging, the work (``evals.baseline`` holds the pure rules): the
option checked at creation, then in the judge phase, per task, the judge's own answer
(``JudgeAnswer``, asked once) and the games of every other candidate against the
baseline on every epoch both have a run of (``PairJudgement``: A the candidate, B the
baseline, game 1, both orders' 5-level verdicts). Each result is stored as it arrives
and never asked again, so a resumed evaluation asks only what is missing.

The judge's verdict calls share ``evals.calls``' one retry budget: a reply without
exactly one verdict label is asked again as a provider error that may pass is.
"""

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from django.db import transaction

from agents.models import Agent
from agents.providers.base import ModelClient
from arena_site.exceptions import ApplicationError
from evals import baseline, calls
from evals.models import EvalRun, EvalSpan, Evaluation, JudgeAnswer, PairJudgement


def baseline_choose(
    *, agents: Sequence[Agent], slug: str, has_judge: bool, tournament: str, pairwise: bool
) -> Agent:
    """The baseline among the candidates, for an evaluation with a judge, without a
    tournament and without all-pairs judging, with another candidate to play it."""
    chosen = next((a for a in agents if a.slug == slug), None)
    if chosen is None:
        raise ApplicationError(
            f"the baseline {slug!r} must be one of the evaluation's candidates (its answers "
            "are generated like theirs)",
            code="baseline_not_candidate",
        )
    if len(agents) < 2:
        raise ApplicationError(
            "baseline-anchored judging needs a candidate besides the baseline",
            code="too_few_agents",
        )
    if not has_judge:
        raise ApplicationError("baseline-anchored judging needs a judge (--judge)", code="no_judge")
    if tournament:
        raise ApplicationError(
            "a baseline plays every candidate once per task; a tournament schedules its own "
            "games: choose one",
            code="baseline_in_tournament",
        )
    if pairwise:
        raise ApplicationError(
            "baseline-anchored judging plays candidates against the baseline only, never "
            "each other: do not ask for every pair as well (pairwise)",
            code="baseline_with_pairwise",
        )
    return chosen


def _spans_store(records, *, evaluation: Evaluation, role: str, **owner) -> None:
    EvalSpan.objects.bulk_create(
        [
            EvalSpan(
                evaluation=evaluation,
                role=role,
                started_at=datetime.fromtimestamp(r.started, UTC),
                name=r.name[:200],
                **{k: getattr(r, k) for k in ("input", "output", "error", "latency_ms")},
                **{k: getattr(r, k) for k in ("input_tokens", "output_tokens", "cost_usd")},
                **owner,
            )
            for r in records
        ]
    )


def judge_answer_obtain(
    *, evaluation: Evaluation, task: dict, client: ModelClient, sleep=None
) -> JudgeAnswer:
    """The judge's own answer to the task: the stored one, else asked (the candidates'
    retry policy, the judge's decoding) and stored with its spans (role ``answer``)."""
    stored = JudgeAnswer.objects.filter(evaluation=evaluation, task_id=task["id"]).first()
    if stored is not None:
        return stored
    t0 = time.monotonic()
    outcome = calls.candidate_answer(
        client,
        prompt=task["prompt"],
        params=dict(calls.JUDGE_DECODING),
        max_tokens=calls.MAX_TOKENS,
        sleep=sleep,
    )
    with transaction.atomic():
        answer, made = JudgeAnswer.objects.get_or_create(
            evaluation=evaluation,
            task_id=task["id"],
            defaults=dict(
                output=outcome.text or "",
                error=outcome.error if outcome.text is None else "",
                judge_model=client.model,
                attempts=max(outcome.attempts, 1),
                duration_ms=int((time.monotonic() - t0) * 1000),
            ),
        )
        if made:
            _spans_store(outcome.spans, evaluation=evaluation, role="answer", answer=answer)
    return answer


def _order(
    client: ModelClient, prompt: str, *, name: str, sleep
) -> tuple[str | None, calls.Outcome]:
    """One order's 5-level verdict (None when it failed for good) and its calls: a
    reply without a verdict is asked again, as the other judges' are."""
    return calls.parsed_call(
        client,
        prompt=prompt,
        span_name=name,
        what=f"baseline judge {client.model}",
        parse=baseline.parse_verdict,
        rejected="judge reply rejected",
        sleep=sleep,
    )


def baseline_game_play(
    *,
    evaluation: Evaluation,
    task: dict,
    epoch: int,
    candidate: EvalRun,
    anchor: EvalRun,
    answer: JudgeAnswer,
    client: ModelClient,
    sleep=None,
) -> PairJudgement:
    """The candidate's run (A) against the baseline's (B) on the task and epoch, judged
    in both orders with the judge's answer as the reference, stored (or the one stored
    first). A failed run or a failed judge answer fails the game, asking nothing."""
    fields = dict(evaluation=evaluation, task_id=task["id"], agent_a_id=candidate.agent_id,
                  agent_b_id=anchor.agent_id, epoch=epoch, game=1)  # fmt: skip
    failed = [r for r in (candidate, anchor) if r.status != EvalRun.Status.DONE]
    failure = ""
    if failed:
        why = failed[0].error or failed[0].status
        failure = f"no reply to judge: {failed[0].agent.slug}'s run failed ({why})"
    elif answer.error:
        failure = f"the judge's own answer to the task failed: {answer.error}"
    if failure:
        return PairJudgement.objects.get_or_create(
            **fields, defaults=dict(failure=failure[:2000], judge_model=client.model, duration_ms=0)
        )[0]
    t0 = time.monotonic()
    ask = dict(task_prompt=task["prompt"], reference=answer.output)
    ab, ab_outcome = _order(
        client,
        baseline.judge_prompt(**ask, response_a=candidate.output, response_b=anchor.output),
        name=f"judge {client.model} · AB",
        sleep=sleep,
    )
    ba, ba_outcome = _order(
        client,
        baseline.judge_prompt(**ask, response_a=anchor.output, response_b=candidate.output),
        name=f"judge {client.model} · BA",
        sleep=sleep,
    )
    ba = baseline.map_back(ba) if ba else None
    resolved = baseline.resolve(ab, ba) if ab and ba else None
    with transaction.atomic():
        game, made = PairJudgement.objects.get_or_create(
            **fields,
            defaults=dict(
                winner=resolved.winner if resolved else "",
                agreement=resolved.agreement if resolved else None,
                ab_level=ab or "",
                ba_level=ba or "",
                ab_winner=baseline.three_level(ab) if ab else "",
                ba_winner=baseline.three_level(ba) if ba else "",
                ab_raw=ab_outcome.raw,
                ba_raw=ba_outcome.raw,
                failure="" if resolved else (ab_outcome.error or ba_outcome.error)[:2000],
                judge_model=client.model,
                duration_ms=int((time.monotonic() - t0) * 1000),
            ),
        )
        if made:
            spans = ab_outcome.spans + ba_outcome.spans
            _spans_store(spans, evaluation=evaluation, role="pairwise", pair=game)
    return game


def baseline_work(
    evaluation: Evaluation, tasks: Sequence[dict], client: ModelClient, sleep=None
) -> list[tuple[str, Callable[[], None]]]:
    """(label, do) per judged task with a game still to play: ``do`` obtains the judge's
    answer, then plays the task's missing games one after another. A game is due for
    every candidate other than the baseline and every epoch where both have a run
    (a run not made yet leaves its game to a later resume)."""
    runs = {
        (r.task_id, r.agent_id, r.replicate): r
        for r in EvalRun.objects.filter(evaluation=evaluation).select_related("agent")
    }
    played = set(
        PairJudgement.objects.filter(evaluation=evaluation).values_list(
            "task_id", "agent_a_id", "epoch"
        )
    )
    others = [
        c.agent_id for c in evaluation.candidates.all() if c.agent_id != evaluation.baseline_id
    ]
    work = []
    for task in tasks:
        epochs = sorted({e for (t, a, e) in runs if t == task["id"]})
        due = [
            (runs[(task["id"], agent, e)], runs[(task["id"], evaluation.baseline_id, e)], e)
            for e in epochs
            for agent in others
            if (task["id"], agent, e) not in played
            and (task["id"], agent, e) in runs
            and (task["id"], evaluation.baseline_id, e) in runs
        ]
        if not due:
            continue

        def do(task=task, due=due) -> None:
            answer = judge_answer_obtain(evaluation=evaluation, task=task, client=client,
                                         sleep=sleep)  # fmt: skip
            for candidate, anchor, epoch in due:
                baseline_game_play(evaluation=evaluation, task=task, epoch=epoch,
                                   candidate=candidate, anchor=anchor, answer=answer,
                                   client=client, sleep=sleep)  # fmt: skip

        work.append((f"{task['id']} · against the baseline", do))
    return work
