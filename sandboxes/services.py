"""Provisioning and tearing down sandboxes, with a slot lease per live sandbox."""

import ipaddress
import logging
import os
import re
import shutil
import subprocess
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from arena_site.hosts import host_id, process_token
from sandboxes import cgroups, disk, netpolicy, reclaim
from sandboxes.base import Sandbox, SandboxBackend, SandboxSpec
from sandboxes.egress import EgressProxy, EgressProxyThread
from sandboxes.local_backend import LocalBackend
from sandboxes.models import SandboxLease
from sandboxes.netpolicy import SimulatedHost, default_resolver
from sandboxes.reaping import reap_orphans
from sandboxes.reclaim import after_reclaim
from sandboxes.rundir import DISPLAY_UID_OFFSET

logger = logging.getLogger(__name__)


_egress: EgressProxyThread | None = None
_egress_lock = threading.Lock()
# Distinct (target, reason) records kept per run; refusals past them are counted per
# reason. A flooding lane costs at most this much memory and Run.egress_refusals size.
MAX_REFUSALS_KEPT = 200
OTHER_TARGETS = "*"
TARGET_MAX_CHARS = 300


@dataclass
class _RunRefusals:
    records: dict[tuple[str, str], int] = field(default_factory=dict)  # in first-seen order
    overflow: Counter[str] = field(default_factory=Counter)


_refusals: dict[int, _RunRefusals] = {}
_refusals_lock = threading.Lock()


def _record_refusal(run_id: int, target: str, reason: str) -> None:
    """Runs on the proxy's event loop, once per refusal: constant time, no ORM and no
    log line (the proxy logs refusals within each run's log budget)."""
    key = (target[:TARGET_MAX_CHARS], reason)
    with _refusals_lock:
        kept = _refusals.setdefault(run_id, _RunRefusals())
        if key in kept.records:
            kept.records[key] += 1
        elif len(kept.records) < MAX_REFUSALS_KEPT:
            kept.records[key] = 1
        else:
            kept.overflow[reason] += 1


def egress_refusals_take(run_id: int) -> list[dict[str, str | int]]:
    """The run's egress refusals as ``Run.egress_refusals`` keeps them, and forgets
    them: one ``{"target", "reason", "count"}`` per distinct target and reason, in the
    order first seen, at most MAX_REFUSALS_KEPT of them; then one record per reason
    with target ``"*"`` counting the refusals past that bound."""
    with _refusals_lock:
        kept = _refusals.pop(run_id, None)
    if kept is None:
        return []
    records: list[dict[str, str | int]] = [
        {"target": target, "reason": reason, "count": count}
        for (target, reason), count in kept.records.items()
    ]
    records += [
        {"target": OTHER_TARGETS, "reason": reason, "count": count}
        for reason, count in kept.overflow.items()
    ]
    return records


def no_dns_resolver(host: str, port: int) -> list:
    """Resolves nothing: with ARENA_EGRESS_RESOLVE off, names are unresolvable."""
    return []


def simulated_hosts() -> dict[str, SimulatedHost]:
    """The simulated public hosts this process's sandboxes may reach (docs/demo-web.md):
    ``demo.arena.test`` on port 80, dialled to the demo web server on this process's
    loopback (started here on first use), unless ``ARENA_DEMO_WEB`` is off."""
    if not settings.ARENA.demo_web:
        return {}
    from sandboxes.demoweb.server import demo_server

    try:
        server = demo_server()
    except OSError:
        # Battles must not stop for the demo site: without it the name is just refused.
        logger.exception("the demo web did not start; demo.arena.test is not served")
        return {}
    return netpolicy.simulated_hosts(server.simulated_host())


def simulated_host_names() -> dict[str, SimulatedHost]:
    """The simulated hosts as admission checks a start URL against them: their names and
    ports only (nothing is started, nothing is dialled), so a start URL on the demo web
    passes without a DNS question, and is refused like any other name when
    ``ARENA_DEMO_WEB`` is off."""
    if not settings.ARENA.demo_web:
        return {}
    from sandboxes.demoweb.data import HOST

    # (its upstream is never dialled from here: admission checks the name and port only)
    placeholder = SimulatedHost(
        name=HOST, address=ipaddress.ip_address("127.0.0.1"), upstream_port=9
    )
    return netpolicy.simulated_hosts(placeholder)


