"""RQ jobs of the environments pipeline (docs/environments.md): primitive ids in, one
service call. ``environments_collect`` runs every minute (arena_site/cron.py); a built
environment is replayed on the battles queue, whose workers own the host's sandboxes."""

import logging
from datetime import timedelta

from django.utils import timezone
from rq import Retry

from arena_site.redis import queue
from environments.building import candidates_collect, environment_build
from environments.models import Environment
from environments.validation import environment_validate

logger = logging.getLogger(__name__)

# A graded environment whose replay job was lost is enqueued again after this long.
STALE_GRADED = timedelta(minutes=15)


def _enqueue_build(environment_id: int) -> None:
    queue("default").enqueue(
        "environments.jobs.environment_build_job",
        environment_id,
        job_id=f"environment-build-{environment_id}",
    )


def validation_enqueue(environment_id: int) -> None:
    """Enqueues the environment's replays on the battles queue (one job per environment:
    its id is fixed); the builder's and an operator's supplied grader's way in."""
    queue("battles").enqueue(
        "environments.jobs.environment_validate_job",
        environment_id,
        job_id=f"environment-validate-{environment_id}",
        # Retried at once (an interval would need a scheduler on the battles queue).
        retry=Retry(max=2),
    )


def environments_collect() -> list[int]:
    """Picks the newly failed runs and enqueues their builds; enqueues again the
    replays of graded environments left waiting (a lost job)."""
    created = candidates_collect()
    for environment_id in created:
        _enqueue_build(environment_id)
    stale = Environment.objects.filter(
        status=Environment.Status.GRADED, created_at__lt=timezone.now() - STALE_GRADED
    ).values_list("pk", flat=True)
    battles = queue("battles")
    for environment_id in stale:
        job = battles.fetch_job(f"environment-validate-{environment_id}")
        if job is None or job.get_status(refresh=False) in ("finished", "failed", "canceled"):
            validation_enqueue(environment_id)
    return created


def environment_build_job(environment_id: int) -> str:
    status = environment_build(environment_id=environment_id)
    if status == Environment.Status.GRADED:
        validation_enqueue(environment_id)
    return status


def environment_validate_job(environment_id: int) -> str:
    return environment_validate(environment_id=environment_id)
