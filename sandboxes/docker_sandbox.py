"""The ``docker`` backend's sandbox, as the host drives it: its containers by role (the
display's and the agent's, ``sandboxes.docker_backend`` launches them), where the host
finds their parts in the run dir, liveness and teardown through the engine."""

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests
from docker.errors import APIError, DockerException, NotFound
from docker.models.containers import Container

from sandboxes import cgroups, disk
from sandboxes.base import SandboxSpec
from sandboxes.local import LocalSandbox
from sandboxes.reclaim import Reclaim
from sandboxes.rundir import SandboxPaths

if TYPE_CHECKING:
    from sandboxes.egress import EgressProxyThread

logger = logging.getLogger(__name__)

# Each role's control dir in the run dir (bound at /run/arena in its container).
CTL_DIRS = {"agent": "ctl", "display": "display-ctl"}
# The control dirs hold two sockets: a tiny quota, so no file there fills the host disk.
CTL_QUOTA = disk.Quota(1024**2, 64)
# How long destroy waits for the engine to confirm a killed container is not running.
STOP_TIMEOUT_S = 15.0


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


def remove_container(container: Container) -> bool:
    """Removes a container (killing everything in it); whether it is gone. One the
    engine cannot remove now is left to the janitor, which finds it by its labels."""
    try:
        container.remove(force=True, v=True)
    except NotFound:
        pass  # already gone
    except (DockerException, requests.RequestException):
        logger.warning("could not remove sandbox container %s", container.name, exc_info=True)
        return False
    return True


def remove_containers(containers: Iterable[Container]) -> bool:
    """Removes the containers all at once; whether every one is gone."""
    gone: list[bool] = []
    in_parallel(lambda container: gone.append(remove_container(container)), containers)
    return all(gone)


def stop_container(container: Container) -> bool:
    """Kills a container's processes (SIGKILL: the engine answers once it is not
    running) and asks the engine to confirm it is not running; whether it did (a
    container already stopped or gone is fine). One the engine cannot stop is logged."""
    try:
        container.kill()
    except NotFound:
        return True
    except APIError as exc:
        if exc.status_code != 409:  # 409: not running
            logger.warning("could not kill sandbox container %s: %s", container.name, exc)
    except (DockerException, requests.RequestException) as exc:
        logger.warning("could not kill sandbox container %s: %s", container.name, exc)
    try:
        container.wait(condition="not-running", timeout=STOP_TIMEOUT_S)
    except NotFound:
        pass
    except (DockerException, requests.RequestException) as exc:
        logger.warning("sandbox container %s is not confirmed stopped: %s", container.name, exc)
        return False
    return True


def kill_group(name: str, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """SIGKILLs every process in the run's container group (``name``: its run dir's)
    and its containers' groups below it, again until none is left; whether none is.
    False where the run has no group of this host's (no writable cgroup v1 pids
    hierarchy: the engine kills it then). A process cannot leave its group (the
    containers cannot write the cgroup file system) and one killed cannot fork, so the
    loop ends within ``pids.max`` rounds at worst."""
    group = cgroups.CGROUP_ROOT / "pids" / cgroups.ENGINE_PARENT / name
    if os.geteuid() != 0 or not group.is_dir():
        return False
    deadline = time.monotonic() + timeout_s
    while True:
        pids: set[int] = set()
        for procs in group.glob("**/cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(pid) for pid in procs.read_text().split())
        if not pids:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)  # (they are dying: a short poll)


class DockerSandbox(LocalSandbox):
    """A run's sandbox in containers (``containers``, by role). The tools (and
    ``page_state``) are the local sandbox's, unchanged: they speak to the same two
    supervisors over the same protocol, read the same framebuffer file and the same
    work dir, all reached through the run dir's bind mounts. What differs is who owns
    the processes: the engine, so liveness and teardown go through it."""

    # The containers' processes run on this host, under the slot's uids (not remote).
    uids_here = True

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
        self._stopped = threading.Event()
        self.reclaim = Reclaim(f"sandbox {run_dir.name}", self._reclaim)
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
        """Stops the run and leaves the rest to the background (``sandboxes.reclaim``).
        When it returns, nothing of the run can act any more: every container is killed
        and the engine has confirmed it is not running, the supervisors' clients are
        closed, the run's egress listeners are released. ``self.reclaim`` then removes
        the containers, their group, the quota mounts and the run dir on this process's
        reclaimer; the slot's holder frees the slot after it (``after_reclaim``).
        Idempotent: a later call (say, the session's after the lifetime timer's) returns
        once the first one has stopped the run."""
        if not self._destroy_begins():
            self._stopped.wait(STOP_TIMEOUT_S + 5)
            return
        try:
            self._stop()
        finally:
            self._stopped.set()
            self.reclaim.submit()

    def _stop(self) -> None:
        """Kills every process of the run: from this host through the run's group when
        the containers sit in one here (``kill_group``: a few ms, where the engine's
        kill takes it tens while it tidies the container up), else through the engine;
        by the slot's uids if the engine did not confirm."""
        if not (self.uids_here and kill_group(self.run_dir.name)):
            stopped: list[bool] = []
            in_parallel(lambda c: stopped.append(stop_container(c)), self.containers.values())
            if not all(stopped) and self.uids_here and os.geteuid() == 0:
                # The engine did not confirm: the slot's uids are the run's alone here.
                for uid in {self.uid, self.display_uid} - {None, 0}:
                    subprocess.run(["pkill", "-KILL", "-U", str(uid)], check=False)
        if self.spec.egress and self.egress is not None:
            with contextlib.suppress(Exception):
                self.egress.release(self.spec.run_id)

    def _reclaim(self) -> bool:
        """The containers (all at once), their group, the quota mounts and the run dir;
        whether every container is gone."""
        gone = remove_containers(self.containers.values())
        cgroups.SandboxCgroup("v1", cgroups.engine_group_directories(self.run_dir.name)).remove()
        with contextlib.suppress(OSError):
            disk.unmount_all_under(self.run_dir)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return gone
