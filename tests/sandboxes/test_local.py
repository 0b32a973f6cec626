"""The local backend, for real: bubblewrap, an unprivileged uid, rlimits, bounded output."""

import os
import subprocess
import time

import pytest

from sandboxes.base import SandboxSpec, ToolError
from sandboxes.local import LocalBackend

SPEC = SandboxSpec(
    run_id=1,
    shell_timeout_s=5,
    output_max_bytes=4096,
    deliver_max_files=3,
    deliver_max_bytes=10_000,
)


@pytest.fixture
def sandbox(sandbox_root):
    box = LocalBackend(sandbox_root, uid_base=61000).provision(SPEC, slot=3)
    yield box
    box.destroy()


def test_shell_runs_in_the_workspace(sandbox):
    result = sandbox.shell("pwd; echo hi > f; cat f")
    assert result.ok and result.exit_code == 0
    assert result.stdout == "/work\nhi\n"
    assert (sandbox.work_dir / "f").read_text() == "hi\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="uid drop needs a root worker")
def test_shell_runs_as_the_slot_uid_never_root(sandbox):
    assert sandbox.shell("id -u").stdout.strip() == str(61000 + 3)


def test_host_secrets_and_etc_are_not_visible(sandbox):
    result = sandbox.shell("cat /etc/shadow; cat /etc/passwd; ls /root; ls /etc")
    assert "root:" not in result.stdout
    assert sorted(result.stdout.split()) == ["alternatives", "ld.so.cache", "localtime"]


def test_no_network_but_loopback(sandbox):
    # the host's Redis/PostgreSQL listen on 127.0.0.1: the sandbox's loopback is its own
    probe = (
        'python3 -c "import socket; s = socket.socket(); s.settimeout(2); '
        "print(s.connect_ex(('127.0.0.1', 6379)))\""
    )
    result = sandbox.shell(probe)
    assert result.stdout.strip() == "111"  # ECONNREFUSED: nothing listens on its own lo
    routes = sandbox.shell("cat /proc/net/route | wc -l; ls /sys/class/net 2>/dev/null || true")
    assert routes.stdout.split()[0] == "1"  # header only: no routes at all


def test_timeout_kills_the_whole_tree(sandbox):
    started = time.monotonic()
    result = sandbox.shell("(sleep 100 &) ; setsid sleep 100 & sleep 100", timeout_s=1)
    assert result.timed_out and not result.ok
    assert "timed out" in result.error
    assert time.monotonic() - started < 5
    leftover = subprocess.run(["pgrep", "-f", "sleep 100"], capture_output=True, text=True)
    assert leftover.stdout.split() == []


def test_output_is_bounded_and_truncation_is_flagged(sandbox):
    result = sandbox.shell("head -c 1000000 /dev/zero | tr '\\0' x")
    assert result.truncated
    assert len(result.stdout) == SPEC.output_max_bytes
    assert result.data["stdout_bytes"] == 1_000_000
    assert "truncated" in result.error


def test_deliver_copies_files_out(sandbox, tmp_path):
    sandbox.shell("mkdir -p out && printf data > out/r.txt")
    [delivered] = sandbox.collect_files(["out/r.txt"], tmp_path / "dest")
    assert delivered.name == "r.txt" and delivered.size == 4
    assert (tmp_path / "dest" / "r.txt").read_text() == "data"


@pytest.mark.parametrize(
    "setup,name",
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


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root worker drops to slot uids")
def test_unreachable_root_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="not reachable by the sandbox uids"):
        LocalBackend(tmp_path / "sb", uid_base=61000).provision(SPEC)


def test_destroy_removes_everything_and_is_idempotent(sandbox_root):
    box = LocalBackend(sandbox_root, uid_base=61000).provision(SPEC, slot=4)
    box.shell("echo x > f")
    box.destroy()
    box.destroy()
    assert not box.run_dir.exists()
    assert box.shell("true").error == "sandbox destroyed"
