"""Reads of tournament evaluations: the run record of 003's shape
(``evals.tournament_record``), built from what the evaluation stored — its runs, its
judged games, and each task's tournament replayed from those games' outcomes (the
schedule depends on nothing else), so a record read mid-run or after a cancel shows
the tasks not yet finished as ``unfinished``."""

from typing import Any

from evals import provenance, tournaments
from evals.models import EvalRun, Evaluation, PairJudgement
from evals.reducers import epochs_of
from evals.selectors import (
    agent_provenance,
    coding_scores,
    evaluation_record,
    iso,
    judge_usage,
    runs_usage,
)
from evals.tournament_record import GameDetail, tournament_record

REPLICATES = 1000  # 003's bootstrap replicates


def _results(evaluation: Evaluation, slug_of: dict[int, str]) -> list[dict[str, Any]]:
    """Every run (of every epoch, each naming it, when there are epochs)."""
    epochs = epochs_of(evaluation.settings)
    kinds = {t["id"]: t["kind"] for t in evaluation.suite.tasks}
    runs = list(
        EvalRun.objects.filter(evaluation=evaluation, replicate__lt=epochs)
        .select_related("lane__coding")
        .defer("lane__coding__diff", "lane__coding__checks")
    )
    usages = runs_usage(runs, kinds)
    return [
        {
            "task_id": r.task_id,
            "model": slug_of[r.agent_id],
            **({"epoch": r.replicate} if epochs > 1 else {}),
            "status": r.status,
            "output": r.output,
            "error": r.error,
            "exact_score": r.exact_score,
            "duration_ms": r.duration_ms,
            "attempts": r.attempts,
            "coding": coding_scores(r),
            "usage": usages[r.pk],
        }
        for r in runs
    ]


def _games(evaluation: Evaluation, slug_of: dict[int, str]) -> list[GameDetail]:
    """Every stored game in the order it was stored (its series' play order)."""
    epochs = epochs_of(evaluation.settings)
    return [
        GameDetail(
            task_id=p.task_id,
            epoch=p.epoch if epochs > 1 else None,
            a=slug_of[p.agent_a_id],
            b=slug_of[p.agent_b_id],
            game=p.game,
            winner=p.winner or None,
            agreement=p.agreement,
            failure=p.failure,
            ab_winner=p.ab_winner,
            ba_winner=p.ba_winner,
            ab_reason=p.ab_reason,
            ba_reason=p.ba_reason,
            ab_raw=tuple(p.ab_raw),
            ba_raw=tuple(p.ba_raw),
            duration_ms=p.duration_ms,
        )
        for p in PairJudgement.objects.filter(evaluation=evaluation).order_by("pk")
    ]


Key = tuple[str, int, str, str, int]  # (task, epoch, a, b, game number)


def stored_outcomes(evaluation: Evaluation, slug_of: dict[int, str]) -> dict[Key, str]:
    """Each stored game's outcome ("A", "B", "tie" or "failed")."""
    return {
        (task_id, epoch, slug_of[a], slug_of[b], number): winner or "failed"
        for task_id, epoch, a, b, number, winner in PairJudgement.objects.filter(
            evaluation=evaluation
        ).values_list("task_id", "epoch", "agent_a_id", "agent_b_id", "game", "winner")
    }


def replaying(outcomes: dict[Key, str], epoch: int = 0) -> tournaments.Play:
    """A ``play`` that answers from the epoch's stored outcomes and stops at the first
    game not stored (``Unplayed``)."""

    def play(task_id: str, a: str, b: str, number: int) -> str:
        key = (task_id, epoch, a, b, number)
        if key not in outcomes:
            raise tournaments.Unplayed
        return outcomes[key]

    return play


def task_epochs(evaluation: Evaluation) -> list[tuple[dict, int | None]]:
    """(task, epoch) of every tournament the evaluation plays: one per task, or with
    epochs one per task and epoch (``epoch`` None for the one epoch)."""
    epochs = epochs_of(evaluation.settings)
    each = [None] if epochs == 1 else list(range(epochs))
    return [(task, epoch) for task in evaluation.suite.tasks for epoch in each]


