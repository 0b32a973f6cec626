"""The judge sandbox's test harness (docs/coding.md, "Grades from outside the code under
test"). Standard library only; it runs on the sandbox's own python3 as

    python3 -I -S /work/.arena-judge/_arena_judge_harness.py '<json config>'

(-I -S: no site, no user site, no environment, no script or working directory on
sys.path, so nothing of the repository is ever imported here) as the last command of its
shell (``exec``): this process alone holds the pipe its output goes to, and it makes
itself not dumpable before it starts anything, so no other process of the sandbox's
uid can open that pipe through /proc or trace this one.

It starts pytest in a child (``_arena_run_pytest.py``) whose observer plugin reports
every collected test and every test phase's outcome on a pipe; the child's own output
goes to another pipe, of which only the tail is kept for people to read. Nothing the
child prints, and no file it writes, is read as a result. In ``run`` mode the plugin
also runs the host's *check tests*: tests that must fail, hidden among the real ones
under names the host chose. Before and after the child, every process of the sandbox
but this one and its ancestors is killed and the scratch directories are emptied; the
files the host names (``watch``) are hashed before and after.

It prints one line, ``ARENA-HARNESS-RESULT <json>``: the child's exit status, whether
it timed out, the outcome of each test (one per test: ``passed``, ``failed``,
``error``, ``skipped``), the check tests' outcomes, the records it could not read, and
the watched files that changed. The host decides what that means (``coding.grading``).
"""

import contextlib
import ctypes
import hashlib
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import time

MARK = "ARENA-HARNESS-RESULT "
HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "_arena_run_pytest.py")
PR_SET_DUMPABLE = 4
RECORDS_MAX_BYTES = 32 * 1024**2
LINE_MAX_BYTES = 4 * 1024**2
DRAIN_S = 5.0
SCRATCH = ("/tmp", "/home/agent")  # noqa: S108 - the sandbox's own


def not_dumpable() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")


def _ancestors() -> set[int]:
    keep, pid = {1, os.getpid()}, os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                pid = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        keep.add(pid)
    return keep


# What runs as PID 1 of a sandbox's own PID namespace: bubblewrap, or Docker's init.
SANDBOX_INITS = (b"bwrap", b"docker-init", b"tini")


class NotInSandbox(RuntimeError):
    """The harness kills every other process it sees: it runs in a sandbox or not at all."""


def in_sandbox() -> bool:
    """Whether this process sees a sandbox's PID namespace (its PID 1 is bubblewrap or
    Docker's init) and is not root."""
    try:
        with open("/proc/1/comm", "rb") as comm:
            init = comm.read().strip()
    except OSError:
        return False
    return os.geteuid() != 0 and init in SANDBOX_INITS


def kill_leftovers(passes: int = 50) -> bool:
    """Kills every process of the sandbox but this one, its ancestors and what the
    engine started in it from outside (a remote engine's channels), pass after
    pass until one finds nothing to kill; True when the last pass found nothing.
    Refuses outside a sandbox (``NotInSandbox``)."""
    if not in_sandbox():
        raise NotInSandbox("the judge harness runs only inside a sandbox")
    keep = _ancestors()
    for _ in range(passes):
        killed = 0
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in keep:
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as stat:
                    state, ppid = stat.read().rsplit(b")", 1)[1].split()[:2]
                # A zombie runs nothing; a parent outside the sandbox's pid namespace
                # (ppid 0) is the worker's own exec (a channel), never the agent's.
                if state == b"Z" or ppid == b"0":
                    continue
                os.kill(int(name), signal.SIGKILL)
                killed += 1
            except (OSError, IndexError):
                continue
        if not killed:
            return True
        time.sleep(0.01)
    return False


