"""The docker backend, on this checkout's private Docker engine (``scripts/docker.sh``,
started once per session by ``tests.docker_engine``) with its desktop image (the
self-contained one, or the one that binds the host's /usr: the tests say where they
differ): what a container really is (the engine's own inspection and what runs inside),
the host side (control socket, framebuffer, work dir, egress socket), teardown,
and the janitor, also after a worker is SIGKILLed.

Every test's containers carry a host label of their own (``own_host``) and run ids no
other test uses, so tests of several pytest processes sharing the engine never see each
other's containers. A fake Engine API (``tests/sandboxes/fake_engine.py``) stays for the
few cases a real engine cannot be made to produce; each such test says why."""

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import docker
import pytest
from django.conf import settings as django_settings

from sandboxes import cgroups, disk, docker_backend, seccomp
from sandboxes.base import SandboxSpec
from sandboxes.control import supervisor_config
from sandboxes.docker_backend import (
    DEFAULT_IMAGE,
    HOST_ETC,
    DockerBackend,
    janitor,
    sandbox_uid,
)
from sandboxes.docker_images import DEFAULT_CODING_IMAGE
from sandboxes.egress import EgressProxy
from sandboxes.local_backend import SANDBOX_TOOLCHAIN, TOOLCHAIN_DIR
from sandboxes.models import SandboxLease
from sandboxes.services import reclaims_wait, sandbox_janitor
from sandboxes.tools import tool_call
from tests.docker_engine import docker_engine  # noqa: F401 - the session fixture
from tests.sandboxes.fake_engine import FakeEngine, FakeSupervisor
from tests.servers import ROOT, child_env

IMAGE = "agent-arena-desktop:test"  # the fake engine's
UID_BASE = 61000  # the fake engine's (nothing runs under it)
SPEC = SandboxSpec(run_id=7, memory_mb=512, pids=128, cpu_fraction=0.5, width=64, height=48)
HOST_DIRS = {"/work": "work", "/run/arena": "ctl"}  # the agent's container's
DISPLAY_DIRS = {"/fb": "fb", "/run/arena": "display-ctl", "/home/display/Downloads": "downloads"}
OUR_LABELS = ("arena.sandbox", "arena.run", "arena.slot", "arena.host", "arena.dir", "arena.role")


def new_run_id() -> int:
    """A run id no other test uses, in this process or another sharing the engine."""
    return 10**9 + secrets.randbelow(10**9)


def own_host() -> str:
    """A host label of the test's own: its janitor never sees another test's containers."""
    return f"{socket.gethostname()}-test-{secrets.token_hex(4)}"


def real_uid_base() -> int:
    # The slot uids of this test process (ARENA_SANDBOX_UID_BASE): processes really run
    # under them, so they must not be another concurrent suite's.
    return django_settings.ARENA.sandbox_uid_base


def shell_spec(**fields) -> SandboxSpec:
    return SandboxSpec(
        **{"run_id": new_run_id(), "desktop": False, "shell_timeout_s": 10, **fields}
    )


ENGINE_GROUPS = cgroups.detect() == "v1"  # a run's containers bounded together


def engine_group_limits(box) -> tuple[int, int]:
    """The memory and pids limits of the group the run's containers sit in."""
    group = cgroups.CGROUP_ROOT / "{}" / cgroups.ENGINE_PARENT / box.run_dir.name
    memory = group.as_posix().format("memory") + "/memory.limit_in_bytes"
    pids = group.as_posix().format("pids") + "/pids.max"
    return int(Path(memory).read_text()), int(Path(pids).read_text())


def inspect(box, role: str = "agent") -> dict:
    box.containers[role].reload()
    return box.containers[role].attrs


def binds_host_usr(box) -> bool:
    """Whether the box runs the image that binds the host's /usr (``scripts/docker.sh
    image --host-usr``) rather than the self-contained one (the default)."""
    return inspect(box)["Config"]["Labels"].get("arena.binds-host-usr") == "1"


# -- the real engine -------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_client(docker_engine):  # noqa: F811
    client = docker.DockerClient(base_url=docker_engine)
    yield client
    client.close()


@pytest.fixture(scope="module")
def real_refusals():
    return []


@pytest.fixture(scope="module")
def real_egress(real_refusals):
    proxy = EgressProxy(on_refusal=lambda *refusal: real_refusals.append(refusal))
    with proxy.run_in_thread() as thread:
        yield thread


def _remove_all_of(client: docker.DockerClient, backend: DockerBackend) -> None:
    """What a test left on the engine: every container of its backend's host label."""
    janitor(client, backend.host, lambda run_id: False, root=backend.root)