def egress_proxy() -> EgressProxyThread:
    """This worker process's egress proxy (one per process, started on first use; a
    forked child starts its own), with the simulated hosts of :func:`simulated_hosts`."""
    global _egress
    with _egress_lock:
        if _egress is None:
            resolver = default_resolver if settings.ARENA.egress_resolve else no_dns_resolver
            _egress = EgressProxy(
                resolver=resolver, on_refusal=_record_refusal, simulated=simulated_hosts()
            ).run_in_thread()
        return _egress


def simulated_host_add(host: SimulatedHost) -> None:
    """Serves one more simulated host to this process's sandboxes from now on (the
    model gateway, ``models.arena.internal``, which a battle worker starts on first
    use). The proxy reads its map on its own loop; replacing an entry is atomic."""
    proxy = egress_proxy().proxy
    proxy.simulated = {**proxy.simulated, **netpolicy.simulated_hosts(host)}


_backend: SandboxBackend | None = None
# How long a failed provisioning waits for the reclaims under way before freeing its slot.
PROVISION_FAILED_WAIT_S = 30.0


def _forget_parents_sandboxes() -> None:
    """In a forked child (an RQ work horse): the parent's egress proxy runs on a thread,
    which a fork does not copy, and its engine client's connections are the parent's;
    a lock another thread held at the fork stays held. The child makes its own proxy
    and backend on first use, with fresh locks (the parent's are dropped, not closed:
    closing them is the parent's business)."""
    global _egress, _egress_lock, _backend, _refusals, _refusals_lock
    _egress, _backend = None, None
    _egress_lock, _refusals_lock = threading.Lock(), threading.Lock()
    _refusals = {}  # the parent's runs' records, never this process's


os.register_at_fork(after_in_child=_forget_parents_sandboxes)


def sandbox_backend() -> SandboxBackend:
    """This process's backend (one per process: the Docker one holds an engine client;
    a forked child makes its own)."""
    global _backend
    arena = settings.ARENA
    with _egress_lock:
        if _backend is not None and getattr(_backend, "root", None) == arena.sandbox_root:
            return _backend
    name = arena.sandbox_backend
    if name == "local":
        backend: SandboxBackend = LocalBackend(
            arena.sandbox_root, arena.sandbox_uid_base, egress=egress_proxy()
        )
    elif name == "docker" and docker_remote_mode():
        from sandboxes.docker_remote import RemoteDockerBackend, remote_client_from_env

        backend = RemoteDockerBackend(
            arena.docker_image, arena.sandbox_root, arena.sandbox_uid_base,
            egress=egress_proxy(), host=host_id(), client_factory=remote_client_from_env,
            coding_image=arena.docker_coding_image,
        )  # fmt: skip
    elif name == "docker":
        from sandboxes.docker_backend import DockerBackend

        backend = DockerBackend(
            arena.docker_image, arena.sandbox_root, arena.sandbox_uid_base,
            egress=egress_proxy(), host=host_id(), coding_image=arena.docker_coding_image,
        )  # fmt: skip
    else:
        raise ValueError(f"unknown sandbox backend {name!r} (ARENA_SANDBOX_BACKEND)")
    with _egress_lock:
        _backend = backend
    return backend


def sandbox_engine_problem() -> str:
    """Why this process's backend cannot make a sandbox now ("" when it can): asked
    before a battle worker takes work (``battles.worker``, ``battles.jobs``)."""
    try:
        return sandbox_backend().engine_problem()
    except Exception as exc:  # a backend that cannot even be made takes no work either
        return f"the sandbox backend cannot be made: {type(exc).__name__}: {exc}"


def docker_remote_mode() -> bool:
    """The Docker backend shares no file system with its engine: ``ARENA_DOCKER_REMOTE``,
    or a ``DOCKER_HOST`` on another host (``tcp://``, ``ssh://``)."""
    from sandboxes.docker_remote import remote_mode_implied

    return settings.ARENA.docker_remote or remote_mode_implied(os.environ.get("DOCKER_HOST"))


def backend_name() -> str:
    """This host's sandbox backend as its host row shows it: ``local``, ``docker`` or
    ``docker-remote``."""
    name = settings.ARENA.sandbox_backend
    return "docker-remote" if name == "docker" and docker_remote_mode() else name


