"""The docker backend. Against a fake Engine API (no engine runs here): what the SDK
asks the engine for, container by container, and how the host side (control socket,
framebuffer, work dir, egress socket) behaves. Against a real engine, marked
``docker_engine``: skipped unless ``ARENA_DOCKER_TESTS=1`` and an engine answers."""

import io
import json
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

import docker
import pytest
from PIL import Image

from sandboxes import disk, docker_backend, seccomp
from sandboxes.base import SandboxSpec
from sandboxes.docker_backend import DEFAULT_IMAGE, DockerBackend, janitor, sandbox_uid
from sandboxes.egress import EgressProxy
from sandboxes.tools import tool_call
from tests.sandboxes.fake_engine import FakeEngine, FakeSupervisor

IMAGE = "agent-arena-desktop:test"
UID_BASE = 61000
SPEC = SandboxSpec(run_id=7, memory_mb=512, pids=128, cpu_fraction=0.5, width=64, height=48)
HOST_DIRS = {"/work": "work", "/fb": "fb", "/run/arena": "ctl"}


@pytest.fixture
def supervisors():
    return {}


@pytest.fixture
def engine(sandbox_root, supervisors):
    with FakeEngine(
        sandbox_root / "engine.sock", images={IMAGE}, on_start=FakeSupervisor.on_start(supervisors)
    ) as fake:
        yield fake


@pytest.fixture
def make_backend(engine, sandbox_root):
    made = []

    def make(**kwargs) -> DockerBackend:
        backend = DockerBackend(
            IMAGE, sandbox_root, UID_BASE, client_factory=engine.client, **kwargs
        )
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def provision(make_backend):
    """Provisions with a fresh backend and destroys whatever it made at teardown."""
    boxes = []

    def run(spec: SandboxSpec = SPEC, slot: int = 2, **backend_kwargs):
        box = make_backend(**backend_kwargs).provision(spec, slot=slot)
        boxes.append(box)
        return box

    yield run
    for box in boxes:
        box.destroy()


@pytest.fixture
def refusals():
    return []


@pytest.fixture
def egress(refusals):
    proxy = EgressProxy(on_refusal=lambda *refusal: refusals.append(refusal)).run_in_thread()
    yield proxy
    proxy.close()


def create_body(engine: FakeEngine) -> dict:
    [call] = engine.calls_to("POST", "/containers/create")
    return call.body


# -- what the engine is asked for ------------------------------------------------------


def test_container_is_locked_down(engine, provision):
    box = provision()

    body = create_body(engine)
    host = body["HostConfig"]
    assert body["Image"] == IMAGE
    assert not host.get("Privileged")
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    # the arena's deny list as the container's seccomp profile (sandboxes.seccomp)
    assert host["SecurityOpt"] == [
        "no-new-privileges",
        f"seccomp={seccomp.docker_profile(seccomp.BROWSER)}",
    ]
    assert host["Memory"] == host["MemorySwap"] == 512 * 1024**2
    assert host["PidsLimit"] == 128
    assert host["NanoCpus"] == 500_000_000
    assert host["NetworkMode"] == "none"
    assert host["IpcMode"] == "private"
    assert host["Init"] is True
    assert not host.get("AutoRemove")
    assert not host.get("Binds") and not host.get("Devices") and not host.get("VolumesFrom")
    assert host.get("PidMode", "") == "" and host.get("UsernsMode", "") == ""
    assert set(host["Tmpfs"]) == {"/tmp", "/home/agent"}
    assert host["Tmpfs"]["/tmp"] == f"rw,nosuid,nodev,size={SPEC.disk_bytes},nr_inodes=65536"
    assert "uid=61002,gid=61002,mode=0700" in host["Tmpfs"]["/home/agent"]
    # the user is the slot's own, never root (this test worker is root)
    assert body["User"] == "61002:61002"
    assert box.shell("id").ok