@pytest.fixture
def real_backends(docker_engine, real_client, sandbox_root, real_egress):  # noqa: F811
    """Makes backends on the real engine, each with a host label of its own. At
    teardown it destroys the sandboxes they provisioned (their egress listeners too)
    and removes whatever else of theirs is on the engine."""
    made: list[DockerBackend] = []
    boxes = []

    def make(**kwargs) -> DockerBackend:
        kwargs = {"egress": real_egress, "host": own_host(), **kwargs}
        backend = DockerBackend(
            kwargs.pop("image", DEFAULT_IMAGE),
            sandbox_root,
            real_uid_base(),
            client_factory=lambda: docker.DockerClient(base_url=docker_engine),
            **kwargs,
        )
        provision = backend.provision

        def tracked(spec: SandboxSpec, *, slot: int = 0):
            box = provision(spec, slot=slot)
            boxes.append(box)
            return box

        backend.provision = tracked  # type: ignore[method-assign]
        made.append(backend)
        return backend

    yield make
    for box in boxes:
        box.destroy()
    assert reclaims_wait(60)  # (their containers removed before the clients close)
    for backend in made:
        _remove_all_of(real_client, backend)
        backend.close()


@pytest.fixture
def real_backend(real_backends):
    return real_backends()


@pytest.fixture(scope="module")
def shared_box(docker_engine, real_client, real_egress):  # noqa: F811
    """One shell-only sandbox that the checks which change nothing share (a container
    costs about a second)."""
    root = Path(tempfile.mkdtemp(prefix="arena-test-docker-", dir="/var/tmp"))
    root.chmod(0o711)
    backend = DockerBackend(
        DEFAULT_IMAGE,
        root,
        real_uid_base(),
        egress=real_egress,
        client_factory=lambda: docker.DockerClient(base_url=docker_engine),
        host=own_host(),
    )
    spec = shell_spec(memory_mb=512, pids=128, cpu_fraction=0.5)
    box = backend.provision(spec, slot=2)
    yield box
    box.destroy()
    assert reclaims_wait(60)
    _remove_all_of(real_client, backend)
    backend.close()
    shutil.rmtree(root, ignore_errors=True)


# -- what a container is ---------------------------------------------------------------


def test_container_is_locked_down(shared_box):
    box = shared_box
    uid = sandbox_uid(real_uid_base(), 2)

    attrs = inspect(box)
    host = attrs["HostConfig"]
    assert attrs["Config"]["Image"] == DEFAULT_IMAGE
    assert host["Privileged"] is False
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    # the arena's deny list as the container's seccomp profile (sandboxes.seccomp): the
    # agent's, which also denies every new namespace (Chromium is in the display's)
    assert host["SecurityOpt"] == [
        "no-new-privileges",
        f"seccomp={seccomp.docker_profile(seccomp.AGENT)}",
    ]
    assert host["Memory"] == host["MemorySwap"] == 512 * 1024**2
    assert host["PidsLimit"] == 128
    if ENGINE_GROUPS:  # the same limits for the run's containers together
        assert host["CgroupParent"] == f"/arena-docker/{box.run_dir.name}"
        assert engine_group_limits(box) == (512 * 1024**2, 128)
    assert host["NanoCpus"] == 500_000_000
    assert host["NetworkMode"] == "none"
    assert list(attrs["NetworkSettings"]["Networks"]) == ["none"]
    assert host["IpcMode"] == "private"
    assert host["Init"] is True
    assert host["AutoRemove"] is False
    assert not host["Binds"] and not host["Devices"] and not host["VolumesFrom"]
    assert host["PidMode"] == "" and host["UsernsMode"] == ""
    # (an empty /usr/local over the host's, where the image binds the host's /usr)
    usr_local = {"/usr/local"} if binds_host_usr(box) else set()
    assert set(host["Tmpfs"]) == {"/tmp", "/home/agent", *usr_local}
    assert host["Tmpfs"]["/tmp"] == f"rw,nosuid,nodev,size={SPEC.disk_bytes},nr_inodes=65536"
    assert f"uid={uid},gid={uid},mode=0700" in host["Tmpfs"]["/home/agent"]
    assert attrs["Config"]["User"] == f"{uid}:{uid}" != "0:0"

    # and inside: the slot's uid, no capabilities, no new privileges, only loopback,
    # nothing writable but its own dirs, no new user namespace
    result = box.shell(
        "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; ls /sys/class/net; "
        "unshare -U true 2>/dev/null || echo no-userns; "
        "touch /x 2>/dev/null || echo root-read-only; "
        "touch /usr/x 2>/dev/null || echo usr-read-only; "
        "touch /usr/local/x 2>/dev/null || echo usr-local-read-only; "
        "touch /tmp/x /home/agent/x /work/x && echo own-dirs-writable; rm /work/x"
    )
    assert result.ok, result
    assert result.stdout.splitlines() == [
        str(uid),
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "NoNewPrivs:\t1",
        "lo",
        "no-userns",
        "root-read-only",
        "usr-read-only",
        "usr-local-read-only",
        "own-dirs-writable",
    ]


