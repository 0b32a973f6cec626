"""Reads of the roster for the people an agent belongs to. ``access_*`` answer 404
(``Http404``) for an agent the user may not see: another team's agent is exactly like
a missing one."""

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404

from accounts.models import Team
from agents.models import Agent, AgentStandingLogEntry


def _team_ids(user: AbstractBaseUser) -> list[int]:
    if not user.is_authenticated:
        return []
    return list(Team.objects.filter(memberships__user=user).values_list("id", flat=True))


def agents_visible_to(user: AbstractBaseUser):
    """The agents whose status and test drives ``user`` may see: their teams' own
    entries, every agent for staff."""
    if user.is_authenticated and user.is_staff:
        return Agent.objects.all()
    return Agent.objects.filter(team_id__in=_team_ids(user))


def access_agent(user: AbstractBaseUser, agent_id: int) -> Agent:
    agent = agents_visible_to(user).filter(pk=agent_id).first()
    if agent is None:
        raise Http404("No such agent.")
    return agent


def access_team_agent(user: AbstractBaseUser, agent_id: int) -> Agent:
    """One of ``user``'s teams' own agents, to change (edit, pause, withdraw): staff
    change other teams' agents in the admin, not here. 404 for any other agent."""
    agent = (
        Agent.objects.filter(team_id__in=_team_ids(user), pk=agent_id)
        .select_related("team", "arena")
        .first()
    )
    if agent is None:
        raise Http404("No such agent.")
    return agent


def agent_status(agent: Agent) -> dict[str, Any]:
    """An agent's standing in words, for its team (a page, the API) and the admins:
    whether it can be drawn, and if not why; its failure streak against the automatic
    pause. Names no other agent and no operator (the log's notes stay the admins')."""
    if agent.retired_at is not None:
        state = "retired"
    elif agent.is_paused:
        state = "paused"
    elif agent.approval != Agent.Approval.APPROVED:
        state = agent.approval
    else:
        state = "active"
    last = (
        AgentStandingLogEntry.objects.filter(agent=agent).order_by("-at", "-pk").first()
        if agent.is_paused
        else None
    )
    return {
        "state": state,
        "drawn": state == "active",
        "paused": agent.is_paused,
        "paused_reason": agent.paused_reason if agent.is_paused else "",
        "paused_automatically": bool(last and last.actor_id is None),
        "paused_at": last.at if last else None,
        "failure_streak": agent.failure_streak,
        "pause_after": settings.ARENA.agent_failure_pause,
        "approval": agent.approval,
        "approval_note": agent.approval_note,
    }
