"""The ``local`` backend: one bubblewrap sandbox per run, alive for the run.

Inside: all namespaces unshared (the network namespace has only its own ``lo``), the
slot's unprivileged uid when the worker is root (never host root inside), ``/usr``
and a few files of ``/etc`` read-only, tmpfs home and ``/tmp``, the run's work dir at
``/work``, and ``--die-with-parent``. A supervisor (``sandboxes/inside/supervisor.py``)
runs as the sandbox's first process: it starts Xvfb and Chromium (whose own sandbox
stays on) and serves the tools over a unix socket in a bound control directory. The
host reads screenshots straight from Xvfb's framebuffer file. A cgroup bounds the
whole sandbox's memory, processes and CPU where the host allows it; rlimits bound
each shell command. Destroy kills the bwrap process, which takes the whole tree with
it (a dying PID namespace kills every member)."""

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandboxes import cgroups
from sandboxes.base import (
    DeliveredFile,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
    ToolError,
    ToolResult,
)
from sandboxes.reaping import become_subreaper, reap_orphans
from sandboxes.screens import ScreenError, framebuffer_png

if TYPE_CHECKING:
    from sandboxes.egress import EgressProxyThread

BWRAP = "bwrap"
SUPERVISOR = Path(__file__).resolve().parent / "inside" / "supervisor.py"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# Read-only host paths the desktop needs; nothing else of the host's /etc is visible.
RO_ETC = ("/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime", "/etc/fonts", "/etc/ssl/certs")
PROVISION_TIMEOUT_S = 30.0
X_BUTTONS = {"left": "1", "middle": "2", "right": "3"}
KEY_ALLOWED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+_-")
# The page state after each step (``page_state``): the same bounds as ``navigate``'s.
PAGE_URL_MAX_CHARS, PAGE_TITLE_MAX_CHARS = 2000, 500
PAGE_STATE_TIMEOUT_S = 5.0


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


def supervisor_config(spec: SandboxSpec) -> dict[str, Any]:
    """What the in-sandbox supervisor is told (the same under every backend)."""
    return {
        "desktop": spec.desktop,
        "width": spec.width,
        "height": spec.height,
        "start_url": spec.start_url,
        "shell_limits": {
            "RLIMIT_CPU": max(1, spec.shell_timeout_s + 1),
            "RLIMIT_FSIZE": 256 * 1024**2,
            "RLIMIT_NPROC": spec.pids // 2,
            "RLIMIT_NOFILE": 1024,
            # no RLIMIT_AS: it breaks Chromium's heap reservation; the cgroup bounds memory
        },
    }


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
        try:
            reply = json.loads(line)
        except ValueError as exc:
            raise ToolError("the sandbox answered garbage") from exc
        if not isinstance(reply, dict):
            raise ToolError("the sandbox answered garbage")
        return reply

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
        self.sock = None
        self.buffer = b""


