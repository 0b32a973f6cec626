"""The ``docker`` backend's remote mode: sandboxes on an engine that shares no file
system with the worker (``ARENA_DOCKER_REMOTE``, implied by a ``tcp://`` or ``ssh://``
``DOCKER_HOST``; docs/sandboxes.md, "Remote engines").

The containers are the local mode's (``DockerBackend._create_kwargs``: uids, profiles,
limits, labels), less every bind mount of a run dir:

- the writable parts are the engine's tmpfs mounts, each bounded in bytes and files:
  ``/work``, ``/tmp`` and home; ``/fb`` of the display; ``/run/arena`` (1 MiB, 64
  files) where the front and the supervisor put their sockets;
- the downloads the display writes and the agent reads are a named volume of the run
  (driver ``local``, type ``tmpfs``, the agent's disk size and file count, owned by the
  display's uid), labelled like the containers, removed at destroy and by the janitor;
- each container's command is the front (``relay.py front``) before the image's
  entrypoint; its secret (one per container) is in the container's environment.

Everything the worker does with them goes over the network contract: one control
channel per supervisor (``ChannelClient`` over ``ExecStream``, reopened on failure),
polled with ``ping`` until the supervisor serves; egress through one tunnel per
container to a listener of the worker's proxy for the run (``open_egress_tunnel``);
screenshots as the display's ``framebuffer`` op, checked here exactly as the local
file is (``screens.framebuffer_bytes_png``); deliveries and files put into ``/work``
as the agent's ``read_file`` and ``write_file`` ops. The engine's archive API is not
used for files: it does not see a container's tmpfs mounts, where ``/work`` is.

The worker keeps one dir of its own per run (``root/run-…``, mode 0700, never shared):
the proxy's listeners for the run's tunnels. No host cgroup groups the containers (the
engine's host is not this one); each keeps the run's memory, process and CPU limits.
Coding lanes (a spec with ``toolchain``) run from the coding image, which carries the
toolchain (the worker's is never bound); files for ``/work`` go in over the channel
(``push_work_dir``, big ones in several requests), and the judge's sealing is a short
root container of its own on the judge's /work volume (``seal_tree``,
``sandboxes.docker_seal``).
"""

import base64
import contextlib
import json
import logging
import os
import secrets
import shutil
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import requests
from docker.errors import DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from docker.types import Mount

from arena_site.perprocess import PerProcess
from sandboxes.base import SandboxLost, SandboxSpec, ToolError, ToolResult, work_relative
from sandboxes.channel import ChannelClient, ChannelError, exec_connector, front_argv, new_secret
from sandboxes.control import supervisor_config
from sandboxes.docker_backend import (
    BUILD_HINT,
    STATUS_CHECK_INTERVAL_S,
    DockerBackend,
    roles,
    sandbox_uid,
)
from sandboxes.docker_images import binds_host_usr, carries_toolchain, unsupported_image
from sandboxes.docker_sandbox import (
    DockerSandbox,
    in_parallel,
    remove_container,
    remove_containers,
)
from sandboxes.docker_seal import Sealer, sealer_kwargs
from sandboxes.docker_volumes import remove_volume, run_volume
from sandboxes.egress_tunnel import Tunnel, TunnelLoop, open_egress_tunnel
from sandboxes.inside import relay
from sandboxes.local import workspace_parts
from sandboxes.screens import ScreenError, framebuffer_bound, framebuffer_bytes_png

if TYPE_CHECKING:
    from sandboxes.egress import EgressProxyThread

logger = logging.getLogger(__name__)

CTL_TMPFS = "size=1m,nr_inodes=64"  # the front's and the supervisor's sockets
PING_TIMEOUT_S = 10.0
SCREENSHOT_TIMEOUT_S = 15.0
FILE_TIMEOUT_S = 30.0
DISPLAY_REPLY_BYTES = 1 << 20  # the display's replies but the framebuffer's
# A file put into /work goes in requests of this many bytes (base64 under the 16 MiB frame)
PUT_CHUNK_BYTES = 8 * 1024**2


