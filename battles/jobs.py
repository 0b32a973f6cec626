"""RQ jobs for battles: primitive ids in, one service call."""

import logging

from django.conf import settings

from battles.selectors import battles_waiting
from battles.services import battle_run_next, battles_fail_stuck

logger = logging.getLogger(__name__)


def battle_run(battle_id: int) -> None:
    """Enqueued once per admitted battle (``battle_id``); runs the oldest queued battle,
    which is ``battle_id`` itself unless an older one still waits (FIFO)."""
    ran = battle_run_next()
    if ran is None:
        logger.info("job for battle %s: no battle queued (already run or claimed)", battle_id)
    elif ran != battle_id:
        logger.info("job for battle %s ran the older battle %s (FIFO)", battle_id, ran)


def battles_janitor() -> list[int]:
    failed = battles_fail_stuck()
    if failed:
        logger.warning("janitor failed stuck battles %s", failed)
    requeued = battles_requeue_orphans()
    if requeued:
        logger.warning("janitor re-enqueued battles whose job was lost %s", requeued)
    return failed


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