def test_only_the_run_dir_and_the_hosts_usr_are_mounted(shared_box):
    box = shared_box
    uid = sandbox_uid(real_uid_base(), 2)

    mounts = {m["Destination"]: m for m in inspect(box)["Mounts"]}

    assert all(m["Type"] == "bind" for m in mounts.values())
    assert not any("docker.sock" in m["Source"] for m in mounts.values())
    host_usr = binds_host_usr(box)
    host_paths = {"/usr", *(p for p in HOST_ETC if os.path.exists(p))} if host_usr else set()
    assert set(mounts) == {*HOST_DIRS, "/etc/passwd", "/etc/group", *host_paths}
    for target, sub in HOST_DIRS.items():
        assert (mounts[target]["Source"], mounts[target]["RW"]) == (str(box.run_dir / sub), True)
    for target in ("/etc/passwd", "/etc/group", *host_paths):
        assert mounts[target]["RW"] is False, target
    # the image's own declaration asks for the host's /usr, or it has its own
    assert ("arena.binds-host-usr" in inspect(box)["Config"]["Labels"]) == host_usr
    assert (box.run_dir / "etc" / "agent-passwd").read_text() == (
        f"agent:x:{uid}:{uid}:agent:/home/agent:/bin/sh\n"
    )
    assert {os.stat(box.run_dir / sub).st_uid for sub in HOST_DIRS.values()} == {uid}
    assert os.stat(box.run_dir).st_mode & 0o777 == 0o700
    if disk.can_mount():  # /work and the control dir are tmpfs quotas of their own
        assert set(disk.mounts_under(box.run_dir)) == {box.run_dir / "work", box.run_dir / "ctl"}
        full = box.shell("head -c 2000000 /dev/zero > /run/arena/fill")
        assert "No space left on device" in full.stderr  # never the host's disk
        box.shell("rm -f /run/arena/fill")
    assert box.shell("ls -A /usr/local/bin; whoami").stdout == "agent\n"


def test_labels_name_and_command(shared_box):
    box = shared_box
    spec = box.spec

    attrs = inspect(box)

    assert re.fullmatch(rf"/arena-run-{spec.run_id}-2-[0-9a-f]{{6}}-agent", attrs["Name"])
    labels = attrs["Config"]["Labels"]
    assert {key: labels[key] for key in OUR_LABELS} == {
        "arena.sandbox": "1",
        "arena.run": str(spec.run_id),
        "arena.slot": "2",
        "arena.host": box.container.labels["arena.host"],
        "arena.dir": str(box.run_dir),
        "arena.role": "agent",
    }
    assert labels["arena.host"].startswith(socket.gethostname())
    assert list(box.containers) == ["agent"]  # no display: the agent's container alone
    [config] = attrs["Config"]["Cmd"]
    assert json.loads(config) == supervisor_config(spec, "agent")
    assert attrs["Config"]["Hostname"] == "sandbox"
    assert attrs["Config"]["WorkingDir"] == "/work"
    assert "http_proxy=http://127.0.0.1:3128" in attrs["Config"]["Env"]


def test_egress_reaches_only_the_proxy_socket(shared_box, real_refusals):
    box = shared_box

    via_proxy = box.shell("curl -sS -o /dev/null https://10.0.0.1/ 2>&1")
    direct = box.shell("curl -sS --noproxy '*' -o /dev/null http://10.0.0.1/ 2>&1; echo exit $?")

    # The supervisor's forwarder reached this run's listener of the filtering proxy,
    # which refused the private address and counted the refusal as the run's.
    assert "403" in via_proxy.stdout
    assert box.spec.run_id in [refusal[0] for refusal in real_refusals]
    assert (box.run_dir / "ctl" / "egress.sock").exists()
    # Around the proxy there is no route at all.
    assert "Couldn't connect to server" in direct.stdout and direct.stdout.endswith("exit 7\n")


def test_tools_and_deliveries_through_the_bound_dirs(shared_box, tmp_path):
    box = shared_box

    shell = tool_call(box, "shell", {"command": "echo hi"}, deliver_dir=tmp_path)
    box.shell("mkdir -p out && printf data > out/r.txt && ln -sf /etc/hostname link")
    ok = tool_call(box, "deliver", {"message": "m", "files": ["out/r.txt"]}, deliver_dir=tmp_path)
    refused = tool_call(box, "deliver", {"message": "m", "files": ["link"]}, deliver_dir=tmp_path)

    assert shell.ok and shell.stdout == "hi\n" and shell.exit_code == 0
    assert ok.ok and ok.data["files"][0]["name"] == "r.txt"
    assert (tmp_path / "r.txt").read_text() == "data"
    assert not refused.ok and "link" in refused.error


