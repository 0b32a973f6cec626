"""The ``local`` backend: two bubblewrap sandboxes per run, alive for the run.

**The agent's sandbox** holds the supervisor that serves the shell and input tools,
the agent's shell and xdotool, as the slot's unprivileged uid (never host root inside).
All namespaces unshared (its network namespace has only its own ``lo``), user
namespaces disabled inside (``--disable-userns``), the ``AGENT`` seccomp filter
(``sandboxes.seccomp``), ``/usr`` read-only without ``/usr/local``, a few files of
``/etc``, and its writable space (``/work``, ``/tmp``, home) on one tmpfs whose size
and file count the kernel enforces (``sandboxes.disk``).

**The display sandbox** holds Xvfb, Chromium (whose own sandbox stays on) and a
supervisor that serves ``navigate`` and the page state, as the slot's *display uid*
(``uid_base + 100 + slot``), with the ``BROWSER`` filter (Chromium's sandbox needs new
user, PID and network namespaces: they stay allowed here, where the agent's processes
are not) and a tmpfs quota of its own. Its framebuffer dir is bound nowhere else: the
host reads screenshots from a file only the display uid writes. Its X socket dir is
bound read-only into the agent's sandbox at ``/tmp/.X11-unix``: the agent's X clients
connect to the real display (what they draw is the real screen) but can neither
replace the socket nor touch the framebuffer, kill Xvfb or Chromium, or steer them.

Each supervisor is reached through a listening socket the host creates in a directory
no sandbox can see and hands over as a file descriptor; it reports ready on a pipe.
A cgroup bounds both sandboxes' memory, processes and CPU together where the host
allows it; rlimits bound each shell command and the supervisors themselves. Destroy
kills both bwrap processes, which takes both trees with them (a dying PID namespace
kills every member), then unmounts the quotas. docs/sandboxes.md has the threat model.
"""

import contextlib
import functools
import hashlib
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandboxes import cgroups, disk, seccomp
from sandboxes.base import (
    DeliveredFile,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
    ToolError,
    ToolResult,
)
from sandboxes.control import SHELL_FSIZE_BYTES, SupervisorClient, supervisor_config
from sandboxes.reaping import become_subreaper, reap_orphans
from sandboxes.rundir import DISPLAY_UID_OFFSET, RunLayout, SandboxPaths, make_run_dir
from sandboxes.screens import ScreenError, framebuffer_png
from sandboxes.untrusted import storable_text

if TYPE_CHECKING:
    from sandboxes.egress import EgressProxyThread

BWRAP = "bwrap"
SUPERVISOR = Path(__file__).resolve().parent / "inside" / "supervisor.py"
SANDBOX_PATH = "/usr/bin:/bin"
# Read-only host paths the desktop needs; nothing else of the host's /etc is visible.
RO_ETC = ("/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime", "/etc/fonts", "/etc/ssl/certs")
# The host's /usr, read-only, with an empty /usr/local over the host's own (tools,
# credentials helpers and builds that no sandbox needs to see).
USR = (
    "--ro-bind", "/usr", "/usr",
    "--tmpfs", "/usr/local",
    "--remount-ro", "/usr/local",
    "--symlink", "usr/bin", "/bin",
    "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64",
    "--symlink", "usr/sbin", "/sbin",
    "--proc", "/proc",
    "--dev", "/dev",
)  # fmt: skip
PROVISION_TIMEOUT_S = 30.0
X_BUTTONS = {"left": "1", "middle": "2", "right": "3"}
KEY_ALLOWED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+_-")
# The page state after each step (``page_state``): the same bounds as ``navigate``'s.
PAGE_URL_MAX_CHARS, PAGE_TITLE_MAX_CHARS = 2000, 500
PAGE_STATE_TIMEOUT_S = 5.0


@functools.cache
def bwrap_has_disable_userns() -> bool:
    """bubblewrap 0.8 and later can forbid new user namespaces inside the sandbox."""
    try:
        listing = subprocess.run([BWRAP, "--help"], capture_output=True, text=True, check=False)
    except OSError:
        return False
    return "--disable-userns" in listing.stdout


