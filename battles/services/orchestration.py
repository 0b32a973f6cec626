"""Running a battle: claiming it from the queue (FIFO), driving both lanes at once,
opening it for screening when both have ended, and failing what a dead worker left."""

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context

import structlog
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from arena_site.dbclock import db_ago
from arena_site.exceptions import ApplicationError
from arena_site.hosts import host_id, process_token
from arena_site.redis import queue
from arena_site.worker import fault_point
from battles.media import run_media_delete
from battles.models import Battle, Run, Span, Step, Task
from battles.parity import LaneInputs, lane_attachments, shared_tools
from battles.services.coding import CodingBattleFailed, coding_battle_drive
from battles.services.failures import battle_lanes_account
from battles.services.human_sides import battle_human_sides_settle
from battles.services.lanes import run_lane
from battles.services.live import battle_publish
from sandboxes.base import SandboxLost
from sandboxes.heartbeats import host_mark_lost
from sandboxes.selectors import hosts_silent
from sandboxes.services import pid_alive, sandbox_janitor

logger = logging.getLogger(__name__)


def battle_end_side(*, user: AbstractBaseUser, battle_id: int, side: str) -> Run:
    """The submitter ends one side early from the live page (end reason
    ended_by_submitter; the battle is then excluded from the rating, SPEC §5.3)."""
    with transaction.atomic():
        battle = Battle.objects.select_for_update().filter(pk=battle_id).first()
        if battle is None or battle.task.submitter_id != user.pk:
            raise ApplicationError("No such battle.", code="not_found", status=404)
        run = battle.runs.filter(side=side).first()
        if run is None:
            raise ApplicationError("A battle has sides A and B.", code="invalid_side")
        if run.status == Run.Status.ENDED:
            raise ApplicationError(
                f"Side {side} has already ended.", code="already_ended", status=409
            )
        Run.objects.filter(pk=run.pk, end_requested_at=None).update(end_requested_at=timezone.now())
    return run


STUCK_REASON = (
    "the worker running this battle stopped (no progress for {seconds} s); its sandboxes "
    "were reaped and nothing was rated"
)


def battles_fail_stuck(*, stuck_after_s: int | None = None) -> list[int]:
    """Fails running battles whose lanes stopped beating (a worker killed mid-battle):
    a visible reason on the battle, runs ended with "error". Returns their ids."""
    seconds = stuck_after_s or settings.ARENA.stuck_after_s
    cutoff = db_ago(seconds)  # beats are on the database's clock
    stuck = Battle.objects.filter(status=Battle.Status.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at=None, dequeued_at__lt=cutoff)
    )
    failed = []
    for battle_id in stuck.values_list("pk", flat=True):
        reason = STUCK_REASON.format(seconds=seconds)
        with transaction.atomic():
            claimed = Battle.objects.filter(pk=battle_id, status=Battle.Status.RUNNING).update(
                status=Battle.Status.FAILED, failure_reason=reason, ended_at=timezone.now()
            )
            if not claimed:
                continue
            Run.objects.filter(battle_id=battle_id).exclude(status=Run.Status.ENDED).update(
                status=Run.Status.ENDED,
                end_reason=Run.EndReason.ERROR,
                error=reason,
                ended_at=timezone.now(),
            )
            battle_publish(battle_id=battle_id)
        failed.append(battle_id)
    return failed


def _claimed() -> dict:
    """The fields a claim sets: running, and which process on which host drives it
    (its first beat on the database's clock)."""
    return {
        "status": Battle.Status.RUNNING,
        "dequeued_at": Now(),
        "heartbeat_at": Now(),
        "worker_host": host_id(),
        "worker_pid": os.getpid(),
        "worker_token": process_token(),
    }


# Why a battle failed, as people read it (the metrics map them to causes by their
# fixed openings: arena_site/ops_selectors.py)
ORCHESTRATOR_REASON = "orchestrator error: {error}"
REPOSITORY_REASON = "the task's repository could not be prepared: {error}"

MAX_ATTEMPTS = 2
DIED_REASON = (
    "the worker running this battle died on each of its {attempts} attempts (its process "
    "ended, or its host's heartbeat stopped); nothing was rated"
)