def test_a_coding_sandbox_has_the_toolchain_read_only_and_the_same_limits(real_backends):
    """A repo lane's and a judge's container (docs/coding.md) on an engine without the
    coding image: the toolchain bound read-only where the local backend binds it, its
    bin first on PATH, and the limits every container has."""
    spec = shell_spec(toolchain=True, memory_mb=512, pids=128, cpu_fraction=0.5)
    box = real_backends(coding_image="agent-arena-no-such-image").provision(spec, slot=1)

    attrs = inspect(box)
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    toolchain = mounts[SANDBOX_TOOLCHAIN]
    assert (toolchain["Source"], toolchain["RW"]) == (str(TOOLCHAIN_DIR), False)
    assert set(mounts) - {SANDBOX_TOOLCHAIN} >= {*HOST_DIRS, "/etc/passwd", "/etc/group"}
    assert f"PATH={SANDBOX_TOOLCHAIN}/bin:/usr/bin:/bin" in attrs["Config"]["Env"]
    host = attrs["HostConfig"]
    assert (host["Memory"], host["PidsLimit"], host["NanoCpus"]) == (512 * 1024**2, 128, 5 * 10**8)
    assert host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"]
    assert host["Tmpfs"]["/tmp"] == f"rw,nosuid,nodev,size={spec.disk_bytes},nr_inodes=65536"
    result = box.shell(
        "command -v ruff; command -v claude; cat /proc/1/comm; "
        "touch /opt/arena/toolchain/x 2>/dev/null || echo toolchain-read-only; "
        "ruff --version | cut -d' ' -f1"
    )
    assert result.stdout.splitlines() == [
        f"{SANDBOX_TOOLCHAIN}/bin/ruff",
        f"{SANDBOX_TOOLCHAIN}/bin/claude",
        "docker-init",  # (the judge's harness runs only under a sandbox's init)
        "toolchain-read-only",
        "ruff",
    ], result


def test_a_coding_sandbox_runs_from_the_coding_image_with_no_bind_of_the_toolchain(
    real_backends,
):
    """The coding image (scripts/docker.sh image --coding) carries the toolchain: the
    container binds nothing of the worker's var/toolchain, and the agents and the
    judge's tools run from the image as the slot's uid."""
    spec = shell_spec(toolchain=True, memory_mb=512, pids=128, cpu_fraction=0.5)
    box = real_backends(coding_image=DEFAULT_CODING_IMAGE).provision(spec, slot=1)

    attrs = inspect(box)
    sources = {m["Destination"]: m["Source"] for m in attrs["Mounts"]}
    assert attrs["Config"]["Image"] == DEFAULT_CODING_IMAGE
    assert attrs["Config"]["Labels"]["arena.toolchain"] == "1"  # (the image's)
    assert SANDBOX_TOOLCHAIN not in sources
    assert [s for s in sources.values() if s.startswith(str(TOOLCHAIN_DIR))] == []
    assert f"PATH={SANDBOX_TOOLCHAIN}/bin:/usr/bin:/bin" in attrs["Config"]["Env"]
    result = box.shell(
        "id -u; command -v claude; claude --version; codex --version; "
        f"aider --version | tail -1; PYTHONPATH={SANDBOX_TOOLCHAIN}/pylib python3 -m lizard "
        "--version; touch /opt/arena/toolchain/x 2>/dev/null || echo toolchain-read-only",
        timeout_s=90,
    )
    lines = result.stdout.splitlines()
    assert lines[:2] == [str(sandbox_uid(real_uid_base(), 1)), f"{SANDBOX_TOOLCHAIN}/bin/claude"]
    assert lines[2].endswith("(Claude Code)") and lines[3].startswith("codex-cli "), result
    assert lines[4].startswith("aider ") and re.fullmatch(r"\d+\.\d+\.\d+", lines[5]), result
    assert lines[6:] == ["toolchain-read-only"], result


def test_without_egress_there_is_no_way_out(real_backend):
    box = real_backend.provision(shell_spec(egress=False), slot=1)

    env = inspect(box)["Config"]["Env"]
    result = box.shell("curl -sS -o /dev/null http://10.0.0.1/ 2>&1; echo exit $?; ls /run/arena")

    assert not any("proxy" in var.lower() for var in env)
    assert not (box.run_dir / "ctl" / "egress.sock").exists()
    assert "Couldn't connect to server" in result.stdout
    assert result.stdout.endswith("exit 7\nctl.sock\n")


