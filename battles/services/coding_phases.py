"""The live phases of a coding battle: one row a phase, written as it starts and ends,
and the battle's page told (the SSE stream reads the same rows)."""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.utils import timezone

from battles.coding_models import CodingPhase
from battles.services.live import battle_publish

logger = logging.getLogger(__name__)


@dataclass
class PhaseHandle:
    """What the code inside a phase may say about it: a short detail, or that it was
    skipped or failed without raising."""

    detail: str = ""
    status: str = CodingPhase.Status.OK


def _publish(battle_id: int | None) -> None:
    if battle_id is not None:
        battle_publish(battle_id=battle_id)


@contextmanager
def phase(battle_id: int | None, name: str, *, run_id: int | None = None) -> Iterator[PhaseHandle]:
    """Records the phase as running, then ok (or what the handle says), or failed with
    the exception's text when the block raises (the exception goes on)."""
    row = CodingPhase.objects.create(
        battle_id=battle_id, run_id=run_id, name=name, started_at=timezone.now()
    )
    _publish(battle_id)
    handle = PhaseHandle()
    try:
        yield handle
    except BaseException as exc:
        CodingPhase.objects.filter(pk=row.pk).update(
            status=CodingPhase.Status.FAILED,
            ended_at=timezone.now(),
            detail=(handle.detail or f"{type(exc).__name__}: {exc}")[:300],
        )
        _publish(battle_id)
        raise
    CodingPhase.objects.filter(pk=row.pk).update(
        status=handle.status, ended_at=timezone.now(), detail=handle.detail[:300]
    )
    _publish(battle_id)
