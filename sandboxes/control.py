"""The host's end of an in-sandbox supervisor (``sandboxes/inside/supervisor.py``):
what it is told, and how it is called: one JSON request and one JSON line back at a
time over a unix socket, the reply bounded. Shared by both backends."""

import contextlib
import json
import os
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any

from sandboxes.base import SandboxSpec, ToolError

SHELL_FSIZE_BYTES = 256 * 1024**2


def connect_nofollow(path: Path, timeout_s: float) -> socket.socket:
    """Connects to the unix socket at ``path`` unless it is a symlink (or not a socket).
    The sandbox owns its control dir and could point ``ctl.sock`` at a host socket for
    the worker to dial as root; ``connect`` follows symlinks and has no O_NOFOLLOW, so
    the socket is pinned with an O_PATH descriptor and dialled through /proc/self/fd."""
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise ToolError("the sandbox's control socket was replaced by something else")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout_s)
            sock.connect(f"/proc/self/fd/{fd}")
        except BaseException:
            sock.close()
            raise
        return sock
    finally:
        os.close(fd)


def supervisor_config(spec: SandboxSpec, role: str) -> dict[str, Any]:
    """What an in-sandbox supervisor of ``role`` is told (both backends run the same two):
    ``agent`` serves the shell, under the bounds a shell request may only lower;
    ``display`` runs Xvfb and Chromium and serves the browser and input."""
    if role == "agent":
        return {
            "role": "agent",
            "shell_timeout_s": spec.shell_timeout_s,
            "output_max_bytes": spec.output_max_bytes,
            "shell_limits": {
                "RLIMIT_CPU": max(1, spec.shell_timeout_s + 1),
                "RLIMIT_FSIZE": SHELL_FSIZE_BYTES,
                "RLIMIT_NPROC": spec.pids // 2,
                "RLIMIT_NOFILE": 1024,
                # no RLIMIT_AS: the cgroup bounds memory
            },
            # The supervisor's own (hard) rlimits: no child of it can have more.
            "self_limits": {
                "RLIMIT_FSIZE": SHELL_FSIZE_BYTES,
                "RLIMIT_NPROC": spec.pids // 2,
                "RLIMIT_NOFILE": 4096,
            },
        }
    if role == "display":
        return {
            "role": "display",
            "width": spec.width,
            "height": spec.height,
            "start_url": spec.start_url,
            # Xvfb, Chromium and xdotool run under these; no RLIMIT_AS: it breaks
            # Chromium's heap reservation.
            "self_limits": {
                "RLIMIT_FSIZE": SHELL_FSIZE_BYTES,
                "RLIMIT_NPROC": spec.pids,
                "RLIMIT_NOFILE": 16384,
            },
        }
    raise ValueError(f"no supervisor role {role!r}")


def reply_of(line: bytes) -> dict[str, Any]:
    """A supervisor's reply: one JSON object, or ToolError (whatever the transport)."""
    try:
        reply = json.loads(line)
    except ValueError as exc:
        raise ToolError("the sandbox answered garbage") from exc
    if not isinstance(reply, dict):
        raise ToolError("the sandbox answered garbage")
    return reply


class SupervisorClient:
    """One request/response at a time over the supervisor's unix socket."""

    def __init__(self, path: Path, max_reply_bytes: int) -> None:
        self.path = path
        self.max_reply_bytes = max_reply_bytes
        self.sock: socket.socket | None = None
        self.buffer = b""
        self.lock = threading.Lock()

    def call(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        with self.lock:
            if self.sock is None:
                self.sock = connect_nofollow(self.path, timeout_s)
            self.sock.settimeout(timeout_s)
            self.sock.sendall(json.dumps(request).encode() + b"\n")
            deadline = time.monotonic() + timeout_s
            while b"\n" not in self.buffer:
                if len(self.buffer) > self.max_reply_bytes:
                    self.close()
                    raise ToolError("the sandbox answered more than the reply limit")
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    self.close()
                    raise ToolError("the sandbox's supervisor went away")
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\n", 1)
        return reply_of(line)

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
        self.sock = None
        self.buffer = b""
