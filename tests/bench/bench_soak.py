"""Benchmark: the soak of issue #19 (part 4). Prints one JSON document.

Sandboxes provisioned, used and destroyed again and again through the real path
(``sandbox_session``: a slot lease in a throwaway database made from DATABASE_URL, the
``local`` backend as this host runs it, with its egress proxy), then counted for what
they left behind. Phases:

- ``cycles``: shell-only sandboxes one after another (the lane's spec without the
  desktop, each for a run of its own). Each cycle writes an attachment into /work from
  the host, runs a command on it in the sandbox (which also writes to /tmp and home and
  leaves a process behind in a session of its own), collects the command's file as a
  delivery, and leaves the session.
  Interleaved with each cycle, the same-run reference: the same cycle done by a bare
  ``bwrap --unshare-all`` (a directory made and chowned, the file written, the command
  run in a namespace sandbox as the slot's uid, the answer read, the directory
  removed). It is the floor under our cycle: what the kernel's namespaces and one
  exec cost on this machine at this moment; the rest of ours is the supervisor, the
  quota mount, the cgroup, the slot lease and the egress socket.
- ``desktop_cycles``: the same with the desktop (Xvfb and Chromium; ~1 s each).
- ``pairs``: 100 pairs of sandboxes at once, as 100 battles would hold them: 200
  threads each enter a session, wait until all 200 are alive, run a command, and leave
  together. Provisioning goes through a gate of ``--gate`` threads at a time: each
  session holds one of the worker's pooled database connections while it provisions
  (``ARENA_DB_POOL_MAX``, 20), and the PostgreSQL server is shared.
- ``docker_cycles`` (``--docker-cycles N``, off by default): the cycle on the ``docker``
  backend, on this checkout's private engine (``scripts/docker.sh``; see
  ``docker_engine``); skipped, with why, where dockerd is not installed.

After each phase, what is left is counted from the system, never from the code's own
records: processes of the slot uids (agent and display ranges) and zombies among
them, the benchmark's own children, files and directories under the sandbox root,
mounts under it (/proc/self/mountinfo), the sandboxes' cgroups under the benchmark's
cgroup parents (the names of the run dirs seen under the root), leases never released,
the benchmark's open file descriptors and threads against a baseline taken after a
warm-up, staging dirs left beside the deliveries, and Docker containers with the
arena's labels and a run dir under the root (``"no engine"`` when none answers). Every
phase also counts the same
things once while its sandboxes are alive, so a counter that sees nothing proves it
looks in the right place.

Run as root (slot uids, quota mounts):
  ARENA_SANDBOX_UID_BASE=220000 .venv/bin/python tests/bench/bench_soak.py [--quick]
  [--cycles 1000] [--desktop-cycles 30] [--pairs 100] [--gate 16] [--docker-cycles 0]
It uses slots 0 to 2 × pairs (``ARENA_SANDBOX_SLOTS`` is raised for it): give it a uid
base no other sandboxes on this host use.
"""

import argparse
import contextlib
import dataclasses
import fcntl
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")
# 200 sessions leave at once, each returning its lease through the pool: let them queue.
os.environ.setdefault("ARENA_DB_POOL_TIMEOUT_S", "60")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connections  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402
from tqdm import tqdm  # noqa: E402

tqdm.monitor_interval = 0  # no monitor thread: the census counts the benchmark's threads

from agents.models import Agent, Arena  # noqa: E402
from battles.models import Run  # noqa: E402
from sandboxes import services  # noqa: E402
from sandboxes.models import SandboxLease  # noqa: E402
from sandboxes.rundir import DISPLAY_UID_OFFSET  # noqa: E402

CGROUP_ROOT = Path("/sys/fs/cgroup")
ATTACHMENT = "soak attachment {n}\n"
# The command an agent runs: it answers from the attachment, writes to /tmp and home
# (the quota filesystem) and leaves a process behind in a session of its own, which
# only the sandbox's end may take down.
COMMAND = (
    "tr a-z A-Z < task.txt > answer.txt && echo x > /tmp/scratch && echo y > $HOME/scratch"
    " && (setsid sleep 600 < /dev/null > /dev/null 2>&1 &) && wc -c answer.txt"
)
BWRAP_BASE = [
    "bwrap", "--unshare-all", "--die-with-parent", "--new-session",
    "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
    "--proc", "/proc", "--dev", "/dev",
]  # fmt: skip


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def summary(samples: list[float]) -> dict:
    if not samples:
        return {"n": 0}
    ordered = sorted(samples)
    return {
        "p50": ms(statistics.median(ordered)),
        "p95": ms(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]),
        "max": ms(ordered[-1]),
        "n": len(ordered),
    }


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- counting what is there, from the system ---------------------------------------------