def test_a_control_socket_swapped_for_a_symlink_is_not_dialled(real_backend, tmp_path):
    box = real_backend.provision(shell_spec(), slot=1)
    decoy_path = Path(tempfile.mkdtemp(dir="/tmp")) / "decoy.sock"
    decoy = socket.socket(socket.AF_UNIX)
    decoy.bind(str(decoy_path))
    decoy.listen()
    decoy.setblocking(False)
    try:
        # The agent owns /run/arena: it replaces the socket with a link to a host path.
        swapped = box.shell(f"rm /run/arena/ctl.sock && ln -s {decoy_path} /run/arena/ctl.sock")
        assert swapped.ok, swapped
        box.client.close()  # the next call dials again

        result = tool_call(box, "shell", {"command": "true"}, deliver_dir=tmp_path)

        assert not result.ok
        with pytest.raises(BlockingIOError):
            decoy.accept()
    finally:
        decoy.close()
        shutil.rmtree(decoy_path.parent)


def display_processes(box) -> str:
    """The command lines in the display's container (the engine's ``top``)."""
    top = box.containers["display"].top(ps_args="-eo pid,args")
    return "\n".join(row[-1] for row in top["Processes"])


def test_desktop_screenshot_with_chromium_running(real_backend, tmp_path):
    box = real_backend.provision(shell_spec(desktop=True, start_url="about:blank"), slot=2)

    result = box.screenshot()
    clicked = tool_call(box, "click", {"x": 640, "y": 400}, deliver_dir=tmp_path)
    processes = display_processes(box)

    assert result.ok and result.data == {"width": 1280, "height": 800}
    assert result.image.startswith(b"\x89PNG")
    assert clicked.ok, clicked
    assert processes.count("/usr/lib/chromium/chromium") >= 2  # the browser and a renderer
    assert "Xvfb :0 -screen 0 1280x800x24" in processes
    assert "--no-sandbox" not in processes  # Chromium keeps its own sandbox


def test_a_desktop_is_two_containers_and_the_agents_has_nothing_of_the_display(real_backend):
    box = real_backend.provision(shell_spec(desktop=True, start_url="about:blank"), slot=3)
    agent, display = inspect(box, "agent"), inspect(box, "display")
    uid, display_uid = sandbox_uid(real_uid_base(), 3), sandbox_uid(real_uid_base(), 3, "display")

    # Each its own uid, profile, network (none), and run-dir parts.
    assert list(box.containers) == ["display", "agent"]
    assert (agent["Config"]["User"], display["Config"]["User"]) == (
        f"{uid}:{uid}",
        f"{display_uid}:{display_uid}",
    )
    assert display_uid != uid or os.geteuid() != 0
    assert display["HostConfig"]["SecurityOpt"][1] == (
        f"seccomp={seccomp.docker_profile(seccomp.BROWSER)}"
    )
    assert (
        agent["HostConfig"]["SecurityOpt"][1] == f"seccomp={seccomp.docker_profile(seccomp.AGENT)}"
    )
    if ENGINE_GROUPS:  # one group bounds both
        assert agent["HostConfig"]["CgroupParent"] == display["HostConfig"]["CgroupParent"]
        assert engine_group_limits(box) == (box.spec.memory_mb * 1024**2, box.spec.pids)
    for attrs in (agent, display):
        assert attrs["HostConfig"]["NetworkMode"] == "none"
        assert attrs["HostConfig"]["PidMode"] == "" and attrs["HostConfig"]["IpcMode"] == "private"
    assert display["Config"]["Labels"]["arena.role"] == "display"
    mounts = {m["Destination"]: m for m in display["Mounts"]}
    for target, sub in DISPLAY_DIRS.items():
        assert (mounts[target]["Source"], mounts[target]["RW"]) == (str(box.run_dir / sub), True)
    if binds_host_usr(box):  # input as XTEST events (the other image carries python-xlib)
        assert mounts["/opt/arena/pylib/Xlib"]["RW"] is False
    agent_mounts = {m["Destination"]: m for m in agent["Mounts"]}
    assert "/fb" not in agent_mounts and "/opt/arena/pylib/Xlib" not in agent_mounts
    downloads = agent_mounts["/home/agent/Downloads"]
    assert (downloads["Source"], downloads["RW"]) == (str(box.run_dir / "downloads"), False)
    assert os.stat(box.paths.framebuffer).st_uid == display_uid

    # Inside the agent's: no X socket of either kind, no framebuffer, no display process.
    seen = box.shell(
        "ls -A /tmp; ls /fb 2>&1; ps -eo comm | grep -cE 'Xvfb|chromium'; "
        'python3 -c "import socket\n'
        "for name in ('/tmp/.X11-unix/X0', '\\0/tmp/.X11-unix/X0'):\n"
        '    print(socket.socket(socket.AF_UNIX).connect_ex(name))"'
    )
    assert seen.stdout.splitlines() == [
        "ls: cannot access '/fb': No such file or directory",
        "0",
        "2",  # ENOENT
        "111",  # ECONNREFUSED: another network namespace
    ]
    # The input goes to the display's supervisor, as XTEST events.
    reply = box._call(
        "input", {"op": "input", "argv": ["mousemove", "5", "5"]}, client=box.display_client
    )
    assert reply == {"ok": True, "via": "xtest"}


