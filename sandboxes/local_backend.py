"""Launching the ``local`` backend's sandboxes (``sandboxes.local`` has the sandbox
itself and its tools): the two bubblewrap command lines (the agent's and the
display's), their quota mounts, seccomp filters and control sockets, waiting until both
supervisors are ready, and tearing down what a failed start left."""

import contextlib
import functools
import importlib.util
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandboxes import cgroups, disk, seccomp
from sandboxes.base import (
    SandboxBackend,
    SandboxSpec,
)
from sandboxes.control import supervisor_config
from sandboxes.local import LocalSandbox
from sandboxes.reaping import become_subreaper
from sandboxes.rundir import DISPLAY_UID_OFFSET, RunLayout, make_run_dir

if TYPE_CHECKING:
    from sandboxes.egress import EgressProxyThread

BWRAP = "bwrap"
# The in-sandbox code (the supervisor and its modules, standard library only), bound
# read-only as one directory: every sandbox and image has it at INSIDE_AT.
INSIDE = Path(__file__).resolve().parent / "inside"
INSIDE_AT = "/opt/arena/inside"
SUPERVISOR = INSIDE / "supervisor.py"
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
# Where the display's supervisor finds python-xlib (supervisor.XLIB_DIR): input as XTEST.
SANDBOX_XLIB = "/opt/arena/pylib/Xlib"
# The CLI coding agents and the judge's tools (scripts/toolchain.sh installs them), bound
# read-only into the agent's sandbox of a spec with ``toolchain``; its bin leads PATH.
TOOLCHAIN_DIR = Path(__file__).resolve().parent.parent / "var" / "toolchain"
SANDBOX_TOOLCHAIN = "/opt/arena/toolchain"


@functools.cache
def xlib_package() -> Path | None:
    """The host's python-xlib package dir (pure Python; bound read-only into the
    display's sandbox, whose system python3 lacks it), or None: input runs xdotool."""
    found = importlib.util.find_spec("Xlib")
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations)))


@functools.cache
def bwrap_has_disable_userns() -> bool:
    """bubblewrap 0.8 and later can forbid new user namespaces inside the sandbox."""
    try:
        listing = subprocess.run([BWRAP, "--help"], capture_output=True, text=True, check=False)
    except OSError:
        return False
    return "--disable-userns" in listing.stdout


def _check_traversable(root: Path, what: str = "sandbox root") -> None:
    """The slot uids must reach their work dirs (and the toolchain): every ancestor
    needs o+x."""
    for directory in [root, *root.resolve().parents]:
        if not os.stat(directory).st_mode & stat.S_IXOTH:
            hint = "choose another ARENA_SANDBOX_ROOT" if what == "sandbox root" else "chmod o+x it"
            raise RuntimeError(
                f"{what} {root} is not reachable by the sandbox uids: {directory} lacks o+x; {hint}"
            )


class LocalBackend(SandboxBackend):
    name = "local"

    def __init__(
        self,
        root: Path,
        uid_base: int,
        egress: "EgressProxyThread | None" = None,
        toolchain: Path = TOOLCHAIN_DIR,
    ) -> None:
        self.root = root
        self.uid_base = uid_base
        self.egress = egress
        self.toolchain = toolchain

    # -- the two sandboxes' command lines ------------------------------------------

    def _agent_argv(
        self, spec: SandboxSpec, layout: RunLayout, uid: int | None, filter_fd: int, config: dict
    ) -> list[str]:
        """The agent's sandbox: the shell and its supervisor. Of the display it sees
        only Chromium's downloads, read-only: no X socket (the display's is in the
        display sandbox's own /tmp, its abstract one in that network namespace), no
        framebuffer, no python-xlib."""
        argv = [*_setpriv(uid), BWRAP, "--unshare-all"]
        if bwrap_has_disable_userns():
            argv += ["--unshare-user", "--disable-userns"]
        argv += ["--die-with-parent", "--new-session", "--seccomp", str(filter_fd), *USR]
        argv += _writable(layout.agent / "tmp", "/tmp", spec.disk_bytes, uid)  # noqa: S108
        argv += _writable(layout.agent / "home", "/home/agent", spec.disk_bytes, uid)
        if spec.desktop:
            argv += ["--ro-bind", str(layout.downloads), "/home/agent/Downloads"]
        argv += _etc(layout, "agent")
        path = SANDBOX_PATH
        if spec.toolchain:
            argv += ["--ro-bind", str(self.toolchain), SANDBOX_TOOLCHAIN]
            path = f"{SANDBOX_TOOLCHAIN}/bin:{SANDBOX_PATH}"
        argv += [
            "--ro-bind", str(INSIDE), INSIDE_AT,
            "--bind", str(layout.work), "/work",
            "--ro-bind", str(layout.agent_ctl), "/run/arena",
            "--chdir", "/work",
            "--clearenv",
            "--setenv", "HOME", "/home/agent",
            "--setenv", "USER", "agent",
            "--setenv", "PATH", path,
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
        """The display sandbox: Xvfb, Chromium and their supervisor (which sends input
        as XTEST events), under the display uid. User namespaces stay possible here:
        Chromium's own sandbox is made of them. Xvfb's socket is made in its own /tmp."""
        argv = [*_setpriv(uid), BWRAP, "--unshare-all", "--die-with-parent", "--new-session"]
        argv += ["--seccomp", str(filter_fd), *USR]
        argv += _writable(layout.display / "tmp", "/tmp", spec.display_disk_bytes, uid)  # noqa: S108
        argv += _writable(layout.display / "home", "/home/display", spec.display_disk_bytes, uid)
        argv += [
            "--bind", str(layout.downloads), "/home/display/Downloads",
            "--bind", str(layout.fb), "/fb",
            "--ro-bind", str(layout.display_ctl), "/run/arena",
        ]  # fmt: skip
        if xlib_package() is not None:
            argv += ["--ro-bind", str(xlib_package()), SANDBOX_XLIB]
        argv += _etc(layout, "display")
        argv += [
            "--ro-bind", str(INSIDE), INSIDE_AT,
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
        return {**supervisor_config(spec, role), "control_fd": control_fd, "ready_fd": ready_fd}

    # -- provisioning ------------------------------------------------------------------

    def _check_toolchain(self, root_worker: bool) -> None:
        if not (self.toolchain / "bin").is_dir():
            raise RuntimeError(
                f"the sandbox toolchain is not installed at {self.toolchain}: run "
                "scripts/toolchain.sh (make run and make test do)"
            )
        if root_worker:
            _check_traversable(self.toolchain, "the sandbox toolchain")

    def provision(
        self, spec: SandboxSpec, *, slot: int = 0, background: bool = False
    ) -> LocalSandbox:
        """``background``: a pooled desktop's boot, at a low CPU weight until a run
        claims it (``cgroups.Limits.background``)."""
        become_subreaper()
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # noqa: S103 - slot uids traverse it; nobody lists it
        root_worker = os.geteuid() == 0
        if root_worker:
            _check_traversable(self.root)
        if spec.toolchain:
            self._check_toolchain(root_worker)
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
                cgroups.Limits(spec.memory_mb * 1024**2, spec.pids, spec.cpu_fraction, background),
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
    return ["/usr/bin/python3", "-I", f"{INSIDE_AT}/supervisor.py", json.dumps(config)]


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