def empty_scratch() -> None:
    """Empties the directories a previous command could leave files in for the next
    (in a sandbox only: ``NotInSandbox``)."""
    if not in_sandbox():
        raise NotInSandbox("the judge harness runs only inside a sandbox")
    for top in SCRATCH:
        try:
            names = os.listdir(top)
        except OSError:
            continue
        for name in names:
            path = os.path.join(top, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except OSError:
                pass


def digest(path: str) -> str:
    """A watched file's hash ("" when missing, "link"/"other" when not a plain file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return ""
    except OSError:
        return "link"
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return "other"
        return hashlib.sha256(handle.read()).hexdigest()


class Records:
    """The observer's JSON lines, bounded; what does not parse is counted."""

    def __init__(self) -> None:
        self.buffer = b""
        self.size = 0
        self.overflow = False
        self.malformed = 0
        self.items: list[dict] = []

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.overflow or self.size > RECORDS_MAX_BYTES:
            self.overflow = True
            return
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        if len(self.buffer) > LINE_MAX_BYTES:
            self.overflow = True
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                self.malformed += 1
                continue
            if isinstance(record, dict) and isinstance(record.get("k"), str):
                self.items.append(record)
            else:
                self.malformed += 1

    def close(self) -> None:
        if self.buffer.strip():
            self.malformed += 1


def final_outcomes(reports: list[dict]) -> dict[str, str]:
    """One outcome per test from its phases' reports: ``error`` when setup or teardown
    failed, else ``failed`` when the call failed, else ``skipped`` when a phase was
    skipped (an expected failure included), else ``passed`` when the call passed."""
    phases: dict[str, dict[str, tuple[str, bool]]] = {}
    for report in reports:
        node, when, outcome = report.get("id"), report.get("when"), report.get("outcome")
        if not isinstance(node, str) or when not in ("setup", "call", "teardown"):
            continue
        if outcome not in ("passed", "failed", "skipped"):
            continue
        phases.setdefault(node, {})[when] = (outcome, bool(report.get("xfail")))
    final: dict[str, str] = {}
    for node, seen in phases.items():
        outcomes = {when: outcome for when, (outcome, _) in seen.items()}
        call, xfail = seen.get("call", ("", False))
        if "failed" in (outcomes.get("setup"), outcomes.get("teardown")):
            final[node] = "error"
        elif call == "failed":
            final[node] = "failed"
        elif "skipped" in outcomes.values() or (xfail and call != "passed"):
            final[node] = "skipped"
        elif call == "passed":
            final[node] = "passed"
        else:
            final[node] = "error"  # set up and torn down, never called
    return final


def run(config: dict) -> dict:
    repo = os.getcwd()
    watch = [str(p) for p in config.get("watch", [])][:5000]
    quiet_before = kill_leftovers()
    empty_scratch()
    before = {path: digest(os.path.join(repo, path)) for path in watch}
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/agent",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",  # noqa: S108 - the sandbox's own
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
    }
    for name, value in (config.get("env") or {}).items():
        if isinstance(name, str) and isinstance(value, str) and name.isidentifier():
            env[name] = value
    cfg_r, cfg_w = os.pipe()
    rec_r, rec_w = os.pipe()
    out_r, out_w = os.pipe()
    child_config = {
        "mode": config["mode"],
        "args": [str(a) for a in config.get("args", [])],
        "module": bool(config.get("module")),
        "canaries": config.get("canaries", []) if config["mode"] == "run" else [],
    }
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, RUNNER, str(cfg_r), str(rec_w)],
        cwd=repo,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=out_w,
        stderr=out_w,
        pass_fds=(cfg_r, rec_w),
        start_new_session=True,
    )
    for fd in (cfg_r, rec_w, out_w):
        os.close(fd)
    data = json.dumps(child_config).encode()
    with contextlib.suppress(OSError):  # a child that died at once reads nothing
        while data:
            data = data[os.write(cfg_w, data) :]
    os.close(cfg_w)
    records, tail = Records(), bytearray()
    tail_bytes = int(config.get("tail_bytes", 8192))
    deadline = started + float(config.get("timeout_s", 600))
    open_fds = {rec_r, out_r}
    timed_out = False

    def pump(wait: float) -> None:
        ready, _, _ = select.select(list(open_fds), [], [], wait)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
            elif fd == rec_r:
                records.feed(chunk)
            else:
                tail.extend(chunk)
                del tail[: max(0, len(tail) - tail_bytes)]

    while proc.poll() is None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if open_fds:
            pump(min(left, 0.5))
        else:
            time.sleep(min(left, 0.05))
    if timed_out:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    code = proc.wait()
    seconds = round(time.monotonic() - started, 3)
    # What the tests started and left running dies before the pipes are read to the end.
    quiet_after = kill_leftovers()
    drain_until = time.monotonic() + DRAIN_S
    while open_fds and time.monotonic() < drain_until:
        pump(0.1)
    for fd in (rec_r, out_r):
        os.close(fd)
    records.close()
    after = {path: digest(os.path.join(repo, path)) for path in watch}
    empty_scratch()
    reports = [r for r in records.items if r["k"] == "report"]
    canary_names = {str(c.get("name")) for c in child_config["canaries"]}
    outcomes = final_outcomes(reports)
    canaries = {name: None for name in canary_names}
    for node in list(outcomes):
        name = node.rsplit("::", 1)[-1]
        if name in canary_names:
            canaries[name] = outcomes.pop(node)
    collected: list[str] = []
    for record in records.items:
        if record["k"] == "collected" and isinstance(record.get("ids"), list):
            collected = [i for i in record["ids"] if isinstance(i, str)]
    errors = [
        r["id"] for r in records.items if r["k"] == "collect_error" and isinstance(r.get("id"), str)
    ]
    finished = [r for r in records.items if r["k"] == "finish"]
    return {
        "exit_code": code if code >= 0 else None,
        "signal": -code if code < 0 else None,
        "timed_out": timed_out,
        "seconds": seconds,
        "collected": collected,
        "collect_errors": errors,
        "outcomes": outcomes,
        "canaries": canaries,
        "finished": bool(finished),
        "malformed": records.malformed,
        "overflow": records.overflow,
        "watch_changed": sorted(path for path in watch if before[path] != after[path]),
        "quiet": quiet_before and quiet_after,
        "output": tail.decode("utf-8", "replace"),
    }


def main() -> None:
    if not in_sandbox():
        sys.exit("the judge harness runs only inside a sandbox (it kills every other process)")
    not_dumpable()
    config = json.loads(sys.argv[1])
    result = run(config)
    sys.stdout.write(MARK + json.dumps(result, separators=(",", ":")) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
