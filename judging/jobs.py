"""RQ jobs for judging."""

from judging.services import battle_resolve as _battle_resolve
from judging.services import battles_resolve_pending as _battles_resolve_pending


def battle_resolve(battle_id: int) -> None:
    _battle_resolve(battle_id=battle_id)


def battles_resolve_pending() -> None:
    """For the scheduler: resolve judging battles whose votes were never resolved."""
    _battles_resolve_pending()