def lease_acquire(*, backend: str, run_id: int | None, path: str = "") -> SandboxLease:
    """Takes the lowest free slot on this host. Slots map to uids, so two live sandboxes
    never share a uid (RLIMIT_NPROC counts per uid). ``path`` is where the sandbox's
    run dir will be, recorded before provisioning starts (a glob pattern when the
    backend names it while provisioning), so the janitor finds what a worker killed
    mid-provisioning left."""
    host = host_id()
    slots = settings.ARENA.sandbox_slots
    for slot in range(slots):
        try:
            with transaction.atomic():
                return SandboxLease.objects.create(
                    slot=slot,
                    backend=backend,
                    host=host,
                    worker_pid=os.getpid(),
                    worker_token=process_token(),
                    run_id=run_id,
                    path=path,
                )
        except IntegrityError:
            continue
    raise RuntimeError(f"all {slots} sandbox slots on {host} are leased")


def lease_release(*, lease: SandboxLease) -> None:
    SandboxLease.objects.filter(pk=lease.pk, released_at=None).update(released_at=timezone.now())


def lane_sandbox_spec(
    *, run_id: int = 0, start_url: str = "", lifetime_s: int = SandboxSpec.lifetime_s
) -> SandboxSpec:
    """The sandbox a battle lane runs in, with this worker's settings: the run's own
    fields are the arguments, everything else is ``settings.ARENA``'s. The warm pool
    boots its desktops from it (``sandboxes.pool.pool_template``), so a lane whose spec
    comes from here always has the pool's boot key."""
    arena = settings.ARENA
    return SandboxSpec(
        run_id=run_id,
        shell_timeout_s=arena.shell_timeout_s,
        output_max_bytes=arena.shell_output_max_bytes,
        deliver_max_files=arena.deliver_max_files,
        deliver_max_bytes=arena.deliver_max_bytes,
        desktop=arena.sandbox_desktop,
        start_url=start_url,
        lifetime_s=lifetime_s,
        disk_bytes=arena.sandbox_disk_bytes,
        disk_inodes=arena.sandbox_disk_inodes,
        display_disk_bytes=arena.sandbox_display_disk_bytes,
        screenshot_max_bytes=arena.screenshot_max_bytes,
    )


@contextmanager
def sandbox_session(spec: SandboxSpec):
    """Provisions a sandbox for one run and always destroys it and frees its slot: once
    ``destroy`` returned for a sandbox destroyed at once (bubblewrap's), once its
    background reclaim confirmed it gone for a Docker one (``sandboxes.reclaim``)."""
    from sandboxes.pool import desktop_pool_claim  # (the pool imports this module)

    pooled = desktop_pool_claim(spec)  # a warm desktop of this worker's pool, or None
    if pooled is not None:
        try:
            yield pooled.sandbox
        finally:
            pooled.finish()  # destroyed, never pooled again; its slot freed
        return
    backend = sandbox_backend()
    lease = lease_acquire(
        backend=backend.name, run_id=spec.run_id, path=_run_dir_pattern(backend, spec.run_id)
    )
    sandbox: Sandbox | None = None
    try:
        sandbox = backend.provision(spec, slot=lease.slot)
        SandboxLease.objects.filter(pk=lease.pk).update(path=str(getattr(sandbox, "run_dir", "")))
        yield sandbox
    finally:
        if sandbox is None:
            # A provisioning that failed after its sandbox existed destroyed it: its
            # reclaim, queued before the error came here, ends first.
            reclaims_wait(PROVISION_FAILED_WAIT_S)
            lease_release(lease=lease)
        else:
            try:
                sandbox.destroy()  # the run stopped; a Docker sandbox's reclaim under way
            finally:
                # The slot stays leased until nothing of the sandbox is left
                # (sandboxes.reclaim says what becomes of one whose reclaim fails).
                after_reclaim(sandbox, lambda: lease_release(lease=lease))


def reclaims_wait(timeout_s: float) -> bool:
    """Waits up to ``timeout_s`` for the background reclaims of this process's destroyed
    Docker sandboxes (their slots are freed when each ends); whether all ended. A forked
    work horse calls it before it leaves by ``os._exit`` (``battles.worker``)."""
    return reclaim.reclaims_wait(timeout_s)


def _run_dir_pattern(backend: SandboxBackend, run_id: int | None) -> str:
    """Where the backend will make this run's dir: both name it ``run-<run id>-…``
    under their root."""
    root = getattr(backend, "root", None)
    if root is None or run_id is None:
        return ""
    return str(Path(root) / f"run-{run_id}-*")


