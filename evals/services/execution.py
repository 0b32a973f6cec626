"""Running an evaluation: what is missing of it, each result stored as it arrives (a
run, a criterion score or a pair judgement already stored is never asked again), so an
interrupted evaluation resumes where it stopped. A cancel takes effect before the next
call.

Two phases: every candidate's answers (chat tasks' calls, then desktop tasks' lanes,
``evals.services.desktop``, then repo tasks' coding lanes, each replicate, judged by
their tests, ``evals.services.repo``), then the judges (rubric and pairwise), which
need those answers. Repo tasks are scored by their tests, not by the rubric or pairwise
judge; in a tournament their games are decided by the composite score (no judge call).
A tournament's games (``evals.tournaments``) are played per task, one after
another — who meets whom next depends on the outcomes — and the tasks side by side;
what a task already stored replays, so a resumed tournament judges only what it lacks.
Within a phase the calls run on a thread pool, at most ``concurrency``
(``ARENA_EVAL_PROVIDER_CONCURRENCY``) in flight per provider endpoint (provider and
base URL) across every evaluation worker of the arena (``evals.gates``):
one slow or rate-limited provider neither stalls nor floods the others, and two
evaluations running at once share the bound. With a concurrency of 1 the calls run in
the caller's thread, one by one. Desktop lanes have a bound of their own: at most the
evaluation's ``desktop.lanes`` sandboxes at once per host, across its evaluations.
"""

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import combinations

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from agents.models import Agent
from agents.services import AgentFailure, model_client_for, sampling_params
from evals import calls, scorers, scoring, usage
from evals.gates import gates
from evals.models import CriterionScore, EvalRun, Evaluation, PairJudgement
from evals.reducers import epochs_of
from evals.services import baseline, desktop, repo, run_scores
from evals.services.spans import spans_store
from evals.tournament_selectors import (
    replaying,
    schedule_of,
    stored_outcomes,
    task_epochs,
    task_tournaments,
)
from evals.tournaments import Play, Unplayed, run_task

CANCEL_POLL_S = 0.5  # a cancel stops the evaluation within this long of its next call


@dataclass(frozen=True)
class Work:
    """One call to make and store: ``endpoint`` names whose concurrency it counts against.
    A task's tournament is one item of many calls, one after another (each game's
    schedule depends on the outcomes before it): it ticks per game itself
    (``ticks=False``)."""

    endpoint: str
    label: str
    do: Callable[[], None]
    ticks: bool = True


def endpoint_of(agent: Agent) -> str:
    return f"{agent.provider} {(agent.params or {}).get('base_url', '')}".strip()


def _duplicate(error: IntegrityError) -> bool:
    """Whether the error is a unique constraint's (PostgreSQL's SQLSTATE 23505, or
    SQLite's message for ``make run`` without a database), not a broken row."""
    cause = error.__cause__
    return getattr(cause, "sqlstate", None) == "23505" or str(cause).startswith("UNIQUE constraint")


def _store(build: Callable[[], object]) -> None:
    """Store one result; a concurrent executor that stored it first wins. Any other
    integrity error is a bug, raised."""
    try:
        with transaction.atomic():
            build()
    except IntegrityError as error:
        if not _duplicate(error):
            raise


def _run_all(
    work: list[Work],
    *,
    concurrency: int,
    cancelled: Callable[[], bool],
    tick: Callable[[str], None],
) -> None:
    """Do every item, at most ``concurrency`` at once per endpoint; none starts after a
    cancel. The pool's threads close their database connections when done."""
    shared = gates()
    if concurrency == 1:
        for item in work:
            with shared.hold(item.endpoint, limit=1, cancelled=cancelled) as held:
                if not held or cancelled():
                    return
                item.do()
            if item.ticks:
                tick(item.label)
        return
    # This job's own bound as well: its threads never poll Redis for more places than
    # they could hold.
    local: dict[str, threading.BoundedSemaphore] = defaultdict(
        lambda: threading.BoundedSemaphore(concurrency)
    )
    for item in work:  # created up front: the defaultdict is not thread-safe
        local[item.endpoint]

    def one(item: Work) -> None:
        try:
            with (
                local[item.endpoint],
                shared.hold(item.endpoint, limit=concurrency, cancelled=cancelled) as held,
            ):
                if held and not cancelled():
                    item.do()
                    if item.ticks:
                        tick(item.label)
        finally:
            connection.close()  # this thread's; the next item opens its own

    endpoints = len(local)
    with ThreadPoolExecutor(max_workers=min(len(work), concurrency * endpoints) or 1) as pool:
        for future in [pool.submit(one, item) for item in work]:
            future.result()  # re-raises a bug in a worker thread here


