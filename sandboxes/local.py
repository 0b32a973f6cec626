"""The ``local`` backend's sandbox, as the host drives it: each tool call goes to the
supervisor of the sandbox that serves it, screenshots come from the display's
framebuffer, deliveries are copied out, destroy takes both sandboxes down. How the two
sandboxes are launched is ``sandboxes.local_backend``.

The ``local`` backend: two bubblewrap sandboxes per run, alive for the run.

**The agent's sandbox** holds the supervisor that serves the shell tool and the
agent's shell, as the slot's unprivileged uid (never host root inside).
All namespaces unshared (its network namespace has only its own ``lo``), user
namespaces disabled inside (``--disable-userns``), the ``AGENT`` seccomp filter
(``sandboxes.seccomp``), ``/usr`` read-only without ``/usr/local``, a few files of
``/etc``, and its writable space (``/work``, ``/tmp``, home) on one tmpfs whose size
and file count the kernel enforces (``sandboxes.disk``).

**The display sandbox** holds Xvfb, Chromium (whose own sandbox stays on) and a
supervisor that serves ``navigate``, the page state and the input tools (XTEST events
on its own X connection), as the slot's *display uid* (``uid_base + 1000 + slot``),
with the ``BROWSER`` filter (Chromium's sandbox needs new user, PID and network
namespaces: they stay allowed here, where the agent's processes are not) and a tmpfs
quota of its own. Its framebuffer dir is bound nowhere else: the host reads
screenshots from a file only the display uid writes. Its X server listens in its own
``/tmp`` and network namespace only: the agent's processes can reach neither socket,
so they can draw nothing on the screen judges see and send the browser no input
outside the tool set; nor can they touch the framebuffer, signal or trace Xvfb or
Chromium.

Each supervisor is reached through a listening socket the host creates in a directory
no sandbox can see and hands over as a file descriptor; it reports ready on a pipe.
A cgroup bounds both sandboxes' memory, processes and CPU together where the host
allows it; rlimits bound each shell command and the supervisors themselves. Destroy
kills both bwrap processes, which takes both trees with them (a dying PID namespace
kills every member), then unmounts the quotas. docs/sandboxes.md has the threat model.
"""

import contextlib
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandboxes import cgroups, disk
from sandboxes.base import (
    DeliveredFile,
    Sandbox,
    SandboxSpec,
    ToolError,
    ToolResult,
)
from sandboxes.control import SupervisorClient
from sandboxes.pagetext import page_text_bounded
from sandboxes.reaping import reap_orphans
from sandboxes.rundir import RunLayout, SandboxPaths
from sandboxes.screens import ScreenError, framebuffer_png
from sandboxes.untrusted import storable_text

if TYPE_CHECKING:
    from sandboxes.egress import EgressProxyThread

X_BUTTONS = {"left": "1", "middle": "2", "right": "3"}
KEY_ALLOWED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+_-")
# The page state after each step (``page_state``): the same bounds as ``navigate``'s.
PAGE_URL_MAX_CHARS, PAGE_TITLE_MAX_CHARS = 2000, 500
PAGE_STATE_TIMEOUT_S = 5.0
# The page as text: the supervisor waits for a navigation a click started (bounded).
PAGE_TEXT_TIMEOUT_S = 15.0


def _text(value: object, limit: int) -> tuple[str, bool]:
    """A string field of the supervisor's reply, bounded and storable (anything that is
    not a string is nothing)."""
    return storable_text(value[:limit] if isinstance(value, str) else "")


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def workspace_parts(name: str) -> list[str]:
    """``name`` (relative to /work, or absolute under it) as its components; refuses
    NUL, ``..`` and anything outside the workspace."""
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
    return parts


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
        paths: SandboxPaths,
        display_proc: subprocess.Popen | None = None,
        display_uid: int | None = None,
        mounts: tuple[Path, ...] = (),
    ) -> None:
        """``proc`` runs the agent's sandbox, ``display_proc`` (if any) the display's;
        ``mounts`` are unmounted on destroy."""
        self.spec = spec
        self.egress = egress
        self.run_dir = run_dir
        self.paths = paths
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
            else self.client  # no display: its ops answer "unknown op"
        )
        self._destroyed = False
        self._destroy_lock = threading.Lock()
        # The sandbox's hard wall-clock limit, whatever the orchestrator does.
        self._reaper = threading.Timer(spec.lifetime_s, self.destroy)
        self._reaper.daemon = True
        self._reaper.start()

    def assign(self, spec: SandboxSpec) -> None:
        """Makes this pre-booted, never used sandbox (``sandboxes.pool``) ``spec``'s run's:
        its spec (the tools' bounds), its wall-clock limit, a fresh egress identity (the
        pool's is released with its sockets, and new ones served for ``spec.run_id``,
        so nothing the proxy counted or refused before belongs to the run) and its
        start page. Precondition: booted from a spec with the same ``pool.boot_key``
        (screen, quotas, cgroup and shell limits are the boot's), and not destroyed."""
        booted = self.spec
        self._reaper.cancel()
        if self.cgroup is not None:
            self.cgroup.set_background(False)  # booted at a low CPU weight (the pool's)
        if self.egress is not None and booted.egress:
            sockets = self._egress_sockets(spec) if spec.egress else []
            self.egress.reassign(booted.run_id, spec.run_id, sockets)  # one hop, not three
        self.spec = spec
        self._reaper = threading.Timer(spec.lifetime_s, self.destroy)
        self._reaper.daemon = True
        self._reaper.start()
        if spec.desktop and spec.start_url:
            # As a cold start shows it: loaded and painted. The start URL is the task's
            # (trusted, data: URLs too); a page that fails to load shows Chromium's
            # error page, as it would have from the command line. A display that does
            # not answer raises: the pool then starts the run cold.
            self._call(
                "navigate",
                {"op": "navigate", "url": spec.start_url, "state": False},
                timeout_s=35,
                client=self.display_client,
            )

    def _egress_sockets(self, spec: SandboxSpec) -> list[tuple[str, int | None]]:
        """Where each sandbox of the run finds its egress socket, and its owner."""
        layout = RunLayout(self.run_dir)
        sockets: list[tuple[str, int | None]] = [(str(layout.agent_ctl / "egress.sock"), self.uid)]
        if spec.desktop:
            sockets.append((str(layout.display_ctl / "egress.sock"), self.display_uid))
        return sockets

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
        """Sends ``argv`` (xdotool's arguments) to the display's supervisor."""
        if not self.spec.desktop:
            return ToolResult(ok=False, tool=tool, error="this sandbox has no display")
        reply = self._call(
            tool, {"op": "input", "argv": [str(a) for a in argv]}, client=self.display_client
        )
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

    def page_text(self) -> dict[str, Any] | None:
        if not self.spec.desktop:
            return None
        try:
            reply = self._call(
                "page_text",
                {"op": "page_text"},
                timeout_s=PAGE_TEXT_TIMEOUT_S,
                client=self.display_client,
            )
        except ToolError:
            return None
        if not reply.get("ok"):
            return None
        return page_text_bounded(reply, width=self.spec.width, height=self.spec.height)

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
        parts = workspace_parts(name)
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

    def _destroy_begins(self) -> bool:
        """The first call of ``destroy`` (False for any later one): stops the lifetime
        timer and closes the supervisors' clients."""
        with self._destroy_lock:
            if self._destroyed:
                return False
            self._destroyed = True
        self._reaper.cancel()
        self.client.close()
        self.display_client.close()
        return True

    def destroy(self) -> None:
        if not self._destroy_begins():
            return
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