def _proc_status(pid: str) -> dict[str, str]:
    fields = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def processes(uids: set[int]) -> dict[str, int]:
    """Processes any of whose uids (real, effective, saved, fs) is a slot's, split into
    live ones and zombies; and the benchmark's own children (it is a subreaper: a
    sandbox's orphans come to it)."""
    me = str(os.getpid())
    found = {"slot_uid_processes": 0, "slot_uid_zombies": 0, "children": 0, "child_zombies": 0}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        status = _proc_status(entry)
        if not status:
            continue
        zombie = status.get("State", "").startswith("Z")
        if {int(u) for u in status.get("Uid", "").split()} & uids:
            found["slot_uid_zombies" if zombie else "slot_uid_processes"] += 1
        if status.get("PPid") == me:
            found["child_zombies" if zombie else "children"] += 1
    return found


def files_under(root: Path) -> int:
    """Files and directories under ``root`` (not counting it), without crossing into
    mounts: a mount left there is counted on its own."""
    count = 0
    for _dirpath, dirnames, filenames in os.walk(root):
        count += len(dirnames) + len(filenames)
    return count


def _unescape(field: str) -> str:
    return (field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")).replace(
        "\\134", "\\"
    )


def mounts_under(root: Path) -> int:
    prefix = os.path.realpath(root)
    count = 0
    with open("/proc/self/mountinfo") as table:
        for line in table:
            point = _unescape(line.split(" ")[4])
            if point == prefix or point.startswith(prefix + "/"):
                count += 1
    return count


def cgroup_parents() -> list[Path]:
    """The directories this process's sandboxes make their groups in: its own group in
    each v1 controller that bounds them, or the v2 tree's ``arena-sandboxes``."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT / "arena-sandboxes"]
    parents = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            if controller in ("memory", "pids", "cpu"):
                parents.append(CGROUP_ROOT / controller / path.lstrip("/"))
    return parents


def cgroups_of(run_names: set[str]) -> int:
    """Groups named for one of ``run_names`` (``arena-slot-<slot>-<run dir>``): another
    session's sandboxes on this host share the parents, never the run dir names."""
    count = 0
    for parent in cgroup_parents():
        with contextlib.suppress(OSError):
            for entry in os.scandir(parent):
                if entry.is_dir() and entry.name.startswith("arena-slot-"):
                    run_name = entry.name.split("-", 3)[-1]
                    count += run_name in run_names
    return count