def evaluation_execute(
    *,
    evaluation_id: int,
    sleep: Callable[[float], None] | None = None,
    progress: Callable[[str], None] | None = None,
    concurrency: int | None = None,
) -> Evaluation:
    """Run what is missing of the evaluation: each (task, agent)'s answer, then the
    rubric judge's score per criterion and the pairwise games; each result is stored as
    it arrives. ``progress`` is called with a short label after each call;
    ``concurrency`` defaults to ``ARENA_EVAL_PROVIDER_CONCURRENCY``."""
    evaluation = Evaluation.objects.select_related("suite", "rubric", "judge").get(pk=evaluation_id)
    if evaluation.status == Evaluation.Status.CANCELLED:
        return evaluation
    Evaluation.objects.filter(pk=evaluation.pk, started_at=None).update(started_at=timezone.now())
    Evaluation.objects.filter(pk=evaluation.pk).exclude(status=Evaluation.Status.CANCELLED).update(
        status=Evaluation.Status.RUNNING
    )  # a cancel that came first stays
    if progress:
        progress("running")  # the page says so now, not after the first (slow) call or lane
    if concurrency is None:
        concurrency = settings.ARENA.eval_provider_concurrency
    if evaluation.settings.get("concurrency") != concurrency:  # the record cites it
        evaluation.settings = {**evaluation.settings, "concurrency": concurrency}
        evaluation.save(update_fields=["settings"])
    agents = [c.agent for c in evaluation.candidates.select_related("agent")]
    tasks = evaluation.suite.tasks
    clients: dict[int, object] = {}
    for agent in [*agents, *([evaluation.judge] if evaluation.judge else [])]:
        try:
            clients[agent.pk] = model_client_for(agent, retries=0)
        except AgentFailure as failure:
            clients[agent.pk] = failure  # every call of this agent fails with it

    polled = {"at": -CANCEL_POLL_S, "cancelled": False}

    def cancelled() -> bool:
        """Whether a cancel came: asked of the database at most every CANCEL_POLL_S (a
        query per call was a large part of the arena's overhead per call)."""
        now = time.monotonic()
        if not polled["cancelled"] and now - polled["at"] >= CANCEL_POLL_S:
            polled["cancelled"] = Evaluation.objects.filter(
                pk=evaluation.pk, status=Evaluation.Status.CANCELLED
            ).exists()
            polled["at"] = now
        return polled["cancelled"]

    ticking = threading.Lock()  # ticks come from the pool's threads

    def tick(label: str) -> None:
        if progress:
            with ticking:
                progress(label)

    run = dict(concurrency=concurrency, cancelled=cancelled, tick=tick)
    epochs = epochs_of(evaluation.settings)
    _run_all(_candidate_work(evaluation, tasks, agents, clients, sleep, epochs), **run)
    if cancelled():
        return _finish(evaluation)
    lanes = evaluation.settings.get("desktop")
    if lanes:
        desktop.lanes_fail_stuck()
        _run_all(
            _desktop_work(evaluation, tasks, agents, epochs),
            concurrency=lanes["lanes"],
            cancelled=cancelled,
            tick=tick,
        )
        if cancelled():
            return _finish(evaluation)
    coding = evaluation.settings.get("repo")
    if coding:
        if not lanes:
            desktop.lanes_fail_stuck()
        _run_all(
            _repo_work(evaluation, tasks, agents, epochs),
            concurrency=coding["lanes"],
            cancelled=cancelled,
            tick=tick,
        )
        if cancelled():
            return _finish(evaluation)
    runs = {  # every epoch's run: the judges judge each epoch's replies
        (r.task_id, r.agent_id, r.replicate): r
        for r in EvalRun.objects.filter(evaluation=evaluation).select_related(
            "agent", "lane__coding"
        )
    }
    judge = evaluation.judge
    run_scores.runs_score(evaluation=evaluation, tasks=tasks)
    judging: list[Work] = [
        Work(endpoint_of(judge) if judge else "scorers", label, do)
        for label, do in run_scores.fact_work(
            evaluation=evaluation,
            tasks=tasks,
            judge=judge,
            client=clients.get(judge.pk) if judge else None,
            sleep=sleep,
        )
    ]
    if evaluation.tournament and (judge is not None or repo_only(tasks)):
        # a tournament plays on with a judge that cannot be built: each game it asks
        # fails with the reason, as a candidate's calls do, and the record says so
        judging += _tournament_work(
            evaluation, tasks, agents, runs, judge, clients, sleep, cancelled, tick
        )
    elif judge is not None and not isinstance(clients[judge.pk], AgentFailure):
        judged = [t for t in tasks if t["kind"] != "repo"]  # repo tasks: their tests
        if evaluation.rubric is not None:
            judging += _rubric_work(evaluation, judged, agents, runs, judge, clients, sleep, epochs)
        if evaluation.pairwise:
            judging += _pair_work(evaluation, judged, agents, runs, judge, clients, sleep, epochs)
        if evaluation.baseline_id:  # the judge's answer first, then the task's games
            for label, do in baseline.baseline_work(evaluation, judged, clients[judge.pk], sleep):
                judging.append(Work(endpoint_of(judge), label, do))
    _run_all(judging, **run)
    Evaluation.objects.filter(pk=evaluation.pk, status=Evaluation.Status.RUNNING).update(
        status=Evaluation.Status.DONE, finished_at=timezone.now()
    )
    return _finish(evaluation)


