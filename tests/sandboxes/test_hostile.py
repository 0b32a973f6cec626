"""A hostile entrant, for real. What an agent's shell can try against the disk, the
display, its supervisor and the kernel, and what it gets: a recorded, bounded failure of
its own run, never a broken neighbour, a fuller host disk, a forged screenshot or a
lifted limit. Real bubblewrap sandboxes on this host (a root worker: slot uids, display
uids and tmpfs quotas); every sandbox is destroyed by its fixture."""

import contextlib
import io
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from django.conf import settings
from PIL import Image

from sandboxes import disk
from sandboxes.base import SandboxSpec, ToolError
from sandboxes.docker_backend import DockerBackend
from sandboxes.local_backend import LocalBackend
from sandboxes.rundir import DISPLAY_UID_OFFSET
from sandboxes.tools import tool_call
from tests.processes import live_processes
from tests.sandboxes.fake_engine import FakeEngine, FakeSupervisor

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="slot uids and quotas need root")

UID_BASE = settings.ARENA.sandbox_uid_base
QUOTA = 32 * 1024**2
FILES = 2048
SHELL = SandboxSpec(
    run_id=21,
    shell_timeout_s=4,
    output_max_bytes=4096,
    deliver_max_files=3,
    deliver_max_bytes=10_000,
    desktop=False,
    memory_mb=512,
    pids=128,
    disk_bytes=QUOTA,
    disk_inodes=FILES,
)
PAGE = "data:text/html,<title>Real</title><body style='background:%2300a000'><h1>real page</h1>"


@pytest.fixture
def lanes(sandbox_root):
    """Two shell sandboxes, as the two lanes of a battle (slots 10 and 11)."""
    backend = LocalBackend(sandbox_root, uid_base=UID_BASE)
    boxes = [backend.provision(SHELL, slot=10), backend.provision(SHELL, slot=11)]
    yield boxes
    for box in boxes:
        box.destroy()


@pytest.fixture
def lane(lanes):
    return lanes[0]


def _desktop(slot: int):
    root = Path(tempfile.mkdtemp(prefix="arena-test-hostile-", dir="/var/tmp"))
    root.chmod(0o711)
    spec = SandboxSpec(
        run_id=22, shell_timeout_s=5, start_url=PAGE, disk_bytes=QUOTA, disk_inodes=FILES
    )
    box = LocalBackend(root, uid_base=UID_BASE).provision(spec, slot=slot)
    return root, box


@pytest.fixture(scope="module")
def desktop():
    """One desktop for the tests that leave it as they found it."""
    root, box = _desktop(12)
    yield box
    box.destroy()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def spoiled_desktop():
    """A desktop of its own for a test that breaks it."""
    root, box = _desktop(13)
    yield box
    box.destroy()
    shutil.rmtree(root, ignore_errors=True)


def colours(png: bytes) -> int:
    return len(Image.open(io.BytesIO(png)).getcolors(maxcolors=1_000_000) or [])


# -- disk --------------------------------------------------------------------------------


def host_disk_bytes(root: Path) -> int:
    """What the files under ``root`` take of the host's disk (the sandboxes' writable dirs
    are all under it; mounts such as the tmpfs quotas are not counted). Not the disk's
    free space: other processes (another xdist worker, PostgreSQL) write to it meanwhile."""
    device = root.stat().st_dev
    total = 0
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.lstat(os.path.join(top, d)).st_dev == device]
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
    return total


def test_a_lane_that_fills_its_disk_gets_enospc_and_nobody_else_notices(lanes, sandbox_root):
    a, b = lanes
    host_used = host_disk_bytes(sandbox_root)

    filled = a.shell(
        "head -c 100000000 /dev/zero > /work/big; stat -c %s /work/big; "
        "head -c 1000000 /dev/zero > /tmp/more; "  # /tmp and home share the quota
        "n=0; while [ $n -lt 5000 ]; do true 2>/dev/null > /home/agent/f$n || break; "
        "n=$((n+1)); done; echo $n",
        timeout_s=4,
    )
    written, files = (int(v) for v in filled.stdout.split())
    assert written <= QUOTA and written > QUOTA - 1024**2
    assert filled.stderr.count("No space left on device") == 2
    assert 0 < files < FILES  # the file count is a quota of its own

    # The other lane writes as usual, and the host's disk did not pay for lane A.
    mine = b.shell("head -c 10000000 /dev/zero > /work/mine && stat -c %s /work/mine")
    assert (mine.ok, mine.stdout) == (True, "10000000\n")
    assert host_disk_bytes(sandbox_root) - host_used < 8 * 1024**2
    # Lane A's sandbox still answers: a full disk is its own problem.
    assert a.shell("rm -f /work/big /tmp/more; echo alive").stdout == "alive\n"


