"""A Docker sandbox's two-phase destroy (``sandboxes.reclaim``), on the private engine of
``tests.docker_engine``: when ``destroy`` returns nothing of the run runs (under either
of the slot's uids) and its egress listeners are gone, while its slot stays leased;
once the background reclaim is done, no container, run dir, engine group or lease is
left. A worker killed between the two phases leaves the rest to the janitor."""

import os
import signal
import subprocess
import sys
import threading

import docker
import pytest

from sandboxes import cgroups, reclaim, services
from sandboxes.base import SandboxSpec
from sandboxes.docker_backend import DEFAULT_IMAGE, DockerBackend
from sandboxes.models import SandboxLease
from sandboxes.pool import DesktopPool, FixedSlots
from sandboxes.reclaim import Reclaim, after_reclaim, reclaims_wait
from tests.docker_engine import docker_engine  # noqa: F401 - the session fixture
from tests.sandboxes.test_docker_backend import new_run_id, own_host
from tests.sandboxes.test_docker_remote_mode import processes_of, wait_for
from tests.servers import ROOT, child_env

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="slot uids need a root worker"),
]


GATES: list[threading.Event] = []


def gate(box) -> threading.Event:
    """Holds ``box``'s reclaim back until the returned event is set: the moment between
    the two phases, frozen (``docker_session`` opens it after a test that failed)."""
    opened = threading.Event()
    GATES.append(opened)
    work = box.reclaim.work
    box.reclaim.work = lambda: opened.wait(60) and work()
    return opened


@pytest.fixture
def docker_session(docker_engine, settings, monkeypatch):  # noqa: F811
    """This process's sandboxes on the private engine, under a host label of the test's
    own; the backend closed after."""
    monkeypatch.setenv("DOCKER_HOST", docker_engine)
    settings.ARENA = settings.ARENA.replace(sandbox_backend="docker", host_id=own_host())
    client = docker.DockerClient(base_url=docker_engine)
    yield client
    for opened in GATES:
        opened.set()
    assert services.reclaims_wait(60)
    services.sandbox_backend().close()
    for container in client.containers.list(
        all=True, filters={"label": f"arena.host={settings.ARENA.host_id}"}
    ):
        container.remove(force=True)
    client.close()


@pytest.mark.django_db(transaction=True)
def test_destroy_stops_the_run_and_the_slot_is_freed_once_reclaimed(docker_session):
    spec = SandboxSpec(run_id=None, desktop=True, start_url="about:blank", shell_timeout_s=10)
    with services.sandbox_session(spec) as box:
        uids = (box.uid, box.display_uid)
        assert uids[0] != uids[1]
        assert box.shell("sleep 300 > /dev/null 2>&1 &").ok
        sockets = [box.run_dir / d / "egress.sock" for d in ("ctl", "display-ctl")]
        assert all(s.exists() for s in sockets)
        assert processes_of(uids[0]) and processes_of(uids[1])
        lease = SandboxLease.objects.get(released_at=None)
        opened = gate(box)

    # Stopped: nothing of the run runs or listens; the rest is still there, the slot held.
    # Killed: none left in the run's groups when destroy returned. A task leaves its
    # group late in its exit, after its memory is gone (it runs nothing any more), and
    # may still be listed an instant, without a command line: so a bounded wait.
    assert wait_for(lambda: processes_of(*uids) == [], 2.0), processes_of(*uids)
    for container in box.containers.values():
        container.reload()  # still on the engine (killed from this host: exited soon)
    assert not any(s.exists() for s in sockets)
    assert box.run_dir.exists()
    lease.refresh_from_db()
    assert lease.released_at is None

    opened.set()
    assert services.reclaims_wait(30)

    lease.refresh_from_db()
    assert lease.released_at is not None
    for container in box.containers.values():
        with pytest.raises(docker.errors.NotFound):
            docker_session.containers.get(container.id)
    assert not box.run_dir.exists()
    assert cgroups.engine_group_directories(box.run_dir.name) == []
    assert box.reclaim.ok is True


