"""When an agent fails a battle: after both lanes have ended and before any screening,
each side's outcome is put to its agent's account (a failure through its own fault
grows its failure streak, which pauses it at ``ARENA_AGENT_FAILURE_PAUSE``; a lane
that ended normally resets it), and a battle in which an agent failed is failed with
the reason in words and its task run again once with a fresh pair, so the submitter's
task is not wasted.

What is the agent's fault is decided where the lane ends (``Run.agent_fault``,
battles.services.lanes): its provider or endpoint failing, silent, unreachable or
breaking the protocol. The sandbox, the worker, the other side and the judges never
are."""

import random

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.services import agent_lane_failed, agent_lane_succeeded
from battles import admission_db
from battles.coding_models import CodingOutcome
from battles.matchmaking import draw_pair
from battles.models import Battle, Run
from battles.services.admission import roster_candidate
from battles.services.creation import Entrant, battle_enqueue, battle_rows

_system_rng = random.SystemRandom()

# A lane that ended like this showed the agent working, whatever it achieved.
WORKED = (
    Run.EndReason.DELIVERED,
    Run.EndReason.GAVE_UP,
    Run.EndReason.STEP_BUDGET,
    Run.EndReason.TIME_BUDGET,
)

# What the submitter reads on the battle page. Blind: it says which side, never which
# agent, and carries no error text (a provider's message can name the model).
FAILED_RERUN = (
    "Side {sides} could not finish: its agent failed (it could not be reached, or it "
    "broke the rules every agent plays by). The battle is not judged and counts for "
    "no one. Your task runs again with a fresh pair of agents: battle #{rerun}."
)
FAILED_NO_RERUN = (
    "Side {sides} could not finish: its agent failed (it could not be reached, or it "
    "broke the rules every agent plays by). The battle is not judged and counts for "
    "no one. {why}"
)
WHY_ALREADY_RERUN = "Your task already had its one re-run, so it is not run again."
WHY_NO_PAIR = (
    "No fresh pair of agents could be drawn for your task right now, so it is not run "
    "again; submit it once more later."
)


@transaction.atomic
def battle_lanes_account(*, battle_id: int) -> bool:
    """Called once both lanes of a running battle have ended (the battle's row is
    locked; a battle no longer running is left alone and False returned). Puts each
    side's outcome to its agent's account; if a side failed through its agent's fault,
    fails the battle with the reason in words, and creates the task's one re-run
    (``battle_rerun``) without the failing agents. Returns whether it failed the
    battle (then it is never screened or judged)."""
    battle = Battle.objects.select_for_update().filter(pk=battle_id).first()
    if battle is None or battle.status != Battle.Status.RUNNING:
        return False
    runs = list(Run.objects.filter(battle_id=battle_id).order_by("side"))
    faulty = [run for run in runs if run.end_reason == Run.EndReason.ERROR and run.agent_fault]
    # A side whose code forged its test results (the coding judge) failed through its
    # agent's fault too; the battle itself is excluded at screening (forged_grade).
    forged = dict(
        CodingOutcome.objects.filter(run__battle_id=battle_id)
        .exclude(forged="")
        .values_list("run_id", "forged")
    )
    for run in runs:
        if run in faulty:
            agent_lane_failed(agent_id=run.agent_id, error=run.error)
        elif run.pk in forged:
            reason = forged[run.pk].split(" (", 1)[0]
            agent_lane_failed(agent_id=run.agent_id, error=f"its code forged its tests: {reason}")
        elif run.end_reason in WORKED:
            agent_lane_succeeded(agent_id=run.agent_id)
    if not faulty:
        return False
    sides = " and ".join(run.side for run in faulty)
    if Battle.objects.filter(task_id=battle.task_id, rerun_of__isnull=False).exists():
        reason = FAILED_NO_RERUN.format(sides=sides, why=WHY_ALREADY_RERUN)
    else:
        rerun = battle_rerun(battle=battle, without={run.agent_id for run in faulty})
        if rerun is None:
            reason = FAILED_NO_RERUN.format(sides=sides, why=WHY_NO_PAIR)
        else:
            reason = FAILED_RERUN.format(sides=sides, rerun=rerun.pk)
    Battle.objects.filter(pk=battle_id).update(
        status=Battle.Status.FAILED, failure_reason=reason, ended_at=timezone.now()
    )
    return True


def battle_rerun(
    *, battle: Battle, without: set[int], rng: random.Random | None = None
) -> Battle | None:
    """A new queued battle on ``battle``'s task, its pair drawn by the matchmaker from
    the arena's active agents but those in ``without`` (and, as always, the task
    team's own), the redundancy target kept. It takes the failed battle's place in the
    FIFO (its submission time): the submitter already waited once. Not counted
    against the queue bounds (the task was admitted). None when fewer than two agents
    remain. Call inside a transaction; the job is enqueued after commit. The
    database allows one re-run per task (``battle_one_rerun_per_task``)."""
    locked = admission_db.admission_lock(slug=battle.arena.slug, team_id=battle.team_id)
    if locked is None:
        return None
    roster = [
        entry
        for entry in locked.roster
        if entry.agent_id not in without and entry.team_id != battle.team_id
    ]
    if len(roster) < 2:
        return None
    side_a, side_b = draw_pair(
        [roster_candidate(entry) for entry in roster],
        rng or _system_rng,
        kappa=settings.ARENA.match_kappa,
        epsilon=settings.ARENA.match_epsilon,
    )
    by_id = {e.agent_id: Entrant(e.agent_id, e.team_id, e.step_budget, e.wall_budget_s)
             for e in roster}  # fmt: skip
    rerun, runs = battle_rows(
        arena_id=battle.arena_id,
        task=battle.task,
        side_a=by_id[side_a],
        side_b=by_id[side_b],
        redundancy_target=battle.redundancy_target,
        is_calibration=False,
    )
    rerun.rerun_of = battle
    rerun.submitted_at = battle.submitted_at
    admission_db.battle_and_runs_insert(battle=rerun, runs=runs)
    rerun_id = rerun.pk
    transaction.on_commit(lambda: battle_enqueue(rerun_id))
    return rerun