def b64_bound(size: int) -> int:
    """The most characters ``size`` bytes take in base64."""
    return 4 * ((size + 2) // 3)


def remote_client_from_env() -> docker.DockerClient:
    """The engine named by ``DOCKER_HOST`` (``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``):
    its session ignores the environment's CA bundle and proxies, which requests would
    put over the engine's own CA (``DOCKER_API_VERSION``, if set, saves probing the
    engine's version before that)."""
    client = docker.from_env(version=os.environ.get("DOCKER_API_VERSION") or None)
    client.api.trust_env = False
    return client


def remote_mode_implied(docker_host: str | None) -> bool:
    """Whether ``DOCKER_HOST`` names an engine on another host (TCP or SSH)."""
    return (docker_host or "").startswith(("tcp://", "ssh://"))


# -- one tunnel loop per process -------------------------------------------------------

_loop: PerProcess[TunnelLoop] = PerProcess(TunnelLoop)  # (a fork copies no thread)


def tunnel_loop() -> TunnelLoop:
    return _loop.get()


# -- the sandbox -----------------------------------------------------------------------


def _reason(reply: dict[str, Any]) -> str:
    error = reply.get("error")
    return error[:500] if isinstance(error, str) else "refused"


class RemoteDockerSandbox(DockerSandbox):
    """A run's containers on a remote engine, driven over their channels only."""

    uids_here = False  # the slot's uids run on the engine's host

    def __init__(
        self,
        spec: SandboxSpec,
        run_dir: Path,
        uid: int,
        containers: dict[str, Container],
        egress: "EgressProxyThread | None",
        *,
        display_uid: int | None,
        api: Any,
        secrets_by_role: dict[str, bytes],
        volumes: dict[str, Any],
        sealer: Sealer | None = None,
    ) -> None:
        super().__init__(spec, run_dir, uid, containers, egress, display_uid=display_uid)
        self.volumes = volumes  # the downloads (a desktop's), /work (a sandbox that seals)
        self.sealer = sealer
        self.api = api
        self.tunnels: list[Tunnel] = []
        # Where the worker places files for /work before pushing them (push_work_dir):
        # its own dir, never the container's.
        self.work_dir = run_dir / "work"
        self.work_dir.mkdir(mode=0o700, exist_ok=True)
        shell_reply = 12 * spec.output_max_bytes + (1 << 20)
        file_reply = b64_bound(spec.deliver_max_bytes) + 4096
        self.client = ChannelClient(  # type: ignore[assignment]
            exec_connector(api, containers["agent"].id),
            secrets_by_role["agent"],
            max_reply_bytes=max(shell_reply, file_reply),
        )
        if "display" in containers:
            # zlib's worst case adds well under 1 % to an incompressible screen
            frame = framebuffer_bound(spec.width, spec.height)
            self.display_client = ChannelClient(  # type: ignore[assignment]
                exec_connector(api, containers["display"].id),
                secrets_by_role["display"],
                max_reply_bytes=max(DISPLAY_REPLY_BYTES, b64_bound(frame + frame // 100) + 4096),
            )
        else:
            self.display_client = self.client

    @property
    def volume(self) -> Any | None:
        """The run's downloads volume (a desktop's)."""
        return self.volumes.get("downloads")

    def _call(
        self,
        tool: str,
        request: dict[str, Any],
        timeout_s: float = 20.0,
        client: Any = None,
    ) -> dict[str, Any]:
        """A channel that fails is the agent's failed step while the engine still
        answers for the container (a supervisor the agent killed, a slow reply); when
        the engine does not, :class:`SandboxLost`."""
        try:
            return super()._call(tool, request, timeout_s, client)
        except ChannelError as exc:
            if self._engine_lost():
                raise SandboxLost(f"the sandbox's engine does not answer: {exc}") from exc
            raise

    def _engine_lost(self) -> bool:
        try:
            self.container.reload()
        except NotFound:
            return False  # removed (destroyed, or by an operator): not a lost engine
        except (DockerException, requests.RequestException):
            return True
        return False

    def screenshot(self) -> ToolResult:
        if not self.spec.desktop:
            return ToolResult(ok=False, tool="screenshot", error="this sandbox has no display")
        width, height = self.spec.width, self.spec.height
        try:
            reply = self._call(
                "screenshot",
                {"op": "framebuffer"},
                timeout_s=SCREENSHOT_TIMEOUT_S,
                client=self.display_client,  # type: ignore[arg-type]
            )
            if reply.get("ok") is not True:
                raise ScreenError(f"the display refused the framebuffer: {_reason(reply)}")
            data = inflate_bounded(reply.get("zlib"), framebuffer_bound(width, height))
            shot = framebuffer_bytes_png(data, width, height, self.spec.screenshot_max_bytes)
        except (ScreenError, ToolError) as exc:
            return ToolResult(ok=False, tool="screenshot", error=str(exc))
        data_out: dict[str, Any] = {"width": shot.width, "height": shot.height}
        if shot.reduced:
            data_out["reduced"] = shot.reduced
        return ToolResult(ok=True, tool="screenshot", image=shot.png, data=data_out)

    def _read_workspace_file(self, name: str, budget: int) -> bytes:
        """The agent's supervisor reads it (``read_file``: O_NOFOLLOW component by
        component, regular files only, at most ``budget`` bytes); the reply is bounded
        and checked again here."""
        parts = workspace_parts(name)
        request = {"op": "read_file", "path": parts, "max_bytes": budget}
        reply = self._call("deliver", request, timeout_s=FILE_TIMEOUT_S)
        if reply.get("ok") is not True:
            raise ToolError(f"{name!r} cannot be delivered: {_reason(reply)}")
        encoded = reply.get("data")
        if not isinstance(encoded, str) or len(encoded) > b64_bound(budget):
            raise ToolError(
                f"{name!r} is over the delivery limit of {self.spec.deliver_max_bytes} bytes"
            )
        try:
            data = base64.b64decode(encoded, validate=True)
        except ValueError:
            raise ToolError(f"{name!r}: the sandbox answered garbage") from None
        if len(data) > budget:
            raise ToolError(
                f"{name!r} is over the delivery limit of {self.spec.deliver_max_bytes} bytes"
            )
        return data

    def put_file(self, name: str, data: bytes, *, mode: int = 0o444) -> str:
        """Writes ``data`` as a new file ``name`` under /work (its dirs made as needed;
        never over an existing file or through a link), in requests of at most
        ``PUT_CHUNK_BYTES`` (each appended where the last ended); returns its path
        inside."""
        parts = workspace_parts(name)
        offset = 0
        while True:
            chunk = data[offset : offset + PUT_CHUNK_BYTES]
            more = offset + len(chunk) < len(data)
            request = {
                "op": "write_file",
                "path": parts,
                "data": base64.b64encode(chunk).decode(),
                "mode": mode,
                "offset": offset,
                "more": more,
            }
            reply = self._call("put_file", request, timeout_s=FILE_TIMEOUT_S)
            if reply.get("ok") is not True:
                raise ToolError(f"{name!r} could not be put into the sandbox: {_reason(reply)}")
            offset += len(chunk)
            if not more:
                return "/work/" + "/".join(parts)

    def seal_tree(self, path: str) -> bool:
        """Seals the tree inside (``sandboxes.inside.seal``), as root, from a short
        container of its own on the run's /work volume (``sandboxes.docker_seal``):
        the sandbox's container never holds a capability. False where the spec does
        not seal, the engine refuses it or the tree is none."""
        if self.sealer is None or work_relative(path) is None:
            return False
        try:
            return self.sealer.seal(path)
        except (DockerException, requests.RequestException) as exc:
            if self._engine_lost():
                raise SandboxLost(f"the sandbox's engine does not answer: {exc}") from exc
            logger.warning("sealing %s of run %s failed: %s", path, self.spec.run_id, exc)
            return False

    def push_work_dir(self) -> list[str]:
        """Puts every file the worker placed in :attr:`work_dir` (a dir of its own here,
        e.g. the lane's attachments, ``battles.attachments.attachments_place``) into the
        sandbox's /work at the same path and mode, then empties it. Returns the paths
        inside."""
        put: list[str] = []
        for path in sorted(p for p in self.work_dir.rglob("*") if p.is_file()):
            if path.is_symlink():
                continue  # the worker's own dir: nothing there links, but never follow
            relative = path.relative_to(self.work_dir).as_posix()
            put.append(self.put_file(relative, path.read_bytes(), mode=path.stat().st_mode & 0o777))
        shutil.rmtree(self.work_dir, ignore_errors=True)
        self.work_dir.mkdir(mode=0o700)
        return put

    def _egress_sockets(self, spec: SandboxSpec) -> list[tuple[str, int | None]]:
        """The proxy's listeners the run's tunnels connect to (a pooled sandbox's
        ``assign`` serves them for the new run; the tunnels stay as they are)."""
        return [(tunnel.proxy_path, None) for tunnel in self.tunnels]

    def _stop(self) -> None:
        """``DockerSandbox.destroy``'s first phase, with the tunnels closed first."""
        for tunnel in self.tunnels:
            with contextlib.suppress(Exception):
                tunnel.close()
        super()._stop()

    def _reclaim(self) -> bool:
        """The containers (all at once), then the run's volumes and the worker's own
        dir of the run; whether every container is gone."""
        gone = remove_containers(self.containers.values())
        for volume in self.volumes.values():
            remove_volume(volume)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return gone


def inflate_bounded(value: object, bound: int) -> bytes:
    """A framebuffer the display sent (base64 of its deflated bytes): at most ``bound``
    bytes once inflated, whatever it claims."""
    if not isinstance(value, str):
        raise ScreenError("the display sent no framebuffer")
    try:
        packed = base64.b64decode(value, validate=True)
        inflater = zlib.decompressobj()
        data = inflater.decompress(packed, bound + 1)
    except (ValueError, zlib.error):
        raise ScreenError("the display sent a framebuffer that does not decode") from None
    if len(data) > bound or inflater.unconsumed_tail or not inflater.eof:
        raise ScreenError("the display sent more than a framebuffer of this screen")
    return data


# -- the backend -----------------------------------------------------------------------


class RemoteDockerBackend(DockerBackend):
    """:class:`DockerBackend` in remote mode: no file system shared with the engine."""

    remote = True

    def provision(
        self, spec: SandboxSpec, *, slot: int = 0, background: bool = False
    ) -> RemoteDockerSandbox:
        client = self.client()
        uids = {role: sandbox_uid(self.uid_base, slot, role) for role in roles(spec)}
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        run_dir = self.root / f"run-{spec.run_id}-{slot}-{secrets.token_hex(4)}"
        run_dir.mkdir(mode=0o700)  # the worker's alone: the proxy's listeners
        name = f"arena-run-{spec.run_id}-{slot}-{secrets.token_hex(3)}"
        keys = {role: new_secret() for role in uids}
        egress = spec.egress and self.egress is not None
        made: dict[str, Container] = {}
        tunnels: list[Tunnel] = []
        volumes: dict[str, Any] = {}
        sealer: Sealer | None = None
        try:
            image, image_attrs, _ = self._image_for(spec, client)
            if refusal := unsupported_image(image, image_attrs):
                raise RuntimeError(refusal)
            entrypoint = list((image_attrs.get("Config") or {}).get("Entrypoint") or [])
            host_usr = binds_host_usr(image_attrs)
            base = self._create_kwargs(spec, slot, run_dir, uids["agent"], name, host_usr=host_usr)
            labels = {k: v for k, v in base["labels"].items() if k != "arena.role"}
            if spec.desktop:
                volumes["downloads"] = run_volume(
                    client, f"{name}-downloads", spec, uids["display"], labels
                )
            if spec.seals:
                volumes["work"] = run_volume(client, f"{name}-work", spec, uids["agent"], labels)

            def launch(role: str) -> None:
                kwargs = self._remote_kwargs(
                    spec, slot, run_dir, uids[role], f"{name}-{role}", role, host_usr, volumes
                )
                if role == "agent" and "work" in volumes:
                    nonlocal sealer
                    sealer = Sealer(client, image, sealer_kwargs(kwargs, volumes["work"].name))
                kwargs["environment"][relay.SECRET_ENV] = keys[role].hex()
                config = json.dumps(supervisor_config(spec, role))
                command = front_argv([*entrypoint, config], egress=egress)
                made[role] = client.containers.create(
                    image, command[1:], entrypoint=command[:1], **kwargs
                )
                made[role].start()
                if egress:
                    assert self.egress is not None
                    sock = exec_connector(client.api, made[role].id)(PING_TIMEOUT_S)
                    tunnels.append(
                        open_egress_tunnel(
                            tunnel_loop(),
                            self.egress,
                            spec.run_id,
                            sock,
                            keys[role],
                            socket_dir=run_dir,
                        )
                    )

            in_parallel(launch, uids)  # the display's (the slower) on this thread
        except ImageNotFound as exc:
            self._discard_remote(spec, run_dir, made, volumes, tunnels)
            hint = BUILD_HINT.format(image=self.image)
            raise RuntimeError(
                f"the sandbox image {self.image!r} is not on the engine; build it: {hint}"
            ) from exc
        except BaseException as exc:
            self._discard_remote(spec, run_dir, made, volumes, tunnels)
            if isinstance(exc, Exception) and (problem := self.engine_problem()):
                raise SandboxLost(f"the sandbox could not be made: {problem}") from exc
            raise
        sandbox = RemoteDockerSandbox(
            spec,
            run_dir,
            uids["agent"],
            {role: made[role] for role in uids},
            self.egress,
            display_uid=uids.get("display"),
            api=client.api,
            secrets_by_role=keys,
            volumes=volumes,
            sealer=sealer,
        )
        sandbox.tunnels = tunnels
        try:
            self._wait_serving(sandbox)
        except BaseException:
            sandbox.destroy()
            raise
        return sandbox

    def _image_for(
        self, spec: SandboxSpec, client: docker.DockerClient
    ) -> tuple[str, dict[str, Any], bool]:
        """As a local engine's, but a spec with ``toolchain`` (a repo lane's, a judge's)
        runs from the coding image alone: nothing of the worker's toolchain reaches
        another host's engine."""
        if not spec.toolchain:
            return super()._image_for(spec, client)
        try:
            attrs = client.images.get(self.coding_image).attrs
        except ImageNotFound:
            attrs = {}
        if not carries_toolchain(attrs):
            raise RuntimeError(
                f"coding sandboxes on a remote engine run from the coding image "
                f"{self.coding_image!r}, which carries the toolchain, and the engine has "
                f"none: build it there (scripts/image.sh --coding {self.coding_image} "
                f"{self.image}, with DOCKER_HOST naming the engine)"
            )
        return self.coding_image, attrs, False

    def _remote_kwargs(
        self,
        spec: SandboxSpec,
        slot: int,
        run_dir: Path,
        uid: int,
        name: str,
        role: str,
        host_usr: bool,
        volumes: dict[str, Any],
    ) -> dict[str, Any]:
        """The local mode's container less every bind of the run dir: tmpfs mounts
        bounded in bytes and files, the downloads volume, and /work on the run's volume
        for a sandbox that seals (``sandboxes.docker_seal``)."""
        kwargs = self._create_kwargs(
            spec, slot, run_dir, uid, name, role=role, host_usr=host_usr, bind_toolchain=False
        )
        prefix = str(run_dir)
        kwargs["mounts"] = [
            m for m in kwargs["mounts"] if not str(m.get("Source", "")).startswith(prefix)
        ]
        owned = f"uid={uid},gid={uid}"
        files = f"nr_inodes={spec.disk_inodes}"
        tmpfs = kwargs["tmpfs"]
        tmpfs["/run/arena"] = f"rw,nosuid,nodev,noexec,{CTL_TMPFS},{owned},mode=0700"
        if role == "agent" and "work" in volumes:
            kwargs["mounts"].append(Mount("/work", volumes["work"].name, type="volume"))
        elif role == "agent":
            tmpfs["/work"] = f"rw,nosuid,nodev,size={spec.disk_bytes},{files},{owned},mode=0755"
        else:
            size = spec.display_disk_bytes
            tmpfs["/fb"] = f"rw,nosuid,nodev,noexec,size={size},{files},{owned},mode=0755"
        if "downloads" in volumes:
            target = f"/home/{role}/Downloads"
            kwargs["mounts"].append(
                Mount(target, volumes["downloads"].name, type="volume", read_only=role == "agent")
            )
        return kwargs

    def _wait_serving(self, sandbox: RemoteDockerSandbox) -> None:
        """Polls each supervisor with ``ping`` over its channel until it serves (the
        front answers "not serving yet" before); a container that exited is an error."""
        clients = {"agent": sandbox.client}
        if "display" in sandbox.containers:
            clients["display"] = sandbox.display_client
        deadline = time.monotonic() + self.provision_timeout_s
        next_check = time.monotonic()
        pending = dict(clients)
        while pending:
            for role, client in list(pending.items()):
                try:
                    reply = client.call({"op": "ping"}, PING_TIMEOUT_S)
                except ChannelError:
                    reply = {}
                if reply.get("ok") is True:
                    del pending[role]
            now = time.monotonic()
            if pending and now >= next_check:
                for role in pending:
                    self._raise_if_exited(sandbox.containers[role])
                next_check = now + STATUS_CHECK_INTERVAL_S
            if pending and now > deadline:
                raise RuntimeError(
                    f"the sandbox was not ready within {self.provision_timeout_s:g} s"
                )
            if pending:
                time.sleep(0.05)

    def _discard_remote(
        self,
        spec: SandboxSpec,
        run_dir: Path,
        containers: dict[str, Container],
        volumes: dict[str, Any],
        tunnels: list[Tunnel],
    ) -> None:
        for tunnel in tunnels:
            with contextlib.suppress(Exception):
                tunnel.close()
        in_parallel(remove_container, containers.values())
        for volume in volumes.values():
            remove_volume(volume)
        if spec.egress and self.egress is not None:
            with contextlib.suppress(Exception):
                self.egress.release(spec.run_id)
        shutil.rmtree(run_dir, ignore_errors=True)
