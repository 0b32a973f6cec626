"""The ``docker`` backend: per run, containers driven through the Docker Engine API from
a desktop image: ``scripts/image.sh``'s (self-contained, Debian packages and the arena's
files; ``scripts/docker.sh image`` builds it) or ``scripts/docker.sh image --host-usr``'s
(a few kilobytes, no programs: its label ``arena.binds-host-usr=1`` makes each container
bind the host's ``/usr`` and ``HOST_ETC`` read-only, as the local backend's sandboxes see
them). The worker refuses an image of a version it does not run (``unsupported_image``).

A desktop run is two containers, as the local backend's run is two sandboxes:

- **the display's** (role ``display``): Xvfb, Chromium and a supervisor serving
  ``navigate``, the page state, the page as text and the input tools (XTEST events on its
  own X connection, python-xlib bound read-only from the host where the image binds the
  host's ``/usr``, else xdotool), as the slot's display uid, under the arena's browser
  seccomp profile (Chromium builds its own sandbox from user namespaces);
- **the agent's** (role ``agent``): the supervisor serving the shell and the agent's
  shell, as the slot's uid, under the agent's profile (no new namespaces at all).

Each has its own network namespace (``none``: only its own loopback), PID namespace,
IPC namespace, ``/tmp`` and home: the agent's processes can reach neither of the X
server's sockets (its file in the display's ``/tmp``, its abstract one in the display's
network namespace), nor the framebuffer (bound into the display's container only), nor
any process of the display. Of the display the agent sees Chromium's downloads,
read-only. A run without a desktop is the agent's container alone.

Both containers are not privileged, drop every capability, set no-new-privileges, have a
read-only root with tmpfs ``/tmp`` and home, memory (swap included), process and CPU
limits and docker-init as pid 1; neither runs as root.

The host shares one per-run directory with them, bound in parts: ``ctl`` (the agent's)
and ``display-ctl`` (the display's) at ``/run/arena`` (the supervisor's control socket,
and the run's socket of the host egress proxy), ``fb`` at ``/fb`` of the display (Xvfb's
framebuffer file, read for screenshots), ``work`` at ``/work`` of the agent (read for
deliveries), ``downloads`` (written by the display, read-only for the agent), and
read-only ``passwd`` and ``group`` files naming each one's uid. A root worker mounts a
tmpfs quota on each of them (the host disk is never written). Nothing else of the host
is mounted (but the read-only system paths an image that binds the host's ``/usr`` asks
for, and for a spec with ``toolchain`` — a repo lane's or the judge's sandbox — the
coding toolchain, read-only at ``SANDBOX_TOOLCHAIN`` as under ``local``, unless the
engine has the coding image, which carries it: ``_image_for``), least of all
the engine's socket. Each supervisor forwards ``127.0.0.1:3128``
inside to its egress socket, exactly as under ``local``, so the proxy is a container's
whole network and every request it makes is checked and attributed to its run.

Every container carries labels (``arena.sandbox``, ``arena.run``, ``arena.slot``,
``arena.host``, ``arena.dir``, ``arena.role``) so :func:`janitor` can find the ones a
dead worker left.

Preconditions: the engine runs on this host's kernel and mounts this host's paths with
this host's uids (a rootful engine). Unix sockets and file ownership cross the bind
mounts, so a remote, rootless or userns-remapped engine cannot work here; provisioning
refuses the last two. An engine on another host is ``sandboxes.docker_remote``'s (the
remote mode: no bind of a run dir, everything over the network contract).
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

from sandboxes import cgroups, disk, seccomp
from sandboxes.base import SandboxBackend, SandboxSpec
from sandboxes.control import supervisor_config
from sandboxes.docker_images import (
    DEFAULT_CODING_IMAGE,
    binds_host_usr,
    carries_toolchain,
    unsupported_image,
)
from sandboxes.docker_sandbox import (
    CTL_DIRS,
    CTL_QUOTA,
    DockerSandbox,
    in_parallel,
    remove_container,
)
from sandboxes.local_backend import (
    RO_ETC,
    SANDBOX_PATH,
    SANDBOX_TOOLCHAIN,
    SANDBOX_XLIB,
    TOOLCHAIN_DIR,
    xlib_package,
)
from sandboxes.rundir import DISPLAY_UID_OFFSET

if TYPE_CHECKING:
    from sandboxes.egress import EgressProxyThread

logger = logging.getLogger(__name__)

DEFAULT_IMAGE = "agent-arena-desktop"
BUILD_HINT = (
    "scripts/docker.sh image (ARENA_DOCKER_IMAGE={image}), or scripts/image.sh {image} "
    "with DOCKER_HOST naming the engine"
)
PROVISION_TIMEOUT_S = 60.0
# An engine that does not answer its ping in this long is taken for lost (engine_problem).
ENGINE_PING_TIMEOUT_S = 5.0
STATUS_CHECK_INTERVAL_S = 0.25
EXITED = ("exited", "dead")

LABEL_SANDBOX = "arena.sandbox"
LABEL_RUN = "arena.run"
LABEL_SLOT = "arena.slot"
LABEL_HOST = "arena.host"
LABEL_DIR = "arena.dir"
LABEL_ROLE = "arena.role"
HOST_ETC = RO_ETC  # the /etc paths the local backend's sandboxes see, and no others

ClientFactory = Callable[[], docker.DockerClient]


def sandbox_uid(uid_base: int, slot: int, role: str = "agent") -> int:
    """The uid a slot's container of ``role`` runs as. A root worker gives every slot's
    agent and display a uid of their own in a range no host user has (RLIMIT_NPROC
    counts per uid across all containers, and a process sharing the uid could signal or
    trace it): ``uid_base + slot``, and ``DISPLAY_UID_OFFSET`` above that for the
    display, as the local backend does. Any other worker uses its own uid for both, the
    only one whose files in the run dir it can read and remove. Never 0."""
    euid = os.geteuid()
    if euid != 0:
        return euid
    return uid_base + slot + (DISPLAY_UID_OFFSET if role == "display" else 0)


def roles(spec: SandboxSpec) -> tuple[str, ...]:
    """The containers of a run, the display's first (it takes longest to start)."""
    return ("display", "agent") if spec.desktop else ("agent",)


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
        toolchain: Path = TOOLCHAIN_DIR,
        coding_image: str = DEFAULT_CODING_IMAGE,
    ) -> None:
        """``seccomp_profile`` (JSON text) replaces the display container's default: the
        arena's deny list as a Docker profile (``sandboxes.seccomp``, its browser profile:
        Chromium builds its own sandbox from user namespaces; README). The agent's
        container always gets the agent's profile (no new namespaces). ``host`` is the
        worker host's id its containers are labelled with (the machine's name by
        default). ``toolchain`` is bound read-only at ``SANDBOX_TOOLCHAIN`` into the
        agent's container of a spec with ``toolchain``, as the local backend binds it,
        unless the engine has ``coding_image`` (``sandboxes.services`` passes
        ``ARENA_DOCKER_CODING_IMAGE``) and it carries the toolchain: such a spec's
        containers run from it."""
        self.image = image
        self.coding_image = coding_image
        self._coding_choice: str | None = None  # the last one logged
        self.root = root
        self.uid_base = uid_base
        self.toolchain = toolchain
        self.egress = egress
        self.client_factory = client_factory
        self.provision_timeout_s = provision_timeout_s
        self.seccomp_profile = (
            seccomp_profile
            if seccomp_profile is not None
            else seccomp.docker_profile(seccomp.BROWSER)
        )
        self.agent_seccomp_profile = seccomp.docker_profile(seccomp.AGENT)
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
        """Closes the engine client, once the reclaims under way (which use it) ended."""
        from sandboxes.reclaim import RECLAIM_WAIT_S, reclaims_wait

        reclaims_wait(RECLAIM_WAIT_S)
        with self._client_lock:
            if self._client is not None:
                self._client.close()
            self._client = None

    # -- provisioning ----------------------------------------------------------------

    def provision(
        self, spec: SandboxSpec, *, slot: int = 0, background: bool = False
    ) -> DockerSandbox:
        """``background``: a pooled desktop's boot (``sandboxes.pool``), its group at a low
        CPU weight until a run claims it (``DockerSandbox.assign``)."""
        client = self.client()
        self._check_engine(client)
        uids = {role: sandbox_uid(self.uid_base, slot, role) for role in roles(spec)}
        run_dir = self._make_run_dir(spec, slot, uids)
        name = f"arena-run-{spec.run_id}-{slot}-{secrets.token_hex(3)}"
        made: dict[str, Container] = {}
        try:
            # One group bounds the run's containers together, as a local run's two
            # sandboxes (each container also keeps the whole run's limits of its own).
            limits = cgroups.Limits(
                spec.memory_mb * 1024**2, spec.pids, spec.cpu_fraction, background=background
            )
            parent = cgroups.engine_group_create(run_dir.name, limits)
            image, image_attrs, bind_toolchain = self._image_for(spec, client)
            if refusal := unsupported_image(image, image_attrs):
                raise RuntimeError(refusal)
            host_usr = binds_host_usr(image_attrs)
            if spec.egress and self.egress is not None:
                # Before the containers start: each supervisor looks for it once, at start.
                for role, uid in uids.items():
                    self.egress.serve_unix(
                        str(run_dir / CTL_DIRS[role] / "egress.sock"),
                        spec.run_id,
                        owner_uid=uid if os.geteuid() == 0 else None,
                    )

            def launch(role: str) -> None:
                kwargs = self._create_kwargs(
                    spec, slot, run_dir, uids[role], f"{name}-{role}", role=role,
                    host_usr=host_usr, bind_toolchain=bind_toolchain,
                )  # fmt: skip
                if parent:
                    kwargs["cgroup_parent"] = parent
                config = json.dumps(supervisor_config(spec, role))
                made[role] = client.containers.create(image, [config], **kwargs)
                made[role].start()

            in_parallel(launch, uids)  # the display's (the slower) on this thread
        except ImageNotFound as exc:
            self._discard(spec, run_dir, made)
            hint = BUILD_HINT.format(image=self.image)
            raise RuntimeError(
                f"the sandbox image {self.image!r} is not on the engine; build it: {hint}"
            ) from exc
        except BaseException:
            self._discard(spec, run_dir, made)
            raise
        containers = {role: made[role] for role in uids}
        sandbox = DockerSandbox(
            spec, run_dir, uids["agent"], containers, self.egress, display_uid=uids.get("display")
        )
        try:
            self._wait_ready(sandbox)
        except BaseException:
            sandbox.destroy()
            raise
        return sandbox

    def _image_for(
        self, spec: SandboxSpec, client: docker.DockerClient
    ) -> tuple[str, dict[str, Any], bool]:
        """The image of ``spec``'s containers, its inspect attributes, and whether the
        agent's binds the worker's toolchain: for a spec with ``toolchain``, the coding
        image where the engine has it carrying the toolchain, else the desktop image and
        the bind (logged once per choice)."""
        if not spec.toolchain:
            return self.image, client.images.get(self.image).attrs, False
        try:
            attrs = client.images.get(self.coding_image).attrs
        except ImageNotFound:
            attrs = {}
        attrs = attrs if carries_toolchain(attrs) else {}
        chosen = self.coding_image if attrs else self.image
        if chosen != self._coding_choice:
            self._coding_choice = chosen
            how = "its toolchain" if attrs else f"a bind of the toolchain {self.toolchain}"
            logger.info("docker backend: coding sandboxes run from %r with %s", chosen, how)
        if attrs:
            return chosen, attrs, False
        if not (self.toolchain / "bin").is_dir():
            raise RuntimeError(
                f"the sandbox toolchain is not installed at {self.toolchain}: run "
                "scripts/toolchain.sh (make run and make test do), or build the coding "
                "image (scripts/docker.sh image --coding)"
            )
        return self.image, client.images.get(self.image).attrs, True

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

    def _make_run_dir(self, spec: SandboxSpec, slot: int, uids: dict[str, int]) -> Path:
        """The run dir: a dir per bind mount, owned by the uid that writes it (a root
        worker), each on a tmpfs quota of its own where this worker can mount one; the
        passwd and group files of each role."""
        # Nothing in a container walks these paths (bind mounts start at the mounted
        # dir), so each run dir stays private to the worker.
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        run_dir = self.root / f"run-{spec.run_id}-{slot}-{secrets.token_hex(4)}"
        run_dir.mkdir(mode=0o700)
        agent = uids["agent"]
        # (dir, owner, quota): the agent's /work; the downloads Chromium writes and the
        # agent reads (a quota of the agent's size); Xvfb's framebuffer dir (the
        # display's size); each supervisor's control dir.
        dirs = [("work", agent, disk.Quota(spec.disk_bytes, spec.disk_inodes)),
                (CTL_DIRS["agent"], agent, CTL_QUOTA)]  # fmt: skip
        if "display" in uids:
            display = uids["display"]
            dirs += [("downloads", display, disk.Quota(spec.disk_bytes, spec.disk_inodes)),
                     ("fb", display, disk.Quota(spec.display_disk_bytes, spec.disk_inodes)),
                     (CTL_DIRS["display"], display, CTL_QUOTA)]  # fmt: skip
        try:
            (run_dir / "etc").mkdir()
            for sub, owner, quota in dirs:
                (run_dir / sub).mkdir()
                if disk.can_mount():
                    disk.mount_tmpfs(run_dir / sub, quota, source=f"arena-{sub}")
                os.chmod(run_dir / sub, 0o755)  # noqa: S103 - the agent reads the downloads
                if os.geteuid() == 0:
                    os.chown(run_dir / sub, owner, owner)
            for role, uid in uids.items():
                home = f"/home/{role}"
                passwd = f"{role}:x:{uid}:{uid}:{role}:{home}:/bin/sh\n"
                (run_dir / "etc" / f"{role}-passwd").write_text(passwd)
                (run_dir / "etc" / f"{role}-group").write_text(f"{role}:x:{uid}:\n")
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
        role: str = "agent",
        host_usr: bool = False,
        bind_toolchain: bool = True,
    ) -> dict[str, Any]:
        """One container of the run: ``role``'s mounts, uid, profile and tmpfs sizes.
        ``bind_toolchain``: false when the image carries the toolchain itself."""
        home = f"/home/{role}"
        toolchain = role == "agent" and spec.toolchain
        path = f"{SANDBOX_TOOLCHAIN}/bin:{SANDBOX_PATH}" if toolchain else SANDBOX_PATH
        environment = {"HOME": home, "USER": role, "PATH": path, "LANG": "C.UTF-8"}
        if role == "agent" and spec.egress and self.egress is not None:
            # (Chromium gets its proxy on its command line: the display needs none)
            for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
                environment[var] = "http://127.0.0.1:3128"
        profile = self.seccomp_profile if role == "display" else self.agent_seccomp_profile
        security_opt = ["no-new-privileges", f"seccomp={profile}"]
        # The engine's tmpfs mounts take sizes and file counts: the same quota as /work
        # (the display's: its own, for Chromium's profile and cache).
        size = spec.display_disk_bytes if role == "display" else spec.disk_bytes
        quota = f"size={size},nr_inodes={spec.disk_inodes}"
        memory = spec.memory_mb * 1024**2
        etc = run_dir / "etc"
        mounts = [
            Mount("/run/arena", str(run_dir / CTL_DIRS[role]), type="bind"),
            Mount("/etc/passwd", str(etc / f"{role}-passwd"), type="bind", read_only=True),
            Mount("/etc/group", str(etc / f"{role}-group"), type="bind", read_only=True),
        ]
        downloads = str(run_dir / "downloads")
        if role == "agent":
            mounts.insert(0, Mount("/work", str(run_dir / "work"), type="bind"))
            if spec.desktop:
                mounts.append(Mount(f"{home}/Downloads", downloads, type="bind", read_only=True))
            if toolchain and bind_toolchain:
                # The CLI coding agents and the judge's tools (docs/coding.md), read-only
                mounts.append(
                    Mount(SANDBOX_TOOLCHAIN, str(self.toolchain), type="bind", read_only=True)
                )
        else:
            mounts.insert(0, Mount("/fb", str(run_dir / "fb"), type="bind"))
            mounts.append(Mount(f"{home}/Downloads", downloads, type="bind"))
        tmpfs = {
            "/tmp": f"rw,nosuid,nodev,{quota}",  # noqa: S108 - its own tmpfs
            home: f"rw,nosuid,nodev,{quota},uid={uid},gid={uid},mode=0700",
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
            if role == "display" and xlib_package() is not None:
                # input as XTEST events (as the local backend's display sandbox has it)
                mounts.append(Mount(SANDBOX_XLIB, str(xlib_package()), type="bind", read_only=True))
        return {
            "name": name,
            "hostname": "sandbox",  # the same in both lanes
            "user": f"{uid}:{uid}",
            "working_dir": "/work" if role == "agent" else home,
            "environment": environment,
            "labels": {
                LABEL_SANDBOX: "1",
                LABEL_RUN: str(spec.run_id),
                LABEL_SLOT: str(slot),
                LABEL_HOST: self.host,
                LABEL_DIR: str(run_dir),
                LABEL_ROLE: role,
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
        """Waits until every supervisor's control socket appeared (each renames it into
        place once it serves); a container that exited meanwhile is an error."""
        sockets = {"agent": sandbox.paths.control}
        if sandbox.paths.display_control is not None:
            sockets["display"] = sandbox.paths.display_control
        deadline = time.monotonic() + self.provision_timeout_s
        next_check = time.monotonic()
        while pending := [role for role, path in sockets.items() if not path.exists()]:
            now = time.monotonic()
            if now >= next_check:
                for role in pending:
                    self._raise_if_exited(sandbox.containers[role])
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
        role = container.labels.get(LABEL_ROLE, "agent")
        raise RuntimeError(
            f"the {role} sandbox exited while starting (exit code {code}): "
            f"{tail.decode(errors='replace')}"
        )

    def _discard(self, spec: SandboxSpec, run_dir: Path, containers: dict[str, Container]) -> None:
        """Undoes a provisioning that failed before its sandbox object existed (its
        containers made or started, or not)."""
        in_parallel(remove_container, containers.values())
        cgroups.SandboxCgroup("v1", cgroups.engine_group_directories(run_dir.name)).remove()
        if spec.egress and self.egress is not None:
            with contextlib.suppress(Exception):
                self.egress.release(spec.run_id)
        with contextlib.suppress(OSError):
            disk.unmount_all_under(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)

    def engine_problem(self) -> str:
        """ "" when the engine answers its ping within ``ENGINE_PING_TIMEOUT_S`` (an
        engine whose host is gone must not hold a worker for the client's minute)."""
        try:
            api = self.client().api
            answer = api.get(f"{api.base_url}/_ping", timeout=ENGINE_PING_TIMEOUT_S)
        except (DockerException, requests.RequestException) as exc:
            cause: BaseException = exc
            while (deeper := cause.__cause__ or cause.__context__) is not None:
                cause = deeper  # (the socket's own error says most: refused, timed out)
            return f"the Docker engine does not answer: {str(cause)[:200] or type(cause).__name__}"
        if answer.status_code != 200:
            return f"the Docker engine answers its ping with HTTP {answer.status_code}"
        return ""

    def health(self) -> dict[str, Any]:
        """The engine answers and has the image."""
        result: dict[str, Any] = {"backend": self.name, "image": self.image}
        try:
            client = self.client()
            client.ping()
            refusal = unsupported_image(self.image, client.images.get(self.image).attrs)
        except ImageNotFound:
            hint = BUILD_HINT.format(image=self.image)
            return {**result, "ok": False, "error": f"the image is missing; build it: {hint}"}
        except (DockerException, requests.RequestException) as exc:
            return {**result, "ok": False, "error": f"the engine does not answer: {exc}"}
        if refusal:
            return {**result, "ok": False, "error": refusal}
        return {**result, "ok": True}


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
        cgroups.SandboxCgroup("v1", cgroups.engine_group_directories(run_dir.name)).remove()