def _finish(evaluation: Evaluation) -> Evaluation:
    evaluation.refresh_from_db()
    return evaluation


def _done_runs(evaluation) -> set[tuple[str, int, int]]:
    return set(
        EvalRun.objects.filter(evaluation=evaluation).values_list(
            "task_id", "agent_id", "replicate"
        )
    )


def _each(tasks, agents, epochs: int, kind: str, done: set):
    """(task, agent, epoch) of the kind's tasks not yet run, task by task, epoch 0 first."""
    for task in tasks:
        for agent in agents:
            for epoch in range(epochs):
                if task["kind"] == kind and (task["id"], agent.pk, epoch) not in done:
                    yield task, agent, epoch


def _candidate_work(evaluation, tasks, agents, clients, sleep, epochs: int) -> list[Work]:
    """A call per chat task, agent and epoch not yet run (a multiple-choice task's
    prompt lists its choices lettered, ``scorers.choices_prompt``)."""
    max_tokens = evaluation.settings.get("candidate_max_tokens", calls.MAX_TOKENS)
    work = []
    for task, agent, epoch in _each(tasks, agents, epochs, "chat", _done_runs(evaluation)):

        def do(task=task, agent=agent, epoch=epoch) -> None:
            started, t0 = timezone.now(), time.monotonic()
            client = clients[agent.pk]
            if isinstance(client, AgentFailure):
                outcome = calls.Outcome(error=str(client))
            else:
                outcome = calls.candidate_answer(
                    client,
                    prompt=scorers.choices_prompt(task["prompt"], task.get("choices") or ()),
                    system=agent.system_prompt,
                    params=sampling_params(agent),
                    max_tokens=max_tokens,
                    sleep=sleep,
                )
            expected = task.get("expected")

            def build() -> None:
                run = EvalRun.objects.create(
                    evaluation=evaluation,
                    task_id=task["id"],
                    agent=agent,
                    replicate=epoch,
                    status=EvalRun.Status.DONE
                    if outcome.text is not None
                    else EvalRun.Status.ERROR,
                    output=outcome.text or "",
                    error=outcome.error,
                    exact_score=scoring.exact_match(outcome.text, expected)
                    if outcome.text is not None and expected is not None
                    else None,
                    started_at=started,
                    duration_ms=int((time.monotonic() - t0) * 1000),
                    attempts=max(outcome.attempts, 1),
                    usage=usage.chat_usage(outcome.spans),
                )
                spans_store(outcome.spans, evaluation_id=evaluation.pk, role="candidate", run=run)

            _store(build)

        label = f"{task['id']} · {agent.slug}" + (f" · epoch {epoch + 1}" if epochs > 1 else "")
        work.append(Work(endpoint_of(agent), label, do))
    return work


def _desktop_work(evaluation, tasks, agents, epochs: int) -> list[Work]:
    """A lane per desktop task, agent and epoch not yet run; its run is stored when it
    ends, with the agent's final message as the output the judges and scorers read."""
    endpoint = desktop.lanes_endpoint()
    work = []
    for task, agent, epoch in _each(tasks, agents, epochs, "desktop", _done_runs(evaluation)):

        def do(task=task, agent=agent, epoch=epoch) -> None:
            desktop.desktop_run(evaluation=evaluation, task=task, agent=agent, replicate=epoch)

        label = f"{task['id']} · {agent.slug} (desktop{f', epoch {epoch + 1}' * (epochs > 1)})"
        work.append(Work(endpoint, label, do))
    return work


