"""A battle worker killed with SIGKILL at each phase of a battle: the janitor sees at
once (no stale heartbeat needed) that the process is gone, reaps what it left (processes
of the slot uids, cgroups, quota mounts, run dirs, leases) and re-runs the battle once
on fresh sandboxes; a second death fails it with the reason."""

import os
import random
import signal
from pathlib import Path

import pytest
from django.conf import settings

from battles.jobs import battles_janitor
from battles.models import Battle, Step
from battles.services import task_submit
from sandboxes import cgroups
from sandboxes.models import SandboxLease
from sandboxes.reaping import become_subreaper
from sandboxes.rundir import DISPLAY_UID_OFFSET
from sandboxes.services import pid_alive
from tests.processes import live_processes
from tests.servers import (
    PYTHON,
    ServerProcess,
    child_env,
    ensure_public_arena,
    poll_until,
    wait_for_child_sessions_to_end,
)

pytestmark = pytest.mark.django_db(transaction=True)

PHASES = ("queued", "claimed", "provisioning", "running", "screening")
# Phases killed with a desktop in each sandbox (Xvfb + Chromium under the display uid):
# those where the sandboxes are being made or live.
DESKTOP_PHASES = ("provisioning", "running")
WORKER_CLASS = "arena_site.worker.ArenaSimpleWorker"


def _start_worker(env: dict, log_dir: Path, name: str, *, burst: bool) -> ServerProcess:
    argv = [PYTHON, "manage.py", "rqworker", "battles", "--worker-class", WORKER_CLASS]
    return ServerProcess.start(name, [*argv, "--burst"] if burst else argv, env, log_dir)


def _slot_uids() -> list[int]:
    base = settings.ARENA.sandbox_uid_base
    return [base + slot for slot in range(4)] + [
        base + DISPLAY_UID_OFFSET + slot for slot in range(4)
    ]


def _kill_at(phase: str, env: dict, tmp_path: Path, name: str) -> ServerProcess:
    """Starts a worker paused at ``phase`` and SIGKILLs it (the worker process alone:
    what it started is left to the janitor)."""
    worker = _start_worker(env, tmp_path / "logs", name, burst=False)
    marker = Path(env["ARENA_FAULT_DIR"]) / phase
    poll_until(marker.exists, timeout=90, what=f"the worker to reach {phase}", processes=[worker])
    os.kill(worker.popen.pid, signal.SIGKILL)
    worker.popen.wait(timeout=10)
    return worker


def _assert_reaped(sandbox_root: Path, battle: Battle) -> None:
    assert SandboxLease.objects.filter(released_at=None).count() == 0
    assert list(sandbox_root.iterdir()) == []
    for run_id in battle.runs.values_list("pk", flat=True):
        assert cgroups.find(f"run-{run_id}-*") is None
    assert live_processes(*_slot_uids()) == []


def _env(sandbox_root: Path, tmp_path: Path, phase: str) -> dict:
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    fault_dir = tmp_path / "faults"
    fault_dir.mkdir(exist_ok=True)
    env.update(ARENA_FAULT_PAUSE=phase, ARENA_FAULT_DIR=str(fault_dir))
    if phase not in DESKTOP_PHASES:
        env["ARENA_SANDBOX_DESKTOP"] = "false"  # shell-only sandboxes: a faster test
    return env


