"""The ``docker`` backend: one container per run, from a desktop image, driven through
the Docker Engine API. The image is ``sandboxes/docker/Dockerfile``'s (self-contained,
needs a registry to build) or ``scripts/docker.sh image``'s (a few kilobytes, no
programs: its label ``arena.binds-host-usr=1`` makes each container bind the host's
``/usr`` and ``HOST_ETC`` read-only, as the local backend's sandboxes see them).

Inside, the same supervisor as in the ``local`` backend (``sandboxes/inside/supervisor.py``,
baked into the image) starts Xvfb and Chromium and serves the tools on a unix socket. The
container is not privileged, drops every capability, sets no-new-privileges, has a
read-only root with tmpfs ``/tmp`` and home, memory (swap included), process and CPU
limits, docker-init as pid 1, and runs as the slot's uid, never root. Its network is
``none``: it has only its own loopback.

The host and the container share one per-run directory, bind-mounted in parts:
``ctl`` at ``/run/arena`` (the supervisor's control socket, and this run's socket of the
host egress proxy), ``fb`` at ``/fb`` (Xvfb's framebuffer file, read for screenshots),
``work`` at ``/work`` (read for deliveries), plus read-only ``passwd`` and ``group``
that name the slot's uid ``agent``. Nothing else of the host is mounted (but the
read-only system paths an image that binds the host's ``/usr`` asks for), least of all
the engine's socket. The supervisor forwards ``127.0.0.1:3128`` inside to the egress
socket, exactly as under ``local``, so the proxy is the container's whole network and
every request it makes is checked and attributed to its run. (A container network
instead would let the two lanes of a battle reach each other, and the proxy would have
to tell runs apart by source address.)

Every container carries labels (``arena.sandbox``, ``arena.run``, ``arena.slot``,
``arena.host``, ``arena.dir``) so :func:`janitor` can find the ones a dead worker left.

Preconditions: the engine runs on this host's kernel and mounts this host's paths with
this host's uids (a rootful engine). Unix sockets and file ownership cross the bind
mounts, so a remote, rootless or userns-remapped engine cannot work; provisioning
refuses the last two.
"""

import contextlib
import json
import logging
import os
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import requests
from docker.errors import DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from docker.types import LogConfig, Mount

from sandboxes import disk, seccomp
from sandboxes.base import SandboxBackend, SandboxSpec
from sandboxes.control import supervisor_config
from sandboxes.local import LocalSandbox
from sandboxes.local_backend import RO_ETC, SANDBOX_PATH

if TYPE_CHECKING:
    from sandboxes.egress import EgressProxyThread

logger = logging.getLogger(__name__)

DEFAULT_IMAGE = "agent-arena-desktop"
BUILD_HINT = (
    "scripts/docker.sh image (binds the host's /usr; ARENA_DOCKER_IMAGE={image}), or "
    "docker build -f sandboxes/docker/Dockerfile -t {image} ."
)
PROVISION_TIMEOUT_S = 60.0
STATUS_CHECK_INTERVAL_S = 0.25
EXITED = ("exited", "dead")

LABEL_SANDBOX = "arena.sandbox"
LABEL_RUN = "arena.run"
LABEL_SLOT = "arena.slot"
LABEL_HOST = "arena.host"
LABEL_DIR = "arena.dir"
# An image's own declaration that it carries no programs and runs the host's: each
# container then binds the host's /usr and HOST_ETC read-only (sandboxes/docker/rootfs.sh).
LABEL_BINDS_HOST_USR = "arena.binds-host-usr"
HOST_ETC = RO_ETC  # the /etc paths the local backend's sandboxes see, and no others

ClientFactory = Callable[[], docker.DockerClient]


def sandbox_uid(uid_base: int, slot: int) -> int:
    """The uid a slot's container runs as. A root worker gives every slot its own uid
    in a range no host user has (RLIMIT_NPROC counts per uid across all containers, and
    a host user sharing the uid could signal or trace the sandbox). Any other worker
    uses its own uid, the only one whose files in the run dir it can read and remove
    (as the local backend does). Never 0."""
    euid = os.geteuid()
    return uid_base + slot if euid == 0 else euid


