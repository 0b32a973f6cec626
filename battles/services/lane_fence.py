"""The fence between two attempts of one battle's lane. A battle whose host was taken
for dead is queued again (battles.services.orchestration) while its first attempt may
still run, frozen or cut off: each write of a lane's outcome is fenced by the attempt's
token, the run's start time, which the re-queue clears under the run's row lock."""

import contextlib
from collections.abc import Iterator

from django.db import transaction
from django.db.models import QuerySet

from battles.models import Run

__all__ = ["LaneLost", "fenced", "this_attempt"]


class LaneLost(Exception):
    """The battle was re-queued under this lane (its host was taken for dead): the lane
    stops and writes nothing more, the new attempt owns the run."""


def this_attempt(run: Run) -> QuerySet[Run]:
    """The run's row while it still carries this attempt's token (empty once re-queued)."""
    return Run.objects.filter(pk=run.pk, started_at=run.started_at)


@contextlib.contextmanager
def fenced(run: Run) -> Iterator[None]:
    """Every write of a lane's outcome (spans, a step and its screenshot, a delivery, the
    run's end) happens in here: a transaction that first locks the run's row and finds
    this attempt's token (its start time) on it, else raises LaneLost. A re-queue changes
    the token under the same row lock (battles.services.orchestration), so the two are
    ordered: a write either lands before the re-queue (which then removes it with the
    rest of the attempt) or is refused after it. A lane that froze mid-step thus writes
    nothing into the run its next attempt owns, not even the step it was in."""
    with transaction.atomic():
        if not this_attempt(run).select_for_update().exists():
            raise LaneLost(f"run {run.pk} was re-queued while this lane ran")
        yield
