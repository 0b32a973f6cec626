"""Writes for battles. The public services, by concern:

- ``admission``: a task submitted through the form or the API (SPEC §2);
- ``creation``: a battle of a chosen pair on a task (the door every battle goes through);
- ``orchestration``: claiming queued battles (FIFO), driving both lanes, failing what a
  dead worker left, the submitter ending a side;
- ``lanes``: one lane's sandbox and agent loop;
- ``live``: the live page's frames and the lanes' heartbeat.
"""

from battles.services.admission import (
    Conversation,
    calibration_pair,
    start_url_resolver,
    task_check_admissible,
    task_submit,
)
from battles.services.lanes import run_lane
from battles.services.live import battle_heartbeat, battle_publish
from battles.services.orchestration import (
    battle_claim_oldest,
    battle_end_side,
    battle_run,
    battle_run_next,
    battles_fail_stuck,
    battles_recover_dead_workers,
)

__all__ = [
    "Conversation",
    "battle_claim_oldest",
    "battle_end_side",
    "battle_heartbeat",
    "battle_publish",
    "battle_run",
    "battle_run_next",
    "battles_fail_stuck",
    "battles_recover_dead_workers",
    "calibration_pair",
    "run_lane",
    "start_url_resolver",
    "task_check_admissible",
    "task_submit",
]
