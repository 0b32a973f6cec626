"""RQ jobs for judging: primitive ids in, one service call; a battle's job logs with its
``battle_id`` (arena_site/logs.py)."""

from structlog.contextvars import bound_contextvars

from judging.services import battle_resolve as _battle_resolve
from judging.services import battle_screen as _battle_screen
from judging.services import battles_resolve_pending as _battles_resolve_pending
from judging.services.machine import battle_machine_judge as _battle_machine_judge
from judging.services.screening import battles_screen_pending


def battle_screen(battle_id: int) -> None:
    """Enqueued when a battle's lanes end: rules 1–6, then it opens for judging."""
    with bound_contextvars(battle_id=battle_id):
        _battle_screen(battle_id=battle_id)


def battle_resolve(battle_id: int) -> None:
    with bound_contextvars(battle_id=battle_id):
        _battle_resolve(battle_id=battle_id)


def battles_resolve_pending() -> None:
    """For the scheduler: undo windows that ended unnoticed, battles past JUDGING_TTL,
    and screenings whose job was lost."""
    battles_screen_pending()
    _battles_resolve_pending()


def battle_machine_judge(battle_id: int) -> None:
    """Enqueued on the ``evals`` queue when a battle opens for judging and its arena has
    a machine judge: the verdicts it lacks. Idempotent."""
    with bound_contextvars(battle_id=battle_id):
        _battle_machine_judge(battle_id=battle_id)