def test_only_the_run_dir_is_mounted_never_the_engine_socket(engine, provision):
    box = provision()

    mounts = create_body(engine)["HostConfig"]["Mounts"]
    assert all(m["Type"] == "bind" for m in mounts)
    assert not any("docker.sock" in m["Source"] for m in mounts)
    by_target = {m["Target"]: m for m in mounts}
    assert set(by_target) == {*HOST_DIRS, "/etc/passwd", "/etc/group"}
    for target, sub in HOST_DIRS.items():
        assert by_target[target]["Source"] == str(box.run_dir / sub)
        assert by_target[target]["ReadOnly"] is False
    assert by_target["/etc/passwd"]["ReadOnly"] and by_target["/etc/group"]["ReadOnly"]
    assert (box.run_dir / "etc" / "passwd").read_text() == (
        "agent:x:61002:61002:agent:/home/agent:/bin/sh\n"
    )
    assert {os.stat(box.run_dir / sub).st_uid for sub in HOST_DIRS.values()} == {61002}
    assert os.stat(box.run_dir).st_mode & 0o777 == 0o700
    if disk.can_mount():  # /work is a tmpfs quota of its own, gone with the sandbox
        assert disk.mounts_under(box.run_dir) == [box.run_dir / "work"]
        box.destroy()
        assert disk.mounts_under(box.run_dir) == [] and not box.run_dir.exists()


def test_labels_name_and_command(engine, provision):
    box = provision()

    [call] = engine.calls_to("POST", "/containers/create")
    assert re.fullmatch(r"arena-run-7-2-[0-9a-f]{6}", call.query["name"][0])
    assert call.body["Labels"] == {
        "arena.sandbox": "1",
        "arena.run": "7",
        "arena.slot": "2",
        "arena.host": socket.gethostname(),
        "arena.dir": str(box.run_dir),
    }
    [config] = call.body["Cmd"]
    assert json.loads(config) == {
        "role": "all",
        "desktop": True,
        "width": 64,
        "height": 48,
        "start_url": "",
        "shell_timeout_s": 20,
        "output_max_bytes": 65536,
        "shell_limits": {
            "RLIMIT_CPU": 21,
            "RLIMIT_FSIZE": 256 * 1024**2,
            "RLIMIT_NPROC": 64,
            "RLIMIT_NOFILE": 1024,
        },
        "self_limits": {
            "RLIMIT_FSIZE": 256 * 1024**2,
            "RLIMIT_NPROC": 128,
            "RLIMIT_NOFILE": 16384,
        },
    }
    assert call.body["Hostname"] == "sandbox" and call.body["WorkingDir"] == "/work"
    # created and started, never pulled, no network made or joined
    assert len(engine.calls_to("POST", r"/containers/[0-9a-f]+/start")) == 1
    assert engine.calls_to("POST", r"/images/create") == []
    assert [c for c in engine.calls if c.path.startswith("/networks")] == []


def test_egress_reaches_only_the_proxy_socket(engine, egress, refusals, provision, supervisors):
    box = provision(egress=egress)

    body = create_body(engine)
    assert body["HostConfig"]["NetworkMode"] == "none"
    assert "http_proxy=http://127.0.0.1:3128" in body["Env"]
    assert supervisors[box.container.name].saw_egress_socket
    # The socket is this run's listener of the filtering proxy: a private address is
    # refused, and the refusal is the run's.
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(box.run_dir / "ctl" / "egress.sock"))
        conn.sendall(b"CONNECT 10.0.0.1:443 HTTP/1.1\r\nHost: 10.0.0.1:443\r\n\r\n")
        assert conn.recv(100).startswith(b"HTTP/1.1 403")
    assert [r[0] for r in refusals] == [7]

    box.destroy()
    assert 7 not in egress.proxy._sandboxes  # released (the proxy has no public query)


def test_without_egress_there_is_no_way_out(engine, egress, provision, supervisors):
    box = provision(SandboxSpec(run_id=8, egress=False), egress=egress)

    body = create_body(engine)
    assert body["HostConfig"]["NetworkMode"] == "none"
    assert not any("proxy" in var.lower() for var in body["Env"])
    assert not supervisors[box.container.name].saw_egress_socket
    assert not (box.run_dir / "ctl" / "egress.sock").exists()


def test_a_non_root_worker_runs_sandboxes_as_itself(monkeypatch):
    monkeypatch.setattr(docker_backend.os, "geteuid", lambda: 1234)
    assert sandbox_uid(UID_BASE, 5) == 1234
    monkeypatch.setattr(docker_backend.os, "geteuid", lambda: 0)
    assert sandbox_uid(UID_BASE, 5) == 61005


# -- the tools, through the bound dirs -------------------------------------------------


