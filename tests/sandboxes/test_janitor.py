"""The janitor reaps what a dead worker left: processes under the slot uid, the run
dir and the slot lease."""

import os
import socket
import subprocess
import time

import pytest

from sandboxes.base import SandboxSpec
from sandboxes.local import LocalBackend
from sandboxes.models import SandboxLease
from sandboxes.services import sandbox_janitor

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="slot uids need a root worker")

SPEC = SandboxSpec(
    run_id=9, shell_timeout_s=5, output_max_bytes=4096, deliver_max_files=3, deliver_max_bytes=1
)


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_janitor_reaps_a_dead_workers_sandbox(db, sandbox_root, settings):
    slot = 7
    uid = settings.ARENA["SANDBOX_UID_BASE"] + slot
    box = LocalBackend(sandbox_root, settings.ARENA["SANDBOX_UID_BASE"]).provision(SPEC, slot=slot)
    # an orphan the dead worker left running under the slot's uid
    orphan = subprocess.Popen(
        box._argv("sleep 300", timeout_s=300), start_new_session=True, stdout=subprocess.DEVNULL
    )
    lease = SandboxLease.objects.create(
        slot=slot,
        backend="local",
        host=socket.gethostname(),
        worker_pid=dead_pid(),
        path=str(box.run_dir),
    )
    live = SandboxLease.objects.create(
        slot=slot + 1, backend="local", host=socket.gethostname(), worker_pid=os.getpid()
    )

    assert sandbox_janitor() == 1

    orphan.wait(timeout=5)
    deadline = time.monotonic() + 5
    while (
        time.monotonic() < deadline
        and subprocess.run(["pgrep", "-U", str(uid)], capture_output=True).stdout
    ):
        time.sleep(0.05)
    assert subprocess.run(["pgrep", "-U", str(uid)], capture_output=True).stdout == b""
    assert not box.run_dir.exists()
    lease.refresh_from_db()
    live.refresh_from_db()
    assert lease.released_at is not None
    assert live.released_at is None  # a live worker's sandbox is left alone
