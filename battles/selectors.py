"""Tenant-scoped reads for battles. ``access_*`` answer 404 (``Battle.DoesNotExist``)
for anything the user may not see."""

from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404

from accounts.models import Team
from battles.coding_models import CodingOutcome
from battles.models import Battle, Task, TestDrive


def team_ids_of(user: AbstractBaseUser) -> list[int]:
    if not user.is_authenticated:
        return []
    return list(Team.objects.filter(memberships__user=user).values_list("id", flat=True))


def visible_battles(user: AbstractBaseUser):
    """Battles the user may open: their teams' own, the ones they were served to judge,
    or all of them for staff."""
    if user.is_authenticated and user.is_staff:
        return Battle.objects.all()
    from django.db.models import Q

    return Battle.objects.filter(
        Q(team_id__in=team_ids_of(user)) | Q(assignments__judge_id=getattr(user, "pk", None))
    ).distinct()


def access_battle(user: AbstractBaseUser, battle_id: int) -> Battle:
    battle = visible_battles(user).filter(pk=battle_id).select_related("task").first()
    if battle is None:
        raise Http404("No such battle.")
    return battle


CLOSED = (Battle.Status.DECIDED, Battle.Status.EXCLUDED, Battle.Status.FAILED)


def user_may_see_identities(user: AbstractBaseUser, battle: Battle) -> bool:
    """Who fought a battle shows only once no vote on it can count any more (SPEC §5.1):
    the battle is decided, excluded or failed, and the user is staff, voted on it (a
    final vote) or belongs to its team. Staff see it always."""
    if user.is_staff:
        return True
    if battle.status not in CLOSED:
        return False
    if battle.team_id in team_ids_of(user):
        return True
    from django.utils import timezone

    return battle.votes.filter(judge=user, retracted=False, final_at__lte=timezone.now()).exists()


def team_tasks(team_ids: list[int]):
    """The teams' tasks: every submitted task. A repo task without a battle is an
    offline evaluation's own copy of a suite's task (evals.services.repo), listed with
    its evaluation and not here."""
    return Task.objects.filter(team_id__in=team_ids).exclude(kind=Task.Kind.REPO, battles=None)


def access_task(user: AbstractBaseUser, task_id: int) -> Task:
    task = team_tasks(team_ids_of(user)).filter(pk=task_id).first()
    if task is None:
        raise Http404("No such task.")
    return task


def battles_waiting(*, older_than_s: int) -> list[int]:
    """Queued battles (every team's: an operator read for the janitor) submitted more
    than ``older_than_s`` seconds ago, oldest first."""
    from datetime import timedelta

    from django.utils import timezone

    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    return list(
        Battle.objects.filter(status=Battle.Status.QUEUED, submitted_at__lt=cutoff)
        .order_by("submitted_at", "pk")
        .values_list("pk", flat=True)
    )


def visible_test_drives(user: AbstractBaseUser):
    """Test drives the user may open: those of their teams' agents (the team the agent
    was entered by when the drive was asked for), every one for staff."""
    if user.is_authenticated and user.is_staff:
        return TestDrive.objects.all()
    return TestDrive.objects.filter(team_id__in=team_ids_of(user))


def access_test_drive(user: AbstractBaseUser, drive_id: int) -> TestDrive:
    drive = visible_test_drives(user).filter(pk=drive_id).select_related("agent").first()
    if drive is None:
        raise Http404("No such test drive.")
    return drive


FORGERIES_SHOWN = 5


def forged_runs_of(agent_ids: list[int]) -> dict[int, list[dict]]:
    """Each agent's latest runs whose test results the coding judge found forged
    (docs/coding.md): for the agent's own team, which may see why its battles were
    excluded. The battle, when it was judged and the reason without its particulars
    (which test, which file: the task's repository is its submitter's, and its hidden
    tests are never the entrant's to see); nothing of the other side."""
    rows = (
        CodingOutcome.objects.filter(run__agent_id__in=agent_ids, run__battle__isnull=False)
        .exclude(forged="")
        .order_by("-judged_at", "-pk")
        .values("run__agent_id", "run__battle_id", "judged_at", "forged")[:200]
    )
    found: dict[int, list[dict]] = {}
    for row in rows:
        entries = found.setdefault(row["run__agent_id"], [])
        if len(entries) < FORGERIES_SHOWN:
            reason = row["forged"].split(" (", 1)[0]
            entries.append({"battle_id": row["run__battle_id"], "at": row["judged_at"],
                            "reason": reason})  # fmt: skip
    return found