class DockerSandbox(LocalSandbox):
    """A sandbox in a container. The tools (and ``page_state``) are the local sandbox's,
    unchanged: they speak to the same supervisor over the same socket, read the same
    framebuffer file and the same work dir, all reached through the run dir's bind
    mounts. What differs is who owns the processes: the engine, so liveness and
    teardown go through it."""

    def __init__(
        self,
        spec: SandboxSpec,
        run_dir: Path,
        uid: int,
        container: Container,
        egress: "EgressProxyThread | None" = None,
    ) -> None:
        # Set before the base starts the lifetime timer, which may call destroy().
        self.container = container
        # No host process and no host cgroup: health() and destroy() are overridden.
        super().__init__(spec, run_dir, uid, proc=None, cgroup=None, egress=egress)  # type: ignore[arg-type]

    def health(self) -> dict[str, Any]:
        try:
            self.container.reload()
        except (DockerException, requests.RequestException) as exc:
            return {"ok": False, "container": self.container.name, "error": str(exc)}
        status = self.container.status
        return {
            "ok": status == "running" and not self._destroyed,
            "container": self.container.name,
            "status": status,
        }

    def destroy(self) -> None:
        """Removes the container (killing everything in it), stops its egress listener and
        removes the run dir. Idempotent. An engine that does not answer leaves the
        container to the janitor, which finds it by its labels."""
        with self._destroy_lock:
            if self._destroyed:
                return
            self._destroyed = True
        self._reaper.cancel()
        self.client.close()
        try:
            self.container.remove(force=True, v=True)
        except NotFound:
            pass  # already gone
        except (DockerException, requests.RequestException):
            logger.warning(
                "could not remove sandbox container %s", self.container.name, exc_info=True
            )
        if self.spec.egress and self.egress is not None:
            with contextlib.suppress(Exception):
                self.egress.release(self.spec.run_id)
        with contextlib.suppress(OSError):
            disk.unmount_all_under(self.run_dir)  # the quota on /work
        shutil.rmtree(self.run_dir, ignore_errors=True)


