"""RQ jobs for judging."""

from judging.services import battle_resolve as _battle_resolve


def battle_resolve(battle_id: int) -> None:
    _battle_resolve(battle_id=battle_id)
