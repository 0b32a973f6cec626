"""The Docker backend's remote mode (``sandboxes.docker_remote``) on an engine that
shares nothing with the worker but its API: the second dockerd of
``tests/docker_remote.py``, reached only over TLS on loopback. A desktop run there: no
bind mount of a run dir, the screenshot's pixels, a click reaching the page, the shell,
a file put into /work and delivered back, egress refused by the worker's proxy and
counted under the run's id, and nothing left after destroy or the janitor. The lying
framebuffers the local reader refuses are refused in bytes too."""

import base64
import hashlib
import io
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from django.conf import settings as django_settings
from PIL import Image

from coding import scripts
from sandboxes.base import SandboxSpec, ToolError
from sandboxes.docker_backend import DockerBackend, janitor
from sandboxes.docker_remote import (
    RemoteDockerBackend,
    RemoteDockerSandbox,
    inflate_bounded,
    remote_mode_implied,
)
from sandboxes.docker_volumes import janitor_volumes
from sandboxes.egress import EgressProxy, EgressProxyThread
from sandboxes.screens import ScreenError, frame_from_bytes, framebuffer_bytes_png
from sandboxes.services import reclaims_wait
from tests.docker_engine import (
    HOST_USR_IMAGE,
    docker_engine,  # noqa: F401 - the session fixture
)
from tests.docker_remote import (
    RemoteEngine,
    copy_image,
    docker_remote,  # noqa: F401 - the module's fixture
    tls_client,
)
from tests.sandboxes.fake_engine import xwd_bytes
from tests.sandboxes.test_screens import H, W, header

# A page of one colour with a big button that retitles the page when clicked.
START_PAGE = (
    "data:text/html,<title>start</title><body style='margin:0;background:%23cc0033'>"
    "<button style='width:400px;height:300px' onclick=\"document.title='clicked'\">go"
    "</button></body>"
)
SLOT = 6


def new_run_id() -> int:
    return 10**9 + secrets.randbelow(10**9)


@pytest.fixture(scope="module")
def remote_image(docker_engine: str, docker_remote: RemoteEngine) -> str:  # noqa: F811
    """The desktop image that binds the host's /usr, moved to the remote engine (the
    engine is on this machine: its host's /usr is this one's)."""
    local = docker.DockerClient(base_url=docker_engine)
    try:
        copy_image(local, docker_remote.client, HOST_USR_IMAGE)
    finally:
        local.close()
    return HOST_USR_IMAGE


@pytest.fixture(scope="module")
def refusals() -> list:
    return []


@pytest.fixture(scope="module")
def egress(refusals: list) -> Iterator[EgressProxyThread]:
    proxy = EgressProxy(on_refusal=lambda *refusal: refusals.append(refusal))
    with EgressProxyThread(proxy) as thread:
        yield thread


@pytest.fixture
def backend(
    docker_remote: RemoteEngine,  # noqa: F811
    remote_image: str,
    egress: EgressProxyThread,
) -> Iterator[RemoteDockerBackend]:
    root = Path(tempfile.mkdtemp(prefix="arena-test-remote-", dir="/var/tmp"))
    made = RemoteDockerBackend(
        remote_image,
        root,
        django_settings.ARENA.sandbox_uid_base,
        egress=egress,
        client_factory=lambda: tls_client(docker_remote.url, docker_remote.tls),
        host=f"{socket.gethostname()}-test-{secrets.token_hex(4)}",
    )
    yield made
    client = made.client()
    janitor(client, made.host, lambda run_id: False, root=root)
    janitor_volumes(client, made.host, lambda run_id: False)
    made.close()
    shutil.rmtree(root, ignore_errors=True)


def on_engine(backend: RemoteDockerBackend) -> tuple[list[str], list[str]]:
    """The containers and volumes of ``backend``'s host label on its engine."""
    client = backend.client()
    label = {"label": [f"arena.host={backend.host}"]}
    containers = [c.name for c in client.containers.list(all=True, filters=label)]
    volumes = [v.name for v in client.volumes.list(filters=label)]
    return containers, volumes


