"""RQ jobs for battles: primitive ids in, one service call."""

import logging

from battles.services import battle_run as _battle_run
from battles.services import battles_fail_stuck

logger = logging.getLogger(__name__)


def battle_run(battle_id: int) -> None:
    _battle_run(battle_id=battle_id)


def battles_janitor() -> list[int]:
    failed = battles_fail_stuck()
    if failed:
        logger.warning("janitor failed stuck battles %s", failed)
    return failed