class LocalSandbox(Sandbox):
    def __init__(
        self,
        spec: SandboxSpec,
        run_dir: Path,
        uid: int | None,
        proc: subprocess.Popen,
        cgroup: cgroups.SandboxCgroup | None,
        egress: "EgressProxyThread | None" = None,
    ) -> None:
        self.spec = spec
        self.egress = egress
        self.run_dir = run_dir
        self.work_dir = run_dir / "work"
        self.uid = uid
        self.proc = proc
        self.cgroup = cgroup
        self.client = SupervisorClient(
            run_dir / "ctl" / "ctl.sock", max_reply_bytes=4 * spec.output_max_bytes + (1 << 20)
        )
        self._destroyed = False
        self._destroy_lock = threading.Lock()
        # The sandbox's hard wall-clock limit, whatever the orchestrator does.
        self._reaper = threading.Timer(spec.lifetime_s, self.destroy)
        self._reaper.daemon = True
        self._reaper.start()

    # -- plumbing --------------------------------------------------------------------

    def _call(self, tool: str, request: dict[str, Any], timeout_s: float = 20.0) -> dict[str, Any]:
        if self._destroyed:
            raise ToolError("sandbox destroyed")
        try:
            return self.client.call(request, timeout_s)
        except TimeoutError as exc:
            self.client.close()
            raise ToolError(f"{tool} did not answer within {timeout_s:g} s") from exc
        except OSError as exc:
            self.client.close()
            raise ToolError(f"{tool} failed: {exc}") from exc

    def _input(self, tool: str, *argv: object) -> ToolResult:
        reply = self._call(tool, {"op": "input", "argv": [str(a) for a in argv]})
        return ToolResult(ok=bool(reply.get("ok")), tool=tool, error=str(reply.get("error", "")))

    def _check_point(self, x: int, y: int) -> None:
        if not (0 <= x < self.spec.width and 0 <= y < self.spec.height):
            raise ToolError(
                f"({x}, {y}) is off the screen; x must be in [0, {self.spec.width}), "
                f"y in [0, {self.spec.height})"
            )

    # -- tools -----------------------------------------------------------------------

    def screenshot(self) -> ToolResult:
        if not self.spec.desktop:
            return ToolResult(ok=False, tool="screenshot", error="this sandbox has no display")
        try:
            png, width, height = framebuffer_png(str(self.run_dir / "fb" / "Xvfb_screen0"))
        except ScreenError as exc:
            return ToolResult(ok=False, tool="screenshot", error=str(exc))
        return ToolResult(
            ok=True, tool="screenshot", image=png, data={"width": width, "height": height}
        )

    def mouse_move(self, x: int, y: int) -> ToolResult:
        self._check_point(x, y)
        return self._input("mouse_move", "mousemove", x, y)

    def click(self, x: int, y: int, button: str = "left", count: int = 1) -> ToolResult:
        self._check_point(x, y)
        if button not in X_BUTTONS:
            raise ToolError(f"button must be one of {', '.join(X_BUTTONS)}")
        if not 1 <= count <= 3:
            raise ToolError("count must be 1, 2 or 3")
        # xdotool sleeps --delay after every click (100 ms by default): none for a single
        # click, and one inside the double-click interval between repeats.
        delay = 60 if count > 1 else 0
        argv: list[object] = ["mousemove", x, y, "click", "--repeat", count, "--delay", delay]
        return self._input("click", *argv, X_BUTTONS[button])

    def drag(self, x1: int, y1: int, x2: int, y2: int) -> ToolResult:
        self._check_point(x1, y1)
        self._check_point(x2, y2)
        return self._input(
            "drag", "mousemove", x1, y1, "mousedown", 1, "mousemove", x2, y2, "mouseup", 1
        )

    def scroll(self, x: int, y: int, dx: int, dy: int) -> ToolResult:
        self._check_point(x, y)
        if abs(dx) > 50 or abs(dy) > 50:
            raise ToolError("scroll at most 50 notches per call")
        argv: list[object] = ["mousemove", x, y]
        if dy:
            argv += ["click", "--repeat", abs(dy), "--delay", 10, 5 if dy > 0 else 4]
        if dx:
            argv += ["click", "--repeat", abs(dx), "--delay", 10, 7 if dx > 0 else 6]
        return self._input("scroll", *argv)

    def type(self, text: str) -> ToolResult:
        if len(text) > 10_000:
            raise ToolError("type at most 10,000 characters per call")
        return self._input("type", "type", "--delay", 2, "--", text)

    def key(self, combo: str) -> ToolResult:
        if not combo or len(combo) > 100 or not set(combo) <= KEY_ALLOWED:
            raise ToolError("key takes a combination like 'ctrl+l', 'Return' or 'shift+Tab'")
        return self._input("key", "key", "--", combo)

    def navigate(self, url: str) -> ToolResult:
        if not url.startswith(("http://", "https://")) and url != "about:blank":
            raise ToolError("navigate takes an http:// or https:// URL")
        reply = self._call("navigate", {"op": "navigate", "url": url}, timeout_s=35)
        return ToolResult(
            ok=bool(reply.get("ok")),
            tool="navigate",
            error=str(reply.get("error", "")),
            data={
                "url": str(reply.get("url", ""))[:PAGE_URL_MAX_CHARS],
                "title": str(reply.get("title", ""))[:PAGE_TITLE_MAX_CHARS],
            },
        )

    def page_state(self) -> dict[str, str] | None:
        if not self.spec.desktop:
            return None
        try:
            reply = self._call("page_state", {"op": "state"}, timeout_s=PAGE_STATE_TIMEOUT_S)
        except ToolError:
            return None
        url, title = reply.get("url"), reply.get("title")
        return {
            "url": url[:PAGE_URL_MAX_CHARS] if isinstance(url, str) else "",
            "title": title[:PAGE_TITLE_MAX_CHARS] if isinstance(title, str) else "",
        }

    def shell(self, command: str, timeout_s: float | None = None) -> ToolResult:
        timeout = min(float(timeout_s or self.spec.shell_timeout_s), self.spec.shell_timeout_s)
        limit = self.spec.output_max_bytes
        reply = self._call(
            "shell",
            {"op": "shell", "command": command, "timeout_s": timeout, "max_bytes": limit},
            timeout_s=timeout + 10,
        )
        stdout, stderr = str(reply.get("stdout", ""))[:limit], str(reply.get("stderr", ""))[:limit]
        out_total = int(reply.get("stdout_bytes", 0))
        err_total = int(reply.get("stderr_bytes", 0))
        truncated = out_total > limit or err_total > limit
        timed_out = bool(reply.get("timed_out"))
        result = ToolResult(
            ok=bool(reply.get("ok")) and not timed_out,
            tool="shell",
            stdout=stdout,
            stderr=stderr,
            exit_code=reply.get("exit_code") if isinstance(reply.get("exit_code"), int) else None,
            truncated=truncated,
            timed_out=timed_out,
            data={"stdout_bytes": out_total, "stderr_bytes": err_total},
        )
        if timed_out:
            result.error = f"command timed out after {timeout:g} s and was killed"
        elif truncated:
            result.error = f"output truncated to {limit} bytes per stream"
        return result

    def collect_files(self, names: list[str], dest: Path) -> list[DeliveredFile]:
        if len(names) > self.spec.deliver_max_files:
            raise ToolError(f"at most {self.spec.deliver_max_files} files may be delivered")
        dest.mkdir(parents=True, exist_ok=True)
        delivered: list[DeliveredFile] = []
        budget = self.spec.deliver_max_bytes
        for name in names:
            data = self._read_workspace_file(name, budget)
            budget -= len(data)
            safe = _safe_name(name, taken={d.name for d in delivered})
            target = dest / safe
            target.write_bytes(data)
            delivered.append(
                DeliveredFile(
                    name=safe, path=target, size=len(data), sha256=hashlib.sha256(data).hexdigest()
                )
            )
        return delivered

    def _read_workspace_file(self, name: str, budget: int) -> bytes:
        """Opens ``name`` under the work dir one component at a time with O_NOFOLLOW, so
        neither a symlink nor ``..`` can lead outside it."""
        raw = str(name)
        if raw.startswith("/"):
            if not raw.startswith("/work/"):
                raise ToolError(f"{name!r} is outside the workspace (/work)")
            raw = raw[len("/work/") :]
        parts = [p for p in raw.split("/") if p not in ("", ".")]
        if not parts or ".." in parts:
            raise ToolError(f"{name!r} is not a file in the workspace")
        dir_fd = os.open(self.work_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in parts[:-1]:
                try:
                    next_fd = os.open(
                        part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd
                    )
                except OSError as exc:
                    raise ToolError(
                        f"{name!r}: {part!r} is not a directory in the workspace"
                    ) from exc
                os.close(dir_fd)
                dir_fd = next_fd
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
            except OSError as exc:
                raise ToolError(f"{name!r} does not exist or is a link") from exc
        finally:
            os.close(dir_fd)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise ToolError(f"{name!r} is not a regular file")
        with os.fdopen(fd, "rb") as handle:
            if info.st_size > budget:
                raise ToolError(
                    f"{name!r} is {info.st_size} bytes; deliveries are limited to "
                    f"{self.spec.deliver_max_bytes} bytes in all"
                )
            data = handle.read(budget + 1)
        if len(data) > budget:
            raise ToolError(f"{name!r} grew past the delivery limit while being read")
        return data

    def health(self) -> dict[str, Any]:
        alive = self.proc.poll() is None
        return {
            "ok": alive and not self._destroyed,
            "cgroup": self.cgroup.version if self.cgroup else "none",
        }

    def destroy(self) -> None:
        with self._destroy_lock:
            if self._destroyed:
                return
            self._destroyed = True
        self._reaper.cancel()
        self.client.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self.cgroup is not None:
            self.cgroup.kill_all()  # anything that escaped the process group
            self.cgroup.remove()
        if self.egress is not None:
            with contextlib.suppress(Exception):
                self.egress.release(self.spec.run_id)
        reap_orphans(keep=set())
        shutil.rmtree(self.run_dir, ignore_errors=True)


def _safe_name(name: str, taken: set[str]) -> str:
    base = "".join(c if c.isalnum() or c in "._-" else "_" for c in Path(name).name) or "file"
    base = base.lstrip(".") or "file"
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{n}-{base}"
    return candidate


def _check_traversable(root: Path) -> None:
    """The slot uids must reach their work dirs: every ancestor needs o+x."""
    for directory in [root, *root.resolve().parents]:
        if not os.stat(directory).st_mode & stat.S_IXOTH:
            raise RuntimeError(
                f"sandbox root {root} is not reachable by the sandbox uids: {directory} lacks "
                "o+x; choose another ARENA_SANDBOX_ROOT"
            )


class LocalBackend(SandboxBackend):
    name = "local"

    def __init__(
        self, root: Path, uid_base: int, egress: "EgressProxyThread | None" = None
    ) -> None:
        self.root = root
        self.uid_base = uid_base
        self.egress = egress

    def _argv(self, spec: SandboxSpec, run_dir: Path, uid: int | None) -> list[str]:
        argv: list[str] = []
        if uid is not None:
            argv += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
        argv += [
            BWRAP,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/bin", "/bin",
            "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64",
            "--symlink", "usr/sbin", "/sbin",
            "--proc", "/proc",
            "--dev", "/dev",
            "--tmpfs", "/tmp",  # noqa: S108 - the sandbox's own tmpfs
            "--dir", "/tmp/.X11-unix",  # noqa: S108
            "--tmpfs", "/home/agent",
        ]  # fmt: skip
        for path in RO_ETC:
            if os.path.exists(path):
                argv += ["--ro-bind", path, path]
        argv += [
            "--ro-bind", str(run_dir / "etc" / "passwd"), "/etc/passwd",
            "--ro-bind", str(run_dir / "etc" / "group"), "/etc/group",
            "--ro-bind", str(run_dir / "etc" / "hosts"), "/etc/hosts",
            "--ro-bind", str(SUPERVISOR), "/opt/arena/supervisor.py",
            "--bind", str(run_dir / "work"), "/work",
            "--bind", str(run_dir / "fb"), "/fb",
            "--bind", str(run_dir / "ctl"), "/run/arena",
            "--chdir", "/work",
            "--clearenv",
            "--setenv", "HOME", "/home/agent",
            "--setenv", "USER", "agent",
            "--setenv", "PATH", SANDBOX_PATH,
            "--setenv", "LANG", "C.UTF-8",
        ]  # fmt: skip
        if spec.egress and self.egress is not None:
            proxy = "http://127.0.0.1:3128"
            for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
                argv += ["--setenv", var, proxy]
        argv += [
            "--",
            "/usr/bin/python3",
            "-I",
            "/opt/arena/supervisor.py",
            json.dumps(supervisor_config(spec)),
        ]
        return argv

    def provision(self, spec: SandboxSpec, *, slot: int = 0) -> LocalSandbox:
        become_subreaper()
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # noqa: S103 - slot uids traverse it; nobody lists it
        root_worker = os.geteuid() == 0
        if root_worker:
            _check_traversable(self.root)
        run_dir = self.root / f"run-{spec.run_id}-{time.time_ns()}"
        for sub in ("work", "fb", "ctl", "etc"):
            (run_dir / sub).mkdir(parents=True)
        uid = self.uid_base + slot if root_worker else os.geteuid()
        (run_dir / "etc" / "passwd").write_text(f"agent:x:{uid}:{uid}:agent:/home/agent:/bin/sh\n")
        (run_dir / "etc" / "group").write_text(f"agent:x:{uid}:\n")
        (run_dir / "etc" / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
        if root_worker:
            os.chmod(run_dir, 0o711)  # noqa: S103 - traversable, not listable
            for sub in ("work", "fb", "ctl"):
                os.chown(run_dir / sub, uid, uid)
        if spec.egress and self.egress is not None:
            self.egress.serve_unix(
                str(run_dir / "ctl" / "egress.sock"),
                spec.run_id,
                owner_uid=uid if root_worker else None,
            )
        cgroup = cgroups.create(
            f"arena-slot-{slot}-{run_dir.name}",
            cgroups.Limits(spec.memory_mb * 1024**2, spec.pids, spec.cpu_fraction),
        )
        argv = self._argv(spec, run_dir, uid if root_worker else None)
        if cgroup is not None:
            # Join the groups before exec, so no process of the sandbox starts outside.
            joins = " ".join(f"echo $$ > {p};" for p in cgroup.procs_files)
            argv = ["/bin/sh", "-c", f'{joins} exec "$@"', "sandbox", *argv]
        log = open(run_dir / "supervisor.log", "wb")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                # bwrap is pid 1 inside and its /proc/1/environ is readable there: hand it
                # nothing of the worker's environment (database URLs, keys).
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            )
        finally:
            log.close()
        sandbox = LocalSandbox(
            spec, run_dir, uid if root_worker else None, proc, cgroup, egress=self.egress
        )
        try:
            self._wait_ready(sandbox)
        except BaseException:
            sandbox.destroy()
            raise
        return sandbox

    def _wait_ready(self, sandbox: LocalSandbox) -> None:
        ctl = sandbox.run_dir / "ctl" / "ctl.sock"
        deadline = time.monotonic() + PROVISION_TIMEOUT_S
        while not ctl.exists():
            if sandbox.proc.poll() is not None:
                tail = (
                    (sandbox.run_dir / "supervisor.log")
                    .read_bytes()[-2000:]
                    .decode(errors="replace")
                )
                raise RuntimeError(f"the sandbox exited while starting: {tail}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sandbox was not ready within {PROVISION_TIMEOUT_S:g} s")
            time.sleep(0.005)

    def health(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "ok": shutil.which(BWRAP) is not None and Path("/usr/lib/chromium/chromium").exists(),
            "cgroup": cgroups.detect(),
            "root_worker": os.geteuid() == 0,
        }