def _service_socket_inodes() -> set[str]:
    """TCP sockets to PostgreSQL or Redis (the pool's connections come and go with load,
    bounded by ARENA_DB_POOL_MAX: counted apart from the descriptors that leak)."""
    ports = set()
    for url in (os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")):
        with contextlib.suppress(ValueError):
            ports.add(
                urlsplit(url).port or {"postgres": 5432, "redis": 6379}.get(urlsplit(url).scheme)
            )
    inodes = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if int(fields[2].rsplit(":", 1)[1], 16) in ports:
                    inodes.add(fields[9])
    return inodes


def open_fds() -> tuple[int, int]:
    """This process's open descriptors: all but its database and Redis connections, and
    those connections."""
    services_ = _service_socket_inodes()
    others = connected = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:[") and target[8:-1] in services_:
                connected += 1
            else:
                others += 1
    return others, connected


def threads() -> int:
    return int(_proc_status("self").get("Threads", "0"))


REPO = Path(__file__).resolve().parents[2]


def docker_address() -> str | None:
    """The engine to count containers on: DOCKER_HOST when it names a unix socket, else
    this checkout's private daemon (``scripts/docker.sh``), else the system's; None when
    no such socket exists. A TCP engine is never dialled (nothing leaves loopback)."""
    address = os.environ.get("DOCKER_HOST")
    if address:
        return address if address.startswith("unix://") else None
    for socket_path in (REPO / "var" / "docker" / "docker.sock", Path("/var/run/docker.sock")):
        if socket_path.exists():
            return f"unix://{socket_path}"
    return None


def docker_containers(root: Path) -> int | str:
    """Containers (running or not) with the arena's sandbox label whose run dir is under
    ``root`` (the engine may be shared with other sessions' sandboxes), or why none
    were counted."""
    address = docker_address()
    if address is None:
        return "no engine"
    import docker
    from docker.errors import DockerException

    try:
        client = docker.DockerClient(base_url=address, timeout=10)
        try:
            found = client.containers.list(all=True, filters={"label": "arena.sandbox=1"})
        finally:
            client.close()
    except (DockerException, OSError) as exc:
        return f"no engine ({type(exc).__name__})"
    return sum(1 for c in found if Path(c.labels.get("arena.dir", "/")).parent == root)


class RunIds:
    """Run rows for the sessions (offline-evaluation lanes of one scripted agent): each
    sandbox has its own run, as in a battle, so its lease names it and the egress proxy
    serves and releases each sandbox's identity on its own."""

    def __init__(self, count: int) -> None:
        agent = Agent.objects.create(
            arena=Arena.objects.public(),
            slug="soak",
            display_name="Soak",
            kind="builtin",
            builtin_policy="soak",
        )
        runs = Run.objects.bulk_create(
            Run(for_evaluation=True, side="A", agent=agent, step_budget=1, wall_budget_s=60)
            for _ in range(count)
        )
        self._ids = iter([run.pk for run in runs])
        self._lock = threading.Lock()

    def spec(self, template):
        with self._lock:
            return dataclasses.replace(template, run_id=next(self._ids))


class Census:
    """Counts what the sandboxes of this run left (``count``), against the benchmark's
    own file descriptors and threads after a warm-up (``baseline``)."""

    def __init__(
        self, root: Path, deliveries: Path, uid_base: int, slots: int, runs: RunIds
    ) -> None:
        self.root = root
        self.runs = runs
        self.deliveries = deliveries
        self.uids = {uid_base + s for s in range(slots)}
        self.uids |= {uid_base + DISPLAY_UID_OFFSET + s for s in range(slots)}
        self.run_names: set[str] = set()
        self.base_fds = open_fds()[0]
        self.base_threads = threads()
        self.base_objects = len(gc.get_objects())

    def seen(self) -> None:
        """Records the run dirs under the root now (call while sandboxes are alive)."""
        self.run_names.update(os.listdir(self.root))

    def baseline(self) -> None:
        docker_containers(self.root)  # (its first call imports the Docker SDK: not a leak)
        gc.collect()
        self.base_fds, self.base_threads = open_fds()[0], threads()
        self.base_objects = len(gc.get_objects())

    def count(self) -> dict:
        found = processes(self.uids)
        fds, connected = open_fds()
        found.update(
            files_under_root=files_under(self.root),
            mounts_under_root=mounts_under(self.root),
            cgroups=cgroups_of(self.run_names),
            leases_unreleased=SandboxLease.objects.filter(released_at=None).count(),
            fds_over_baseline=fds - self.base_fds,
            threads_over_baseline=threads() - self.base_threads,
            delivery_staging_left=sum(
                1 for p in self.deliveries.iterdir() if p.name.startswith(".")
            ),
            docker_containers=docker_containers(self.root),
        )
        connections.close_all()  # the count's own connection goes back to the pool
        # Not leaks: the pool's connections (at most ARENA_DB_POOL_MAX) and the heap,
        # which grows and shrinks; shown to spot a steady climb.
        gc.collect()
        found.update(
            info_database_and_redis_connections=connected,
            info_python_objects_over_baseline=len(gc.get_objects()) - self.base_objects,
            info_rss_mb=round(int(_proc_status("self")["VmRSS"].split()[0]) / 1024),
        )
        return found


def leaked(found: dict) -> int:
    return sum(
        v for k, v in found.items() if isinstance(v, int) and v > 0 and not k.startswith("info_")
    )


# -- the phases -----------------------------------------------------------------------


def one_cycle(spec, census: Census, n: int, out: dict, check_alive: bool = False) -> None:
    dest = census.deliveries / f"cycle-{n}"
    spec = census.runs.spec(spec)
    t0 = time.perf_counter()
    with services.sandbox_session(spec) as box:
        t1 = time.perf_counter()
        (box.work_dir / "task.txt").write_text(ATTACHMENT.format(n=n))  # an attachment
        result = box.shell(COMMAND)
        assert result.ok and result.exit_code == 0, (result.error, result.stderr)
        delivered = box.collect_files(["answer.txt"], dest)
        assert delivered[0].path.read_text() == ATTACHMENT.format(n=n).upper()
        t2 = time.perf_counter()
        census.seen()
        if check_alive:
            out["while_alive"] = census.count()
    t3 = time.perf_counter()
    shutil.rmtree(dest)
    out.setdefault("provision", []).append(t1 - t0)
    out.setdefault("run", []).append(t2 - t1)
    out.setdefault("destroy", []).append(t3 - t2)
    out.setdefault("cycle", []).append(t3 - t0)


def reference_cycle(root: Path, uid: int, n: int, out: dict) -> None:
    """The same cycle in a bare bubblewrap sandbox: no supervisor, quota, cgroup, lease
    or egress socket; the directory is the sandbox's whole state."""
    t0 = time.perf_counter()
    work = root / f"reference-{n}"
    work.mkdir(mode=0o755)
    os.chown(work, uid, uid)
    t1 = time.perf_counter()
    (work / "task.txt").write_text(ATTACHMENT.format(n=n))
    argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *BWRAP_BASE]
    argv += ["--bind", str(work), "/work", "--tmpfs", "/tmp", "--chdir", "/work", "--clearenv"]
    argv += ["--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp"]
    argv += ["--", "/bin/sh", "-c", COMMAND]
    done = subprocess.run(argv, capture_output=True, env={"PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr
    assert (work / "answer.txt").read_text() == ATTACHMENT.format(n=n).upper()
    t2 = time.perf_counter()
    # bwrap's pid 1 inside outlives the outer bwrap by a moment and is reparented to
    # this process (a subreaper, as every worker is): reap it, or it stays a zombie.
    reap_children_of(uid)
    shutil.rmtree(work)
    t3 = time.perf_counter()
    out.setdefault("provision", []).append(t1 - t0)
    out.setdefault("run", []).append(t2 - t1)
    out.setdefault("destroy", []).append(t3 - t2)
    out.setdefault("cycle", []).append(t3 - t0)


def reap_children_of(uid: int, timeout_s: float = 2.0) -> None:
    """Waits for this process's children of ``uid`` to exit, and reaps them."""
    me, deadline = str(os.getpid()), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        mine = []
        for entry in os.listdir("/proc"):
            status = _proc_status(entry) if entry.isdigit() else {}
            if status.get("PPid") == me and str(uid) in status.get("Uid", "").split():
                mine.append((int(entry), status.get("State", "").startswith("Z")))
        if not mine:
            return
        for pid, zombie in mine:
            if zombie:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        time.sleep(0.001)


def timings(out: dict) -> dict:
    return {
        f"{key}_ms": summary(out.get(key, [])) for key in ("provision", "run", "destroy", "cycle")
    }


def sequential(spec, census: Census, cycles: int, label: str, reference_uid: int | None) -> dict:
    ours: dict = {}
    reference: dict = {}
    started, t = load(), time.perf_counter()
    for n in tqdm(range(cycles), desc=label, file=sys.stderr, mininterval=2.0):
        one_cycle(spec, census, n, ours, check_alive=n == 0)
        if reference_uid is not None:
            reference_cycle(census.root, reference_uid, n, reference)
    report = {
        "cycles": cycles,
        "wall_s": round(time.perf_counter() - t, 1),
        "load_avg_start": started,
        "load_avg_end": load(),
        **timings(ours),
        "counted_while_alive": ours.get("while_alive"),
    }
    if reference_uid is not None:
        report["reference_bare_bwrap"] = timings(reference)
    report["left_after"] = census.count()
    report["leaked_total"] = leaked(report["left_after"])
    return report


def pairs_at_once(spec, census: Census, pairs: int, gate_width: int) -> dict:
    """``2 × pairs`` sessions alive at once, each in its own thread."""
    lanes = 2 * pairs
    alive = threading.Barrier(lanes + 1)
    ran = threading.Barrier(lanes + 1)
    leave = threading.Event()
    gate = threading.BoundedSemaphore(gate_width)
    errors: list[str] = []
    out: dict = {"provision": [], "run": [], "destroy": []}
    lock = threading.Lock()
    bar = tqdm(total=3 * lanes, desc="pairs", file=sys.stderr, mininterval=2.0)

    def lane(k: int) -> None:
        stack = ExitStack()
        try:
            with gate:
                t0 = time.perf_counter()
                box = stack.enter_context(services.sandbox_session(census.runs.spec(spec)))
                provisioned = time.perf_counter() - t0
                connections.close_all()  # its pooled connection back, for the next lane
            bar.update()
            alive.wait()
            t1 = time.perf_counter()
            (box.work_dir / "task.txt").write_text(ATTACHMENT.format(n=k))
            result = box.shell(COMMAND)
            assert result.ok and result.exit_code == 0, (result.error, result.stderr)
            ran_s = time.perf_counter() - t1
            bar.update()
            ran.wait()
            leave.wait()
            t2 = time.perf_counter()
            stack.close()
            destroyed = time.perf_counter() - t2
            bar.update()
            with lock:
                out["provision"].append(provisioned)
                out["run"].append(ran_s)
                out["destroy"].append(destroyed)
        except BaseException as exc:  # reported; the barriers broken, so none waits on
            with lock:
                errors.append(f"lane {k}: {type(exc).__name__}: {exc}")
            alive.abort()
            ran.abort()
            stack.close()
        finally:
            connections.close_all()

    started, memory_before = load(), mem_available()
    workers = [threading.Thread(target=lane, args=(k,)) for k in range(lanes)]
    t = time.perf_counter()
    for worker in workers:
        worker.start()
    report: dict = {"pairs": pairs, "sandboxes": lanes, "provision_gate": gate_width}
    try:
        alive.wait()
        report["all_alive_s"] = round(time.perf_counter() - t, 2)
        census.seen()
        report["memory_used_by_all_alive_mb"] = round((memory_before - mem_available()) / 1024)
        report["counted_while_alive"] = census.count()
        ran.wait()
    except threading.BrokenBarrierError:
        pass
    t_leave = time.perf_counter()
    leave.set()
    for worker in workers:
        worker.join()
    bar.close()
    report.update(
        wall_s=round(time.perf_counter() - t, 2),
        all_destroyed_s=round(time.perf_counter() - t_leave, 2),
        load_avg_start=started,
        load_avg_end=load(),
        errors=errors[:10],
        error_count=len(errors),
        **{f"{key}_ms": summary(values) for key, values in out.items()},
    )
    report["left_after"] = census.count()
    report["leaked_total"] = leaked(report["left_after"])
    return report


def mem_available() -> int:
    """MemAvailable, in KiB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


@contextlib.contextmanager
def docker_engine():
    """This checkout's private engine (``scripts/docker.sh``) with the desktop image,
    for the block; yields its DOCKER_HOST. One that answers already is used as it is,
    its image rebuilt only if its inputs changed, and held as a test session holds it
    (``var/docker/sessions``, shared: no session stops it meanwhile); it is never
    stopped from here. Otherwise ``tests.docker_engine`` starts one and, if nobody
    else uses it by then, stops it after."""
    from tests.docker_engine import STATE, docker_sh, engine_session

    if subprocess.run(["bash", str(REPO / "scripts" / "docker.sh"), "status"]).returncode:
        with engine_session() as docker_host:
            yield docker_host
        return
    users = os.open(STATE / "sessions", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(users, fcntl.LOCK_SH)
        docker_sh("image")
        yield docker_sh("host").strip().split("=", 1)[1]
    finally:
        os.close(users)


def docker_phase(spec, census: Census, cycles: int) -> dict:
    """The cycle on the docker backend (``docker_engine``); skipped, with why, where no
    engine can run."""
    if shutil.which("dockerd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") is None:
        return {"skipped": "dockerd is not installed (scripts/docker.sh install)"}
    arena = settings.ARENA
    before = os.environ.get("DOCKER_HOST")
    report: dict = {}
    try:
        with docker_engine() as docker_host:
            os.environ["DOCKER_HOST"] = docker_host
            settings.ARENA = arena.replace(sandbox_backend="docker")
            services._backend = None
            try:
                health = services.sandbox_backend().health()
                if not health.get("ok"):
                    return {"skipped": f"the docker backend is not usable: {health}"}
                report = sequential(spec, census, cycles, "docker cycles", None)
                report["engine"] = docker_host
                # The engine client keeps one connection per request path it used, at
                # most 25 (docker-py's DEFAULT_NUM_POOLS; 25 after 10 cycles and after
                # 35): counted apart, the descriptors again once it is closed.
                services.sandbox_backend().close()
            finally:
                backend = services._backend
                if backend is not None and hasattr(backend, "close"):
                    backend.close()
                settings.ARENA = arena
                services._backend = None
                if before is None:
                    os.environ.pop("DOCKER_HOST", None)
                else:
                    os.environ["DOCKER_HOST"] = before
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        # (scripts/docker.sh failed to start, build or stop: what was measured stands)
        report["engine_error"] = f"{type(exc).__name__}: {exc}"[:500]
    if "left_after" in report:  # again with the client closed and the engine let go
        report["info_fds_over_baseline_before_client_close"] = report["left_after"][
            "fds_over_baseline"
        ]
        report["left_after"] = census.count()
        report["leaked_total"] = leaked(report["left_after"])
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, for development")
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--desktop-cycles", type=int, default=30)
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--gate", type=int, default=16, help="lanes provisioning at a time")
    parser.add_argument("--docker-cycles", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.cycles, args.desktop_cycles, args.pairs = 20, 3, 5
    if os.geteuid() != 0:  # `make bench` goes on with the other benchmarks
        print(json.dumps({"skipped": "runs as root: slot uids, quota mounts and cgroups"}))
        return
    slots = max(2 * args.pairs + 1, 8)
    root = Path(tempfile.mkdtemp(prefix="arena-soak-", dir="/var/tmp"))
    root.chmod(0o711)
    deliveries = Path(tempfile.mkdtemp(prefix="arena-soak-deliveries-"))
    settings.ARENA = settings.ARENA.replace(sandbox_root=root, sandbox_slots=slots)
    uid_base = settings.ARENA.sandbox_uid_base
    reference_uid = uid_base + slots - 1  # a slot uid no session takes one at a time
    config = setup_databases(verbosity=0, interactive=False)
    report: dict = {
        "host": {"cpus": os.cpu_count(), "uid_base": uid_base, "slots": slots},
        "load_avg_start": load(),
    }
    try:
        runs = RunIds(3 + args.cycles + args.desktop_cycles + 2 * args.pairs + args.docker_cycles)
        census = Census(root, deliveries, uid_base, slots, runs)
        report["before"] = census.count()
        shell = dataclasses.replace(services.lane_sandbox_spec(run_id=0), desktop=False)
        for n in range(3):  # the egress proxy, the demo web and the pool start on first use
            one_cycle(shell, census, -1 - n, {})
        census.baseline()
        report["after_warm_up"] = census.count()
        report["cycles"] = sequential(shell, census, args.cycles, "cycles", reference_uid)
        if args.desktop_cycles:
            desktop = dataclasses.replace(shell, desktop=True)
            report["desktop_cycles"] = sequential(
                desktop, census, args.desktop_cycles, "desktop cycles", None
            )
        if args.pairs:
            report["pairs"] = pairs_at_once(shell, census, args.pairs, args.gate)
        if args.docker_cycles:
            report["docker_cycles"] = docker_phase(shell, census, args.docker_cycles)
        else:
            report["docker_cycles"] = {"skipped": "not asked for (--docker-cycles N)"}
        report["leaked_total"] = sum(
            section.get("leaked_total", 0)
            for section in report.values()
            if isinstance(section, dict)
        )
    finally:
        teardown_databases(config, verbosity=0)
        # What is left in the tree by now was counted already; clear it for the host.
        with contextlib.suppress(OSError):
            from sandboxes import disk

            disk.unmount_all_under(root)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(deliveries, ignore_errors=True)
    self_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report["peak_rss_mb"] = {
        "benchmark": round(self_peak / 1024),
        "largest_child": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
    }
    report["load_avg_end"] = load()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