def pid_alive(pid: int, token: str = "") -> bool:
    """Whether a process of this pid runs on this host (pid namespace) and, given its
    ``token`` (``arena_site.hosts.process_token``, recorded when it took a lease or a
    battle), is that same process, not a later one given the pid again."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not token or process_token(pid) == token


def sandbox_janitor() -> int:
    """Reaps sandboxes whose worker died on this host: kills what still runs under the
    slot's uids (the agent's and the display's) and in its cgroups, unmounts its quota
    filesystems, removes the run dir and frees the slot. Orphans of the dead worker
    that were reparented to this process are reaped too. Returns how many sandboxes
    it reaped."""
    host = host_id()
    reaped = 0
    # A remote engine's containers run on its own machine: the slot's uids here are
    # none of the run's (the Docker janitor below removes its containers by label).
    remote = settings.ARENA.sandbox_backend == "docker" and docker_remote_mode()
    for lease in SandboxLease.objects.filter(host=host, released_at=None):
        if pid_alive(lease.worker_pid, lease.worker_token):
            continue
        if os.geteuid() == 0 and not remote:
            base = settings.ARENA.sandbox_uid_base
            for uid in (base + lease.slot, base + DISPLAY_UID_OFFSET + lease.slot):
                subprocess.run(["pkill", "-KILL", "-U", str(uid)], check=False)
        if lease.path:
            _reap_run_dirs(lease)
        lease_release(lease=lease)
        reaped += 1
    if reaped:
        reap_orphans(keep=set())
    if settings.ARENA.sandbox_backend == "docker":
        if problem := sandbox_engine_problem():
            # The leases are freed above; the containers go once the engine is back
            # (the battle workers' host duties run this every ARENA_FAULT_CHECK_S).
            logger.warning("janitor: %s; its containers are removed once it answers", problem)
        else:
            reaped += _docker_janitor(host)
    return reaped


def _reap_run_dirs(lease: SandboxLease) -> None:
    """Kills and removes the cgroups of the dead lease's run dir(s), unmounts their
    quota filesystems and removes the dirs. A pattern (the worker died before the
    backend named the dir) matches every dir of the run, except the exact dirs of live
    leases; no live lease may hold the same pattern (it would be provisioning now)."""
    pattern = Path(lease.path)
    if "*" in pattern.name:
        live = [
            other
            for other in SandboxLease.objects.filter(host=lease.host, released_at=None).exclude(
                pk=lease.pk
            )
            if pid_alive(other.worker_pid, other.worker_token)
        ]
        if any(other.path == lease.path for other in live):
            return
        kept = {other.path for other in live}
        directories = [d for d in sorted(pattern.parent.glob(pattern.name)) if str(d) not in kept]
        # The pattern itself also finds groups whose dir is gone already.
        names = [d.name for d in directories] if kept else [pattern.name]
    else:
        directories, names = [pattern], [pattern.name]
    for name in names:
        group = cgroups.find(name)
        if group is not None:
            group.kill_all()
            group.remove()
        # A Docker run's container group: gone here if its worker died before making the
        # containers, else once the Docker janitor removed them (it cannot go before).
        cgroups.SandboxCgroup("v1", cgroups.engine_group_directories(name)).remove(timeout_s=0)
    for directory in directories:
        # Before removing the dir: rmtree would empty a live quota, not unmount it.
        disk.unmount_all_under(directory)
        shutil.rmtree(directory, ignore_errors=True)


# A pooled desktop's run dir: run-<negative identity>-<slot>-<random> (sandboxes.pool).
POOLED_RUN_DIR = re.compile(r"run-(-\d+)-")


def _docker_janitor(host: str) -> int:
    """Removes containers of this host whose run holds no live lease."""
    from sandboxes.docker_backend import janitor

    live_runs: set[int | None] = set()
    for lease in SandboxLease.objects.filter(host=host, released_at=None):
        if pid_alive(lease.worker_pid, lease.worker_token):
            live_runs.add(lease.run_id)
            # A pooled desktop's containers carry the pool's identity (negative), named
            # by its run dir, before and after a run claims it (sandboxes.pool).
            pooled = POOLED_RUN_DIR.match(Path(lease.path).name) if lease.path else None
            if pooled:
                live_runs.add(int(pooled[1]))
    backend = sandbox_backend()
    removed = janitor(
        backend.client(),
        host,
        lambda run_id: run_id in live_runs,
        root=settings.ARENA.sandbox_root,
    )
    if getattr(backend, "remote", False):  # the runs' downloads volumes, after their containers
        from sandboxes.docker_volumes import janitor_volumes

        janitor_volumes(backend.client(), host, lambda run_id: run_id in live_runs)
    return removed