# `make test` kills a worker mid-lane and just before screening; the three earlier
# phases (queued, claimed, provisioning) are the same recovery path and run in `make soak`.
@pytest.mark.parametrize(
    "phase",
    [
        p if p in ("running", "screening") else pytest.param(p, marks=pytest.mark.soak)
        for p in PHASES
    ],
)
def test_a_worker_killed_at_any_phase_gets_its_battle_rerun_once(
    phase, alice, roster, sandbox_root, tmp_path
):
    ensure_public_arena()
    become_subreaper()  # the killed worker's orphans come to us, as to `make run`
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(4))
    env = _env(sandbox_root, tmp_path, phase)
    processes = []
    try:
        # Given a worker killed at this phase of the battle
        processes.append(_kill_at(phase, env, tmp_path, "killed"))
        battle.refresh_from_db()
        assert battle.status == ("queued" if phase == "queued" else "running")

        # When the janitor runs (its heartbeat is fresh: no stuck bound is waited out)
        battles_janitor()

        # Then what the worker left is reaped and the battle waits for its re-run...
        _assert_reaped(sandbox_root, battle)
        battle.refresh_from_db()
        assert battle.status == "queued"
        assert battle.attempt == (1 if phase == "queued" else 2)
        assert battle.worker_pid is None
        assert not Step.objects.filter(run__battle=battle).exists()
        assert set(battle.runs.values_list("status", flat=True)) == {"pending"}
        # ...which a worker (the marker is there: it does not pause) runs to the end.
        processes.append(_start_worker(env, tmp_path / "logs", "rerun", burst=True))
        assert processes[-1].wait(timeout=120) == 0, processes[-1].tail()
        battle.refresh_from_db()
        assert battle.status in ("screening", "judging", "excluded"), processes[-1].tail()
        assert battle.attempt == (1 if phase == "queued" else 2)
        assert set(battle.runs.values_list("status", flat=True)) == {"ended"}
        assert "error" not in set(battle.runs.values_list("end_reason", flat=True))
        _assert_reaped(sandbox_root, battle)
        assert battles_janitor() == []  # nothing left to do
        battle.refresh_from_db()
        assert battle.attempt == (1 if phase == "queued" else 2)
    finally:
        for process in processes:
            process.stop()
        wait_for_child_sessions_to_end()


def test_a_second_death_ends_the_battle_with_the_reason(alice, roster, sandbox_root, tmp_path):
    ensure_public_arena()
    become_subreaper()
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(4))
    env = _env(sandbox_root, tmp_path, "running")
    processes = []
    try:
        processes.append(_kill_at("running", env, tmp_path, "first"))
        battles_janitor()
        assert Battle.objects.get(pk=battle.pk).attempt == 2
        (tmp_path / "faults" / "running").unlink()  # the re-run pauses too
        processes.append(_kill_at("running", env, tmp_path, "second"))

        assert battles_janitor() == [battle.pk]

        battle.refresh_from_db()
        assert battle.status == "failed"
        assert "died on each of its 2 attempts" in battle.failure_reason
        assert set(battle.runs.values_list("end_reason", flat=True)) == {"error"}
        assert battle.streaming_applied is None  # nothing of it was rated
        _assert_reaped(sandbox_root, battle)
    finally:
        for process in processes:
            process.stop()
        wait_for_child_sessions_to_end()


# `make soak`: the same re-run path as the simple worker above, under a forking worker.
@pytest.mark.soak
def test_a_killed_work_horse_under_a_forking_worker_gets_its_battle_rerun(
    alice, roster, sandbox_root, tmp_path
):
    """The forking worker (``ArenaWorker``) survives the death of the work horse that ran
    the battle (the OOM killer's way): the claim recorded the horse's pid, so the janitor
    sees it dead at once, and the same surviving worker runs the re-run."""
    ensure_public_arena()
    become_subreaper()
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(4))
    env = _env(sandbox_root, tmp_path, "running")
    argv = [PYTHON, "manage.py", "rqworker", "battles", "--worker-class",
            "arena_site.worker.ArenaWorker"]  # fmt: skip
    worker = ServerProcess.start("forking", argv, env, tmp_path / "logs")
    try:
        marker = Path(env["ARENA_FAULT_DIR"]) / "running"
        poll_until(marker.exists, timeout=90, what="the horse to reach a step", processes=[worker])
        horse = int(marker.read_text())
        assert horse != worker.popen.pid  # the battle runs in a forked horse
        battle.refresh_from_db()
        assert (battle.status, battle.worker_pid) == ("running", horse)
        os.kill(horse, signal.SIGKILL)
        # gone once the worker has reaped it (a zombie still answers to its pid)
        poll_until(lambda: not pid_alive(horse), timeout=30, what="the horse to be reaped")
        assert worker.popen.poll() is None  # the worker itself lives on

        battles_janitor()  # (every ARENA_FAULT_CHECK_S in a running arena)

        battle.refresh_from_db()
        assert battle.attempt == 2
        # the surviving worker takes the re-run (the marker is there: it does not pause)
        poll_until(
            lambda: Battle.objects.get(pk=battle.pk).status in ("screening", "judging", "excluded"),
            timeout=120, what="the re-run to end", processes=[worker],
        )  # fmt: skip
        battle.refresh_from_db()
        assert battle.attempt == 2
        assert set(battle.runs.values_list("status", flat=True)) == {"ended"}
        assert "error" not in set(battle.runs.values_list("end_reason", flat=True))
    finally:
        worker.stop()
        wait_for_child_sessions_to_end()