def battles_recover_dead_workers() -> tuple[list[int], list[int]]:
    """Running battles of this host whose driving process is gone (a worker killed at
    any phase: claimed, provisioning, mid-lane, before screening). Their sandboxes are
    reaped first (``sandbox_janitor``: processes of the slot uids, cgroups, quota
    mounts, run dirs); then each is queued again for one more attempt on fresh
    sandboxes, keeping its place in the FIFO (its submission time), or failed with the
    reason when that was its last attempt. Nothing of a dead attempt is rated: a running
    battle has no decision. Returns (re-queued ids, failed ids)."""
    running = Battle.objects.filter(status=Battle.Status.RUNNING, worker_host=host_id()).exclude(
        worker_pid=None
    )
    dead = [
        (pk, {"worker_pid": pid, "worker_token": token})
        for pk, pid, token in running.values_list("pk", "worker_pid", "worker_token")
        if not pid_alive(pid, token)
    ]
    if not dead:
        return [], []
    sandbox_janitor()
    return _battles_recover(dead)


def battles_recover_dead_hosts() -> tuple[list[int], list[int]]:
    """Running battles of hosts whose heartbeat stopped ARENA_HOST_DEAD_AFTER_S ago (a
    machine lost, every worker on it killed): any host's janitor re-queues them, or
    fails them on their last attempt, like a dead worker's. Their sandboxes are on
    the lost machine: it reaps them itself when it starts again. A host that only
    paused and comes back finds its battles gone: its lanes stop at their next step
    (``battles.services.lanes``), and nothing they end is taken. Returns (re-queued
    ids, failed ids)."""
    requeued, failed = [], []
    for host in hosts_silent():
        lost = host_mark_lost(host=host)
        again, dead = battles_recover_host(host, say=lost)
        requeued += again
        failed += dead
    return requeued, failed


def battles_recover_host(host: str, *, say: bool = True) -> tuple[list[int], list[int]]:
    """Re-queues (or fails, on their last attempt) the running battles of ``host``, a
    host taken for dead or forgotten by an operator. Returns (re-queued, failed) ids."""
    battles = Battle.objects.filter(status=Battle.Status.RUNNING, worker_host=host)
    ids = list(battles.values_list("pk", flat=True))
    if say or ids:
        logger.warning("host %s stopped beating; re-queueing its battles %s", host, ids)
    return _battles_recover([(pk, {"worker_host": host}) for pk in ids])


def _battles_recover(battles: list[tuple[int, dict]]) -> tuple[list[int], list[int]]:
    """Re-queues (or fails, on the last attempt) each running battle that still
    matches its filter under its row lock (another janitor may have been first)."""
    requeued, failed = [], []
    for battle_id, still in battles:
        with transaction.atomic():
            battle = (
                Battle.objects.select_for_update()
                .filter(pk=battle_id, status=Battle.Status.RUNNING, **still)
                .first()
            )
            if battle is None:
                continue  # recovered by another janitor meanwhile
            if battle.attempt < MAX_ATTEMPTS:
                _battle_requeue(battle)
                requeued.append(battle_id)
            else:
                _battle_fail(battle_id, DIED_REASON.format(attempts=battle.attempt))
                failed.append(battle_id)
        battle_publish(battle_id=battle_id)
    return requeued, failed


LOST_REASON = (
    "the sandboxes of this battle were lost on each of its {attempts} attempts (their "
    "engine stopped answering); nothing was rated"
)


def _battle_sandbox_lost(battle_id: int, attempt: int, exc: SandboxLost) -> None:
    """A lane's sandbox was lost with its engine (``SandboxLost``): through no doing of
    either agent, so nothing of the attempt is rated or counted against them. The
    battle is queued again, keeping its place, for a worker whose engine answers (this
    one takes no battle until its own does: ``battles.worker``), or failed with the
    reason on its last attempt. Nothing happens when the battle is not this attempt's
    any more (a janitor took it over meanwhile)."""
    logger.warning("battle %s lost its sandboxes on attempt %s: %s", battle_id, attempt, exc)
    with transaction.atomic():
        battle = (
            Battle.objects.select_for_update()
            .filter(pk=battle_id, attempt=attempt, status=Battle.Status.RUNNING)
            .first()
        )
        if battle is None:
            return
        if battle.attempt < MAX_ATTEMPTS:
            _battle_requeue(battle)
        else:
            _battle_fail(battle_id, LOST_REASON.format(attempts=battle.attempt))
    battle_publish(battle_id=battle_id)


