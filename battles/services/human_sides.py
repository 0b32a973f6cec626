"""A human entrant's side of a battle, settled before the battle's lanes start
(docs/human-baseline.md, "Timeouts").

The battle worker offers the lane to the entrant's operators (``agents.human.human_lane_offer``:
the operator page lists it with the task's instruction) and waits up to the entrant's
``take_s`` for one of them to take it, keeping the battle's heartbeat moving. Taken, the
lanes start as for any pair. Not taken, the side is drawn again from the arena's active
agents (the matchmaker's opponent weights against the other side, never a human entrant,
never the task team's own agent), the battle and its run name the new agent, and the
lanes start: the battle is not voided, the other side has not started yet, and the
submitter waits ``take_s`` at most. Only when no agent can take the side does the lane
start untaken, to end as the entrant's failure (the failure path re-runs the task).
"""

import logging
import random
import time

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.human import human_lane_offer, human_lane_taken, human_lane_withdraw, take_s_of
from agents.models import Agent
from battles import admission_db
from battles.matchmaking import opponent_probabilities
from battles.models import Battle, Run
from battles.parity import shared_tools
from battles.services.admission import roster_candidate
from battles.services.creation import Entrant, conflict_check, entrant_of
from battles.services.live import battle_heartbeat, battle_publish

logger = logging.getLogger(__name__)

POLL_S = 0.25
HEARTBEAT_S = 5.0
_system_rng = random.SystemRandom()


def battle_human_sides_settle(
    *, battle: Battle, runs: list[Run], rng: random.Random | None = None
) -> list[Run]:
    """The battle's runs once every human side was taken by its operator or drawn again
    (the same list when no side is human)."""
    humans = [run for run in runs if run.agent.kind == Agent.Kind.HUMAN]
    if not humans:
        return runs
    tools = shared_tools([run.agent for run in runs])
    offered = {
        run.pk: human_lane_offer(
            run_id=run.pk,
            agent=run.agent,
            instruction=battle.task.instruction,
            tools=tools,
            take_s=take_s_of(run.agent),
        )
        for run in humans
    }
    battle_publish(battle_id=battle.pk)
    deadline = max(lane.take_by for lane in offered.values())
    beat = time.monotonic()
    waiting = list(humans)
    while waiting and timezone.now() < deadline:
        time.sleep(POLL_S)
        waiting = [run for run in waiting if not human_lane_taken(lane_id=offered[run.pk].pk)]
        if time.monotonic() - beat >= HEARTBEAT_S:
            battle_heartbeat(battle_id=battle.pk)
            beat = time.monotonic()
    redrawn = False
    for run in waiting:
        others = [other.agent_id for other in runs if other.pk != run.pk]
        redrawn |= _side_redraw(
            battle=battle, run=run, lane_id=offered[run.pk].pk, keep=others,
            rng=rng or _system_rng,
        )  # fmt: skip
    if not redrawn:
        return runs
    battle_publish(battle_id=battle.pk)
    return list(battle.runs.select_related("agent").order_by("side"))


@transaction.atomic
def _side_redraw(
    *, battle: Battle, run: Run, lane_id: int, keep: list[int], rng: random.Random
) -> bool:
    """Draws another agent for ``run``'s side against the agents in ``keep`` (the other
    side), withdraws the offered lane and names the new agent on the battle and the run.
    False, and the lane left as offered, when no agent can take the side (the lane then
    starts untaken and ends as the entrant's failure at once) or an operator took the
    lane at the last moment (it is theirs)."""
    locked = admission_db.admission_lock(slug=battle.arena.slug, team_id=battle.team_id)
    if locked is None:
        return False
    pool = [
        entry
        for entry in locked.roster
        if entry.kind != Agent.Kind.HUMAN
        and entry.agent_id not in keep
        and entry.agent_id != run.agent_id
        and entry.team_id != battle.team_id
        and entry.runs(battle.task.kind)
    ]
    if not pool:
        logger.info("battle %s: no agent can take side %s; it starts untaken", battle.pk, run.side)
        return False
    candidates = [roster_candidate(entry) for entry in pool]
    other = next((entry for entry in locked.roster if entry.agent_id in keep), None)
    if other is not None:
        weights = opponent_probabilities(
            roster_candidate(other),
            candidates,
            kappa=settings.ARENA.match_kappa,
            epsilon=settings.ARENA.match_epsilon,
        )
    else:
        weights = [1.0] * len(pool)
    chosen = rng.choices(pool, weights=weights)[0]
    if not human_lane_withdraw(lane_id=lane_id):
        return False
    kept = [entrant_of(agent) for agent in Agent.objects.filter(pk__in=keep)]
    entrants = [Entrant(chosen.agent_id, chosen.team_id, chosen.step_budget,
                        chosen.wall_budget_s), *kept]  # fmt: skip
    conflict_check(task_team_id=battle.task.team_id, entrants=tuple(entrants))
    logger.info("battle %s: side %s untaken by its operators, drawn again", battle.pk, run.side)
    # both sides under the tighter budgets of the new pair, as battle_rows sets them
    arena = settings.ARENA
    Run.objects.filter(battle_id=battle.pk).update(
        step_budget=min(e.step_budget or arena.step_budget for e in entrants),
        wall_budget_s=min(e.wall_budget_s or arena.wall_budget_s for e in entrants),
    )
    Run.objects.filter(pk=run.pk).update(agent_id=chosen.agent_id)
    field = "agent_a_id" if run.side == "A" else "agent_b_id"
    Battle.objects.filter(pk=battle.pk).update(**{field: chosen.agent_id})
    return True
