"""Resource limits for a whole sandbox (desktop included) through cgroups.

rlimits cannot bound the desktop: an address-space limit breaks Chromium's heap
reservation, and RLIMIT_NPROC counts per uid. A cgroup bounds the sandbox's memory,
process count and CPU together. This host kind mounts cgroup v1 controllers; v2 is
used where its controllers are enabled. Each sandbox's group is created under the
worker's own group (so the worker's limits still contain it) and removed on destroy.

The Docker backend's containers are the engine's processes, not the worker's: a run's
containers sit in one group made for them (``engine_group_create``, the engine's
``cgroup_parent``), which bounds them together as a local run's group does.
"""

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Where a run's containers are grouped, in every hierarchy (a path the engine's cgroupfs
# driver takes as ``cgroup_parent``; it makes the same path in the hierarchies we don't).
ENGINE_PARENT = "arena-docker"


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    pids: int
    cpu_fraction: float  # of one core
    # A desktop booting or idling for the pool (``sandboxes.pool``): its CPU quota is the
    # same, but when cores are contended it yields to running sandboxes and the worker.
    background: bool = False


# (knob, its default, a background group's value) per cgroup version: the v1 CFS shares
# and the v2 weight, both 1/16 of the default in the background.
CPU_WEIGHT = {"v1": ("cpu.shares", "1024", "64"), "v2": ("cpu.weight", "100", "6")}


def _own_path(controller: str) -> str | None:
    """This process's group in a v1 controller's hierarchy ("/" at the root)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def _writable(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


@dataclass
class SandboxCgroup:
    """The groups one sandbox runs in; ``procs_files`` get the sandbox's first pid."""

    version: str
    directories: list[Path] = field(default_factory=list)

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.directories]

    def remove(self, timeout_s: float = 2.0) -> None:
        """Removes the groups once their processes are gone (kill them first)."""
        deadline = time.monotonic() + timeout_s
        for directory in reversed(self.directories):
            while directory.exists():
                try:
                    directory.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    # The last processes are still dying (a desktop's take ~30 ms): a
                    # short poll, so destroy does not wait out a long sleep for nothing.
                    time.sleep(0.002)

    def set_background(self, background: bool) -> None:
        """Sets the group's CPU weight (``Limits.background``); a group without the cpu
        controller is left as it is."""
        if self.version not in CPU_WEIGHT:
            return
        knob, default, low = CPU_WEIGHT[self.version]
        for directory in self.directories:
            if (directory / knob).exists():
                (directory / knob).write_text(low if background else default)

    def kill_all(self) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def pids(self) -> list[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in procs.read_text().split())
        return sorted(found)


def detect() -> str:
    """ "v1", "v2" or "none": what this host lets the worker use for sandboxes."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        controllers = (CGROUP_ROOT / "cgroup.controllers").read_text().split()
        return (
            "v2"
            if {"memory", "pids"} <= set(controllers) and os.access(CGROUP_ROOT, os.W_OK)
            else "none"
        )
    memory = _own_path("memory")
    pids = _own_path("pids")
    if memory is None or pids is None:
        return "none"
    ok = _writable(CGROUP_ROOT / "memory" / memory.lstrip("/")) and _writable(
        CGROUP_ROOT / "pids" / pids.lstrip("/")
    )
    return "v1" if ok else "none"


def find(run_name: str) -> SandboxCgroup | None:
    """The groups of a sandbox whose run dir is named ``run_name`` (for the janitor)."""
    version = detect()
    found = SandboxCgroup(version=version)
    if version == "v1":
        for controller in ("memory", "pids", "cpu"):
            parent = _own_path(controller)
            if parent is None:
                continue
            base = CGROUP_ROOT / controller / parent.lstrip("/")
            found.directories += sorted(base.glob(f"arena-slot-*-{run_name}"))
    elif version == "v2":
        found.directories += sorted(
            (CGROUP_ROOT / "arena-sandboxes").glob(f"arena-slot-*-{run_name}")
        )
    return found if found.directories else None


def create(name: str, limits: Limits) -> SandboxCgroup | None:
    """Creates the sandbox's groups with ``limits``; None where the host allows none."""
    from arena_site.worker import fault_point

    version = detect()
    group = None
    if version == "v1":
        group = _create_v1(name, limits)
    elif version == "v2":
        group = _create_v2(name, limits)
    fault_point("provisioning")  # run dir, quota mounts and groups made; no sandbox yet
    return group