def schedule_of(evaluation: Evaluation) -> dict[str, Any]:
    """The evaluation's tournament as ``evals.tournaments.run_task`` takes it."""
    opening = [(a, b) for a, b in evaluation.opening] if evaluation.opening else None
    return {"format": evaluation.tournament, "best_of": evaluation.best_of,
            "seed": evaluation.seed, "opening": opening}  # fmt: skip


def task_tournaments(
    evaluation: Evaluation, slugs: list[str], outcomes: dict[Key, str]
) -> list[tournaments.TaskTournament]:
    """Each task's (and epoch's) tournament replayed from the stored outcomes (the
    schedule depends on nothing else); a task stops, ``unfinished``, at its first game
    not stored."""
    schedule = schedule_of(evaluation)
    return [
        tournaments.run_task(
            task["id"], slugs, play=replaying(outcomes, epoch or 0), epoch=epoch, **schedule
        )
        for task, epoch in task_epochs(evaluation)
    ]


def tournament_record_of(evaluation: Evaluation) -> dict[str, Any]:
    """The record of a tournament evaluation (evals/tournament_record.schema.json)."""
    candidates = [c.agent for c in evaluation.candidates.select_related("agent")]
    slugs = [a.slug for a in candidates]
    slug_of = {a.pk: a.slug for a in candidates}
    judge = evaluation.judge
    settings = evaluation.settings
    run: dict[str, Any] = {
        "app_version": provenance.app_version(),
        "run_id": evaluation.pk,
        "status": evaluation.status,
        "created_at": iso(evaluation.created_at),
        "started_at": iso(evaluation.started_at),
        "finished_at": iso(evaluation.finished_at),
        "candidate_max_tokens": settings["candidate_max_tokens"],
        "attempts": settings["attempts"],
        "backoff_s": settings["backoff_s"],
        "concurrency": settings["concurrency"],
        "selection_seed": settings.get("selection_seed"),
        "suite": {
            "name": evaluation.suite.name,
            "sha256": evaluation.suite.sha256,
            "tasks": len(evaluation.suite.tasks),
        },
        "agents": [agent_provenance(a) for a in candidates],
    }
    games: list[GameDetail] = []
    played = None
    tasks = evaluation.suite.tasks
    composite = [t["id"] for t in tasks if t["kind"] == "repo"]
    decided = judge is not None or (bool(tasks) and len(composite) == len(tasks))
    if decided:
        run["judge_decoding"] = settings["judge_decoding"]
        stored = _games(evaluation, slug_of)
        outcomes = {
            (g.task_id, g.epoch or 0, g.a, g.b, g.game): g.winner or "failed" for g in stored
        }
        played = task_tournaments(evaluation, slugs, outcomes)
        in_schedule = {
            (t.task_id, t.epoch, s.a, s.b, g.number)
            for t in played
            for s in t.series
            for g in s.games
        }
        games = [g for g in stored if (g.task_id, g.epoch, g.a, g.b, g.game) in in_schedule]
    return tournament_record(
        run=run,
        tasks=list(evaluation.suite.tasks),
        results=_results(evaluation, slug_of),
        games=games,
        tournaments=played,
        candidates=slugs,
        judge=agent_provenance(judge) if judge is not None else None,
        judge_usage=judge_usage(evaluation),
        seed=evaluation.seed,
        replicates=REPLICATES,
        format=evaluation.tournament,
        best_of=evaluation.best_of,
        opening=evaluation.opening,
        composite_tasks=composite if decided and composite else None,
        epochs=epochs_of(settings),
    )


def record_of(evaluation: Evaluation) -> dict[str, Any]:
    """The one record an evaluation publishes: a tournament's (003's shape) when it has
    a format, else the evaluation record (evals/record.schema.json)."""
    if evaluation.tournament:
        return tournament_record_of(evaluation)
    return evaluation_record(evaluation)
