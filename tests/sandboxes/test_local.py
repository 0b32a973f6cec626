"""The local backend, for real: bubblewrap, an unprivileged uid, rlimits, cgroups, a
desktop with Xvfb and Chromium in a display sandbox of their own, bounded output, safe
deliveries. (The hostile entrant's attacks are in test_hostile.py.)"""

import io
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from django.conf import settings
from PIL import Image

from sandboxes import cgroups, disk
from sandboxes.base import SandboxSpec, ToolError
from sandboxes.local_backend import LocalBackend
from sandboxes.rundir import DISPLAY_UID_OFFSET
from sandboxes.tools import tool_call
from tests.processes import live_processes

UID_BASE = settings.ARENA.sandbox_uid_base
SHELL_ONLY = SandboxSpec(
    run_id=1,
    shell_timeout_s=5,
    output_max_bytes=4096,
    deliver_max_files=3,
    deliver_max_bytes=10_000,
    desktop=False,
    memory_mb=512,
    pids=128,
)
PAGE = "data:text/html,<title>Form</title><input id=q autofocus style='font-size:40px'>"


def uid_processes(uid: int) -> list[str]:
    return live_processes(uid)


@pytest.fixture
def sandbox(sandbox_root):
    box = LocalBackend(sandbox_root, uid_base=UID_BASE).provision(SHELL_ONLY, slot=3)
    yield box
    box.destroy()


@pytest.fixture(scope="module")
def desktop():
    """One desktop for the module's desktop tests (a desktop costs ~1 s and ~1 GB)."""
    root = Path(tempfile.mkdtemp(prefix="arena-test-desktop-", dir="/var/tmp"))
    root.chmod(0o711)
    spec = SandboxSpec(run_id=2, shell_timeout_s=5, start_url=PAGE)
    box = LocalBackend(root, uid_base=UID_BASE).provision(spec, slot=4)
    yield box
    box.destroy()
    shutil.rmtree(root, ignore_errors=True)


def test_shell_runs_in_the_workspace(sandbox):
    result = sandbox.shell("pwd; echo hi > f; cat f")
    assert result.ok and result.exit_code == 0
    assert result.stdout == "/work\nhi\n"
    assert (sandbox.work_dir / "f").read_text() == "hi\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="uid drop needs a root worker")
def test_shell_runs_as_the_slot_uid_never_root(sandbox):
    assert sandbox.shell("id -u; id -G").stdout.split() == [str(UID_BASE + 3), str(UID_BASE + 3)]


def test_only_the_needed_host_paths_are_visible(sandbox):
    result = sandbox.shell("ls /; ls /etc; cat /etc/shadow 2>&1; ls /root 2>&1")
    listing = result.stdout.split()
    assert "shadow" not in listing and "root:" not in result.stdout
    assert {"passwd", "group", "hosts", "alternatives", "ld.so.cache"} <= set(listing)
    assert "agent:x:" in sandbox.shell("cat /etc/passwd").stdout


def test_host_secrets_are_not_readable(sandbox):
    # the worker's own files (settings, database, keys) live outside the sandbox's view
    probe = "cat /work/../../root/.bashrc /proc/1/environ 2>&1; ls /var /opt/arena 2>&1"
    result = sandbox.shell(probe)
    assert "ARENA_SECRET_KEY" not in result.stdout and "DATABASE_URL" not in result.stdout


def test_host_loopback_and_private_ranges_are_unreachable(sandbox):
    # Redis and PostgreSQL listen on the host's 127.0.0.1: the sandbox's lo is its own.
    # connect() to a private or metadata address fails in the namespace with no route:
    # no packet leaves it.
    probe = (
        'python3 -c "import socket\n'
        "for host, port in (('127.0.0.1', 6379), ('127.0.0.1', 5432), ('10.0.0.1', 80),"
        " ('169.254.169.254', 80), ('192.168.1.1', 80)):\n"
        '    s = socket.socket(); s.settimeout(2); print(s.connect_ex((host, port)))"'
    )
    codes = sandbox.shell(probe).stdout.split()
    assert codes == ["111", "111", "101", "101", "101"]  # ECONNREFUSED, ENETUNREACH
    assert sandbox.shell("cat /proc/net/route | wc -l").stdout.strip() == "1"  # no routes


def test_timeout_kills_the_whole_tree(sandbox):
    started = time.monotonic()
    result = sandbox.shell("(sleep 100 &) ; sh -c 'sleep 100 & sleep 100' & sleep 100", timeout_s=1)
    assert result.timed_out and not result.ok
    assert "timed out" in result.error
    assert time.monotonic() - started < 5
    assert "sleep" not in sandbox.shell("ps -eo comm").stdout