def test_tools_reach_the_supervisor_through_the_control_socket(provision, supervisors, tmp_path):
    box = provision()
    supervisor = supervisors[box.container.name]

    shell = tool_call(box, "shell", {"command": "echo hi"}, deliver_dir=tmp_path)
    click = tool_call(box, "click", {"x": 10, "y": 20, "count": 2}, deliver_dir=tmp_path)
    navigate = tool_call(box, "navigate", {"url": "https://example.com/"}, deliver_dir=tmp_path)

    assert shell.ok and shell.stdout == "ran: echo hi\n" and shell.exit_code == 0
    assert click.ok and navigate.ok and navigate.data["title"] == "Fake"
    assert [r["op"] for r in supervisor.requests] == ["shell", "input", "navigate"]
    assert supervisor.requests[0]["timeout_s"] == SPEC.shell_timeout_s
    argv = ["mousemove", "10", "20", "click", "--repeat", "2", "--delay", "60", "1"]
    assert supervisor.requests[1]["argv"] == argv


def test_screenshot_reads_the_bound_framebuffer(provision, tmp_path):
    box = provision()

    result = tool_call(box, "screenshot", {}, deliver_dir=tmp_path)

    assert result.ok and result.data == {"width": 64, "height": 48}
    image = Image.open(io.BytesIO(result.image))
    assert image.format == "PNG" and image.getpixel((3, 3)) == (200, 30, 30)


def test_deliver_copies_out_of_the_bound_work_dir_safely(provision, tmp_path):
    box = provision()
    (box.work_dir / "out").mkdir()
    (box.work_dir / "out" / "r.txt").write_text("data")
    os.symlink("/etc/hostname", box.work_dir / "link")

    ok = tool_call(box, "deliver", {"message": "m", "files": ["out/r.txt"]}, deliver_dir=tmp_path)
    refused = tool_call(box, "deliver", {"message": "m", "files": ["link"]}, deliver_dir=tmp_path)

    assert ok.ok and ok.data["files"][0]["name"] == "r.txt"
    assert (tmp_path / "r.txt").read_text() == "data"
    assert not refused.ok and "link" in refused.error


def test_a_control_socket_swapped_for_a_symlink_is_not_dialled(provision, tmp_path):
    box = provision()
    decoy_path = Path(tempfile.mkdtemp(dir="/tmp")) / "decoy.sock"
    decoy = socket.socket(socket.AF_UNIX)
    decoy.bind(str(decoy_path))
    decoy.listen()
    decoy.setblocking(False)
    try:
        # The agent owns /run/arena: it replaces the socket, then forces a reconnect.
        box.client.close()
        ctl = box.run_dir / "ctl" / "ctl.sock"
        ctl.unlink()
        ctl.symlink_to(decoy_path)

        result = tool_call(box, "shell", {"command": "true"}, deliver_dir=tmp_path)

        assert not result.ok
        with pytest.raises(BlockingIOError):
            decoy.accept()
    finally:
        decoy.close()
        shutil.rmtree(decoy_path.parent)


# -- teardown, failures, health --------------------------------------------------------


def test_destroy_removes_the_container_by_force_once(engine, provision):
    box = provision()
    container_id = box.container.id

    box.destroy()
    box.destroy()

    [delete] = engine.calls_to("DELETE", r"/containers/[0-9a-f]+")
    assert delete.path == f"/containers/{container_id}"
    assert delete.query["force"] == ["True"]
    assert engine.containers == {}
    assert not box.run_dir.exists()
    assert not tool_call(box, "shell", {"command": "x"}, deliver_dir=box.run_dir).ok


def test_destroy_of_a_container_already_gone_is_fine(engine, provision):
    box = provision()
    engine.containers.clear()  # removed behind our back (say, by the janitor)

    box.destroy()

    assert len(engine.calls_to("DELETE", r"/containers/[0-9a-f]+")) == 1
    assert not box.run_dir.exists()


def test_missing_image_is_a_clear_error_and_leaves_nothing(engine, make_backend, sandbox_root):
    backend = DockerBackend(
        "agent-arena-desktop:missing", sandbox_root, UID_BASE, client_factory=engine.client
    )
    try:
        with pytest.raises(RuntimeError, match="docker build -f sandboxes/docker/Dockerfile"):
            backend.provision(SPEC, slot=0)
    finally:
        backend.close()

    assert engine.containers == {}
    assert engine.calls_to("POST", r"/images/create") == []
    assert list(sandbox_root.glob("run-*")) == []