def test_chromium_without_user_namespaces_runs_without_its_own_sandbox(real_backends):
    """The agent's profile forbids every namespace, as Docker's default profile does to
    an unprivileged container: the image's wrapper (/opt/arena/chromium) then adds
    --no-sandbox and says so, and the desktop works; the container is the boundary."""
    profile = seccomp.docker_profile(seccomp.AGENT)
    box = real_backends(seccomp_profile=profile).provision(shell_spec(desktop=True), slot=3)

    assert inspect(box, "display")["HostConfig"]["SecurityOpt"] == [
        "no-new-privileges",
        f"seccomp={profile}",
    ]
    assert box.screenshot().ok
    processes = display_processes(box).splitlines()
    assert any(
        line.startswith("/usr/lib/chromium/chromium ") and "--no-sandbox" in line
        for line in processes
    )
    log = box.containers["display"].exec_run(["cat", "/tmp/browser.log"]).output
    assert b"no user namespaces in this container" in log


# -- teardown, failures, health --------------------------------------------------------


def test_destroy_removes_the_container_and_the_run_dir_once(real_backend, real_client):
    box = real_backend.provision(shell_spec(), slot=1)

    box.destroy()
    box.destroy()
    assert reclaims_wait(30)

    with pytest.raises(docker.errors.NotFound):
        real_client.containers.get(box.container.id)
    assert not box.run_dir.exists()
    assert cgroups.engine_group_directories(box.run_dir.name) == []
    assert not tool_call(box, "shell", {"command": "x"}, deliver_dir=box.run_dir.parent).ok


def test_destroy_of_a_container_already_gone_is_fine(real_backend, real_client):
    box = real_backend.provision(shell_spec(), slot=1)
    real_client.containers.get(box.container.id).remove(force=True)  # say, by the janitor

    box.destroy()
    assert reclaims_wait(30)

    assert not box.run_dir.exists()
    assert box.reclaim.ok is True  # a container already gone is a container gone


def test_missing_image_is_a_clear_error_and_leaves_nothing(
    real_backends, real_client, sandbox_root
):
    backend = real_backends(image="agent-arena-desktop:missing")

    hint = r"build it: scripts/docker\.sh image .* scripts/image\.sh"
    with pytest.raises(RuntimeError, match=hint):
        backend.provision(shell_spec(), slot=0)

    mine = real_client.containers.list(all=True, filters={"label": f"arena.host={backend.host}"})
    assert mine == []
    assert list(sandbox_root.glob("run-*")) == []
    report = backend.health()
    assert not report["ok"] and "build it" in report["error"]


def test_a_container_that_never_gets_ready_times_out(real_backends, real_client, sandbox_root):
    backend = real_backends(provision_timeout_s=0.2)  # a desktop takes seconds

    with pytest.raises(RuntimeError, match=r"not ready within 0\.2 s"):
        backend.provision(shell_spec(desktop=True), slot=0)
    assert reclaims_wait(30)  # (the sandbox it had made is destroyed like any)

    mine = real_client.containers.list(all=True, filters={"label": f"arena.host={backend.host}"})
    assert mine == []
    assert list(sandbox_root.glob("run-*")) == []


def test_health_follows_the_engine_and_the_container(real_backend, real_client):
    assert real_backend.health() == {"backend": "docker", "image": DEFAULT_IMAGE, "ok": True}
    box = real_backend.provision(shell_spec(), slot=1)
    assert box.health()["ok"]

    real_client.containers.get(box.container.id).kill()
    real_client.containers.get(box.container.id).wait(timeout=10)

    assert box.health() == {"ok": False, "container": box.container.name, "status": "exited"}


# -- the janitor -----------------------------------------------------------------------


