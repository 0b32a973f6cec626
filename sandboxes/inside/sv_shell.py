"""The agent sandbox's ``shell`` op: one command under the supervisor's limits."""

import contextlib
import os
import signal
import subprocess
import time

from sv_limits import limiter


def run_shell(command: str, timeout_s: float, max_bytes: int, limits: dict) -> dict:
    started = time.monotonic()
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command],
        cwd="/work",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own group: a timeout kills grandchildren too
        preexec_fn=limiter(limits),
    )
    out, err = bytearray(), bytearray()
    counts = {"out": 0, "err": 0}
    timed_out = False

    import selectors

    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, ("out", out))
    selector.register(proc.stderr, selectors.EVENT_READ, ("err", err))
    open_streams = 2
    deadline = started + timeout_s
    while open_streams:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        for key, _ in selector.select(timeout=left):
            chunk = os.read(key.fileobj.fileno(), 65536)
            name, sink = key.data
            if not chunk:
                selector.unregister(key.fileobj)
                open_streams -= 1
                continue
            counts[name] += len(chunk)
            room = max_bytes - len(sink)
            if room > 0:
                sink += chunk[:room]
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        code = proc.wait(timeout=max(0.1, deadline - time.monotonic()) if not timed_out else 5)
    except subprocess.TimeoutExpired:
        # Output closed but the process lingers: the limit still applies to it.
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
    # Descendants that left the group (setsid) are killed when the sandbox ends;
    # within the group, nothing survives a timeout.
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    selector.close()
    proc.stdout.close()
    proc.stderr.close()
    return {
        "ok": not timed_out and code == 0,
        "exit_code": code,
        # Bytes that are not UTF-8 travel as lone surrogates (JSON \\udcNN escapes); the
        # host stores them escaped and flagged (sandboxes.untrusted).
        "stdout": out.decode(errors="surrogateescape"),
        "stderr": err.decode(errors="surrogateescape"),
        "stdout_bytes": counts["out"],
        "stderr_bytes": counts["err"],
        "timed_out": timed_out,
    }