def _battle_requeue(battle: Battle) -> None:
    """Under the battle's row lock: forgets what the dead attempt did (steps, spans,
    run outcomes, stored screenshots and deliveries) and queues the battle again."""
    run_ids = list(battle.runs.values_list("pk", flat=True))
    # The runs first: clearing their start time (the attempt's token) takes their row
    # locks, so a lane's fenced write in hand (battles.services.lane_fence) commits before
    # and is removed below, and any later one is refused.
    Run.objects.filter(pk__in=run_ids).update(
        status=Run.Status.PENDING,
        input_digest="",
        final_message="",
        end_reason="",
        error="",
        agent_fault=False,
        delivered_files=[],
        egress_refusals=[],
        started_at=None,
        ended_at=None,
    )
    Step.objects.filter(run_id__in=run_ids).delete()
    Span.objects.filter(run_id__in=run_ids).delete()
    attempt = battle.attempt + 1
    Battle.objects.filter(pk=battle.pk).update(
        status=Battle.Status.QUEUED,
        attempt=attempt,
        dequeued_at=None,
        lanes_started_at=None,
        heartbeat_at=None,
        ended_at=None,
        worker_host="",
        worker_pid=None,
        worker_token="",
    )
    battle_id = battle.pk

    def after_commit() -> None:
        run_media_delete(run_ids)
        queue("battles").enqueue(
            "battles.jobs.battle_run", battle_id, job_id=f"battle-{battle_id}-attempt-{attempt}"
        )

    transaction.on_commit(after_commit)


def _battle_fail(battle_id: int, reason: str) -> None:
    now = timezone.now()
    Battle.objects.filter(pk=battle_id).update(
        status=Battle.Status.FAILED, failure_reason=reason, ended_at=now
    )
    Run.objects.filter(battle_id=battle_id).exclude(status=Run.Status.ENDED).update(
        status=Run.Status.ENDED, end_reason=Run.EndReason.ERROR, error=reason, ended_at=now
    )


def battle_claim_oldest() -> int | None:
    """FIFO dispatch (SPEC §6): claims the earliest submitted queued battle of any arena
    (ties by id, i.e. admission order; the rule of ``queueing.fifo_next``) and marks it
    running. Concurrent workers skip each other's locked rows, so each battle is claimed
    once. None when nothing waits."""
    with transaction.atomic():
        battle_id = (
            Battle.objects.filter(status=Battle.Status.QUEUED)
            .order_by("submitted_at", "pk")
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)
            .first()
        )
        if battle_id is None:
            return None
        Battle.objects.filter(pk=battle_id).update(**_claimed())
    return battle_id


def battle_run_next() -> int | None:
    """Runs the oldest queued battle to its end; returns its id (None when the queue is
    empty). Every admission enqueues one job that calls this, and each of the
    BATTLE_SLOTS battle workers runs one job at a time, so the queue is served first in,
    first out whatever order the jobs arrive in."""
    battle_id = battle_claim_oldest()
    if battle_id is not None:
        fault_point("claimed")
        # every line logged while it runs names it (arena_site/logs.py), lanes included
        with structlog.contextvars.bound_contextvars(battle_id=battle_id):
            _battle_drive(battle_id)
    return battle_id


def battle_run(*, battle_id: int) -> None:
    """Claims this queued battle and drives both lanes to their end. Idempotent: a
    battle that is not queued any more is left alone."""
    claimed = Battle.objects.filter(pk=battle_id, status=Battle.Status.QUEUED).update(**_claimed())
    if not claimed:
        logger.info("battle %s is not queued; nothing to do", battle_id)
        return
    with structlog.contextvars.bound_contextvars(battle_id=battle_id):
        _battle_drive(battle_id)