def _text(value: object, limit: int) -> tuple[str, bool]:
    """A string field of the supervisor's reply, bounded and storable (anything that is
    not a string is nothing)."""
    return storable_text(value[:limit] if isinstance(value, str) else "")


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class LocalSandbox(Sandbox):
    def __init__(
        self,
        spec: SandboxSpec,
        run_dir: Path,
        uid: int | None,
        proc: subprocess.Popen,
        cgroup: cgroups.SandboxCgroup | None,
        egress: "EgressProxyThread | None" = None,
        *,
        paths: SandboxPaths | None = None,
        display_proc: subprocess.Popen | None = None,
        display_uid: int | None = None,
        mounts: tuple[Path, ...] = (),
    ) -> None:
        """``proc`` runs the agent's sandbox, ``display_proc`` (if any) the display's;
        ``mounts`` are unmounted on destroy."""
        self.spec = spec
        self.egress = egress
        self.run_dir = run_dir
        self.paths = paths or SandboxPaths.single(run_dir)
        self.work_dir = self.paths.work
        self.uid = uid
        self.display_uid = display_uid
        self.proc = proc
        self.display_proc = display_proc
        self.cgroup = cgroup
        self.mounts = mounts
        # Every string of a reply may come back escaped, 6 bytes per byte (\\u0000).
        reply_bytes = 12 * spec.output_max_bytes + (1 << 20)
        self.client = SupervisorClient(self.paths.control, max_reply_bytes=reply_bytes)
        self.display_client = (
            SupervisorClient(self.paths.display_control, max_reply_bytes=1 << 20)
            if self.paths.display_control is not None
            else self.client
        )
        self._destroyed = False
        self._destroy_lock = threading.Lock()
        # The sandbox's hard wall-clock limit, whatever the orchestrator does.
        self._reaper = threading.Timer(spec.lifetime_s, self.destroy)
        self._reaper.daemon = True
        self._reaper.start()

    # -- plumbing --------------------------------------------------------------------

    def _call(
        self,
        tool: str,
        request: dict[str, Any],
        timeout_s: float = 20.0,
        client: SupervisorClient | None = None,
    ) -> dict[str, Any]:
        if self._destroyed:
            raise ToolError("sandbox destroyed")
        client = client or self.client
        try:
            return client.call(request, timeout_s)
        except TimeoutError as exc:
            client.close()
            raise ToolError(f"{tool} did not answer within {timeout_s:g} s") from exc
        except OSError as exc:
            client.close()
            raise ToolError(f"{tool} failed: {exc}") from exc

    def _input(self, tool: str, *argv: object) -> ToolResult:
        reply = self._call(tool, {"op": "input", "argv": [str(a) for a in argv]})
        error, escaped = _text(reply.get("error"), 2000)
        return ToolResult(ok=bool(reply.get("ok")), tool=tool, error=error, escaped=escaped)

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
            shot = framebuffer_png(
                str(self.paths.framebuffer),
                self.spec.width,
                self.spec.height,
                self.spec.screenshot_max_bytes,
            )
        except ScreenError as exc:
            return ToolResult(ok=False, tool="screenshot", error=str(exc))
        data: dict[str, Any] = {"width": shot.width, "height": shot.height}
        if shot.reduced:
            data["reduced"] = shot.reduced  # the PNG bound held only with fewer colours/pixels
        return ToolResult(ok=True, tool="screenshot", image=shot.png, data=data)

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
        reply = self._call(
            "navigate", {"op": "navigate", "url": url}, timeout_s=35, client=self.display_client
        )
        error, error_escaped = _text(reply.get("error"), 2000)
        page_url, url_escaped = _text(reply.get("url"), PAGE_URL_MAX_CHARS)
        title, title_escaped = _text(reply.get("title"), PAGE_TITLE_MAX_CHARS)
        return ToolResult(
            ok=bool(reply.get("ok")),
            tool="navigate",
            error=error,
            data={"url": page_url, "title": title},
            escaped=error_escaped or url_escaped or title_escaped,
        )

    def page_state(self) -> dict[str, str] | None:
        if not self.spec.desktop:
            return None
        try:
            reply = self._call(
                "page_state",
                {"op": "state"},
                timeout_s=PAGE_STATE_TIMEOUT_S,
                client=self.display_client,
            )
        except ToolError:
            return None
        # Bounded, not escaped: the lane stores it escaped and flags the step (a title
        # can hold NUL).
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
        # Untrusted: NUL and bytes that are not UTF-8 come back escaped and flagged.
        stdout, out_escaped = _text(reply.get("stdout"), limit)
        stderr, err_escaped = _text(reply.get("stderr"), limit)
        out_total, err_total = _count(reply.get("stdout_bytes")), _count(reply.get("stderr_bytes"))
        truncated = out_total > limit or err_total > limit
        timed_out = bool(reply.get("timed_out"))
        exit_code = reply.get("exit_code")
        result = ToolResult(
            ok=bool(reply.get("ok")) and not timed_out,
            tool="shell",
            stdout=stdout,
            stderr=stderr,
            exit_code=exit_code
            if isinstance(exit_code, int) and not isinstance(exit_code, bool)
            else None,
            truncated=truncated,
            timed_out=timed_out,
            data={"stdout_bytes": out_total, "stderr_bytes": err_total},
            escaped=out_escaped or err_escaped,
        )
        if timed_out:
            result.error = f"command timed out after {timeout:g} s and was killed"
        elif truncated:
            result.error = f"output truncated to {limit} bytes per stream"
        return result

    def collect_files(self, names: list[str], dest: Path) -> list[DeliveredFile]:
        """All or nothing: the files are copied into a staging dir beside ``dest`` and
        moved into ``dest`` only once every one of them was read; a refusal midway
        leaves ``dest`` as it was and no staged file behind."""
        if len(names) > self.spec.deliver_max_files:
            raise ToolError(f"at most {self.spec.deliver_max_files} files may be delivered")
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
        moved: list[Path] = []
        try:
            delivered: list[DeliveredFile] = []
            budget = self.spec.deliver_max_bytes
            for name in names:
                data = self._read_workspace_file(name, budget)
                budget -= len(data)
                safe = _safe_name(name, taken={d.name for d in delivered})
                (staging / safe).write_bytes(data)
                delivered.append(
                    DeliveredFile(
                        name=safe,
                        path=dest / safe,
                        size=len(data),
                        sha256=hashlib.sha256(data).hexdigest(),
                    )
                )
            dest.mkdir(exist_ok=True)
            for item in delivered:
                os.replace(staging / item.name, item.path)
                moved.append(item.path)
        except BaseException:
            for path in moved:
                path.unlink(missing_ok=True)
            raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return delivered

    def _read_workspace_file(self, name: str, budget: int) -> bytes:
        """Opens ``name`` under the work dir one component at a time with O_NOFOLLOW, so
        neither a symlink nor ``..`` can lead outside it."""
        raw = str(name)
        if "\x00" in raw:
            raise ToolError(f"{name!r}: a file name cannot contain NUL")
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
        alive = all(p.poll() is None for p in self._procs())
        return {
            "ok": alive and not self._destroyed,
            "cgroup": self.cgroup.version if self.cgroup else "none",
        }

    def _procs(self) -> list[subprocess.Popen]:
        return [p for p in (self.proc, self.display_proc) if p is not None]

    def destroy(self) -> None:
        with self._destroy_lock:
            if self._destroyed:
                return
            self._destroyed = True
        self._reaper.cancel()
        self.client.close()
        self.display_client.close()
        procs = self._procs()
        for proc in procs:  # both at once: they die in parallel
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        if self.cgroup is not None:
            self.cgroup.kill_all()  # anything that escaped the process group
        for mount in self.mounts:  # frees the quota's pages before the cgroup goes
            with contextlib.suppress(OSError):
                disk.unmount(mount)
        if self.cgroup is not None:
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

    # -- the two sandboxes' command lines ------------------------------------------

    def _agent_argv(
        self, spec: SandboxSpec, layout: RunLayout, uid: int | None, filter_fd: int, config: dict
    ) -> list[str]:
        """The agent's sandbox: the shell, xdotool and their supervisor."""
        argv = [*_setpriv(uid), BWRAP, "--unshare-all"]
        if bwrap_has_disable_userns():
            argv += ["--unshare-user", "--disable-userns"]
        argv += ["--die-with-parent", "--new-session", "--seccomp", str(filter_fd), *USR]
        argv += _writable(layout.agent / "tmp", "/tmp", spec.disk_bytes, uid)  # noqa: S108
        argv += _writable(layout.agent / "home", "/home/agent", spec.disk_bytes, uid)
        if spec.desktop:
            argv += [
                "--ro-bind", str(layout.x11), "/tmp/.X11-unix",  # noqa: S108 - connect only
                "--ro-bind", str(layout.downloads), "/home/agent/Downloads",
            ]  # fmt: skip
        argv += _etc(layout, "agent")
        argv += [
            "--ro-bind", str(SUPERVISOR), "/opt/arena/supervisor.py",
            "--bind", str(layout.work), "/work",
            "--ro-bind", str(layout.agent_ctl), "/run/arena",
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
        return [*argv, "--", *_supervisor_command(config)]

    def _display_argv(
        self, spec: SandboxSpec, layout: RunLayout, uid: int | None, filter_fd: int, config: dict
    ) -> list[str]:
        """The display sandbox: Xvfb, Chromium and their supervisor, under the display
        uid. User namespaces stay possible here: Chromium's own sandbox is made of them."""
        argv = [*_setpriv(uid), BWRAP, "--unshare-all", "--die-with-parent", "--new-session"]
        argv += ["--seccomp", str(filter_fd), *USR]
        argv += _writable(layout.display / "tmp", "/tmp", spec.display_disk_bytes, uid)  # noqa: S108
        argv += ["--bind", str(layout.x11), "/tmp/.X11-unix"]  # noqa: S108
        argv += _writable(layout.display / "home", "/home/display", spec.display_disk_bytes, uid)
        argv += [
            "--bind", str(layout.downloads), "/home/display/Downloads",
            "--bind", str(layout.fb), "/fb",
            "--ro-bind", str(layout.display_ctl), "/run/arena",
        ]  # fmt: skip
        argv += _etc(layout, "display")
        argv += [
            "--ro-bind", str(SUPERVISOR), "/opt/arena/supervisor.py",
            # Chromium's managed policies: no requests of its own (docs/egress.md).
            "--ro-bind", str(SUPERVISOR.with_name("chromium-policies.json")),
            "/etc/chromium/policies/managed/arena.json",
            "--chdir", "/home/display",
            "--clearenv",
            "--setenv", "HOME", "/home/display",
            "--setenv", "USER", "display",
            "--setenv", "PATH", SANDBOX_PATH,
            "--setenv", "LANG", "C.UTF-8",
        ]  # fmt: skip
        return [*argv, "--", *_supervisor_command(config)]

    @staticmethod
    def _config(role: str, spec: SandboxSpec, control_fd: int, ready_fd: int) -> dict[str, Any]:
        config = supervisor_config(spec)
        if role == "agent":
            # The shell's supervisor: the shell's own process count and file size.
            config["self_limits"] = {
                "RLIMIT_FSIZE": SHELL_FSIZE_BYTES,
                "RLIMIT_NPROC": spec.pids // 2,
                "RLIMIT_NOFILE": 4096,
            }
        else:
            config = {
                key: config[key]
                for key in ("desktop", "width", "height", "start_url", "self_limits")
            }
        return {**config, "role": role, "control_fd": control_fd, "ready_fd": ready_fd}

    # -- provisioning ------------------------------------------------------------------

    def provision(self, spec: SandboxSpec, *, slot: int = 0) -> LocalSandbox:
        become_subreaper()
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # noqa: S103 - slot uids traverse it; nobody lists it
        root_worker = os.geteuid() == 0
        if root_worker:
            _check_traversable(self.root)
        layout = RunLayout(self.root / f"run-{spec.run_id}-{time.time_ns()}")
        uid = self.uid_base + slot if root_worker else os.geteuid()
        display_uid = self.uid_base + DISPLAY_UID_OFFSET + slot if root_worker else uid
        mounts: list[Path] = []
        cgroup = None
        try:
            make_run_dir(spec, layout, uid, display_uid, root_worker, mounts)
            if spec.egress and self.egress is not None:
                # Before the sandboxes start: each supervisor looks for it once, at start.
                self.egress.serve_unix(
                    str(layout.agent_ctl / "egress.sock"),
                    spec.run_id,
                    owner_uid=uid if root_worker else None,
                )
                if spec.desktop:
                    self.egress.serve_unix(
                        str(layout.display_ctl / "egress.sock"),
                        spec.run_id,
                        owner_uid=display_uid if root_worker else None,
                    )
            cgroup = cgroups.create(
                f"arena-slot-{slot}-{layout.root.name}",
                cgroups.Limits(spec.memory_mb * 1024**2, spec.pids, spec.cpu_fraction),
            )
            uids = {"agent": uid, "display": display_uid} if root_worker else {}
            procs, ready = self._start(spec, layout, uids, cgroup)
        except BaseException:
            self._discard(spec, layout, mounts, cgroup)
            raise
        sandbox = LocalSandbox(
            spec,
            layout.root,
            uid if root_worker else None,
            procs["agent"],
            cgroup,
            egress=self.egress,
            paths=layout.paths(spec.desktop),
            display_proc=procs.get("display"),
            display_uid=display_uid if root_worker and spec.desktop else None,
            mounts=tuple(mounts),
        )
        try:
            self._wait_ready(sandbox, ready)
        except BaseException:
            sandbox.destroy()
            raise
        return sandbox

    def _start(
        self,
        spec: SandboxSpec,
        layout: RunLayout,
        uids: dict[str, int],
        cgroup: cgroups.SandboxCgroup | None,
    ) -> tuple[dict[str, subprocess.Popen], dict[str, int]]:
        """Starts the display sandbox (first: Chromium takes longest) and the agent's;
        returns their processes and the read ends of their ready pipes."""
        procs: dict[str, subprocess.Popen] = {}
        ready: dict[str, int] = {}
        try:
            for role in ("display", "agent") if spec.desktop else ("agent",):
                procs[role], ready[role] = self._start_one(
                    role, spec, layout, uids.get(role), cgroup
                )
        except BaseException:
            for proc in procs.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            for fd in ready.values():
                os.close(fd)
            raise
        return procs, ready

    def _start_one(
        self,
        role: str,
        spec: SandboxSpec,
        layout: RunLayout,
        uid: int | None,
        cgroup: cgroups.SandboxCgroup | None,
    ) -> tuple[subprocess.Popen, int]:
        # The control socket lives where no sandbox can reach it; the supervisor gets
        # the listening socket itself, and no path inside leads to it.
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ready_r, ready_w = os.pipe()
        filter_fd = seccomp.bpf_fd(seccomp.AGENT if role == "agent" else seccomp.BROWSER)
        try:
            listener.bind(str(layout.host / f"{role}.sock"))
            listener.listen(16)
            config = self._config(role, spec, listener.fileno(), ready_w)
            build = self._agent_argv if role == "agent" else self._display_argv
            argv = build(spec, layout, uid, filter_fd, config)
            if cgroup is not None:
                # Join the groups before exec, so no process of the sandbox starts outside.
                joins = " ".join(f"echo $$ > {p};" for p in cgroup.procs_files)
                argv = ["/bin/sh", "-c", f'{joins} exec "$@"', "sandbox", *argv]
            # The log is the sandbox's stdout and stderr, and bwrap's pid 1 inside holds
            # it: on the sandbox's own quota filesystem, so it cannot fill the host disk.
            log = open(layout.log(role), "wb")  # noqa: SIM115 - handed to the child
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    # bwrap is pid 1 inside and its /proc/1/environ is readable there: hand
                    # it nothing of the worker's environment (database URLs, keys).
                    env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                    pass_fds=(listener.fileno(), ready_w, filter_fd),
                )
            finally:
                log.close()
        except BaseException:
            os.close(ready_r)
            raise
        finally:
            listener.close()
            os.close(ready_w)
            os.close(filter_fd)
        return proc, ready_r

    def _wait_ready(self, sandbox: LocalSandbox, ready: dict[str, int]) -> None:
        """Waits until every supervisor wrote its ready line (it serves from then on);
        a pipe closed before that means its sandbox died."""
        deadline = time.monotonic() + PROVISION_TIMEOUT_S
        pending = dict(ready)
        lines = dict.fromkeys(ready, b"")
        try:
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(
                        f"the sandbox was not ready within {PROVISION_TIMEOUT_S:g} s"
                    )
                readable, _, _ = select.select(list(pending.values()), [], [], left)
                for role, fd in list(pending.items()):
                    if fd not in readable:
                        continue
                    chunk = os.read(fd, 64)
                    if not chunk:
                        log = RunLayout(sandbox.run_dir).log(role)
                        tail = log.read_bytes()[-2000:].decode(errors="replace")
                        raise RuntimeError(f"the {role} sandbox exited while starting: {tail}")
                    lines[role] += chunk
                    if b"\n" in lines[role]:
                        del pending[role]
        finally:
            for fd in ready.values():
                os.close(fd)

    def _discard(
        self,
        spec: SandboxSpec,
        layout: RunLayout,
        mounts: list[Path],
        cgroup: cgroups.SandboxCgroup | None,
    ) -> None:
        """Undoes a provisioning that failed before its sandbox object existed."""
        if spec.egress and self.egress is not None:
            with contextlib.suppress(Exception):
                self.egress.release(spec.run_id)
        if cgroup is not None:
            cgroup.kill_all()
            cgroup.remove()
        for mount in mounts:
            with contextlib.suppress(OSError):
                disk.unmount(mount)
        shutil.rmtree(layout.root, ignore_errors=True)

    def health(self) -> dict[str, Any]:
        try:
            seccomp.bpf(seccomp.AGENT)
            filters = True
        except RuntimeError:
            filters = False
        return {
            "backend": self.name,
            "ok": shutil.which(BWRAP) is not None
            and Path("/usr/lib/chromium/chromium").exists()
            and filters,
            "cgroup": cgroups.detect(),
            "root_worker": os.geteuid() == 0,
            "seccomp_filter": filters,
            "disable_userns": bwrap_has_disable_userns(),
            # a root worker mounts tmpfs quotas (bytes and files) on the whole writable
            # space; any other gets bubblewrap's --size on /tmp and home (bytes only)
            "quota_filesystem": "tmpfs" if disk.can_mount() else "bytes-only",
        }


def _supervisor_command(config: dict[str, Any]) -> list[str]:
    return ["/usr/bin/python3", "-I", "/opt/arena/supervisor.py", json.dumps(config)]


def _setpriv(uid: int | None) -> list[str]:
    """Drops a root worker to ``uid`` (no supplementary groups) before bwrap starts."""
    if uid is None:
        return []
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def _writable(source: Path, target: str, size: int, uid: int | None) -> list[str]:
    """A writable dir of a sandbox: a root worker binds it from the run's quota tmpfs;
    any other worker gets bubblewrap's own tmpfs of ``size`` bytes (no file bound)."""
    if uid is not None:
        return ["--bind", str(source), target]
    return ["--size", str(size), "--tmpfs", target]


def _etc(layout: RunLayout, who: str) -> list[str]:
    argv: list[str] = []
    for path in RO_ETC:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for name in ("passwd", "group", "hosts"):
        argv += ["--ro-bind", str(layout.etc / f"{who}-{name}"), f"/etc/{name}"]
    return argv
