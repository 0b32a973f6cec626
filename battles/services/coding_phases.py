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


def phase_open(battle_id: int | None, name: str, *, run_id: int | None = None, at=None) -> int:
    """A phase row, running from ``at`` (now); returns its id."""
    row = CodingPhase.objects.create(
        battle_id=battle_id, run_id=run_id, name=name, started_at=at or timezone.now()
    )
    _publish(battle_id)
    return row.pk


def phase_close(
    pk: int,
    battle_id: int | None,
    *,
    status: str = CodingPhase.Status.OK,
    detail: str = "",
    at=None,
) -> None:
    """Ends a running phase (a phase already ended stays as it was)."""
    CodingPhase.objects.filter(pk=pk, ended_at=None).update(
        status=status, ended_at=at or timezone.now(), detail=detail[:300]
    )
    _publish(battle_id)


@contextmanager
def phase(battle_id: int | None, name: str, *, run_id: int | None = None) -> Iterator[PhaseHandle]:
    """Records the phase as running, then ok (or what the handle says), or failed with
    the exception's text when the block raises (the exception goes on)."""
    pk = phase_open(battle_id, name, run_id=run_id)
    handle = PhaseHandle()
    try:
        yield handle
    except BaseException as exc:
        phase_close(
            pk,
            battle_id,
            status=CodingPhase.Status.FAILED,
            detail=handle.detail or f"{type(exc).__name__}: {exc}",
        )
        raise
    phase_close(pk, battle_id, status=handle.status, detail=handle.detail)
