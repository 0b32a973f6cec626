"""The warm desktop pool, for real: pre-booted desktops (both bubblewrap sandboxes,
Xvfb, Chromium) that a run claims, makes its own and destroys; never one that served
a run before, never one of another screen or bounds, never a dead one."""

import os
import shutil
import signal
import tempfile
import urllib.parse
from pathlib import Path

import django_rq
import pytest
from django.conf import settings

from sandboxes.base import SandboxSpec
from sandboxes.cgroups import CPU_WEIGHT
from sandboxes.egress import EgressProxy
from sandboxes.local_backend import LocalBackend
from sandboxes.models import SandboxLease
from sandboxes.pool import (
    DesktopPool,
    FixedSlots,
    boot_key,
    desktop_pool_start,
    desktop_pool_stop,
    pool_template,
)
from sandboxes.rundir import DISPLAY_UID_OFFSET
from sandboxes.services import lane_sandbox_spec, sandbox_session
from tests.processes import live_processes
from tests.servers import ServerProcess, child_env, wait_for_child_sessions_to_end, worker_command

UID_BASE = settings.ARENA.sandbox_uid_base
TEMPLATE = SandboxSpec(run_id=0, shell_timeout_s=5)
SLOTS = [50, 51, 52]


def page(title: str) -> str:
    return "data:text/html," + urllib.parse.quote(f"<title>{title}</title><h1>{title}</h1>")


@pytest.fixture(scope="module")
def proxy():
    refusals: list[tuple[int, str, str]] = []

    async def no_dial(address, port):
        raise AssertionError("nothing is public here")

    egress = EgressProxy(
        resolver=lambda host, port: [],
        dialer=no_dial,
        on_refusal=lambda *record: refusals.append(record),
    ).run_in_thread()
    egress.refusals = refusals
    yield egress
    egress.close()


@pytest.fixture(scope="module")
def pool(proxy):
    root = Path(tempfile.mkdtemp(prefix="arena-test-pool-", dir="/var/tmp"))
    root.chmod(0o711)
    forgotten: list[int] = []
    backend = LocalBackend(root, uid_base=UID_BASE, egress=proxy)
    warm = DesktopPool(
        backend, TEMPLATE, 1, FixedSlots(list(SLOTS)), forget_identity=forgotten.append
    ).start()
    warm.forgotten = forgotten
    assert warm.wait_full(120)
    yield warm
    warm.close()
    shutil.rmtree(root, ignore_errors=True)


def _uids(box) -> tuple[int, ...]:
    return tuple(u for u in (box.uid, box.display_uid) if u is not None)


def test_a_pooled_desktop_carries_nothing_of_the_run_before(pool, proxy):
    first = pool.claim(SandboxSpec(run_id=901, shell_timeout_s=5, start_url=page("first-run")))
    assert first is not None
    box = first.sandbox
    # The run's own start page, spec and egress identity.
    assert box.page_state()["title"] == "first-run"
    assert box.spec.run_id == 901
    assert box.shell("echo secret > /work/left; echo secret > /tmp/left; echo x > ~/left").ok
    refused = box.shell("curl -s -m 5 -o /dev/null -w '%{http_code}' http://10.0.0.1/")
    assert refused.stdout == "403"
    assert {r[0] for r in proxy.refusals} == {901}
    assert pool.forgotten and all(identity < 0 for identity in pool.forgotten)
    old_dir, old_uids = box.run_dir, _uids(box)
    old_work, old_profile = os.stat(box.work_dir).st_dev, os.stat(box.run_dir / "display").st_dev
    first.finish()
    # Destroyed, not returned to the pool: nothing of it runs or remains.
    assert not old_dir.exists()
    assert live_processes(*old_uids) == []
    assert proxy.counters(901) == {}

    assert pool.wait_full(120)
    second = pool.claim(SandboxSpec(run_id=902, shell_timeout_s=5, start_url=page("second-run")))
    assert second is not None
    try:
        box = second.sandbox
        assert box.run_dir != old_dir
        assert box.page_state()["title"] == "second-run"
        # The first run's files are nowhere: its work dir, /tmp and home were its own.
        assert box.shell("ls -A /work").stdout == ""
        assert box.shell("ls -A /tmp").stdout == ""
        assert box.shell("ls -A ~").stdout == "Downloads\n"
        # Fresh quota filesystems (and, as a root worker, another slot's uids).
        assert os.stat(box.work_dir).st_dev != old_work
        assert os.stat(box.run_dir / "display").st_dev != old_profile
        if os.geteuid() == 0:
            assert set(_uids(box)).isdisjoint(old_uids)
        # Chromium's profile knows nothing of the first run's pages.
        profile = box.run_dir / "display" / "tmp" / "browser-profile"
        assert profile.is_dir()
        for path in profile.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert b"first-run" not in path.read_bytes(), path
        # Its egress identity is its own: the first run's refusals are not its.
        box.shell("curl -s -m 5 -o /dev/null http://10.0.0.2/")
        assert [r[0] for r in proxy.refusals if "10.0.0.2" in r[1]] == [902]
        assert {r[0] for r in proxy.refusals if "10.0.0.1" in r[1]} == {901}
    finally:
        second.finish()