def test_the_quota_is_gone_with_the_sandbox(sandbox_root):
    box = LocalBackend(sandbox_root, uid_base=UID_BASE).provision(SHELL, slot=14)
    assert disk.mounts_under(box.run_dir) == [box.run_dir / "agent"]
    box.destroy()
    assert disk.mounts_under(box.run_dir) == [] and not box.run_dir.exists()


# -- the display ------------------------------------------------------------------------


def test_the_framebuffer_is_out_of_the_agents_reach(desktop):
    inside = desktop.shell(
        "ls /fb 2>&1; find / -xdev -name 'Xvfb_screen*' 2>/dev/null; echo end"
    ).stdout
    assert "No such file or directory" in inside and "Xvfb_screen" not in inside
    info = os.stat(desktop.paths.framebuffer, follow_symlinks=False)
    assert info.st_uid == UID_BASE + DISPLAY_UID_OFFSET + 12 != desktop.uid
    assert not info.st_mode & 0o022  # only the display uid writes it


def test_a_forged_frame_changes_nothing(desktop):
    # The agent writes the fakest frame it can, wherever it can: a solid red screen in
    # Xvfb's format. The screenshot is still Chromium's page.
    forge = (
        'python3 -c "import struct, sys\n'
        "h = struct.pack('>25I', 100, 7, 2, 24, 1280, 800, 0, 0, 32, 0, 32, 32, 5120, 4,"
        " 0xFF0000, 0xFF00, 0xFF, 8, 256, 0, 1280, 800, 0, 0, 0)\n"
        "for p in ('/work/Xvfb_screen0', '/tmp/Xvfb_screen0', '/home/agent/Xvfb_screen0'):\n"
        "    open(p, 'wb').write(h + bytes((0, 0, 255, 0)) * (1280 * 800))\"; ls /work"
    )
    assert desktop.shell(forge).stdout == "Xvfb_screen0\n"
    shot = desktop.screenshot()
    assert shot.ok and colours(shot.image) > 10
    image = Image.open(io.BytesIO(shot.image)).convert("RGB")
    assert image.getpixel((640, 700)) != (255, 0, 0)
    desktop.shell("rm -f /work/Xvfb_screen0 /tmp/Xvfb_screen0 /home/agent/Xvfb_screen0")


def test_the_agent_has_no_x_server_to_talk_to_and_input_still_reaches_the_screen(desktop):
    # (tests/sandboxes/test_paint.py is the whole attack; here: the sockets are not there)
    attempt = desktop.shell(
        'ls -A /tmp; ls /tmp/.X11-unix 2>&1; python3 -c "import socket\n'
        "for name in ('/tmp/.X11-unix/X0', '\\0/tmp/.X11-unix/X0'):\n"
        '    print(socket.socket(socket.AF_UNIX).connect_ex(name))"'
    )
    assert attempt.stdout.splitlines() == [
        "ls: cannot access '/tmp/.X11-unix': No such file or directory",
        "2",  # ENOENT: no socket file
        "111",  # ECONNREFUSED: no abstract socket in the agent's network namespace
    ]
    # An X server of its own on :0 (its abstract socket) is its own alone: the display
    # and its input are elsewhere.
    assert desktop.click(300, 300).ok
    assert desktop.screenshot().ok


def test_every_display_process_runs_under_the_seccomp_filter(desktop):
    # (all but bwrap's own monitor outside the sandbox, which applies the filter)
    pids = set(live_processes(UID_BASE + DISPLAY_UID_OFFSET + 12))
    pids.discard(str(desktop.display_proc.pid))
    assert len(pids) > 3  # Xvfb, the supervisor, Chromium and its helpers
    status = [Path(f"/proc/{pid}/status").read_text() for pid in pids]
    assert {text.split("Seccomp:")[1].split()[0] for text in status} == {"2"}  # filter mode


