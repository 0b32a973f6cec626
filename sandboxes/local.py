"""The ``local`` backend: each sandbox is a per-run work directory, and each tool call
runs inside bubblewrap with its own namespaces (network included: only ``lo``), as
the slot's unprivileged uid when the worker runs as root, under rlimits.

The skeleton runs the shell tool here; the desktop (Xvfb + Chromium) joins it later
behind the same interface."""

import contextlib
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

from sandboxes.base import (
    DeliveredFile,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
    ToolError,
    ToolResult,
)

BWRAP = "bwrap"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# Read-only host paths the shell needs; nothing else of the host's /etc is visible.
RO_ETC = ("/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime")


def _read_bounded(stream, limit: int, sink: dict) -> None:
    """Reads ``stream`` to EOF, keeping at most ``limit`` bytes and counting the rest."""
    kept = bytearray()
    total = 0
    while chunk := stream.read(65536):
        total += len(chunk)
        room = limit - len(kept)
        if room > 0:
            kept += chunk[:room]
    sink["data"] = bytes(kept)
    sink["total"] = total


class LocalSandbox(Sandbox):
    def __init__(self, spec: SandboxSpec, run_dir: Path, uid: int | None) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.work_dir = run_dir / "work"
        self.uid = uid
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._destroyed = False

    def _argv(self, command: str, timeout_s: float) -> list[str]:
        argv: list[str] = []
        if self.uid is not None:
            argv += [
                "setpriv",
                f"--reuid={self.uid}",
                f"--regid={self.uid}",
                "--clear-groups",
                "--",
            ]
        cpu = max(1, int(timeout_s) + 1)
        argv += [
            "prlimit",
            f"--cpu={cpu}",
            f"--as={2 * 1024**3}",
            f"--fsize={256 * 1024**2}",
            "--nproc=256",
            "--nofile=1024",
            "--",
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
            "--tmpfs", "/home/agent",
        ]  # fmt: skip
        for path in RO_ETC:
            if os.path.exists(path):
                argv += ["--ro-bind", path, path]
        argv += [
            "--bind", str(self.work_dir), "/work",
            "--chdir", "/work",
            "--clearenv",
            "--setenv", "HOME", "/home/agent",
            "--setenv", "PATH", SANDBOX_PATH,
            "--setenv", "LANG", "C.UTF-8",
            "--",
            "/bin/sh", "-c", command,
        ]  # fmt: skip
        return argv

    def shell(self, command: str, timeout_s: float | None = None) -> ToolResult:
        if self._destroyed:
            return ToolResult(ok=False, tool="shell", error="sandbox destroyed")
        timeout = min(float(timeout_s or self.spec.shell_timeout_s), self.spec.shell_timeout_s)
        proc = subprocess.Popen(
            self._argv(command, timeout),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, killed as a whole on timeout
        )
        with self._lock:
            self._procs.add(proc)
        out: dict = {}
        err: dict = {}
        readers = [
            threading.Thread(
                target=_read_bounded, args=(proc.stdout, self.spec.output_max_bytes, out)
            ),
            threading.Thread(
                target=_read_bounded, args=(proc.stderr, self.spec.output_max_bytes, err)
            ),
        ]
        for reader in readers:
            reader.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._kill(proc)
            proc.wait()
        for reader in readers:
            reader.join()
        with self._lock:
            self._procs.discard(proc)
        truncated = out["total"] > len(out["data"]) or err["total"] > len(err["data"])
        result = ToolResult(
            ok=not timed_out and proc.returncode == 0,
            tool="shell",
            stdout=out["data"].decode(errors="replace"),
            stderr=err["data"].decode(errors="replace"),
            exit_code=proc.returncode,
            truncated=truncated,
            timed_out=timed_out,
            data={"stdout_bytes": out["total"], "stderr_bytes": err["total"]},
        )
        if timed_out:
            result.error = f"command timed out after {timeout:g} s and was killed"
        elif truncated:
            result.error = f"output truncated to {self.spec.output_max_bytes} bytes per stream"
        return result

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

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

    def destroy(self) -> None:
        self._destroyed = True
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            self._kill(proc)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
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

    def __init__(self, root: Path, uid_base: int) -> None:
        self.root = root
        self.uid_base = uid_base

    def provision(self, spec: SandboxSpec, *, slot: int = 0) -> LocalSandbox:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # noqa: S103 - slot uids traverse it; nobody lists it
        if os.geteuid() == 0:
            _check_traversable(self.root)
        run_dir = self.root / f"run-{spec.run_id}-{time.time_ns()}"
        (run_dir / "work").mkdir(parents=True)
        uid = None
        if os.geteuid() == 0:
            uid = self.uid_base + slot
            os.chmod(run_dir, 0o711)  # noqa: S103 - traversable, not listable
            os.chown(run_dir / "work", uid, uid)
        return LocalSandbox(spec, run_dir, uid)

    def health(self) -> dict:
        return {"backend": self.name, "ok": shutil.which(BWRAP) is not None}