def test_output_is_bounded_and_truncation_is_flagged(sandbox):
    result = sandbox.shell("head -c 1000000 /dev/zero | tr '\\0' x")
    assert result.truncated
    assert len(result.stdout) == SHELL_ONLY.output_max_bytes
    assert result.data["stdout_bytes"] == 1_000_000
    assert "truncated" in result.error


def test_a_gigabyte_of_output_costs_nothing_but_time(sandbox):
    result = sandbox.shell("head -c 1000000000 /dev/zero", timeout_s=5)
    assert result.truncated
    # the bound holds on the bytes kept; each NUL is then stored as the 4 characters \x00
    assert result.escaped and result.stdout == "\\x00" * SHELL_ONLY.output_max_bytes
    assert result.data["stdout_bytes"] == 1_000_000_000 or result.timed_out


@pytest.mark.skipif(os.geteuid() != 0, reason="RLIMIT_NPROC is not enforced for root")
def test_fork_bomb_is_contained(sandbox):
    result = sandbox.shell("bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", timeout_s=4)
    assert not result.ok or "survived" in result.stdout
    # the sandbox still answers, and the host was never short of processes
    assert sandbox.shell("echo alive").stdout == "alive\n"


@pytest.mark.skipif(cgroups.detect() == "none", reason="no cgroup memory control on this host")
def test_memory_hog_is_killed_by_the_sandbox_cgroup(sandbox):
    hog = "python3 -c \"x = bytearray(1024 * 1024 * 1024); print('allocated')\""
    result = sandbox.shell(hog, timeout_s=5)
    assert "allocated" not in result.stdout
    assert not result.ok


def test_disk_fill_stops_at_the_file_size_limit(sandbox):
    result = sandbox.shell("head -c 300000000 /dev/zero > big; ls -l big | awk '{print $5}'")
    assert (
        "File size limit exceeded" in result.stderr
        or int(result.stdout.split()[-1]) <= 256 * 1024**2
    )
    (sandbox.work_dir / "big").unlink(missing_ok=True)


def test_deliver_copies_files_out(sandbox, tmp_path):
    sandbox.shell("mkdir -p out && printf data > out/r.txt")
    [delivered] = sandbox.collect_files(["out/r.txt"], tmp_path / "dest")
    assert delivered.name == "r.txt" and delivered.size == 4
    assert (tmp_path / "dest" / "r.txt").read_text() == "data"


@pytest.mark.parametrize(
    ("setup", "name"),
    [
        ("ln -s /etc/hostname link", "link"),
        ("mkdir d && ln -s /etc d/escape", "d/escape/hostname"),
        ("ln -s / rootdir", "rootdir/etc/hostname"),
        ("true", "../../etc/hostname"),
        ("true", "/etc/hostname"),
        ("mkfifo pipe", "pipe"),
        ("mkdir adir", "adir"),
        ("true", "missing.txt"),
    ],
)
def test_deliver_refuses_escapes_and_non_files(sandbox, tmp_path, setup, name):
    sandbox.shell(setup)
    with pytest.raises(ToolError):
        sandbox.collect_files([name], tmp_path / "dest")
    assert not (tmp_path / "dest").exists() or list((tmp_path / "dest").iterdir()) == []


def test_deliver_limits_size_and_count(sandbox, tmp_path):
    sandbox.shell("head -c 20000 /dev/zero > big; touch a b c d")
    with pytest.raises(ToolError, match="limited"):
        sandbox.collect_files(["big"], tmp_path / "dest")
    with pytest.raises(ToolError, match="at most 3"):
        sandbox.collect_files(["a", "b", "c", "d"], tmp_path / "dest")


@pytest.mark.parametrize(
    ("tool", "args", "error"),
    [
        ("click", {"x": 5000, "y": 1}, "off the screen"),
        ("click", {"x": 1}, "needs y"),
        ("click", {"x": "1", "y": 1}, "must be an integer"),
        ("click", {"x": 1, "y": 1, "button": "side"}, "must be one of"),
        ("key", {"combo": "ctrl+l; rm -rf /"}, "key takes"),
        ("navigate", {"url": "file:///etc/passwd"}, "http"),
        ("shell", {"command": 5}, "must be a string"),
        ("warp", {}, "there is no tool"),
    ],
)
def test_bad_tool_arguments_are_recorded_errors(sandbox, tmp_path, tool, args, error):
    result = tool_call(sandbox, tool, args, deliver_dir=tmp_path)
    assert not result.ok
    assert error in result.error