def test_killing_everything_it_can_is_a_recorded_error_never_an_impostor(spoiled_desktop, tmp_path):
    box = spoiled_desktop
    # Another PID namespace and another uid: no Xvfb or Chromium to name, let alone kill.
    listing = box.shell("ps -eo args").stdout
    assert "Xvfb" not in listing and "chromium" not in listing
    # No path inside leads to the host's end of the control socket: nothing to take over.
    sockets = box.shell(
        "find / -path /proc -prune -o -type s -print 2>/dev/null; ls -A /run/arena"
    ).stdout.split()
    assert sockets == []  # (no egress here: /run/arena is empty; no X socket at all)
    impostor = box.shell(
        "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('/run/arena/ctl.sock')\""
    )
    assert "Read-only file system" in impostor.stderr

    started = time.monotonic()
    # Everything the agent may signal, its supervisor included.
    killed = tool_call(box, "shell", {"command": "kill -9 -1; sleep 5"}, deliver_dir=tmp_path)
    after = tool_call(box, "shell", {"command": "echo hi"}, deliver_dir=tmp_path)
    assert not killed.ok and "went away" in killed.error
    assert not after.ok and "failed" in after.error
    assert time.monotonic() - started < 5
    # The display lives on: the screen is still the real one, the browser obeys the host.
    assert len(live_processes(UID_BASE + DISPLAY_UID_OFFSET + 13)) > 3
    shot = box.screenshot()
    assert shot.ok and colours(shot.image) > 10
    assert box.navigate("about:blank").ok
    assert box.page_state() == {"url": "about:blank", "title": ""}


# -- system calls and privileges -------------------------------------------------------

# x86-64 numbers; each call made directly with arguments that would do something
# (or fail differently) without the filter.
PROBE = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
calls = {
    "ptrace(TRACEME)": (101, 0, 0, 0, 0),
    "process_vm_readv": (310, 1, 0, 0, 0, 0, 0),
    "process_vm_writev": (311, 1, 0, 0, 0, 0, 0),
    "unshare(NEWUSER)": (272, 0x10000000),
    "unshare(NEWNS)": (272, 0x00020000),
    "unshare(NEWNET)": (272, 0x40000000),
    "unshare(NEWPID)": (272, 0x20000000),
    "clone(NEWUSER)": (56, 0x10000000 | 17, 0, 0, 0, 0),
    "clone3": (435, 0, 0),
    "setns": (308, 0, 0),
    "mount": (165, 0, 0, 0, 0, 0),
    "umount2": (166, 0, 0),
    "pivot_root": (155, 0, 0),
    "move_mount": (429, 0, 0, 0, 0, 0),
    "fsopen": (430, 0, 0),
    "chroot": (161, 0),
    "keyctl": (250, 0, -3, 0),
    "add_key": (248, 0, 0, 0, 0, 0),
    "request_key": (249, 0, 0, 0, 0),
    "bpf": (321, 0, 0, 0),
    "perf_event_open": (298, 0, 0, -1, -1, 0),
    "io_uring_setup": (425, 1, 0),
    "userfaultfd": (323, 0),
    "kexec_load": (246, 0, 0, 0, 0),
    "reboot": (169, 0, 0, 0, 0),
    "personality(ADDR_NO_RANDOMIZE)": (135, 0x0040000),
    "kcmp": (312, 1, 1, 0, 0, 0),
}
for name, (nr, *args) in calls.items():
    ctypes.set_errno(0)
    result = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    print(name, result, errno.errorcode.get(ctypes.get_errno(), "-"))
