"""RQ jobs for battles: primitive ids in, one service call."""

import logging
import secrets
import socket

import structlog
from django.conf import settings

from arena_site.worker import fault_point
from battles.selectors import battles_waiting
from battles.services import (
    battle_run_next,
    battles_fail_stuck,
    battles_recover_dead_hosts,
    battles_recover_dead_workers,
    test_drives_fail_stuck,
)
from battles.services import test_drive_run as test_drive_run_service
from battles.services.hosts import host_takes_no_battle
from battles.snapshots import snapshots_prune as snapshots_prune_service
from sandboxes.services import pid_alive

logger = logging.getLogger(__name__)


def battle_run(battle_id: int) -> None:
    """Enqueued once per admitted battle (``battle_id``); runs the oldest queued battle,
    which is ``battle_id`` itself unless an older one still waits (FIFO). Its log lines
    carry ``battle_id`` (arena_site/logs.py): the job's, or the one it runs while it
    runs it."""
    with structlog.contextvars.bound_contextvars(battle_id=battle_id):
        _battle_run(battle_id)


def _battle_run(battle_id: int) -> None:
    fault_point("queued")  # the job is taken, no battle claimed yet
    if refusal := host_takes_no_battle():
        # This worker takes no battle now (its engine stopped answering, or an operator
        # cordoned its host, after it took the job): the job goes back for another
        # worker, and this one takes no more until that ends (battles.worker).
        problem = refusal[0]
        import django_rq

        job_id = f"battle-{battle_id}-handed-on-{secrets.token_hex(4)}"
        django_rq.get_queue("battles").enqueue("battles.jobs.battle_run", battle_id, job_id=job_id)
        logger.warning("job for battle %s handed on (%s)", battle_id, problem)
        return
    ran = battle_run_next()
    if ran is None:
        logger.info("job for battle %s: no battle queued (already run or claimed)", battle_id)
    elif ran != battle_id:
        logger.info("job for battle %s ran the older battle %s (FIFO)", battle_id, ran)


def test_drive_run(drive_id: int) -> None:
    """Enqueued once per test drive (``drive_id``) on the battles queue: one lane."""
    test_drive_run_service(drive_id=drive_id)


def battles_janitor() -> list[int]:
    """Every ARENA_FAULT_CHECK_S: battles of this host's dead workers, and of hosts that
    stopped beating, re-run once (or failed), jobs a dead worker held replaced, then the
    slow paths (a stale heartbeat, another host's worker; a job lost with Redis).
    Returns the battles failed."""
    requeued, died = battles_recover_dead_workers()
    if requeued:
        logger.warning("janitor re-queued battles whose worker died %s", requeued)
    again, lost = battles_recover_dead_hosts()
    if again:
        logger.warning("janitor re-queued battles of hosts that stopped beating %s", again)
    died += lost
    if died:
        logger.warning("janitor failed battles whose worker died on every attempt %s", died)
    replaced = battles_replace_dead_jobs()
    if replaced:
        logger.warning("janitor replaced jobs held by dead workers %s", replaced)
    stuck = battles_fail_stuck()
    if stuck:
        logger.warning("janitor failed stuck battles %s", stuck)
    requeued = battles_requeue_orphans()
    if requeued:
        logger.warning("janitor re-enqueued battles whose job was lost %s", requeued)
    drives = test_drives_fail_stuck()
    if drives:
        logger.warning("janitor failed test drives that stopped or never started %s", drives)
    return died + stuck


def battles_replace_dead_jobs() -> list[str]:
    """Battle jobs that a worker of this host took and died with (killed between taking
    the job and claiming its battle, or while driving it) get a replacement job at once.
    A replacement is harmless even when the battle has run: each job runs the oldest
    queued battle. Returns the ids of the jobs replaced."""
    import django_rq
    from rq.worker import Worker

    queue = django_rq.get_queue("battles")
    # RQ names a worker's machine, not its arena host id: a pid says something only
    # about processes of this machine.
    machine = socket.gethostname()
    replaced = []
    for job_id in queue.started_job_registry.get_job_ids():
        job = queue.fetch_job(job_id)
        if job is None or not job.worker_name:
            continue
        worker = Worker.find_by_key(
            Worker.redis_worker_namespace_prefix + job.worker_name, connection=queue.connection
        )
        dead = worker is None or (
            worker.hostname == machine and worker.pid is not None and not pid_alive(worker.pid)
        )
        if not dead or queue.fetch_job(f"{job_id}-again") is not None:
            continue
        queue.enqueue("battles.jobs.battle_run", *job.args, job_id=f"{job_id}-again")
        queue.started_job_registry.remove_executions(job)
        replaced.append(job_id)
    return replaced


def battles_requeue_orphans() -> list[int]:
    """Queued battles waiting longer than STUCK_AFTER_S whose job is gone (a worker
    killed between taking the job and claiming the battle, or a flushed Redis) get
    their job again. An extra job is harmless: each runs the oldest queued battle."""
    import django_rq
    from rq.job import JobStatus

    queue = django_rq.get_queue("battles")
    requeued = []
    for battle_id in battles_waiting(older_than_s=settings.ARENA.stuck_after_s):
        job = queue.fetch_job(f"battle-{battle_id}")
        if job is None or job.get_status(refresh=True) in (
            JobStatus.FINISHED,
            JobStatus.FAILED,
            JobStatus.STOPPED,
            JobStatus.CANCELED,
        ):
            queue.enqueue("battles.jobs.battle_run", battle_id, job_id=f"battle-{battle_id}")
            requeued.append(battle_id)
    return requeued


def snapshots_prune() -> int:
    """Every hour: the snapshots past ARENA_SNAPSHOT_RETENTION_DAYS and their blobs."""
    return snapshots_prune_service()
