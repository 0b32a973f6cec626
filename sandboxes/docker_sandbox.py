"""The ``docker`` backend's sandbox, as the host drives it: its containers by role (the
display's and the agent's, ``sandboxes.docker_backend`` launches them), where the host
finds their parts in the run dir, liveness and teardown through the engine."""

import contextlib
import logging
import shutil
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests
from docker.errors import DockerException, NotFound
from docker.models.containers import Container

from sandboxes import cgroups, disk
from sandboxes.base import SandboxSpec
from sandboxes.local import LocalSandbox
from sandboxes.rundir import SandboxPaths

if TYPE_CHECKING:
    from sandboxes.egress import EgressProxyThread

logger = logging.getLogger(__name__)

# Each role's control dir in the run dir (bound at /run/arena in its container).
CTL_DIRS = {"agent": "ctl", "display": "display-ctl"}
# The control dirs hold two sockets: a tiny quota, so no file there fills the host disk.
CTL_QUOTA = disk.Quota(1024**2, 64)


def sandbox_paths(run_dir: Path, desktop: bool) -> SandboxPaths:
    return SandboxPaths(
        work=run_dir / "work",
        framebuffer=run_dir / "fb" / "Xvfb_screen0",
        control=run_dir / CTL_DIRS["agent"] / "ctl.sock",
        display_control=run_dir / CTL_DIRS["display"] / "ctl.sock" if desktop else None,
    )


def in_parallel(action: Callable[[Any], None], items: Iterable[Any]) -> None:
    """Runs ``action`` on every item at once (one thread each but the first, which runs
    here); raises the first error once all have finished."""
    items = list(items)
    errors: list[BaseException] = []

    def run(item: Any) -> None:
        try:
            action(item)
        except BaseException as exc:  # re-raised below, on the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(item,)) for item in items[1:]]
    for thread in threads:
        thread.start()
    if items:
        run(items[0])
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def remove_container(container: Container) -> None:
    """Removes a container (killing everything in it); one the engine cannot remove now
    is left to the janitor, which finds it by its labels."""
    try:
        container.remove(force=True, v=True)
    except NotFound:
        pass  # already gone
    except (DockerException, requests.RequestException):
        logger.warning("could not remove sandbox container %s", container.name, exc_info=True)


class DockerSandbox(LocalSandbox):
    """A run's sandbox in containers (``containers``, by role). The tools (and
    ``page_state``) are the local sandbox's, unchanged: they speak to the same two
    supervisors over the same protocol, read the same framebuffer file and the same
    work dir, all reached through the run dir's bind mounts. What differs is who owns
    the processes: the engine, so liveness and teardown go through it."""

    def __init__(
        self,
        spec: SandboxSpec,
        run_dir: Path,
        uid: int,
        containers: dict[str, Container],
        egress: "EgressProxyThread | None" = None,
        *,
        display_uid: int | None = None,
    ) -> None:
        # Set before the base starts the lifetime timer, which may call destroy().
        self.containers = containers
        # No host process and no host cgroup: health() and destroy() are overridden.
        super().__init__(
            spec,
            run_dir,
            uid,
            proc=None,  # type: ignore[arg-type]
            cgroup=None,
            egress=egress,
            paths=sandbox_paths(run_dir, spec.desktop),
            display_uid=display_uid,
        )

    @property
    def container(self) -> Container:
        """The agent's container (its shell's)."""
        return self.containers["agent"]

    def health(self) -> dict[str, Any]:
        """``status``: the agent's container's; ``display``: the display's, if any."""
        statuses: dict[str, str] = {}
        for role, container in self.containers.items():
            try:
                container.reload()
            except (DockerException, requests.RequestException) as exc:
                return {"ok": False, "container": container.name, "error": str(exc)}
            statuses[role] = container.status
        report: dict[str, Any] = {
            "ok": set(statuses.values()) == {"running"} and not self._destroyed,
            "container": self.container.name,
            "status": statuses["agent"],
        }
        if "display" in statuses:
            report["display"] = statuses["display"]
        return report

    def assign(self, spec: SandboxSpec) -> None:
        """A pooled desktop made ``spec``'s run's (``LocalSandbox.assign``): its group back
        to the normal CPU weight first (it was booted in the background)."""
        group = cgroups.SandboxCgroup("v1", cgroups.engine_group_directories(self.run_dir.name))
        with contextlib.suppress(OSError):
            group.set_background(False)
        super().assign(spec)

    def _egress_sockets(self, spec: SandboxSpec) -> list[tuple[str, int | None]]:
        roles = ("agent", "display") if spec.desktop else ("agent",)
        owners = {"agent": self.uid, "display": self.display_uid}
        return [(str(self.run_dir / CTL_DIRS[r] / "egress.sock"), owners[r]) for r in roles]

    def destroy(self) -> None:
        """Removes the containers (all at once) and their group, stops the run's egress
        listeners and removes the run dir with its quotas. Idempotent."""
        if not self._destroy_begins():
            return
        in_parallel(remove_container, self.containers.values())
        cgroups.SandboxCgroup("v1", cgroups.engine_group_directories(self.run_dir.name)).remove()
        if self.spec.egress and self.egress is not None:
            with contextlib.suppress(Exception):
                self.egress.release(self.spec.run_id)
        with contextlib.suppress(OSError):
            disk.unmount_all_under(self.run_dir)
        shutil.rmtree(self.run_dir, ignore_errors=True)