def _battle_drive(battle_id: int) -> None:
    """Drives a claimed (running) battle's two lanes to their end and opens it for
    judging, or fails it with the reason."""
    battle_publish(battle_id=battle_id)
    battle = Battle.objects.select_related("task").get(pk=battle_id)
    if battle.task.kind == Task.Kind.REPO:
        return _coding_battle_drive(battle_id, battle.attempt)
    runs = list(battle.runs.select_related("agent"))
    # a human side is taken by its operator or drawn again before any lane starts
    runs = battle_human_sides_settle(battle=battle, runs=runs)
    inputs = LaneInputs(
        instruction=battle.task.instruction,
        start_url=battle.task.start_url,
        step_budget=runs[0].step_budget,
        wall_budget_s=runs[0].wall_budget_s,
        tools=shared_tools([run.agent for run in runs]),
        attachments=lane_attachments(battle.task.attachments.order_by("pk")),
    )
    barrier = threading.Barrier(len(runs), action=lambda: _lanes_started(battle_id))
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        # each lane logs with the battle's context (a context per thread: one cannot be
        # entered by two threads at once)
        futures = [
            pool.submit(copy_context().run, _lane_thread, run.pk, inputs, barrier) for run in runs
        ]
    # (every lane has ended: the pool waited for both)
    errors = [future.exception() for future in futures]
    if lost := next((e for e in errors if isinstance(e, SandboxLost)), None):
        _battle_sandbox_lost(battle_id, battle.attempt, lost)
        return
    try:
        for future in futures:
            future.result()
    except Exception as exc:
        logger.exception("battle %s failed", battle_id)
        Battle.objects.filter(pk=battle_id).update(
            status=Battle.Status.FAILED,
            failure_reason=ORCHESTRATOR_REASON.format(error=exc),
            ended_at=timezone.now(),
        )
        battle_publish(battle_id=battle_id)
        return
    _lanes_done(battle_id, battle.attempt)


def _coding_battle_drive(battle_id: int, attempt: int) -> None:
    """A repo task's battle: lanes, diffs, destroy, then the judge sandboxes
    (battles.services.coding); a source that cannot be prepared fails the battle."""
    try:
        coding_battle_drive(battle_id, lambda: _lanes_started(battle_id))
    except SandboxLost as exc:
        _battle_sandbox_lost(battle_id, attempt, exc)
        return
    except CodingBattleFailed as exc:
        _battle_fail(battle_id, REPOSITORY_REASON.format(error=exc))
        battle_publish(battle_id=battle_id)
        return
    except Exception as exc:
        logger.exception("coding battle %s failed", battle_id)
        _battle_fail(battle_id, ORCHESTRATOR_REASON.format(error=exc))
        battle_publish(battle_id=battle_id)
        return
    _lanes_done(battle_id, attempt)


def _lanes_done(battle_id: int, attempt: int) -> None:
    """Both lanes have ended: each side to its agent's account, then screening — unless
    the battle is not this attempt's any more (its host was taken for dead and another
    took it over: ``battles_recover_dead_hosts``)."""
    fault_point("screening")
    # No judge is served it before exclusion rules 1–6 (docs/method.md §7, the identity-leak
    # scan first) have run: screening is the judging queue's job, so this slot is free
    # for the next battle meanwhile (the sweep re-runs a screening whose job was lost).
    # First each side goes to its agent's account: a battle an agent failed is failed
    # and its task re-run instead (battles.services.failures), in the same transaction.
    with transaction.atomic():
        if not Battle.objects.select_for_update().filter(pk=battle_id, attempt=attempt).exists():
            logger.warning("battle %s was re-queued while attempt %s ran", battle_id, attempt)
            return
        if not battle_lanes_account(battle_id=battle_id):
            ended = Battle.objects.filter(pk=battle_id, status=Battle.Status.RUNNING).update(
                status=Battle.Status.SCREENING, ended_at=timezone.now()
            )
            if ended:
                transaction.on_commit(lambda: screening_enqueue(battle_id))
    battle_publish(battle_id=battle_id)


def screening_enqueue(battle_id: int) -> None:
    queue("judging").enqueue("judging.jobs.battle_screen", battle_id, job_id=f"screen-{battle_id}")


def _lanes_started(battle_id: int) -> None:
    Battle.objects.filter(pk=battle_id).update(lanes_started_at=timezone.now())


def _lane_thread(run_id: int, inputs: LaneInputs, barrier: threading.Barrier) -> None:
    try:
        run_lane(run_id=run_id, inputs=inputs, barrier=barrier)
    finally:
        connection.close()  # each lane thread has its own connection