def test_a_failed_reclaim_frees_nothing(monkeypatch):
    """No engine: a reclaim whose work cannot confirm its containers gone (the engine
    refused), tried twice, runs none of its callbacks, so the slot stays leased."""
    monkeypatch.setattr(reclaim, "RETRY_AFTER_S", 0)
    tries, freed = [], []
    pending = Reclaim("a sandbox", lambda: tries.append(1) and False)
    sandbox = type("Destroyed", (), {"reclaim": pending})()
    after_reclaim(sandbox, lambda: freed.append("early"))

    pending.submit()

    assert reclaim.reclaims_wait(10) and pending.wait(0)
    after_reclaim(sandbox, lambda: freed.append("late"))
    assert (pending.ok, len(tries), freed) == (False, 2, [])


def test_a_successful_reclaim_frees_the_slot_whenever_asked():
    pending = Reclaim("a sandbox", lambda: True)
    sandbox = type("Destroyed", (), {"reclaim": pending})()
    freed: list[str] = []
    after_reclaim(sandbox, lambda: freed.append("before"))
    pending.submit()
    assert reclaim.reclaims_wait(10)
    after_reclaim(sandbox, lambda: freed.append("after"))  # done already: at once
    after_reclaim(object(), lambda: freed.append("synchronous"))  # no reclaim: at once
    assert freed == ["before", "after", "synchronous"]


WORKER = """
import django, threading, time
django.setup()
from sandboxes.base import SandboxSpec
from sandboxes.services import sandbox_session
with sandbox_session(SandboxSpec(run_id=None, desktop=False)) as box:
    box.reclaim.work = lambda: threading.Event().wait()  # the reclaim never comes
print(box.run_dir, box.container.id, flush=True)
time.sleep(300)
"""


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_between_stop_and_reclaim_leaves_it_to_the_janitor(
    docker_engine,  # noqa: F811
    docker_session,
    settings,
    sandbox_root,
    tmp_path,
):
    host = settings.ARENA.host_id
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    env.update(
        ARENA_SANDBOX_BACKEND="docker",
        ARENA_HOST_ID=host,
        ARENA_DOCKER_IMAGE=DEFAULT_IMAGE,
        ARENA_DEMO_WEB="false",
        DOCKER_HOST=docker_engine,
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        run_dir, container_id = worker.stdout.readline().split()
        lease = SandboxLease.objects.get(released_at=None)
        assert lease.worker_pid == worker.pid
        assert processes_of(settings.ARENA.sandbox_uid_base + lease.slot) == []  # stopped
        services.sandbox_janitor()  # its worker lives: the janitor keeps it all
        docker_session.containers.get(container_id)
        assert os.path.exists(run_dir)

        worker.send_signal(signal.SIGKILL)
        worker.wait()

        assert services.sandbox_janitor() == 2  # the lease, and the container
        with pytest.raises(docker.errors.NotFound):
            docker_session.containers.get(container_id)
        assert not os.path.exists(run_dir)
        assert cgroups.engine_group_directories(os.path.basename(run_dir)) == []
        lease.refresh_from_db()
        assert lease.released_at is not None
    finally:
        worker.kill()
        worker.wait()


def test_a_pooled_docker_desktops_slot_is_freed_once_reclaimed_and_close_waits(
    docker_engine,  # noqa: F811
    sandbox_root,
    settings,
):
    client = docker.DockerClient(base_url=docker_engine)
    backend = DockerBackend(
        DEFAULT_IMAGE,
        sandbox_root,
        settings.ARENA.sandbox_uid_base,
        client_factory=lambda: docker.DockerClient(base_url=docker_engine),
        host=own_host(),
    )
    slots = FixedSlots([4, 5])
    pool = DesktopPool(backend, SandboxSpec(run_id=0, egress=False), 1, slots).start()
    try:
        assert pool.wait_full(180)
        claimed = pool.claim(SandboxSpec(run_id=new_run_id(), egress=False))
        assert claimed is not None
        slot = claimed.token
        opened = gate(claimed.sandbox)

        claimed.finish()

        assert slot not in slots.free  # stopped, not yet reclaimed: the slot is held
        opened.set()
        assert reclaims_wait(30)
        assert slot in slots.free
        assert pool.wait_full(180)
    finally:
        for each in GATES:
            each.set()
        pool.close()  # destroys the idle one and waits for its reclaim
    labels = {"label": f"arena.host={backend.host}"}
    assert client.containers.list(all=True, filters=labels) == []
    assert sorted(slots.free) == [4, 5]
    assert list(sandbox_root.glob("run-*")) == []
    backend.close()
    client.close()
