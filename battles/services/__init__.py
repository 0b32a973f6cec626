"""Writes for battles. The public services, by concern:

- ``admission``: a task submitted through the form or the API (SPEC §2);
- ``creation``: a battle of a chosen pair on a task (the door every battle goes through);
- ``orchestration``: claiming queued battles (FIFO), driving both lanes, failing what a
  dead worker left, the submitter ending a side;
- ``lanes``: one lane's sandbox and agent loop;
- ``live``: the live page's frames and the lanes' heartbeat;
- ``failures``: each side's outcome to its agent's account after the lanes, and the
  re-run of a task whose battle an agent failed;
- ``test_drives``: one agent alone on a sample task, for its team and the admins.
"""

from battles.services.admission import (
    Conversation,
    calibration_pair,
    start_url_resolver,
    task_check_admissible,
    task_submit,
)
from battles.services.failures import battle_lanes_account, battle_rerun
from battles.services.lanes import run_lane
from battles.services.live import battle_heartbeat, battle_publish
from battles.services.orchestration import (
    battle_claim_oldest,
    battle_end_side,
    battle_run,
    battle_run_next,
    battles_fail_stuck,
    battles_recover_dead_hosts,
    battles_recover_dead_workers,
)
from battles.services.test_drives import (
    SAMPLE_TASKS,
    test_drive_run,
    test_drive_start,
    test_drives_fail_stuck,
)

__all__ = [
    "SAMPLE_TASKS",
    "Conversation",
    "battle_claim_oldest",
    "battle_end_side",
    "battle_heartbeat",
    "battle_lanes_account",
    "battle_publish",
    "battle_rerun",
    "battle_run",
    "battle_run_next",
    "battles_fail_stuck",
    "battles_recover_dead_hosts",
    "battles_recover_dead_workers",
    "calibration_pair",
    "run_lane",
    "start_url_resolver",
    "task_check_admissible",
    "task_submit",
    "test_drive_run",
    "test_drive_start",
    "test_drives_fail_stuck",
]