def _cpu_weights(box) -> set[str]:
    """The CPU weight knob's values of the sandbox's groups (none without a cpu group)."""
    if box.cgroup is None or box.cgroup.version not in CPU_WEIGHT:
        return set()
    knob = CPU_WEIGHT[box.cgroup.version][0]
    return {(d / knob).read_text().strip() for d in box.cgroup.directories if (d / knob).exists()}


def test_an_idle_desktop_yields_the_cpu_until_a_run_claims_it(pool):
    assert pool.wait_full(120)
    idle = pool._idle[0].sandbox
    weights = _cpu_weights(idle)
    if not weights:
        pytest.skip("no cpu cgroup for sandboxes on this host")
    _, default, background = CPU_WEIGHT[idle.cgroup.version]
    assert weights == {background}
    claimed = pool.claim(SandboxSpec(run_id=906, shell_timeout_s=5))
    assert claimed is not None and claimed.sandbox is idle
    try:
        assert _cpu_weights(idle) == {default}  # as a cold start's: the run's full share
    finally:
        claimed.finish()


@pytest.mark.parametrize(
    "changes",
    [
        {"width": 1024, "height": 768},
        {"memory_mb": 1024},
        {"shell_timeout_s": 20},
        {"disk_bytes": 256 * 1024**2},
        {"desktop": False},
    ],
)
def test_a_run_booted_otherwise_starts_cold(pool, changes):
    assert pool.wait_full(120)
    spec = SandboxSpec(run_id=903, **{"shell_timeout_s": 5, **changes})
    assert boot_key(spec) != pool.key
    assert pool.claim(spec) is None
    assert pool.idle() == 1  # still there for a run it fits


def test_a_dead_idle_desktop_is_never_served(pool):
    assert pool.wait_full(120)
    dead = pool._idle[0].sandbox
    for proc in dead._procs():
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    claimed = pool.claim(SandboxSpec(run_id=904, shell_timeout_s=5))
    if claimed is not None:  # the pool's thread replaced it first
        assert claimed.sandbox is not dead and claimed.sandbox.health()["ok"]
        claimed.finish()
    assert pool.wait_full(120)
    assert not dead.run_dir.exists()
    assert pool._idle[0].sandbox.health()["ok"]


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_forked_process_gets_no_pooled_desktop(pool):
    assert pool.wait_full(120)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a forked work horse: the pool's desktops are its parent's
        os.write(write, b"none" if pool.claim(SandboxSpec(run_id=905)) is None else b"some")
        os._exit(0)
    os.waitpid(child, 0)
    assert os.read(read, 8) == b"none"
    os.close(read)
    os.close(write)
    assert pool.idle() == 1


