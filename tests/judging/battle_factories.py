"""Battles whose lanes have ended, straight into the database, and judges that serve
and vote on them at chosen server times (no admission, no sandboxes)."""

import datetime as dt

import time_machine
from django.contrib.auth import get_user_model

from agents.models import Agent, Arena
from battles.models import Battle, Run, Step, Task
from judging.models import Vote
from judging.services import judge_next, vote_cast

# An hour before the suite started: every time a test travels to (T0 plus minutes) is in
# the past of the real clock, which the services read when a test does not travel, and
# far inside the judging window (JUDGING_TTL, a day), whatever day the suite runs.
T0 = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).replace(second=0, microsecond=0)
READ = dt.timedelta(seconds=30)  # longer than the reading time of the default messages


def ended_battle(
    submitter,
    *,
    a: str = "rulebook",
    b: str = "idle",
    messages: tuple[str, str] = ("6*7 = 42", "I was unable to do it."),
    steps: tuple[int, int] = (1, 1),
    step_args: tuple[dict, dict] = ({"command": "echo 42"}, {"command": "true"}),
    budgets: tuple[int, int] = (20, 20),
    end_reasons: tuple[str, str] = ("delivered", "gave_up"),
    files: tuple[list, list] = ([], []),
    target: int = 1,
    calibration: bool = False,
    status: str = Battle.Status.JUDGING,
) -> Battle:
    """A battle of ``submitter``'s team whose two lanes ended, open for judging."""
    team = submitter.memberships.first().team
    agent_a, agent_b = Agent.objects.get(slug=a), Agent.objects.get(slug=b)
    task = Task.objects.create(team=team, submitter=submitter, instruction="what is 6*7")
    battle = Battle.objects.create(
        arena=Arena.objects.public(),
        team=team,
        task=task,
        agent_a=agent_a,
        agent_b=agent_b,
        status=status,
        redundancy_target=target,
        is_calibration=calibration,
        submitted_at=T0 - dt.timedelta(minutes=10),
        ended_at=T0 - dt.timedelta(minutes=1),
    )
    for i, (side, agent) in enumerate((("A", agent_a), ("B", agent_b))):
        run = Run.objects.create(
            battle=battle,
            side=side,
            agent=agent,
            status=Run.Status.ENDED,
            step_budget=budgets[i],
            wall_budget_s=300,
            final_message=messages[i],
            end_reason=end_reasons[i],
            delivered_files=files[i],
        )
        for index in range(steps[i]):
            Step.objects.create(
                run=run,
                index=index,
                tool="shell",
                args=step_args[i],
                result={"ok": True, "stdout": "", "stderr": "", "exit_code": 0},
                started_at=T0 - dt.timedelta(minutes=5),
                duration_ms=10,
            )
    return battle


def people(count: int, prefix: str = "crowd") -> list:
    """Judges with no team, who accepted the current consent terms (when there are any)."""
    from accounts.services import consent_accept, consent_terms_current

    User = get_user_model()
    users = [User.objects.create_user(f"{prefix}{i}", password="x") for i in range(count)]
    terms = consent_terms_current()
    if terms is not None:
        for user in users:
            consent_accept(user=user, terms=terms)
    return users


def serve(judge, at: dt.datetime = T0) -> Battle | None:
    with time_machine.travel(at, tick=False):
        return judge_next(judge=judge)


def cast(judge, battle: Battle, choice: str, at: dt.datetime = T0 + READ) -> Vote:
    with time_machine.travel(at, tick=False):
        return vote_cast(judge=judge, battle_id=battle.pk, choice=choice)


def judge_on(judge, battle: Battle, choice: str, *, at: dt.datetime = T0) -> Vote:
    """Serves ``battle`` to ``judge`` at ``at`` (it must be the one served) and votes
    after the reading time."""
    served = serve(judge, at)
    assert served is not None and served.pk == battle.pk, (served, battle)
    return cast(judge, battle, choice, at + READ)
