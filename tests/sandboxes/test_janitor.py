"""A worker killed mid-run (SIGKILL) leaves a sandbox behind; the janitor reaps it:
processes under the slot's uids (the agent's and the display's), the quota mounts, the
run dir, the cgroup, the slot lease."""

import os
import signal
import subprocess
import sys

import pytest

from arena_site.hosts import host_id, process_token
from sandboxes import disk
from sandboxes.models import SandboxLease
from sandboxes.reaping import become_subreaper
from sandboxes.rundir import DISPLAY_UID_OFFSET
from sandboxes.services import sandbox_janitor
from tests.processes import live_processes
from tests.servers import ROOT, child_env

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="slot uids need a root worker"),
    pytest.mark.django_db(transaction=True),
]

WORKER = """
import django, sys, time
django.setup()
from sandboxes.base import SandboxSpec
from sandboxes.services import sandbox_session
with sandbox_session(SandboxSpec(run_id=None)) as box:
    box.shell("sleep 300 > /dev/null 2>&1 &")
    print(box.run_dir, flush=True)
    time.sleep(300)
"""


def uid_processes(uid: int) -> list[str]:
    return live_processes(uid)


def test_janitor_reaps_the_sandbox_of_a_worker_killed_mid_run(sandbox_root, tmp_path, settings):
    # Orphans of the killed worker come to us, as they come to `make run`'s parent
    # process, and the janitor reaps them.
    become_subreaper()
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    run_dir = worker.stdout.readline().strip()
    lease = SandboxLease.objects.get(released_at=None)
    uid = settings.ARENA.sandbox_uid_base + lease.slot
    assert lease.path == run_dir and lease.worker_pid == worker.pid

    worker.send_signal(signal.SIGKILL)
    worker.wait()

    assert disk.mounts_under(run_dir)  # the quotas outlived the worker
    assert sandbox_janitor() == 1
    assert uid_processes(uid) == []
    assert uid_processes(uid + DISPLAY_UID_OFFSET) == []
    assert disk.mounts_under(run_dir) == []
    assert not os.path.exists(run_dir)
    lease.refresh_from_db()
    assert lease.released_at is not None
    assert sandbox_janitor() == 0  # nothing left to do


def test_janitor_leaves_live_workers_alone(db):
    live = SandboxLease.objects.create(
        slot=30, backend="local", host=os.uname().nodename, worker_pid=os.getpid()
    )
    assert sandbox_janitor() == 0
    live.refresh_from_db()
    assert live.released_at is None


def test_a_remote_engines_janitor_kills_nothing_under_the_slots_uids_here(settings, monkeypatch):
    # With a remote engine the run's processes live on the engine's machine: the slot's
    # uids here may be another host's (several "hosts" on one machine, a local engine
    # beside). The janitor frees the dead worker's lease and kills nothing here.
    settings.ARENA = settings.ARENA.replace(sandbox_backend="docker")
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")  # remote mode; does not answer
    monkeypatch.setattr("sandboxes.services._backend", None)
    uid = settings.ARENA.sandbox_uid_base + 3
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lease = SandboxLease.objects.create(
        slot=3, backend="docker", host=host_id(),
        worker_pid=dead.pid,
    )  # fmt: skip
    bystander = subprocess.Popen(["sleep", "60"], user=uid)
    try:
        assert sandbox_janitor() == 1
        lease.refresh_from_db()
        assert lease.released_at is not None
        assert bystander.poll() is None, "the janitor killed a process of the slot's uid"
    finally:
        bystander.kill()
        bystander.wait()


def test_a_lease_whose_pid_now_names_another_process_is_reaped():
    """The lease's pid runs, but it is not the process that took the lease (its start
    time differs: the pid was given again): the lease is freed, not kept alive by a
    stranger. The lease of this very process is kept."""
    mine = SandboxLease.objects.create(
        slot=0, backend="local", host=host_id(), worker_pid=os.getpid(),
        worker_token=process_token(),
    )  # fmt: skip
    earlier = f"{os.getpid()}:{int(process_token().split(':')[1]) - 1}"
    stale = SandboxLease.objects.create(
        slot=1, backend="local", host=host_id(), worker_pid=os.getpid(), worker_token=earlier
    )

    assert sandbox_janitor() == 1

    mine.refresh_from_db()
    stale.refresh_from_db()
    assert mine.released_at is None and stale.released_at is not None
