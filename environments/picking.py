"""Which failed runs become candidate environments, and why (docs/environments.md,
"Candidates"). A read: it writes nothing.

A run is picked once, as soon as its failure is known, by the first rule that holds:

1. a repo task whose success command failed on the run's patch (``tests_failed``),
   known when the battle's judge sandboxes have run;
2. the agent gave up (``gave_up``) or ran out of steps or time (``budget``), known when
   its lane ended;
3. a machine judge's resolved verdict preferred the opponent (``machine_wrong``);
4. the crowd's decision preferred the opponent (``judged_worse``).

The reference, whose final state the grader is derived from and whose replay must pass
it, is the opponent's run when that run is correct by the same evidence: its patch
passed the success command (repo tasks), it delivered (gave up, budget: the grader
then only checks the artifact's presence and type), or it was preferred by the judge
that found this run wrong."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Exists, OuterRef, Q

from battles.models import Battle, CodingOutcome, Run, Task
from environments.models import BattleScan, Environment
from judging.models import MachineVerdict

FAILED_BUDGET = (Run.EndReason.STEP_BUDGET, Run.EndReason.TIME_BUDGET)
# Battles whose lanes have ended and whose runs stand (not failed, not excluded).
_ENDED = (Battle.Status.SCREENING, Battle.Status.JUDGING, Battle.Status.DECIDED)


@dataclass(frozen=True)
class Pick:
    run: Run
    battle: Battle
    mode: str
    reference: Run | None
    failed_at: datetime


def _passed(outcome: CodingOutcome | None) -> bool:
    return outcome is not None and not outcome.judge_error and outcome.functional == 1.0


def _coding(run: Run) -> CodingOutcome | None:
    try:
        return run.coding
    except CodingOutcome.DoesNotExist:
        return None


def _machine_prefers(battle: Battle, side: str) -> MachineVerdict | None:
    verdicts = [
        v
        for v in battle.machine_verdicts.all()
        if v.status == MachineVerdict.Status.RESOLVED and v.outcome in ("A", "B")
    ]
    return next((v for v in sorted(verdicts, key=lambda v: v.pk) if v.outcome == side), None)


def _pick(run: Run, opponent: Run, battle: Battle) -> Pick | None:
    if battle.task.kind == Task.Kind.REPO:
        mine, theirs = _coding(run), _coding(opponent)
        if mine is None or mine.judge_error or mine.functional is None or _passed(mine):
            return None
        reference = opponent if _passed(theirs) else None
        return Pick(run, battle, Environment.FailureMode.TESTS_FAILED, reference, battle.ended_at)
    delivered = opponent.end_reason == Run.EndReason.DELIVERED
    if run.end_reason == Run.EndReason.GAVE_UP or run.end_reason in FAILED_BUDGET:
        mode = (
            Environment.FailureMode.GAVE_UP
            if run.end_reason == Run.EndReason.GAVE_UP
            else Environment.FailureMode.BUDGET
        )
        return Pick(run, battle, mode, opponent if delivered else None, run.ended_at)
    if run.end_reason != Run.EndReason.DELIVERED:
        return None  # an error or the submitter's stop is no failure of the task
    reference = opponent if delivered else None
    verdict = _machine_prefers(battle, opponent.side)
    if verdict is not None:
        mode = Environment.FailureMode.MACHINE_WRONG
        return Pick(run, battle, mode, reference, verdict.created_at)
    if battle.status == Battle.Status.DECIDED and battle.outcome == opponent.side:
        mode = Environment.FailureMode.JUDGED_WORSE
        return Pick(run, battle, mode, reference, battle.decided_at)
    return None


def battles_to_scan(*, limit: int = 200) -> list[Battle]:
    """Ended battles the picker has not looked at yet at their current stage, oldest
    first: never looked at, or looked at before they were decided and decided since."""
    # Only battles whose lanes kept their initial state: an arena's battles from before
    # snapshots are never looked at (its first collect would otherwise wade through them
    # all before a new failure's turn).
    snapshotted = Exists(Run.objects.filter(battle=OuterRef("pk"), snapshot__isnull=False))
    unseen = (
        Q(status__in=_ENDED)
        & snapshotted
        & ~Exists(BattleScan.objects.filter(battle=OuterRef("pk")))
    )
    newly_decided = Q(status=Battle.Status.DECIDED) & Exists(
        BattleScan.objects.filter(battle=OuterRef("pk"), stage=BattleScan.Stage.ENDED)
    )
    return list(
        Battle.objects.filter(unseen | newly_decided)
        .select_related("task")
        .prefetch_related("runs__coding", "runs__environment", "machine_verdicts")
        .order_by("ended_at", "pk")[:limit]
    )


def battle_picks(battle: Battle) -> list[Pick]:
    """The failed runs of ``battle`` that have no environment yet."""
    runs = sorted(battle.runs.all(), key=lambda r: r.side)
    if len(runs) != 2:
        return []
    picks = []
    for run, opponent in ((runs[0], runs[1]), (runs[1], runs[0])):
        if run.snapshot_id is None or _has_environment(run):
            continue
        pick = _pick(run, opponent, battle)
        if pick is not None:
            picks.append(pick)
    return picks


def _has_environment(run: Run) -> bool:
    try:
        return run.environment is not None
    except Environment.DoesNotExist:
        return False