def repo_only(tasks) -> bool:
    """Whether every task is a repo task: a tournament then plays its games without a
    judge, each decided by the composite scores."""
    return bool(tasks) and all(t["kind"] == "repo" for t in tasks)


def _repo_work(evaluation, tasks, agents, epochs: int) -> list[Work]:
    """A coding lane per repo task, agent and epoch not yet run, under the same
    per-host gate as the desktop lanes; each run stored once its judge has ended."""
    endpoint = desktop.lanes_endpoint()
    work = []
    for task, agent, epoch in _each(tasks, agents, epochs, "repo", _done_runs(evaluation)):

        def do(task=task, agent=agent, epoch=epoch) -> None:
            repo.repo_run(evaluation=evaluation, task=task, agent=agent, replicate=epoch)

        label = f"{task['id']} · {agent.slug} (repo, run {epoch + 1})"
        work.append(Work(endpoint, label, do))
    return work


def _rubric_work(evaluation, tasks, agents, runs, judge, clients, sleep, epochs) -> list[Work]:
    """Every criterion of every done run (each epoch's) not yet scored."""
    rubric = evaluation.rubric
    done = set(
        CriterionScore.objects.filter(run__evaluation=evaluation).values_list("run_id", "criterion")
    )
    work = []
    for task in tasks:
        for agent, epoch in ((agent, e) for agent in agents for e in range(epochs)):
            run = runs.get((task["id"], agent.pk, epoch))
            if run is None or run.status != EvalRun.Status.DONE:
                continue  # a failed candidate has no reply to judge
            for criterion in rubric.criteria:
                if (run.pk, criterion["name"]) in done:
                    continue

                def do(task=task, run=run, criterion=criterion) -> None:
                    judged = calls.rubric_criterion(
                        clients[judge.pk],
                        criterion=criterion["name"],
                        description=criterion["description"],
                        scale=criterion["scale"],
                        task_input=task["prompt"],
                        reference=task.get("reference"),
                        output=run.output,
                        sleep=sleep,
                    )

                    def build() -> None:
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
                        spans_store(
                            judged.outcome.spans,
                            evaluation_id=evaluation.pk,
                            role="rubric",
                            run=run,
                        )

                    _store(build)

                label = f"{task['id']} · {agent.slug} · {criterion['name']}" + (
                    f" · epoch {epoch + 1}" if epochs > 1 else ""
                )
                work.append(Work(endpoint_of(judge), label, do))
    return work


