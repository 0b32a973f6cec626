"""The door every battle goes through: a task, two distinct agents, sides, the redundancy
target and both runs under the same budgets (SPEC §4 parity), with the conflict-of-
interest rule of SPEC §5.1 (a team's own agent never meets that team's task).

Admission (``battles.services.admission``) draws the pair and calls ``battle_rows``
inside its locked, hand-written INSERT path; ``battle_create`` is the same rule for a
pair chosen by a caller (tournaments, operators)."""

import random
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.models import Agent
from arena_site.exceptions import ApplicationError
from arena_site.redis import queue
from battles.models import Battle, Run, Task

_system_rng = random.SystemRandom()


@dataclass(frozen=True)
class Entrant:
    """What the creation rule needs of an agent."""

    agent_id: int
    team_id: int | None
    step_budget: int | None
    wall_budget_s: int | None


def conflict_check(*, task_team_id: int, entrants: tuple[Entrant, Entrant]) -> None:
    """Refuses a pair in which an agent was entered by the task's own team: that team's
    members could only judge it as interested parties (SPEC §5.1)."""
    for entrant in entrants:
        if entrant.team_id is not None and entrant.team_id == task_team_id:
            raise ApplicationError(
                "An agent entered by the submitting team cannot battle on that team's task.",
                code="conflict_of_interest",
                status=409,
            )


def battle_rows(
    *,
    arena_id: int,
    task: Task,
    side_a: Entrant,
    side_b: Entrant,
    redundancy_target: int,
    is_calibration: bool,
) -> tuple[Battle, list[Run]]:
    """The unsaved battle and its two runs. Both sides run under the same budgets, the
    tighter of the two agents' (the arena default where an agent sets none)."""
    if side_a.agent_id == side_b.agent_id:
        raise ApplicationError("A battle needs two distinct agents.", code="same_agent")
    conflict_check(task_team_id=task.team_id, entrants=(side_a, side_b))
    arena = settings.ARENA
    step_budget = min(e.step_budget or arena.step_budget for e in (side_a, side_b))
    wall_budget = min(e.wall_budget_s or arena.wall_budget_s for e in (side_a, side_b))
    battle = Battle(
        arena_id=arena_id,
        team_id=task.team_id,
        task=task,
        agent_a_id=side_a.agent_id,
        agent_b_id=side_b.agent_id,
        redundancy_target=redundancy_target,
        is_calibration=is_calibration,
        submitted_at=timezone.now(),
    )
    runs = [
        Run(
            battle=battle,
            side=side,
            agent_id=entrant.agent_id,
            step_budget=step_budget,
            wall_budget_s=wall_budget,
        )
        for side, entrant in (("A", side_a), ("B", side_b))
    ]
    return battle, runs


def redundancy_draw(rng: random.Random) -> int:
    """SPEC §5.2: the judging target, REDUNDANCY_TARGET with probability
    REDUNDANCY_FRACTION, else 1."""
    arena = settings.ARENA
    return arena.redundancy_target if rng.random() < arena.redundancy_fraction else 1


def entrant_of(agent: Agent) -> Entrant:
    return Entrant(agent.pk, agent.team_id, agent.step_budget, agent.wall_budget_s)


@transaction.atomic
def battle_create(
    *,
    task: Task,
    agent_a: Agent,
    agent_b: Agent,
    redundancy_target: int | None = None,
    rng: random.Random | None = None,
) -> Battle:
    """A queued battle of this pair on ``task`` (sides as given; the caller randomises
    them if it wants), run by a battle worker after commit. Refuses a retired or
    paused agent, agents of another arena than each other, and the conflict of interest
    above. ``redundancy_target`` defaults to the SPEC §5.2 draw."""
    for agent in (agent_a, agent_b):
        if not agent.is_active:
            raise ApplicationError(
                f"{agent.display_name} is retired or paused; it cannot battle now.",
                code="agent_inactive",
                status=409,
            )
    if agent_a.arena_id != agent_b.arena_id:
        raise ApplicationError("Both agents must be in the same arena.", code="arena_mismatch")
    target = (
        redundancy_target if redundancy_target is not None else redundancy_draw(rng or _system_rng)
    )
    if target < 1:
        raise ApplicationError("redundancy_target must be at least 1.", code="invalid_target")
    battle, runs = battle_rows(
        arena_id=agent_a.arena_id,
        task=task,
        side_a=entrant_of(agent_a),
        side_b=entrant_of(agent_b),
        redundancy_target=target,
        is_calibration=False,
    )
    battle.save()
    Run.objects.bulk_create(runs)
    battle_id = battle.pk
    transaction.on_commit(lambda: battle_enqueue(battle_id))
    return battle


def battle_enqueue(battle_id: int) -> None:
    """The battle's job (after the commit that created it): a battle worker runs the
    oldest queued battle (FIFO), which this one becomes in its turn."""
    queue("battles").enqueue("battles.jobs.battle_run", battle_id, job_id=f"battle-{battle_id}")