"""


def test_denied_system_calls_fail_from_inside(lane):
    result = lane.shell(f"python3 - <<'EOF'\n{PROBE}\nEOF")
    answers = {}
    for line in result.stdout.splitlines():
        name, _returned, code = line.rsplit(" ", 2)
        answers[name] = code
    expected = dict.fromkeys(answers, "EPERM")
    expected["clone3"] = "ENOSYS"  # so the C library falls back to clone, whose flags are seen
    assert len(answers) == 27 and answers == expected


def test_namespaces_tracers_and_debuggers_fail_while_ordinary_work_goes_on(lane):
    result = lane.shell(
        "unshare -U true; unshare -m true; unshare -n true; unshare -r true; "
        "strace -e trace=none true; strace -p $PPID; gdb -batch -p $PPID; "
        "grep Seccomp: /proc/self/status /proc/$PPID/status; "
        # fork, threads and subprocesses still work
        'python3 -c "import os, subprocess, threading\n'
        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
        "print(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout.strip())\n"
        "pid = os.fork()\nos._exit(0) if pid == 0 else print('fork', os.waitpid(pid, 0)[1])\""
    )
    errors = result.stderr.splitlines()
    assert errors.count("unshare: unshare failed: Operation not permitted") == 4
    assert "PTRACE_TRACEME: Operation not permitted" in result.stderr  # strace of a child
    assert "strace: attach: ptrace(PTRACE_ATTACH, 2): Operation not permitted" in errors
    assert "ptrace: Operation not permitted." in errors  # gdb -p
    assert result.stdout.count("Seccomp:\t2") == 2  # the shell and its supervisor
    assert result.stdout.endswith("thread\nchild\nfork 0\n")


def test_the_supervisor_is_not_dumpable(lane):
    # Same uid, yet its memory, environment and descriptors stay closed to the shell.
    result = lane.shell(
        "cat /proc/$PPID/environ; ls /proc/$PPID/fd; head -c 1 /proc/$PPID/mem; "
        "grep -E 'Max (processes|file size|core file size)' /proc/$PPID/limits"
    )
    assert result.stderr.count("Permission denied") == 3
    limits = {
        " ".join(line.split()[:-3]): line.split()[-3:-1] for line in result.stdout.splitlines()
    }
    assert limits == {
        "Max core file size": ["0", "0"],
        "Max file size": [str(256 * 1024**2)] * 2,
        "Max processes": [str(SHELL.pids // 2)] * 2,
    }


def test_usr_local_of_the_host_is_not_there(lane):
    result = lane.shell("ls -A /usr/local; cat /usr/local/bin/* 2>&1 | head -1; touch /usr/local/x")
    assert result.stdout == "cat: '/usr/local/bin/*': No such file or directory\n"
    assert "Read-only file system" in result.stderr
    assert os.listdir("/usr/local")  # the host has one


# -- limits the supervisor cannot be asked to lift -------------------------------------


def test_the_shells_limits_cannot_be_lifted_through_the_tool(lane):
    started = time.monotonic()
    result = lane.shell("sleep 60", timeout_s=10_000)
    assert result.timed_out and time.monotonic() - started < SHELL.shell_timeout_s + 3
    raised = lane.shell("ulimit -H -p 100000 && echo raised; ulimit -H -f unlimited && echo raised")
    assert "raised" not in raised.stdout
    assert raised.stderr.count("Operation not permitted") == 2


def test_the_supervisor_keeps_its_bounds_whatever_it_is_asked(lane):
    # Asked directly, past the host's own checks: bounds only go down, never up, and
    # input runs no program.
    started = time.monotonic()
    reply = lane._call(
        "shell",
        {
            "op": "shell",
            "command": "ulimit -H -t; ulimit -H -p; ulimit -H -f; ulimit -H -n; echo; "
            "head -c 100000 /dev/zero | tr '\\0' x; sleep 60",
            "timeout_s": float("inf"),
            "max_bytes": 10**9,
        },
        timeout_s=30,
    )
    assert reply["timed_out"] and time.monotonic() - started < SHELL.shell_timeout_s + 3
    assert reply["stdout_bytes"] > len(reply["stdout"].encode()) == SHELL.output_max_bytes
    assert reply["stdout"].split()[:4] == [
        str(SHELL.shell_timeout_s + 1), str(SHELL.pids // 2), str(256 * 1024**2 // 512), "1024"
    ]  # fmt: skip
    # Input is not the agent's supervisor's to send (the display's sends it, and runs
    # no program either: test_xtest.py).
    argv = ["exec", "sh", "-c", "touch /work/pwned"]
    assert lane._call("input", {"op": "input", "argv": argv}) == {
        "ok": False,
        "error": "unknown op 'input'",
    }
    assert (
        lane._call("x", {"op": "navigate", "url": "http://x/"})["error"] == "unknown op 'navigate'"
    )
    assert not (lane.work_dir / "pwned").exists()


# -- untrusted bytes -----------------------------------------------------------------------


def test_nul_and_bytes_that_are_not_utf8_come_back_escaped_and_flagged(lane):
    result = lane.shell("printf 'a\\000b\\377c\\\\d'; printf 'e\\000' >&2")
    assert (result.stdout, result.stderr, result.escaped) == ("a\\x00b\\xffc\\\\d", "e\\x00", True)
    plain = lane.shell("printf 'caf\\303\\251 \\\\ ok'")
    assert (plain.stdout, plain.escaped) == ("café \\ ok", False)


def test_file_names_with_nul_or_bad_bytes_are_refused_or_renamed(lane, tmp_path):
    lane.shell("printf x > \"$(printf 'bad\\377name.txt')\"")
    [delivered] = lane.collect_files(["bad\udcffname.txt"], tmp_path / "dest")
    assert delivered.name == "bad_name.txt" and delivered.size == 1
    with pytest.raises(ToolError, match="cannot contain NUL"):
        lane.collect_files(["a\x00b.txt"], tmp_path / "other")
    result = tool_call(lane, "deliver", {"message": "m", "files": ["x\x00"]}, deliver_dir=tmp_path)
    assert not result.ok and "NUL" in result.error


def test_a_deliver_that_fails_midway_leaves_no_file_behind(lane, tmp_path):
    lane.shell("printf one > one.txt; printf two > two.txt; head -c 9999 /dev/zero > big")
    deliveries = tmp_path / "deliveries"
    dest = deliveries / "run-21"
    for names in (["one.txt", "missing.txt"], ["one.txt", "two.txt", "big"]):
        with pytest.raises(ToolError):
            lane.collect_files(names, dest)
        assert list(deliveries.iterdir()) == []  # neither the files nor a staging dir
    delivered = lane.collect_files(["one.txt", "two.txt"], dest)
    assert [d.name for d in delivered] == ["one.txt", "two.txt"]
    assert sorted(p.name for p in deliveries.iterdir()) == ["run-21"]
    assert (dest / "two.txt").read_text() == "two"


# -- a supervisor that lies ---------------------------------------------------------------
# Under the Docker backend the agent shares its container (and uid) with its supervisor
# and could replace it: the host treats every reply as hostile.


class LyingSupervisor(FakeSupervisor):
    def _serve(self, conn):
        with contextlib.suppress(OSError):  # the host hangs up on the flood
            super()._serve(conn)

    def answer(self, request):
        if request.get("op") == "shell" and request["command"] == "flood":
            return {"ok": True, "stdout": "x" * (20 * 1024**2)}
        if request.get("op") == "shell" and request["command"] == "garbage":
            return {
                "ok": True,
                "stdout": "a\x00b\udcff",
                "stderr": ["not", "text"],
                "stdout_bytes": "lots",
                "stderr_bytes": -5,
                "exit_code": True,
            }
        return super().answer(request)


def test_a_lying_supervisor_gets_bounded_storable_results(sandbox_root, tmp_path):
    registry: dict = {}
    image = "agent-arena-desktop:test"
    with FakeEngine(
        sandbox_root / "engine.sock", images={image}, on_start=LyingSupervisor.on_start(registry)
    ) as engine:
        backend = DockerBackend(image, sandbox_root, UID_BASE, client_factory=engine.client)
        box = backend.provision(SandboxSpec(run_id=23, width=64, height=48), slot=15)
        try:
            flood = tool_call(box, "shell", {"command": "flood"}, deliver_dir=tmp_path)
            assert not flood.ok and flood.error == "the sandbox answered more than the reply limit"
            garbage = tool_call(box, "shell", {"command": "garbage"}, deliver_dir=tmp_path)
            assert (garbage.stdout, garbage.stderr, garbage.escaped) == ("a\\x00b\\xff", "", True)
            assert garbage.exit_code is None
            assert garbage.data == {"stdout_bytes": 0, "stderr_bytes": 0}
        finally:
            box.destroy()
            backend.close()
