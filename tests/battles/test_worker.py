"""One real RQ worker process on real Redis runs a battle job end to end."""

import hashlib

import django_rq

from agents.services import roster_install_builtins
from battles.models import Battle, Run
from battles.services import task_submit
from tests.conftest import make_person
from tests.servers import (
    ServerProcess,
    child_env,
    ensure_public_arena,
    wait_for_child_sessions_to_end,
    worker_command,
)

# What each built-in policy does with a file-creation task: (end reason, steps taken).
EXPECTED = {
    "rulebook": (Run.EndReason.DELIVERED, 3),  # printf, cat, deliver
    "surveyor": (Run.EndReason.DELIVERED, 2),  # look around, deliver the report
    "idle": (Run.EndReason.GAVE_UP, 1),  # one gesture, then gives up
}
CONTENT = b"hello arena\n"


def test_battle_worker_runs_both_lanes_to_judging(
    transactional_db, terms, rng, tmp_path, sandbox_root
):
    # Given a consenting member of a team and the built-in roster, committed
    roster_install_builtins(arena=ensure_public_arena())
    alice = make_person("alice", "Acme", terms)
    # When a task is submitted (the job goes to Redis after commit)
    battle = task_submit(
        user=alice, instruction="Create a file named notes.txt containing hello arena", rng=rng
    )
    queue = django_rq.get_queue("battles")
    assert queue.job_ids == [f"battle-{battle.pk}"]

    # And a real worker drains the battles queue, then the judging queue (the screening
    # job the battle enqueued when its lanes ended)
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    worker = ServerProcess.start(
        "rqworker-burst", worker_command("battles", "judging", burst=True), env, tmp_path / "logs"
    )
    try:
        returncode = worker.wait(timeout=120)
    finally:
        worker.stop()
        wait_for_child_sessions_to_end()
    logs = worker.tail()
    assert returncode == 0, logs

    # Then the battle awaits judges, both lanes ran on identical inputs to a stated end
    battle.refresh_from_db()
    assert (battle.status, battle.failure_reason) == (Battle.Status.JUDGING, ""), logs
    assert battle.lanes_started_at is not None
    assert queue.job_ids == []
    runs = list(battle.runs.select_related("agent").prefetch_related("steps"))
    assert [run.side for run in runs] == ["A", "B"]
    assert len(runs[0].input_digest) == 64
    assert runs[0].input_digest == runs[1].input_digest
    for run in runs:
        steps = list(run.steps.all())
        assert (run.status, run.error) == (Run.Status.ENDED, ""), logs
        assert (run.end_reason, len(steps)) == EXPECTED[run.agent.slug], logs
        assert [step.index for step in steps] == list(range(len(steps)))
        # Every command ran in the sandbox and succeeded.
        shell = [step.result for step in steps if step.tool == "shell"]
        assert [result["ok"] for result in shell] == [True] * len(shell), shell
        if run.agent.slug == "rulebook":
            delivered = tmp_path / "private" / "deliveries" / f"run-{run.pk}" / "notes.txt"
            assert delivered.read_bytes() == CONTENT
            assert run.delivered_files == [
                {
                    "name": "notes.txt",
                    "size": len(CONTENT),
                    "sha256": hashlib.sha256(CONTENT).hexdigest(),
                }
            ]
