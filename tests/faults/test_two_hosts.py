"""Two worker hosts on one PostgreSQL and one Redis (docs/deployment.md): "host-a" and
"host-b" are battle workers with distinct host ids, sandbox roots and uid ranges. Host A
is killed with SIGKILL in the middle of a battle; host B's janitor sees A's heartbeat
stop, re-queues A's battle, and B finishes the whole queue: every battle is accounted
for, none waits for the dead machine. When A starts again it reaps what it left."""

import json
import os
import random
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest
from django.conf import settings

from battles.jobs import battles_janitor
from battles.models import Battle
from battles.services import task_submit
from sandboxes.models import SandboxLease, WorkerHost
from sandboxes.reaping import become_subreaper
from sandboxes.rundir import DISPLAY_UID_OFFSET
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

WORKER = [PYTHON, "manage.py", "rqworker", "battles", "--worker-class",
          "battles.worker.PooledBattleWorker"]  # fmt: skip
HEARTBEAT_S, DEAD_AFTER_S = 0.5, 3.0
INSTRUCTIONS = (
    "what is 6*7",
    "name the largest planet of the solar system",
    "how many days does a leap year have",
    "spell the word arena backwards",
)


def _root() -> Path:
    path = Path(tempfile.mkdtemp(prefix="arena-test-host-", dir="/var/tmp"))
    path.chmod(0o711)  # the slot uids traverse it
    return path


def _host_env(host: str, root: Path, uid_base: int, tmp_path: Path) -> dict:
    env = child_env(sandbox_root=root, private_media_root=tmp_path / "private")
    env.update(
        ARENA_HOST_ID=host,
        ARENA_SANDBOX_UID_BASE=str(uid_base),
        ARENA_SANDBOX_DESKTOP="false",  # shell-only sandboxes: a faster test
        ARENA_SANDBOX_POOL_SIZE="0",
        ARENA_HOST_HEARTBEAT_S=str(HEARTBEAT_S),
        ARENA_HOST_DEAD_AFTER_S=str(DEAD_AFTER_S),
        ARENA_FAULT_CHECK_S="1",
    )
    return env


def _uids(base: int) -> list[int]:
    return [base + s for s in range(4)] + [base + DISPLAY_UID_OFFSET + s for s in range(4)]


def test_a_host_killed_mid_battle_has_its_battle_finished_by_the_survivor(alice, roster, tmp_path):
    ensure_public_arena()
    become_subreaper()  # what the killed host leaves comes to us, not to pid 1
    battles = [
        task_submit(user=alice, instruction=text, rng=random.Random(i))
        for i, text in enumerate(INSTRUCTIONS)
    ]
    ids = [b.pk for b in battles]
    base_a = settings.ARENA.sandbox_uid_base
    base_b = base_a + 2 * DISPLAY_UID_OFFSET  # a range of its own
    root_a, root_b = _root(), _root()
    fault_dir = tmp_path / "faults"
    fault_dir.mkdir()
    env_a = _host_env("host-a", root_a, base_a, tmp_path)
    env_a.update(ARENA_FAULT_PAUSE="running", ARENA_FAULT_DIR=str(fault_dir))
    env_b = _host_env("host-b", root_b, base_b, tmp_path)
    logs = tmp_path / "logs"
    processes: list[ServerProcess] = []
    timeline: list[tuple[float, str]] = []
    t0 = time.monotonic()

    def event(what: str) -> None:
        timeline.append((round(time.monotonic() - t0, 2), what))

    try:
        # Given host A in the middle of the oldest battle (a step stored, sandboxes live)
        host_a = ServerProcess.start("host-a", WORKER, env_a, logs)
        processes.append(host_a)
        poll_until(
            (fault_dir / "running").exists, timeout=90, what="host A mid-battle", processes=[host_a]
        )
        event(f"host A runs battle {ids[0]} (paused mid-lane)")
        assert Battle.objects.get(pk=ids[0]).worker_host == "host-a"
        assert SandboxLease.objects.filter(host="host-a", released_at=None).count() == 2

        # and host B working the rest of the queue
        host_b = ServerProcess.start("host-b", WORKER, env_b, logs)
        processes.append(host_b)
        poll_until(
            lambda: Battle.objects.filter(worker_host="host-b").exists(),
            timeout=60,
            what="host B to claim a battle",
            processes=[host_b],
        )
        event("host B claims its first battle")

        # When host A's machine dies: SIGKILL, no goodbye
        os.kill(host_a.popen.pid, signal.SIGKILL)
        host_a.popen.wait(timeout=10)
        killed = time.monotonic()
        event("host A killed (SIGKILL)")

        # Then B's janitor takes A for dead once its heartbeat is DEAD_AFTER_S old...
        poll_until(
            lambda: Battle.objects.filter(pk=ids[0], attempt=2).exists(),
            timeout=30,
            what="host B to re-queue host A's battle",
            processes=[host_b],
            interval=0.05,
        )
        detected = time.monotonic() - killed
        event(f"battle {ids[0]} re-queued by host B's janitor, attempt 2")
        lost = WorkerHost.objects.get(host_id="host-a")
        assert lost.lost_at is not None
        # not before the bound (its last beat came at most one beat before the kill)
        assert DEAD_AFTER_S - HEARTBEAT_S <= detected <= DEAD_AFTER_S + 10.0, detected

        # ...and finishes the whole queue, A's battle included
        seen = {"done": 0}

        def finished() -> bool:
            done = Battle.objects.filter(pk__in=ids, status="screening").count()
            if done > seen["done"]:
                seen["done"] = done
                event(f"{done} of {len(ids)} battles in screening")
            return done == len(ids)

        poll_until(finished, timeout=180, what="host B to finish the queue", processes=[host_b])
        for battle in Battle.objects.filter(pk__in=ids).order_by("pk"):
            assert battle.status == "screening", (battle.pk, battle.status, battle.failure_reason)
            assert battle.worker_host == "host-b"
            assert battle.attempt == (2 if battle.pk == ids[0] else 1)
            runs = list(battle.runs.values_list("status", "end_reason"))
            assert len(runs) == 2 and all(s == "ended" and r != "error" for s, r in runs), runs
        assert not SandboxLease.objects.filter(host="host-b", released_at=None).exists()
        assert battles_janitor() == []  # nothing left for anyone

        # A's sandboxes are on its "machine": they wait for it, and it reaps them at start
        assert SandboxLease.objects.filter(host="host-a", released_at=None).count() == 2
        host_b.stop()
        restarted = ServerProcess.start("host-a again", [*WORKER, "--burst"], env_a, logs)
        processes.append(restarted)
        assert restarted.wait(timeout=60) == 0, restarted.tail()
        event("host A restarted: reaped its own orphans")
        assert not SandboxLease.objects.filter(host="host-a", released_at=None).exists()
        assert list(root_a.iterdir()) == []
        assert live_processes(*_uids(base_a), *_uids(base_b)) == []
        assert WorkerHost.objects.get(host_id="host-a").lost_at is None  # it beats again
        print("two-host timeline:", json.dumps(timeline))
    finally:
        for process in processes:
            process.stop()
        wait_for_child_sessions_to_end()
        shutil.rmtree(root_a, ignore_errors=True)
        shutil.rmtree(root_b, ignore_errors=True)
