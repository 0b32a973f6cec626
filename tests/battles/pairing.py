"""A submitted battle given the agents a test chooses (the matchmaker drew its own)."""

import random

from agents.models import Agent
from battles.models import Battle, Run
from battles.services import task_submit


def pair(battle: Battle, a: Agent | str, b: Agent | str, *, step_budget: int | None = None):
    """Sets ``battle``'s sides to ``a`` and ``b`` (agents or slugs), and both runs'
    step budget when given; returns the battle."""
    a, b = (x if isinstance(x, Agent) else Agent.objects.get(slug=x) for x in (a, b))
    Battle.objects.filter(pk=battle.pk).update(agent_a=a, agent_b=b)
    Run.objects.filter(battle=battle, side="A").update(agent=a)
    Run.objects.filter(battle=battle, side="B").update(agent=b)
    if step_budget is not None:
        Run.objects.filter(battle=battle).update(step_budget=step_budget)
    return battle


def submitted_between(user, instruction: str, a, b, *, attachments=(), step_budget=None):
    """A task submitted by ``user`` whose battle is between ``a`` and ``b``."""
    battle = task_submit(
        user=user, instruction=instruction, attachments=attachments, rng=random.Random(0)
    )
    return pair(battle, a, b, step_budget=step_budget)