def engine_group_create(name: str, limits: Limits) -> str | None:
    """Makes a group with ``limits`` for a run's containers and returns the engine's
    ``cgroup_parent`` for it; None where that cannot bound them (not cgroup v1 with
    writable memory and pids hierarchies: each container keeps its own limits only).
    v1 only: the engine's cgroupfs driver puts a container at the same path in every
    hierarchy, so the limits of the memory, pids and cpu groups made here hold for all of
    the run's containers together. Removed with ``engine_group_directories``."""
    if detect() != "v1":
        return None
    knobs = _v1_knobs(limits)
    if not all(_writable(CGROUP_ROOT / c) for c in ("memory", "pids")):
        return None
    for controller in knobs:
        base = CGROUP_ROOT / controller
        if _writable(base):
            (base / ENGINE_PARENT / name).mkdir(parents=True, exist_ok=True)
            _write_knobs(base / ENGINE_PARENT / name, knobs[controller])
    return f"/{ENGINE_PARENT}/{name}"


def engine_group_directories(name: str) -> list[Path]:
    """A run's container group in every hierarchy: those ``engine_group_create`` made
    and those the engine made itself. Remove them (``SandboxCgroup.remove``) once the
    run's containers are gone."""
    return sorted(CGROUP_ROOT.glob(f"*/{ENGINE_PARENT}/{name}"))


def _v1_knobs(limits: Limits) -> dict[str, dict[str, str]]:
    return {
        "memory": {
            "memory.limit_in_bytes": str(limits.memory_bytes),
            # no swap beyond the memory limit where the knob exists
            "memory.memsw.limit_in_bytes": str(limits.memory_bytes),
        },
        "pids": {"pids.max": str(limits.pids)},
        "cpu": {
            "cpu.cfs_period_us": "100000",
            "cpu.cfs_quota_us": str(max(1000, int(100000 * limits.cpu_fraction))),
            "cpu.shares": CPU_WEIGHT["v1"][2 if limits.background else 1],
        },
    }


def _write_knobs(directory: Path, knobs: dict[str, str]) -> None:
    for knob, value in knobs.items():
        with contextlib.suppress(OSError):  # memsw may be absent
            (directory / knob).write_text(value)


def _create_v1(name: str, limits: Limits) -> SandboxCgroup:
    group = SandboxCgroup(version="v1")
    for controller, knobs in _v1_knobs(limits).items():
        parent = _own_path(controller)
        if parent is None:
            continue
        base = CGROUP_ROOT / controller / parent.lstrip("/")
        if not _writable(base):
            continue
        directory = base / name
        directory.mkdir(exist_ok=True)
        _write_knobs(directory, knobs)
        group.directories.append(directory)
    return group


def _create_v2(name: str, limits: Limits) -> SandboxCgroup:
    directory = CGROUP_ROOT / "arena-sandboxes" / name
    directory.parent.mkdir(exist_ok=True)
    with contextlib.suppress(OSError):
        (directory.parent / "cgroup.subtree_control").write_text("+memory +pids +cpu")
    directory.mkdir(exist_ok=True)
    (directory / "memory.max").write_text(str(limits.memory_bytes))
    (directory / "pids.max").write_text(str(limits.pids))
    with contextlib.suppress(OSError):
        (directory / "cpu.max").write_text(f"{max(1000, int(100000 * limits.cpu_fraction))} 100000")
        (directory / "cpu.weight").write_text(CPU_WEIGHT["v2"][2 if limits.background else 1])
    return SandboxCgroup(version="v2", directories=[directory])