def processes_of(*uids: int) -> list[str]:
    """The live processes of these uids (``pid state args``): a zombie, killed and not
    yet reaped by its container's shim, runs nothing and is left out."""
    out = subprocess.run(
        ["ps", "-o", "pid=,stat=,args=", "-u", ",".join(map(str, uids))],
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in out.stdout.splitlines() if not line.split()[1].startswith("Z")]


def wait_for(predicate, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_desktop_on_the_remote_engine_over_the_channel_alone(
    backend: RemoteDockerBackend, egress: EgressProxyThread, refusals: list, tmp_path: Path
) -> None:
    run_id = new_run_id()
    spec = SandboxSpec(run_id=run_id, desktop=True, start_url=START_PAGE, shell_timeout_s=10)
    started = time.monotonic()
    box = backend.provision(spec, slot=SLOT)
    ready_s = time.monotonic() - started
    assert isinstance(box, RemoteDockerSandbox)
    uids = (box.uid, box.display_uid)
    try:
        # No bind mount of anything of the worker's: tmpfs, the downloads volume, and
        # the host's /usr the image asks for (read-only).
        for role, container in box.containers.items():
            container.reload()
            for mount in container.attrs["Mounts"]:
                if mount["Type"] == "bind":
                    assert mount["RW"] is False, (role, mount)
                    assert not mount["Source"].startswith(str(backend.root)), (role, mount)
                else:
                    assert mount["Type"] == "volume" and mount["Name"] == box.volume.name
                    assert mount["RW"] is (role == "display")
            tmpfs = container.attrs["HostConfig"]["Tmpfs"]
            assert "nr_inodes=" in tmpfs["/run/arena"] and "size=1m" in tmpfs["/run/arena"]
            assert "/work" in tmpfs if role == "agent" else "/fb" in tmpfs
        assert box.volume.attrs["Options"]["type"] == "tmpfs"
        assert f"size={spec.disk_bytes}" in box.volume.attrs["Options"]["o"]

        assert wait_for(lambda: (box.page_state() or {}).get("title") == "start")
        shots = []

        def painted() -> bool:
            # the title is the DOM's; the browser paints after it (under load, a
            # screenshot right after the title can still show the blank page)
            shot = box.screenshot()
            assert shot.ok, shot.error
            shots.append(Image.open(io.BytesIO(shot.image)).convert("RGB"))
            return shots[-1].getpixel((1000, 700)) == (204, 0, 51)  # the page's own colour

        assert wait_for(painted), shots[-1].getpixel((1000, 700))
        image = shots[-1]
        assert image.size == (1280, 800)
        assert image.getpixel((200, 150)) != (204, 0, 51)  # the button

        assert box.click(200, 150).ok
        assert wait_for(lambda: (box.page_state() or {}).get("title") == "clicked")

        assert box.seal_tree("/work") is False  # (a spec that does not seal)
        shell = box.shell("id -u; pwd; ls -a /run/arena")
        assert shell.ok and shell.stdout.split()[:2] == [str(box.uid), "/work"], shell

        # A file in (an attachment) and files out (deliveries), with the host's rules.
        assert box.put_file("attachments/brief.txt", b"from the worker\n") == (
            "/work/attachments/brief.txt"
        )
        seen = box.shell("cat attachments/brief.txt; stat -c %a attachments/brief.txt")
        assert seen.stdout == "from the worker\n444\n", seen
        with pytest.raises(ToolError, match="could not be put"):
            box.put_file("attachments/brief.txt", b"again")  # never over a file
        # What the worker placed in its own work dir (a lane's attachments) goes in too.
        (box.work_dir / "given").mkdir()
        (box.work_dir / "given" / "data.csv").write_bytes(b"a,b\n1,2\n")
        (box.work_dir / "given" / "data.csv").chmod(0o444)
        assert box.push_work_dir() == ["/work/given/data.csv"]
        assert list(box.work_dir.iterdir()) == []
        seen = box.shell("cat given/data.csv; stat -c %a given/data.csv")
        assert seen.stdout == "a,b\n1,2\n444\n", seen
        box.shell("printf answer > out.txt; ln -s /etc/hostname link; mkdir d")
        box.shell("head -c 6000000 /dev/zero > big")
        delivered = box.collect_files(["out.txt", "/work/attachments/brief.txt"], tmp_path / "out")
        assert [(d.name, d.size) for d in delivered] == [("out.txt", 6), ("brief.txt", 16)]
        assert (tmp_path / "out" / "out.txt").read_bytes() == b"answer"
        for name, error in (("link", "link"), ("d", "regular file"), ("big", "over the")):
            with pytest.raises(ToolError, match=error):
                box.collect_files(["out.txt", name], tmp_path / name)
            assert not (tmp_path / name).exists()  # nothing partial
        with pytest.raises(ToolError, match="outside the workspace"):
            box.collect_files(["/etc/passwd"], tmp_path / "etc")

        # Egress: the worker's proxy refuses a private address, counted as the run's.
        curl = "curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://10.20.30.40/x"
        assert box.shell(curl).stdout == "403"
        assert egress.counters(run_id)["refused:private"] == 1
        assert (run_id, "http://10.20.30.40/x", "private") in refusals
        assert box.health()["ok"] is True
    finally:
        box.destroy()
    assert processes_of(*uids) == []  # stopped when destroy returns
    assert reclaims_wait(30)  # removed in the background
    assert on_engine(backend) == ([], [])
    assert not box.run_dir.exists()
    print(f"remote desktop ready in {ready_s:.2f} s")


def test_the_janitor_removes_a_dead_runs_containers_and_volume(
    backend: RemoteDockerBackend,
) -> None:
    run_id = new_run_id()
    spec = SandboxSpec(run_id=run_id, desktop=True, start_url="about:blank", shell_timeout_s=10)
    box = backend.provision(spec, slot=SLOT + 1)
    box._reaper.cancel()  # a worker that died: nobody destroys it
    containers, volumes = on_engine(backend)
    assert len(containers) == 2 and volumes == [box.volume.name]
    client = backend.client()
    assert janitor(client, backend.host, lambda r: r == run_id, root=backend.root) == 0
    assert janitor(client, backend.host, lambda r: False, root=backend.root) == 2
    assert janitor_volumes(client, backend.host, lambda r: False) == 1
    assert on_engine(backend) == ([], [])
    assert not box.run_dir.exists()
    box._destroyed = True


def test_a_pooled_remote_desktop_is_assigned_a_run_and_its_egress_identity(
    backend: RemoteDockerBackend, egress: EgressProxyThread
) -> None:
    """The warm pool's path (``sandboxes.pool``): booted in the background under the
    pool's identity, then made a run's: its tunnels' listeners now count for the run."""
    pool_id, run_id = -new_run_id(), new_run_id()
    booted = SandboxSpec(run_id=pool_id, desktop=True, start_url="about:blank")
    box = backend.provision(booted, slot=SLOT + 2, background=True)
    try:
        box.assign(SandboxSpec(run_id=run_id, desktop=True, start_url=START_PAGE))
        assert (box.page_state() or {}).get("title") == "start"
        curl = "curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://10.1.2.3/"
        assert box.shell(curl).stdout == "403"
        assert egress.counters(run_id)["refused:private"] == 1
        assert "refused:private" not in egress.counters(pool_id)
    finally:
        box.destroy()
    assert reclaims_wait(30)
    assert on_engine(backend) == ([], [])


def test_coding_lanes_without_the_coding_image_are_refused_with_how_to_build_it(
    backend: RemoteDockerBackend,
) -> None:
    # The remote engine has the desktop image only: the worker's toolchain never goes
    # to another host's engine as a bind.
    spec = SandboxSpec(run_id=new_run_id(), desktop=False, toolchain=True)
    with pytest.raises(RuntimeError, match=r"build it there \(scripts/image.sh --coding"):
        backend.provision(spec)
    assert on_engine(backend) == ([], [])


def test_a_tree_is_sealed_inside_and_a_big_file_goes_in_in_pieces(
    backend: RemoteDockerBackend,
) -> None:
    """The judge's two needs on an engine that shares no file with the worker: a
    bundle bigger than one channel request, and a tree the sandbox's uid can no longer
    change (sealed by the one root process the worker starts inside, through the
    engine; the container itself keeps no capability)."""
    spec = SandboxSpec(run_id=new_run_id(), desktop=False, shell_timeout_s=20, seals=True)
    box = backend.provision(spec, slot=SLOT + 3)
    try:
        data = secrets.token_bytes(20 * 1024**2 + 7)  # three requests of at most 8 MiB
        assert box.put_file("attachments/source.bundle", data) == "/work/attachments/source.bundle"
        seen = box.shell("sha256sum attachments/source.bundle; stat -c '%a %s' attachments/*")
        assert seen.stdout.split() == [
            hashlib.sha256(data).hexdigest(),
            "attachments/source.bundle",
            "444",
            str(len(data)),
        ], seen
        made = box.shell(
            "mkdir -p t/d && printf x > t/f && printf y > t/d/g && chmod 6777 t/f && "
            "chmod 777 t/d && ln -s /work/outside t/link && printf z > outside && chmod 700 t"
        )
        assert made.ok and made.exit_code == 0, made
        assert box.seal_tree("/work/t") is True
        seen = box.shell("stat -c '%u %a %n' t t/d t/f t/d/g outside; stat -c '%u %N' t/link")
        assert seen.stdout.splitlines() == [
            "0 755 t",
            "0 755 t/d",
            "0 755 t/f",  # (6777 & 0755) | 0444: no set-id bit, written by none
            "0 644 t/d/g",
            f"{box.uid} 644 outside",  # the link's target, never followed
            "0 't/link' -> '/work/outside'",
        ], seen
        tries = box.shell(
            "printf w >> t/f; printf w > t/d/new; rm -f t/d/g; mv t/f t/h; chmod 777 t/f; "
            "cat t/f t/d/g; grep -E 'CapEff|CapBnd' /proc/self/status"
        )
        # (the sandbox's container holds no capability: the seals ran beside it)
        caps = "CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n"
        assert tries.stdout == "xy" + caps, tries
        assert tries.stderr.count("Permission denied") >= 3, tries
        # The judge's "kill the leftovers" kills what the sandbox left (detached or
        # not) and spares the front and the worker's exec channels it is reached by
        box.shell("(setsid sleep 300 > /dev/null 2>&1 &); sleep 301 > /dev/null 2>&1 &")
        quiet = box.shell(scripts.quiesce(()))
        assert quiet.stdout == "quiet=1\n", quiet
        left = box.shell("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout
        assert "sleep 30" not in left and "relay.py front" in left, left
        assert box.seal_tree("/work/missing") is False
        assert box.seal_tree("/work/../etc") is False
        assert box.seal_tree("/etc") is False
        assert box.shell("stat -c %u /etc").stdout.strip() == "0"
        assert on_engine(backend) == ([box.container.name], [box.volumes["work"].name])
    finally:
        box.destroy()
    assert reclaims_wait(30)
    assert on_engine(backend) == ([], [])


def test_remote_mode_is_implied_by_an_engine_on_another_host() -> None:
    assert remote_mode_implied("tcp://10.0.0.5:2376")
    assert remote_mode_implied("ssh://arena@engine")
    assert not remote_mode_implied("unix:///var/run/docker.sock")
    assert not remote_mode_implied(None)


# -- the framebuffer as bytes ------------------------------------------------------------


def test_a_framebuffers_bytes_become_the_same_png_as_its_file(tmp_path: Path) -> None:
    data = xwd_bytes(W, H, (200, 30, 30))
    shot = framebuffer_bytes_png(data, W, H, 1 << 20)
    assert Image.open(io.BytesIO(shot.png)).convert("RGB").getpixel((3, 3)) == (200, 30, 30)
    assert inflate_bounded(base64.b64encode(zlib.compress(data)).decode(), len(data))


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (header(100_000, 100_000), "says 100000×100000"),
        (header(W + 1, H), "the screen is 64×48"),
        (header(bpp=16), "unsupported framebuffer format"),
        (header(line=W * 4 + 4), "line length"),
        (header(size=10**9), "not Xvfb's"),
        (header(ncolors=10**6), "not Xvfb's"),
        (header(), "length does not match"),
        (xwd_bytes(W, H, (0, 0, 0)) + b"extra", "length does not match"),
        (b"\x00" * 40, "too short"),
    ],
)
def test_lying_framebuffer_bytes_are_refused_as_the_file_is(content: bytes, error: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ScreenError, match=error):
            frame_from_bytes(content, W, H)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_a_deflate_bomb_is_refused_at_the_screens_bound() -> None:
    bomb = base64.b64encode(zlib.compress(b"\x00" * (64 * 1024**2))).decode()
    tracemalloc.start()
    try:
        with pytest.raises(ScreenError, match="more than a framebuffer"):
            inflate_bounded(bomb, 1024**2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024**2
    with pytest.raises(ScreenError, match="does not decode"):
        inflate_bounded("not base64!", 1024)


@pytest.mark.parametrize(
    ("remote", "docker_host", "expected"),
    [
        (True, "unix:///var/run/docker.sock", RemoteDockerBackend),
        (False, "tcp://127.0.0.1:2376", RemoteDockerBackend),
        (False, "unix:///var/run/docker.sock", DockerBackend),
    ],
)
def test_the_arena_picks_the_remote_mode_from_settings_or_docker_host(
    settings, sandbox_root, monkeypatch, remote, docker_host, expected
) -> None:
    from sandboxes import services

    monkeypatch.setenv("DOCKER_HOST", docker_host)
    monkeypatch.setattr(services, "_backend", None)
    settings.ARENA = settings.ARENA.replace(
        sandbox_backend="docker", sandbox_root=sandbox_root, docker_remote=remote
    )
    backend = services.sandbox_backend()
    assert type(backend) is expected
    assert getattr(backend, "remote", False) is (expected is RemoteDockerBackend)
    monkeypatch.setattr(services, "_backend", None)


def test_destroy_stops_a_remote_run_and_its_reclaim_removes_the_rest(
    backend: RemoteDockerBackend, egress: EgressProxyThread
) -> None:
    spec = SandboxSpec(
        run_id=new_run_id(), desktop=True, start_url="about:blank", shell_timeout_s=10
    )
    box = backend.provision(spec, slot=SLOT + 3)
    uids = (box.uid, box.display_uid)
    assert box.shell("sleep 300 > /dev/null 2>&1 &").ok
    listeners = [Path(tunnel.proxy_path) for tunnel in box.tunnels]
    assert len(listeners) == 2 and all(path.exists() for path in listeners)
    assert processes_of(uids[0]) and processes_of(uids[1])
    opened = threading.Event()
    work = box.reclaim.work
    box.reclaim.work = lambda: opened.wait(60) and work()  # the moment between, frozen

    box.destroy()

    # Stopped: nothing runs under either uid, the run's listeners are gone, the
    # containers (exited) and the volume wait for the reclaim.
    assert processes_of(*uids) == []
    assert not any(path.exists() for path in listeners)
    for container in box.containers.values():
        container.reload()
        assert container.status == "exited"
    containers, volumes = on_engine(backend)
    assert len(containers) == 2 and volumes == [box.volume.name]
    opened.set()
    assert reclaims_wait(30) and box.reclaim.ok is True
    assert on_engine(backend) == ([], [])
    assert not box.run_dir.exists()
