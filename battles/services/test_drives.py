"""Test drives: one agent alone on a sample task in a sandbox, through the same lane
as a battle's (``run_lane``: the sandbox, the budgets, every step, screenshot and span
stored), so its team and the admins see how it behaves before it is drawn, or why it
fails. A drive is never judged, rated or counted: it touches neither the agent's
failure streak nor the matchmaker's exposure."""

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.http import Http404
from django.utils import timezone

from agents.selectors import access_agent
from arena_site.dbclock import db_ago
from arena_site.exceptions import ApplicationError
from arena_site.redis import queue
from battles.models import Run, TestDrive
from battles.parity import LaneInputs, shared_tools
from battles.services.lanes import run_lane
from battles.services.live import test_drive_publish

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SampleTask:
    name: str
    title: str
    instruction: str
    start_url: str = ""


# Tasks that need nothing from outside the sandbox, so a drive tells about the agent
# alone: a file to make and deliver, and a question to answer in words.
SAMPLE_TASKS = {
    task.name: task
    for task in (
        SampleTask(
            "files",
            "Make a file and deliver it",
            "Create a file named hello.txt in /work containing the words hello arena, "
            "then deliver it with a one-line note saying what you did.",
        ),
        SampleTask(
            "question",
            "Answer a question",
            "What is 17 multiplied by 23? Deliver the number and one sentence on how "
            "you worked it out.",
        ),
    )
}
DEFAULT_SAMPLE = "files"
# A drive not started within this long (the workers are busy, or its job was lost) is
# failed so that the agent can be driven again (one live drive per agent).
QUEUED_FOR_AT_MOST = timedelta(hours=1)


def test_drive_start(
    *, user: AbstractBaseUser, agent_id: int, sample: str = DEFAULT_SAMPLE
) -> TestDrive:
    """Queues a test drive of the agent on the sample task ``sample``, for a member of
    the agent's entrant team or an admin (anyone else: 404, as for a missing agent).
    Refuses a retired agent (409), an unknown sample (400) and a second drive while
    one of the same agent is queued or running (409). A paused agent can be driven:
    that is how its team sees what fails. The job runs after commit."""
    try:
        agent = access_agent(user, agent_id)
    except Http404 as exc:
        raise ApplicationError("No such agent.", code="not_found", status=404) from exc
    task = SAMPLE_TASKS.get(sample)
    if task is None:
        raise ApplicationError(
            f"Unknown sample task {sample!r}: one of {', '.join(SAMPLE_TASKS)}.",
            code="invalid_sample",
        )
    if agent.retired_at is not None:
        raise ApplicationError(
            f"{agent.display_name} is retired; it cannot be driven.",
            code="agent_retired",
            status=409,
        )
    arena = settings.ARENA
    try:
        with transaction.atomic():
            drive = TestDrive.objects.create(
                agent=agent,
                team_id=agent.team_id,
                requested_by=user,
                sample=task.name,
                instruction=task.instruction,
                start_url=task.start_url,
            )
            Run.objects.create(
                test_drive=drive,
                side="A",
                agent=agent,
                step_budget=agent.step_budget or arena.step_budget,
                wall_budget_s=agent.wall_budget_s or arena.wall_budget_s,
            )
    except IntegrityError as exc:  # test_drive_one_live_per_agent
        raise ApplicationError(
            f"A test drive of {agent.display_name} is already queued or running; wait "
            "for it to end.",
            code="test_drive_running",
            status=409,
        ) from exc
    drive_id = drive.pk
    transaction.on_commit(lambda: test_drive_enqueue(drive_id))
    return drive


def test_drive_enqueue(drive_id: int) -> None:
    queue("battles").enqueue(
        "battles.jobs.test_drive_run", drive_id, job_id=f"test-drive-{drive_id}"
    )


def test_drive_run(*, drive_id: int) -> None:
    """Claims the queued drive and runs its one lane to its end. Idempotent: a drive
    that is not queued any more is left alone."""
    now = timezone.now()
    claimed = TestDrive.objects.filter(pk=drive_id, status=TestDrive.Status.QUEUED).update(
        status=TestDrive.Status.RUNNING, started_at=now, heartbeat_at=Now()
    )
    if not claimed:
        logger.info("test drive %s is not queued; nothing to do", drive_id)
        return
    test_drive_publish(drive_id=drive_id)
    drive = TestDrive.objects.select_related("agent").get(pk=drive_id)
    run = drive.runs.get()
    inputs = LaneInputs(
        instruction=drive.instruction,
        start_url=drive.start_url,
        step_budget=run.step_budget,
        wall_budget_s=run.wall_budget_s,
        tools=shared_tools([drive.agent]),
    )
    try:
        run_lane(run_id=run.pk, inputs=inputs)
    except Exception as exc:
        logger.exception("test drive %s failed", drive_id)
        TestDrive.objects.filter(pk=drive_id, status=TestDrive.Status.RUNNING).update(
            status=TestDrive.Status.FAILED,
            failure_reason=f"the arena could not run it: {type(exc).__name__}",
            ended_at=timezone.now(),
        )
        test_drive_publish(drive_id=drive_id)
        return
    TestDrive.objects.filter(pk=drive_id, status=TestDrive.Status.RUNNING).update(
        status=TestDrive.Status.ENDED, ended_at=timezone.now()
    )
    test_drive_publish(drive_id=drive_id)


STUCK_REASON = "the worker running this drive stopped (no progress for {seconds} s); start another"
NOT_STARTED_REASON = "it did not start within an hour (the workers were busy); start another"


def test_drives_fail_stuck(*, stuck_after_s: int | None = None) -> list[int]:
    """Fails running drives whose lane stopped beating (its worker died) and queued
    ones that never started, with the reason, so that the agent can be driven again.
    Returns their ids."""
    seconds = stuck_after_s or settings.ARENA.stuck_after_s
    now = timezone.now()
    # (beats are on the database's clock)
    stale = Q(status=TestDrive.Status.RUNNING, heartbeat_at__lt=db_ago(seconds))
    late = Q(status=TestDrive.Status.QUEUED, created_at__lt=now - QUEUED_FOR_AT_MOST)
    failed = []
    for drive_id, status in TestDrive.objects.filter(stale | late).values_list("pk", "status"):
        reason = (
            STUCK_REASON.format(seconds=seconds)
            if status == TestDrive.Status.RUNNING
            else NOT_STARTED_REASON
        )
        with transaction.atomic():
            if not TestDrive.objects.filter(pk=drive_id, status=status).update(
                status=TestDrive.Status.FAILED, failure_reason=reason, ended_at=now
            ):
                continue
            Run.objects.filter(test_drive_id=drive_id).exclude(status=Run.Status.ENDED).update(
                status=Run.Status.ENDED, end_reason=Run.EndReason.ERROR, error=reason, ended_at=now
            )
            test_drive_publish(drive_id=drive_id)
        failed.append(drive_id)
    return failed