def test_destroy_leaves_no_process_dir_or_cgroup(sandbox_root):
    box = LocalBackend(sandbox_root, uid_base=UID_BASE).provision(SHELL_ONLY, slot=6)
    box.shell("sleep 300 > /dev/null 2>&1 & setsid sleep 300 > /dev/null 2>&1 &")
    groups = list(box.cgroup.directories) if box.cgroup else []
    box.destroy()
    box.destroy()
    assert not box.run_dir.exists()
    assert disk.mounts_under(box.run_dir) == []
    assert all(not g.exists() for g in groups)
    if os.geteuid() == 0:
        assert uid_processes(UID_BASE + 6) == []
    with pytest.raises(ToolError, match="destroyed"):
        box.shell("true")


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root worker drops to slot uids")
def test_unreachable_root_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="not reachable by the sandbox uids"):
        LocalBackend(tmp_path / "sb", uid_base=UID_BASE).provision(SHELL_ONLY)


# --- the desktop -------------------------------------------------------------------


def test_desktop_screenshot_is_a_png_of_the_screen(desktop):
    result = desktop.screenshot()
    assert result.ok and result.data == {"width": 1280, "height": 800}
    image = Image.open(io.BytesIO(result.image))
    assert image.format == "PNG" and image.size == (1280, 800)
    assert (
        len(image.getcolors(maxcolors=100_000) or []) > 10
    )  # a browser window, not a blank screen


def test_desktop_typing_reaches_the_page(desktop):
    desktop.click(100, 150)
    desktop.type("hello arena")
    desktop.key("Return")
    assert desktop.page_state()["title"] == "Form"
    assert desktop.navigate("about:blank").ok


def _display_processes(box) -> dict[int, str]:
    """Command lines of the display sandbox's processes, by host pid."""
    listing = subprocess.run(
        ["ps", "-U", str(box.display_uid), "-o", "pid=,args="],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return {int(line.split(None, 1)[0]): line.split(None, 1)[1] for line in listing.splitlines()}


@pytest.mark.skipif(os.geteuid() != 0, reason="the display uid needs a root worker")
def test_desktop_chromium_keeps_its_own_sandbox(desktop):
    # Chromium runs in the display sandbox, under the display uid, with its sandbox on:
    # the zygote, and renderers in user namespaces of their own (its namespace sandbox).
    assert desktop.display_uid == UID_BASE + DISPLAY_UID_OFFSET + 4
    processes = _display_processes(desktop)
    listing = "\n".join(processes.values())
    assert "/usr/lib/chromium/chromium" in listing
    assert "--no-sandbox" not in listing
    assert "--type=zygote" in listing
    browser = next(p for p, a in processes.items() if "--type=" not in a and "chromium" in a)
    renderers = [p for p, a in processes.items() if "--type=renderer" in a]
    assert renderers
    namespace = os.readlink(f"/proc/{browser}/ns/user")
    assert all(os.readlink(f"/proc/{p}/ns/user") != namespace for p in renderers)
    # The agent's shell sees none of it: another PID namespace.
    assert "chromium" not in desktop.shell("ps -eo args").stdout


def test_navigate_without_egress_reaches_nothing(desktop):
    result = desktop.navigate("https://example.com/")
    assert not result.ok
    assert "ERR_" in result.error


def test_desktop_framebuffer_symlink_is_refused(desktop):
    fb = desktop.paths.framebuffer.parent
    desktop.shell("true")
    # the display sandbox owns /fb: a link to a host file there fails safe
    original = fb / "Xvfb_screen0"
    moved = fb / "moved"
    os.rename(original, moved)
    os.symlink("/etc/hostname", original)
    try:
        result = desktop.screenshot()
        assert not result.ok and "framebuffer" in result.error
    finally:
        os.unlink(original)
        os.rename(moved, original)


def test_a_control_socket_swapped_for_a_link_is_never_dialled(sandbox, tmp_path):
    """A control socket swapped for a link to a host socket (under the Docker backend
    the container owns its control dir; the local one keeps it out of every sandbox's
    reach) is never dialled: the client refuses links."""
    import socket as sockets

    host_socket = tmp_path / "host.sock"
    server = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    server.bind(str(host_socket))
    server.listen(1)
    server.setblocking(False)
    ctl = sandbox.paths.control
    sandbox.client.close()
    os.rename(ctl, ctl.with_name("real.sock"))
    os.symlink(host_socket, ctl)
    with pytest.raises(ToolError):
        sandbox.shell("true")
    with pytest.raises(BlockingIOError):
        server.accept()  # nobody connected to the host socket
    server.close()
