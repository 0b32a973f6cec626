"""Rated battles straight into the database, for the refit and leaderboard tests."""

from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from agents.models import Agent
from battles.models import Battle, Task
from judging.models import Vote


def judges(count: int, prefix: str = "crowd") -> list:
    User = get_user_model()
    return [User.objects.create_user(f"{prefix}{i}", password="x") for i in range(count)]


def decided_battle(
    *,
    submitter,
    a: Agent,
    b: Agent,
    outcome: str,
    judge=None,
    weight: float | None = 1.0,
    status: str = Battle.Status.DECIDED,
    exclusion_reason: str = "",
    judged_at: datetime | None = None,
    instruction: str = "compare these",
    task: Task | None = None,
) -> Battle:
    """A battle of ``submitter``'s team between ``a`` and ``b``, decided ``outcome`` by
    ``judge``'s admissible vote (no vote when judge is None), on ``task`` (a new task of
    ``instruction`` when None)."""
    judged_at = judged_at or timezone.now() - timedelta(minutes=5)
    team = submitter.memberships.first().team
    if task is None:
        task = Task.objects.create(team=team, submitter=submitter, instruction=instruction)
    battle = Battle.objects.create(
        arena_id=a.arena_id,
        team=team,
        task=task,
        agent_a=a,
        agent_b=b,
        status=status,
        outcome=outcome,
        evidence_weight=weight,
        exclusion_reason=exclusion_reason,
        submitted_at=judged_at - timedelta(minutes=10),
        ended_at=judged_at - timedelta(minutes=2),
        first_judgment_at=judged_at,
        decided_at=judged_at if status == Battle.Status.DECIDED else None,
        decision_source=Battle.DecisionSource.CROWD if status == Battle.Status.DECIDED else "",
        cluster_judge=judge,
    )
    if judge is not None:
        Vote.objects.create(
            judge=judge,
            battle=battle,
            choice=outcome,
            served_at=judged_at - timedelta(minutes=1),
            voted_at=judged_at,
            final_at=judged_at,
            admissible=True,
        )
    return battle


def round_robin(submitter, agents: list[Agent], judges_: list, *, rounds: int, rng) -> list:
    """Every pair of ``agents`` plays ``rounds`` battles; the earlier agent in the list
    wins 2 of 3, the rest split; judges take turns."""
    battles = []
    turn = 0
    for _ in range(rounds):
        for i, first in enumerate(agents):
            for second in agents[i + 1 :]:
                roll = rng.random()
                outcome = "A" if roll < 0.6 else "B" if roll < 0.9 else "tie"
                a, b = (first, second) if rng.random() < 0.5 else (second, first)
                if a is not first:
                    outcome = {"A": "B", "B": "A", "tie": "tie"}[outcome]
                battles.append(
                    decided_battle(
                        submitter=submitter,
                        a=a,
                        b=b,
                        outcome=outcome,
                        judge=judges_[turn % len(judges_)],
                    )
                )
                turn += 1
    return battles