def test_janitor_removes_only_this_hosts_orphans(real_client, sandbox_root):
    here, there = own_host(), own_host()
    orphan_dir = sandbox_root / "run-2-0-abcd"
    (orphan_dir / "work").mkdir(parents=True)
    outside = Path(tempfile.mkdtemp(prefix="run-", dir="/tmp"))

    def container(**labels):
        # Created, never started: all the janitor reads is the labels.
        return real_client.containers.create(DEFAULT_IMAGE, labels=labels, network_mode="none")

    live = container(**{"arena.sandbox": "1", "arena.host": here, "arena.run": "1"})
    orphan = container(
        **{"arena.sandbox": "1", "arena.host": here, "arena.run": "2", "arena.dir": str(orphan_dir)}
    )
    no_run = container(
        **{"arena.sandbox": "1", "arena.host": here, "arena.run": "None", "arena.dir": str(outside)}
    )
    elsewhere = container(**{"arena.sandbox": "1", "arena.host": there, "arena.run": "3"})
    unrelated = container(**{"arena.host": here, "arena.run": "4"})
    asked = []

    def is_live(run_id):
        asked.append(run_id)
        return run_id == 1

    try:
        removed = janitor(real_client, here, is_live, root=sandbox_root)

        assert removed == 2
        left = {c.id for c in real_client.containers.list(all=True)}
        assert {live.id, elsewhere.id, unrelated.id} <= left
        assert not {orphan.id, no_run.id} & left
        assert sorted(asked, key=str) == [1, 2, None]
        assert not orphan_dir.exists()
        assert outside.exists()  # a labelled dir outside the root is never removed
    finally:
        for each in (live, orphan, no_run, elsewhere, unrelated):
            with contextlib.suppress(docker.errors.NotFound):
                each.remove(force=True)
        outside.rmdir()


def test_janitor_removes_a_sandbox_once_its_run_is_not_live(real_backend, real_client):
    box = real_backend.provision(shell_spec(), slot=3)
    run_id = box.spec.run_id

    assert janitor(real_client, real_backend.host, lambda r: r == run_id) == 0
    assert box.health()["ok"]
    removed = janitor(real_client, real_backend.host, lambda r: r != run_id, root=real_backend.root)

    assert removed == 1
    with pytest.raises(docker.errors.NotFound):
        real_client.containers.get(box.container.id)
    assert not box.run_dir.exists()
    assert cgroups.engine_group_directories(box.run_dir.name) == []
    box.destroy()  # what its worker does later: nothing left to do


WORKER = """
import django, time
django.setup()
from sandboxes.base import SandboxSpec
from sandboxes.services import sandbox_session
with sandbox_session(SandboxSpec(run_id=None, desktop=False)) as box:
    print(box.run_dir, box.container.id, flush=True)
    time.sleep(300)
"""