def test_a_container_that_dies_while_starting_is_removed(engine, make_backend, sandbox_root):
    def crash(container):
        container.status = "exited"
        container.exit_code = 1
        container.logs = b"supervisor: Xvfb did not start\n"

    engine.on_start = crash

    with pytest.raises(RuntimeError, match=r"exit code 1\): supervisor: Xvfb did not start"):
        make_backend().provision(SPEC, slot=0)

    assert engine.containers == {}
    [delete] = engine.calls_to("DELETE", r"/containers/[0-9a-f]+")
    assert delete.query["force"] == ["True"]
    assert list(sandbox_root.glob("run-*")) == []


def test_a_container_that_never_gets_ready_times_out(engine, make_backend, sandbox_root):
    engine.on_start = lambda container: None

    with pytest.raises(RuntimeError, match=r"not ready within 0\.3 s"):
        make_backend(provision_timeout_s=0.3).provision(SPEC, slot=0)

    assert engine.containers == {}
    assert list(sandbox_root.glob("run-*")) == []


@pytest.mark.parametrize("option", ["name=rootless", "name=userns"])
def test_remapped_engines_are_refused(engine, make_backend, sandbox_root, option):
    engine.info = {"SecurityOptions": ["name=seccomp,profile=builtin", option]}

    with pytest.raises(RuntimeError, match="rootful engine"):
        make_backend().provision(SPEC, slot=0)

    assert engine.calls_to("POST", "/containers/create") == []
    assert list(sandbox_root.glob("run-*")) == []


def test_seccomp_profile_is_passed_when_configured(engine, provision):
    provision(seccomp_profile='{"defaultAction": "SCMP_ACT_ERRNO"}')

    assert create_body(engine)["HostConfig"]["SecurityOpt"] == [
        "no-new-privileges",
        'seccomp={"defaultAction": "SCMP_ACT_ERRNO"}',
    ]


def test_health_checks_engine_and_image(engine, make_backend, sandbox_root):
    assert make_backend().health() == {"backend": "docker", "image": IMAGE, "ok": True}

    missing = DockerBackend("nope", sandbox_root, UID_BASE, client_factory=engine.client)
    report = missing.health()
    missing.close()
    assert not report["ok"] and "build it" in report["error"]

    # An engine that never answers: it listens, nothing accepts.
    with socket.socket(socket.AF_UNIX) as silent:
        silent.bind(str(sandbox_root / "silent.sock"))
        silent.listen()
        mute = DockerBackend(
            IMAGE,
            sandbox_root,
            UID_BASE,
            client_factory=lambda: docker.DockerClient(
                base_url=f"unix://{sandbox_root}/silent.sock", version="1.45", timeout=0.2
            ),
        )
        report = mute.health()
        mute.close()
    assert not report["ok"] and "does not answer" in report["error"]


def test_sandbox_health_follows_the_container(engine, provision):
    box = provision()
    assert box.health()["ok"]

    engine.find(box.container.id).status = "exited"

    assert box.health() == {"ok": False, "container": box.container.name, "status": "exited"}


# -- the janitor -----------------------------------------------------------------------


def test_janitor_removes_only_this_hosts_orphans(engine, sandbox_root):
    here, there = socket.gethostname(), "other-host"
    orphan_dir = sandbox_root / "run-2-0-abcd"
    (orphan_dir / "work").mkdir(parents=True)
    outside = Path(tempfile.mkdtemp(prefix="run-", dir="/tmp"))
    live = engine.add_container(
        "live", {"arena.sandbox": "1", "arena.host": here, "arena.run": "1"}
    )
    orphan = engine.add_container(
        "orphan",
        {"arena.sandbox": "1", "arena.host": here, "arena.run": "2", "arena.dir": str(orphan_dir)},
        status="exited",
    )
    no_run = engine.add_container(
        "no-run",
        {"arena.sandbox": "1", "arena.host": here, "arena.run": "None", "arena.dir": str(outside)},
    )
    elsewhere = engine.add_container(
        "elsewhere", {"arena.sandbox": "1", "arena.host": there, "arena.run": "3"}
    )
    unrelated = engine.add_container("unrelated", {"arena.host": here, "arena.run": "4"})
    asked = []

    def is_live(run_id):
        asked.append(run_id)
        return run_id == 1

    client = engine.client()
    try:
        removed = janitor(client, here, is_live, root=sandbox_root)
    finally:
        client.close()

    assert removed == 2
    assert set(engine.containers) == {live.id, elsewhere.id, unrelated.id}
    assert {c.path for c in engine.calls_to("DELETE", ".*")} == {
        f"/containers/{orphan.id}",
        f"/containers/{no_run.id}",
    }
    assert all(c.query["force"] == ["True"] for c in engine.calls_to("DELETE", ".*"))
    assert sorted(asked, key=str) == [1, 2, None]
    [listing] = engine.calls_to("GET", "/containers/json")
    assert listing.query["all"] == ["1"]
    assert json.loads(listing.query["filters"][0]) == {
        "label": ["arena.sandbox=1", f"arena.host={here}"]
    }
    assert not orphan_dir.exists()
    assert outside.exists()  # a labelled dir outside the root is never removed
    outside.rmdir()