@pytest.mark.django_db(transaction=True)
def test_the_workers_pool_serves_sandbox_session_with_slot_leases(settings):
    assert desktop_pool_start(size=0) is None  # 0 turns it off
    pool = desktop_pool_start(size=1)
    try:
        assert pool is not None and pool.wait_full(120)
        # The pooled desktop holds a slot lease like any live sandbox, with no run yet.
        idle = SandboxLease.objects.get(released_at=None)
        assert idle.run_id is None and idle.worker_pid == os.getpid()
        assert idle.path == str(pool._idle[0].sandbox.run_dir)
        spec = SandboxSpec(run_id=None, start_url=page("lane"), **_lane_fields(settings))
        with sandbox_session(spec) as box:
            assert pool.stats["claimed"] == 1
            assert box.page_state()["title"] == "lane"
            assert str(box.run_dir) == idle.path
        assert not box.run_dir.exists()
        idle.refresh_from_db()
        assert idle.released_at is not None
        assert pool.wait_full(120)  # refilled in the background
    finally:
        desktop_pool_stop()
    assert SandboxLease.objects.filter(released_at=None).count() == 0
    slots = SandboxLease.objects.values_list("slot", flat=True)
    base = settings.ARENA.sandbox_uid_base
    assert (
        live_processes(*[base + s for s in slots], *[base + DISPLAY_UID_OFFSET + s for s in slots])
        == []
    )


def _lane_fields(settings) -> dict:
    """The fields ``run_lane`` sets from the settings, as the pool's template has them."""
    arena = settings.ARENA
    fields = {
        "shell_timeout_s": arena.shell_timeout_s,
        "output_max_bytes": arena.shell_output_max_bytes,
        "disk_bytes": arena.sandbox_disk_bytes,
        "disk_inodes": arena.sandbox_disk_inodes,
        "display_disk_bytes": arena.sandbox_display_disk_bytes,
    }
    assert boot_key(SandboxSpec(run_id=0, **fields)) == boot_key(pool_template())
    # The one builder of a lane's spec gives the pool's boot key whatever the run's fields.
    lane = lane_sandbox_spec(run_id=7, start_url=page("x"), lifetime_s=60)
    assert boot_key(lane) == boot_key(pool_template()) and lane.desktop == arena.sandbox_desktop
    return fields


def job_takes_a_pooled_desktop() -> dict:
    """A battles job, run by a PoolWorker in its own process: once the worker's pool is
    full, a lane's sandbox session gets one of its desktops."""
    from sandboxes import pool as pool_module

    assert pool_module._pool is not None and pool_module._pool.wait_full(120)
    spec = SandboxSpec(run_id=None, start_url=page("job"), **_lane_fields(settings))
    with sandbox_session(spec) as box:
        title = box.page_state()["title"]
        lease = SandboxLease.objects.get(released_at=None, path=str(box.run_dir))
    return {
        "claimed": pool_module._pool.stats["claimed"],
        "title": title,
        "pid": os.getpid(),
        "lease_pid": lease.worker_pid,
    }


@pytest.mark.django_db(transaction=True)
def test_a_pool_worker_serves_its_jobs_from_its_own_pool(sandbox_root, tmp_path):
    queue = django_rq.get_queue("battles")
    job = queue.enqueue("tests.sandboxes.test_pool.job_takes_a_pooled_desktop")
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    env["ARENA_SANDBOX_POOL_SIZE"] = "1"
    argv = worker_command("battles", burst=True)
    argv[argv.index("rq.worker.SimpleWorker")] = "sandboxes.pool.PoolWorker"
    worker = ServerProcess.start("rqworker-pool", argv, env, tmp_path / "logs")
    try:
        returncode = worker.wait(timeout=240)
    finally:
        worker.stop()
        wait_for_child_sessions_to_end()
    assert returncode == 0, worker.tail()
    job.refresh()
    assert job.return_value() == {
        "claimed": 1,
        "title": "job",
        "pid": worker.popen.pid,
        "lease_pid": worker.popen.pid,
    }, worker.tail()
    # The worker destroyed its pool on the way out: no slot held, nothing running.
    assert SandboxLease.objects.filter(released_at=None).count() == 0
    base = settings.ARENA.sandbox_uid_base
    slots = list(SandboxLease.objects.values_list("slot", flat=True))
    assert 1 <= len(slots) <= 2  # the desktop the job had (and its replacement, if begun)
    uids = [base + s for s in slots] + [base + DISPLAY_UID_OFFSET + s for s in slots]
    assert live_processes(*uids) == []