@pytest.mark.django_db(transaction=True)
def test_janitor_removes_the_container_of_a_killed_worker(
    docker_engine,  # noqa: F811
    real_client,
    sandbox_root,
    tmp_path,
    settings,
    monkeypatch,
):
    host = own_host()
    # (demo_web as it is: this process's egress proxy, made once, may be made here)
    settings.ARENA = settings.ARENA.replace(sandbox_backend="docker", host_id=host)
    monkeypatch.setenv("DOCKER_HOST", docker_engine)  # this process's janitor, too
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    env.update(
        ARENA_SANDBOX_BACKEND="docker",
        ARENA_HOST_ID=host,
        ARENA_DOCKER_IMAGE=DEFAULT_IMAGE,
        ARENA_DEMO_WEB="false",  # (its egress proxy need not start the demo site)
        DOCKER_HOST=docker_engine,
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        run_dir, container_id = worker.stdout.readline().split()
        lease = SandboxLease.objects.get(released_at=None)
        assert (lease.backend, lease.host, lease.worker_pid) == ("docker", host, worker.pid)
        assert lease.path == run_dir

        worker.send_signal(signal.SIGKILL)
        worker.wait()

        assert real_client.containers.get(container_id).status == "running"  # outlived it
        assert sandbox_janitor() == 2  # the lease, and the container
        with pytest.raises(docker.errors.NotFound):
            real_client.containers.get(container_id)
        assert not os.path.exists(run_dir)
        lease.refresh_from_db()
        assert lease.released_at is not None
        assert sandbox_janitor() == 0  # nothing left to do
    finally:
        worker.kill()
        worker.wait()
        for container in real_client.containers.list(
            all=True, filters={"label": f"arena.host={host}"}
        ):
            container.remove(force=True)


# -- what only a fake engine can show ----------------------------------------------------


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
    assert reclaims_wait(60)


def test_the_engine_is_asked_for_nothing_else(engine, provision):
    """Fake engine: only it records every request. Created and started, never pulled,
    no network made or joined; an image without ``arena.binds-host-usr`` (the
    self-contained one, scripts/image.sh) gets none of the host's paths."""
    box = provision()

    created = engine.calls_to("POST", "/containers/create")
    by_role = {call.body["Labels"]["arena.role"]: call for call in created}
    assert len(created) == 2  # (made at once: in either order)
    display, agent = by_role["display"], by_role["agent"]
    assert len(engine.calls_to("POST", r"/containers/[0-9a-f]+/start")) == 2
    assert engine.calls_to("POST", r"/images/create") == []
    assert [c for c in engine.calls if c.path.startswith("/networks")] == []
    etc = {"/etc/passwd", "/etc/group"}
    host = agent.body["HostConfig"]
    assert {m["Target"] for m in host["Mounts"]} == {*HOST_DIRS, *etc, "/home/agent/Downloads"}
    assert set(host["Tmpfs"]) == {"/tmp", "/home/agent"}
    host = display.body["HostConfig"]
    assert {m["Target"] for m in host["Mounts"]} == {*DISPLAY_DIRS, *etc}
    assert set(host["Tmpfs"]) == {"/tmp", "/home/display"}
    # (this test worker is root: the slot's own uid, and its display uid)
    assert agent.body["User"] == "61002:61002" and box.shell("id").ok
    assert display.body["User"] == "62002:62002"


def test_a_non_root_worker_runs_sandboxes_as_itself(monkeypatch):
    """No engine: the uid rule alone (this test worker is root)."""
    monkeypatch.setattr(docker_backend.os, "geteuid", lambda: 1234)
    assert sandbox_uid(UID_BASE, 5) == sandbox_uid(UID_BASE, 5, "display") == 1234
    monkeypatch.setattr(docker_backend.os, "geteuid", lambda: 0)
    assert sandbox_uid(UID_BASE, 5) == 61005
    assert sandbox_uid(UID_BASE, 5, "display") == 62005


def test_tools_reach_the_supervisor_through_the_control_socket(provision, supervisors, tmp_path):
    """Fake engine: the real supervisor keeps no record of the requests it got, and the
    exact xdotool argv the host sends, to the display's supervisor, is what this checks."""
    box = provision()
    agent = supervisors[box.containers["agent"].name]
    display = supervisors[box.containers["display"].name]

    shell = tool_call(box, "shell", {"command": "echo hi"}, deliver_dir=tmp_path)
    click = tool_call(box, "click", {"x": 10, "y": 20, "count": 2}, deliver_dir=tmp_path)
    navigate = tool_call(box, "navigate", {"url": "https://example.com/"}, deliver_dir=tmp_path)

    assert shell.ok and shell.stdout == "ran: echo hi\n" and shell.exit_code == 0
    assert click.ok and navigate.ok and navigate.data["title"] == "Fake"
    assert [r["op"] for r in agent.requests] == ["shell"]
    assert [r["op"] for r in display.requests] == ["input", "navigate"]
    assert agent.requests[0]["timeout_s"] == SPEC.shell_timeout_s
    argv = ["mousemove", "10", "20", "click", "--repeat", "2", "--delay", "60", "1"]
    assert display.requests[0]["argv"] == argv


def test_a_container_that_dies_while_starting_is_removed(engine, make_backend, sandbox_root):
    """Fake engine: the real image's supervisor does not die at start on request."""

    def crash(container):
        container.status = "exited"
        container.exit_code = 1
        container.logs = b"supervisor: Xvfb did not start\n"

    engine.on_start = crash

    with pytest.raises(RuntimeError, match=r"exit code 1\): supervisor: Xvfb did not start"):
        make_backend().provision(SPEC, slot=0)
    assert reclaims_wait(30)

    assert engine.containers == {}  # the display's and the agent's
    deletes = engine.calls_to("DELETE", r"/containers/[0-9a-f]+")
    assert [delete.query["force"] for delete in deletes] == [["True"], ["True"]]
    assert list(sandbox_root.glob("run-*")) == []


@pytest.mark.parametrize("option", ["name=rootless", "name=userns"])
def test_remapped_engines_are_refused(engine, make_backend, sandbox_root, option):
    """Fake engine: the private engine is rootful and not remapped."""
    engine.info = {"SecurityOptions": ["name=seccomp,profile=builtin", option]}

    with pytest.raises(RuntimeError, match="rootful engine"):
        make_backend().provision(SPEC, slot=0)

    assert engine.calls_to("POST", "/containers/create") == []
    assert list(sandbox_root.glob("run-*")) == []


def test_health_of_an_engine_that_never_answers(sandbox_root):
    """No engine: a socket that listens and never accepts."""
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


def test_the_arena_picks_the_docker_backend_from_settings(settings, sandbox_root):
    from sandboxes import services
    from sandboxes.docker_backend import DockerBackend

    settings.ARENA = settings.ARENA.replace(sandbox_backend="docker", sandbox_root=sandbox_root)
    backend = services.sandbox_backend()
    assert isinstance(backend, DockerBackend)
    assert backend.image == settings.ARENA.docker_image