def test_janitor_leaves_a_sandbox_of_a_live_run(engine, provision):
    box = provision()
    client = engine.client()
    try:
        assert janitor(client, socket.gethostname(), lambda run_id: run_id == 7) == 0
    finally:
        client.close()
    assert box.health()["ok"]


# -- a real engine -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_client():
    if os.environ.get("ARENA_DOCKER_TESTS") != "1":
        pytest.skip("set ARENA_DOCKER_TESTS=1 where a Docker engine runs")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        pytest.skip(f"no Docker engine answers: {exc}")
    yield client
    client.close()


@pytest.fixture
def real_backend(real_client, sandbox_root):
    image = os.environ.get("ARENA_DOCKER_IMAGE", DEFAULT_IMAGE)
    with EgressProxy().run_in_thread() as proxy:
        backend = DockerBackend(
            image, sandbox_root, UID_BASE, egress=proxy, client_factory=lambda: real_client
        )
        yield backend


@pytest.mark.docker_engine
def test_real_container_runs_unprivileged_with_no_network(real_backend, tmp_path):
    box = real_backend.provision(SandboxSpec(run_id=901, desktop=False, shell_timeout_s=10), slot=1)
    try:
        result = box.shell(
            "id -u; ls /sys/class/net; touch /etc/x 2>&1 || echo read-only; "
            "ls /run/arena; printf data > /work/out.txt; grep CapEff /proc/self/status"
        )
        lines = result.stdout.split()
        assert result.ok, result
        assert lines[0] == str(sandbox_uid(UID_BASE, 1)) != "0"
        assert "lo" in lines and "eth0" not in lines
        assert "read-only" in lines
        assert "ctl.sock" in lines and "egress.sock" in lines
        assert "0000000000000000" in lines
        [delivered] = box.collect_files(["out.txt"], tmp_path)
        assert delivered.size == 4
        refused = box.shell("curl -sS -o /dev/null https://10.0.0.1/ 2>&1")
        assert "403" in refused.stdout
    finally:
        box.destroy()
    with pytest.raises(docker.errors.NotFound):
        real_backend.client().containers.get(box.container.id)
    assert not box.run_dir.exists()


@pytest.mark.docker_engine
def test_real_desktop_screenshot(real_backend):
    box = real_backend.provision(SandboxSpec(run_id=902, start_url="about:blank"), slot=2)
    try:
        result = box.screenshot()
        assert result.ok and result.data == {"width": 1280, "height": 800}
        assert box.shell("ps -eo args").stdout.count("/usr/lib/chromium/chromium") >= 1
    finally:
        box.destroy()


@pytest.mark.docker_engine
def test_real_janitor_removes_an_orphan(real_backend, sandbox_root):
    box = real_backend.provision(SandboxSpec(run_id=903, desktop=False), slot=3)
    try:
        removed = janitor(
            real_backend.client(),
            socket.gethostname(),
            lambda run_id: run_id != 903,  # only ours: other sandboxes may run here
            root=sandbox_root,
        )
        assert removed == 1
        with pytest.raises(docker.errors.NotFound):
            real_backend.client().containers.get(box.container.id)
        assert not box.run_dir.exists()
    finally:
        box.destroy()


def test_the_arena_picks_the_docker_backend_from_settings(settings, sandbox_root):
    from sandboxes import services
    from sandboxes.docker_backend import DockerBackend

    settings.ARENA = settings.ARENA.replace(sandbox_backend="docker", sandbox_root=sandbox_root)
    backend = services.sandbox_backend()
    assert isinstance(backend, DockerBackend)
    assert backend.image == settings.ARENA.docker_image