class DockerBackend(SandboxBackend):
    """Provisions :class:`DockerSandbox` containers from ``image`` with run dirs under
    ``root`` (on this host). ``client_factory`` builds the engine client on first use;
    one backend (and client) may serve many threads."""

    name = "docker"

    def __init__(
        self,
        image: str,
        root: Path,
        uid_base: int,
        *,
        egress: "EgressProxyThread | None" = None,
        client_factory: ClientFactory = docker.from_env,
        provision_timeout_s: float = PROVISION_TIMEOUT_S,
        seccomp_profile: str | None = None,
        host: str | None = None,
    ) -> None:
        """``seccomp_profile`` (JSON text) replaces the default: the arena's deny list as
        a Docker profile (``sandboxes.seccomp``, its browser profile: Chromium shares the
        container and builds its own sandbox from user namespaces; README). ``host`` is
        the worker host's id its containers are labelled with (the machine's name by
        default)."""
        self.image = image
        self.root = root
        self.uid_base = uid_base
        self.egress = egress
        self.client_factory = client_factory
        self.provision_timeout_s = provision_timeout_s
        self.seccomp_profile = (
            seccomp_profile
            if seccomp_profile is not None
            else seccomp.docker_profile(seccomp.BROWSER)
        )
        self.host = host or socket.gethostname()
        self._client: docker.DockerClient | None = None
        self._client_lock = threading.Lock()
        self._engine_checked = False

    def client(self) -> docker.DockerClient:
        with self._client_lock:
            if self._client is None:
                self._client = self.client_factory()
            return self._client

    def close(self) -> None:
        with self._client_lock:
            if self._client is not None:
                self._client.close()
            self._client = None

    # -- provisioning ----------------------------------------------------------------

    def provision(self, spec: SandboxSpec, *, slot: int = 0) -> DockerSandbox:
        if spec.toolchain:
            # The image carries no /opt/arena/toolchain and the container mounts nothing
            # of the host's but the run dir: the CLI agents run on the local backend only.
            raise RuntimeError(
                "the docker backend cannot run the coding toolchain (CLI agents, judge "
                "tools): its image has no /opt/arena/toolchain; use the local backend"
            )
        client = self.client()
        self._check_engine(client)
        uid = sandbox_uid(self.uid_base, slot)
        run_dir = self._make_run_dir(spec, slot, uid)
        name = f"arena-run-{spec.run_id}-{slot}-{secrets.token_hex(3)}"
        try:
            host_usr = binds_host_usr(client.images.get(self.image).attrs)
            if spec.egress and self.egress is not None:
                # Before the container starts: the supervisor looks for it once, at start.
                self.egress.serve_unix(
                    str(run_dir / "ctl" / "egress.sock"),
                    spec.run_id,
                    owner_uid=uid if os.geteuid() == 0 else None,
                )
            container = client.containers.create(
                self.image,
                [json.dumps(supervisor_config(spec))],
                **self._create_kwargs(spec, slot, run_dir, uid, name, host_usr=host_usr),
            )
        except ImageNotFound as exc:
            self._discard(spec, run_dir)
            hint = BUILD_HINT.format(image=self.image)
            raise RuntimeError(
                f"the sandbox image {self.image!r} is not on the engine; build it: {hint}"
            ) from exc
        except BaseException:
            self._discard(spec, run_dir)
            raise
        sandbox = DockerSandbox(spec, run_dir, uid, container, egress=self.egress)
        try:
            container.start()
            self._wait_ready(sandbox)
        except BaseException:
            sandbox.destroy()
            raise
        return sandbox

    def _check_engine(self, client: docker.DockerClient) -> None:
        """Refuses engines whose containers see other uids than this host (the bind
        mounts would be unwritable for the sandbox and its files unreadable for us)."""
        if self._engine_checked:
            return
        options = client.info().get("SecurityOptions") or []
        remapped = [o for o in options if "name=rootless" in o or "name=userns" in o]
        if remapped:
            raise RuntimeError(
                "the docker backend needs a rootful engine without user-namespace "
                f"remapping (the engine reports {', '.join(remapped)}); use the local backend"
            )
        self._engine_checked = True

    def _make_run_dir(self, spec: SandboxSpec, slot: int, uid: int) -> Path:
        # Nothing in a container walks these paths (bind mounts start at the mounted
        # dir), so each run dir stays private to the worker.
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        run_dir = self.root / f"run-{spec.run_id}-{slot}-{secrets.token_hex(4)}"
        run_dir.mkdir(mode=0o700)
        try:
            for sub in ("work", "fb", "ctl", "etc"):
                (run_dir / sub).mkdir()
            if disk.can_mount():
                # /work is a host dir bound into the container: a tmpfs quota of its own
                # (the container's /tmp and home are the engine's tmpfs, sized below).
                quota = disk.Quota(spec.disk_bytes, spec.disk_inodes)
                disk.mount_tmpfs(run_dir / "work", quota, source="arena-work")
            passwd = f"agent:x:{uid}:{uid}:agent:/home/agent:/bin/sh\n"
            (run_dir / "etc" / "passwd").write_text(passwd)
            (run_dir / "etc" / "group").write_text(f"agent:x:{uid}:\n")
            if os.geteuid() == 0:
                for sub in ("work", "fb", "ctl"):
                    os.chown(run_dir / sub, uid, uid)
        except BaseException:
            with contextlib.suppress(OSError):
                disk.unmount_all_under(run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        return run_dir

    def _create_kwargs(
        self,
        spec: SandboxSpec,
        slot: int,
        run_dir: Path,
        uid: int,
        name: str,
        *,
        host_usr: bool = False,
    ) -> dict[str, Any]:
        environment = {
            "HOME": "/home/agent",
            "USER": "agent",
            "PATH": SANDBOX_PATH,
            "LANG": "C.UTF-8",
        }
        if spec.egress and self.egress is not None:
            for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
                environment[var] = "http://127.0.0.1:3128"
        security_opt = ["no-new-privileges", f"seccomp={self.seccomp_profile}"]
        # The engine's tmpfs mounts take sizes and file counts: the same quota as /work.
        quota = f"size={spec.disk_bytes},nr_inodes={spec.disk_inodes}"
        memory = spec.memory_mb * 1024**2
        mounts = [
            Mount("/work", str(run_dir / "work"), type="bind"),
            Mount("/fb", str(run_dir / "fb"), type="bind"),
            Mount("/run/arena", str(run_dir / "ctl"), type="bind"),
            Mount("/etc/passwd", str(run_dir / "etc" / "passwd"), type="bind", read_only=True),
            Mount("/etc/group", str(run_dir / "etc" / "group"), type="bind", read_only=True),
        ]
        tmpfs = {
            "/tmp": f"rw,nosuid,nodev,{quota}",  # noqa: S108 - its own tmpfs
            "/home/agent": f"rw,nosuid,nodev,{quota},uid={uid},gid={uid},mode=0700",
        }
        if host_usr:
            mounts += [
                Mount(path, path, type="bind", read_only=True)
                for path in ("/usr", *HOST_ETC)
                if os.path.exists(path)
            ]
            # An empty /usr/local over the host's, as under the local backend: tools,
            # credential helpers and builds no sandbox needs to see.
            tmpfs["/usr/local"] = "ro,nosuid,nodev,size=4k"
        return {
            "name": name,
            "hostname": "sandbox",  # the same in both lanes
            "user": f"{uid}:{uid}",
            "working_dir": "/work",
            "environment": environment,
            "labels": {
                LABEL_SANDBOX: "1",
                LABEL_RUN: str(spec.run_id),
                LABEL_SLOT: str(slot),
                LABEL_HOST: self.host,
                LABEL_DIR: str(run_dir),
            },
            "mounts": mounts,
            "tmpfs": tmpfs,
            "read_only": True,
            "privileged": False,
            "cap_drop": ["ALL"],
            "security_opt": security_opt,
            "network_mode": "none",
            "ipc_mode": "private",
            "init": True,
            "mem_limit": memory,
            "memswap_limit": memory,  # no swap beyond the memory limit
            "pids_limit": spec.pids,
            "nano_cpus": int(spec.cpu_fraction * 1e9),
            "auto_remove": False,  # destroy() and the janitor remove it, after a look
            "log_config": LogConfig(
                type=LogConfig.types.JSON, config={"max-size": "1m", "max-file": "1"}
            ),
        }

    def _wait_ready(self, sandbox: DockerSandbox) -> None:
        ctl = sandbox.run_dir / "ctl" / "ctl.sock"
        deadline = time.monotonic() + self.provision_timeout_s
        next_check = time.monotonic()
        while not ctl.exists():
            now = time.monotonic()
            if now >= next_check:
                self._raise_if_exited(sandbox.container)
                next_check = now + STATUS_CHECK_INTERVAL_S
            if now > deadline:
                raise RuntimeError(
                    f"the sandbox was not ready within {self.provision_timeout_s:g} s"
                )
            time.sleep(0.01)

    @staticmethod
    def _raise_if_exited(container: Container) -> None:
        container.reload()
        if container.status not in EXITED:
            return
        code = container.attrs.get("State", {}).get("ExitCode")
        tail = container.logs(stdout=True, stderr=True, tail=40)[-2000:]
        raise RuntimeError(
            f"the sandbox exited while starting (exit code {code}): {tail.decode(errors='replace')}"
        )

    def _discard(self, spec: SandboxSpec, run_dir: Path) -> None:
        if spec.egress and self.egress is not None:
            with contextlib.suppress(Exception):
                self.egress.release(spec.run_id)
        with contextlib.suppress(OSError):
            disk.unmount_all_under(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)

    def health(self) -> dict[str, Any]:
        """The engine answers and has the image."""
        result: dict[str, Any] = {"backend": self.name, "image": self.image}
        try:
            client = self.client()
            client.ping()
            client.images.get(self.image)
        except ImageNotFound:
            hint = BUILD_HINT.format(image=self.image)
            return {**result, "ok": False, "error": f"the image is missing; build it: {hint}"}
        except (DockerException, requests.RequestException) as exc:
            return {**result, "ok": False, "error": f"the engine does not answer: {exc}"}
        return {**result, "ok": True}


def binds_host_usr(image_attrs: dict[str, Any]) -> bool:
    """Whether an image (its inspect attributes) declares that it runs the host's /usr
    (``LABEL_BINDS_HOST_USR``, set by ``scripts/docker.sh image``)."""
    labels = (image_attrs.get("Config") or {}).get("Labels") or {}
    return labels.get(LABEL_BINDS_HOST_USR) == "1"


def _label_run_id(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def janitor(
    client: docker.DockerClient,
    host: str,
    is_live: Callable[[int | None], bool],
    *,
    root: Path | None = None,
) -> int:
    """Removes this host's sandbox containers whose run no live lease holds (their
    worker died, or lost the engine while destroying them), and with ``root`` their run
    dirs under it. ``is_live`` gets the run id from the container's label (None when it
    has none). Returns how many containers it removed.

    Precondition: a run's lease is taken before its container is created and released
    after it is removed (``sandbox_session`` does both), so no container being
    provisioned or used looks orphaned.
    """
    wanted = {LABEL_SANDBOX: "1", LABEL_HOST: host}
    containers = client.containers.list(
        all=True,
        filters={"label": [f"{key}={value}" for key, value in wanted.items()]},
        ignore_removed=True,
    )
    removed = 0
    for container in containers:
        labels = container.labels
        if any(labels.get(key) != value for key, value in wanted.items()):
            continue  # the engine's filter, checked again: never another host's sandbox
        if is_live(_label_run_id(labels.get(LABEL_RUN))):
            continue
        try:
            container.remove(force=True, v=True)
        except NotFound:
            continue  # removed meanwhile, by its own worker
        removed += 1
        logger.info("janitor removed sandbox container %s", container.name)
        if root is not None:
            _remove_run_dir(root, labels.get(LABEL_DIR))
    return removed


def _remove_run_dir(root: Path, path: str | None) -> None:
    """Removes a run dir named by a container label, if it is one of ``root``'s."""
    if not path:
        return
    run_dir = Path(path)
    if run_dir.parent.resolve() == root.resolve() and run_dir.name.startswith("run-"):
        with contextlib.suppress(OSError):
            disk.unmount_all_under(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)