def _play_game(
    evaluation: Evaluation,
    *,
    task: dict,
    a: Agent,
    b: Agent,
    number: int,
    run_a: EvalRun,
    run_b: EvalRun,
    judge: Agent,
    client,
    sleep,
    epoch: int = 0,
) -> str:
    """Judges game ``number`` of (a, b) on the task (both orientations), stores it and
    returns its outcome ("A", "B", "tie" or "failed"); a repo task's game is decided by
    the two runs' composite scores instead (``repo.composite_game``), asking no judge.
    A judge that cannot be built fails the game with its reason, asking nothing; so does
    a candidate with no reply (its run failed): there is nothing to judge. When another
    executor stored the game first, its outcome is the one returned."""
    fields = dict(
        evaluation=evaluation, task_id=task["id"], agent_a=a, agent_b=b, game=number, epoch=epoch
    )
    if task["kind"] == "repo":
        decided = repo.composite_game(a, b, run_a, run_b)
        _store(lambda: PairJudgement.objects.create(**fields, **decided))
        return PairJudgement.objects.get(**fields).outcome
    failure = ""
    if isinstance(client, AgentFailure):
        failure = f"the judge cannot be asked: {client}"
    else:
        silent = [(x, r) for x, r in ((a, run_a), (b, run_b)) if r.status != EvalRun.Status.DONE]
        if silent:
            x, r = silent[0]
            failure = f"no reply to judge: {x.slug}'s run failed ({r.error or r.status})"
    if failure:
        _store(
            lambda: PairJudgement.objects.create(
                **fields, failure=failure[:2000], judge_model=judge.model_id, duration_ms=0
            )
        )
        return PairJudgement.objects.get(**fields).outcome
    game = calls.pairwise_game(
        client,
        task_prompt=task["prompt"],
        response_a=run_a.output,
        response_b=run_b.output,
        sleep=sleep,
    )
    ab, ba = game.ab.verdict, game.ba.verdict

    def build() -> None:
        pair = PairJudgement.objects.create(
            **fields,
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
        spans_store(
            game.ab.outcome.spans + game.ba.outcome.spans,
            evaluation_id=evaluation.pk,
            role="pairwise",
            pair=pair,
        )

    _store(build)
    return PairJudgement.objects.get(**fields).outcome


def _pair_work(evaluation, tasks, agents, runs, judge, clients, sleep, epochs) -> list[Work]:
    """Game 1 of every pair of done runs on every task and epoch (epoch e's replies
    against each other), not yet judged."""
    done = set(
        PairJudgement.objects.filter(evaluation=evaluation).values_list(
            "task_id", "agent_a_id", "agent_b_id", "epoch"
        )
    )
    work = []
    for task, epoch in ((task, e) for task in tasks for e in range(epochs)):
        for a, b in combinations(agents, 2):
            run_a, run_b = runs.get((task["id"], a.pk, epoch)), runs.get((task["id"], b.pk, epoch))
            if (task["id"], a.pk, b.pk, epoch) in done or not (
                run_a and run_b and run_a.status == run_b.status == EvalRun.Status.DONE
            ):
                continue

            def do(task=task, a=a, b=b, run_a=run_a, run_b=run_b, epoch=epoch) -> None:
                _play_game(evaluation, task=task, a=a, b=b, number=1, run_a=run_a, run_b=run_b,
                           judge=judge, client=clients[judge.pk], sleep=sleep,
                           epoch=epoch)  # fmt: skip

            label = f"{task['id']} · {a.slug} vs {b.slug}" + (
                f" · epoch {epoch + 1}" if epochs > 1 else ""
            )
            work.append(Work(endpoint_of(judge), label, do))
    return work


def _tournament_work(
    evaluation, tasks, agents, runs, judge, clients, sleep, cancelled, tick
) -> list[Work]:
    """Each task's (with epochs: each task and epoch's) tournament not yet finished, as
    one item: its stored games replay (the schedule depends only on outcomes), then the
    missing ones are judged one after another, each stored as it ends, comparing that
    epoch's replies. A cancel stops a task before its next game; a candidate with no
    run yet leaves the task for a later resume."""
    by_slug = {a.slug: a for a in agents}
    slugs = [a.slug for a in agents]
    outcomes = stored_outcomes(evaluation, {a.pk: a.slug for a in agents})
    schedule = schedule_of(evaluation)
    finished = {
        (t.task_id, t.epoch)
        for t in task_tournaments(evaluation, slugs, outcomes)
        if t.status != "unfinished"
    }

    def play_for(task: dict, epoch: int) -> Play:
        stored = replaying(outcomes, epoch)

        def play(task_id: str, a: str, b: str, number: int) -> str:
            try:
                return stored(task_id, a, b, number)
            except Unplayed:
                pass
            agent_a, agent_b = by_slug[a], by_slug[b]
            run_a = runs.get((task_id, agent_a.pk, epoch))
            run_b = runs.get((task_id, agent_b.pk, epoch))
            if cancelled() or run_a is None or run_b is None:
                raise Unplayed
            outcome = _play_game(evaluation, task=task, a=agent_a, b=agent_b, number=number,
                                 run_a=run_a, run_b=run_b, judge=judge,
                                 client=clients[judge.pk] if judge else None,
                                 sleep=sleep, epoch=epoch)  # fmt: skip
            tick(f"{task_id} · {a} vs {b} · game {number}")
            return outcome

        return play

    def do(task: dict, epoch: int | None) -> None:
        run_task(task["id"], slugs, play=play_for(task, epoch or 0), epoch=epoch, **schedule)

    return [
        Work(
            endpoint_of(judge) if judge and task["kind"] != "repo" else "composite",
            f"{task['id']} · tournament" + ("" if epoch is None else f" · epoch {epoch + 1}"),
            lambda task=task, epoch=epoch: do(task, epoch),
            ticks=False,
        )
        for task, epoch in task_epochs(evaluation)
        if (task["id"], epoch) not in finished and (judge is not None or task["kind"] == "repo")
    ]
