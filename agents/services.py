"""Writes for the roster."""

from django.db import transaction

from agents.models import Agent, Arena
from agents.policies import BUILTIN_POLICIES, BUILTIN_ROSTER


@transaction.atomic
def roster_install_builtins(*, arena: Arena) -> list[Agent]:
    """Idempotently enters the built-in offline agents in ``arena``."""
    agents = []
    for slug, name, policy, baseline in BUILTIN_ROSTER:
        assert policy in BUILTIN_POLICIES, policy
        agent, _ = Agent.objects.update_or_create(
            arena=arena,
            slug=slug,
            defaults={
                "display_name": name,
                "kind": Agent.Kind.BUILTIN,
                "builtin_policy": policy,
                "is_baseline": baseline,
            },
        )
        agents.append(agent)
    return agents


def policy_for(agent: Agent):
    """The policy object that drives one lane for ``agent``."""
    if agent.kind == Agent.Kind.BUILTIN:
        return BUILTIN_POLICIES[agent.builtin_policy]()
    raise NotImplementedError(f"agents of kind {agent.kind!r} are not runnable yet")
