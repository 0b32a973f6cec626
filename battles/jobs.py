"""RQ jobs for battles: primitive ids in, one service call."""

from battles.services import battle_run as _battle_run


def battle_run(battle_id: int) -> None:
    _battle_run(battle_id=battle_id)
