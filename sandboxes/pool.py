"""A warm pool of pre-booted desktops per worker process (docs/performance.md, "The warm
desktop pool and the step path").

A cold desktop takes ~0.7 s: two bubblewrap sandboxes, Xvfb, Chromium's first paint.
The pool keeps ``ARENA_SANDBOX_POOL_SIZE`` of them booted and idle — Xvfb up, Chromium
on ``about:blank`` with a fresh profile, both supervisors ready — each exactly as
the backend's ``provision`` makes it (its own slot lease and uids, quota tmpfs,
seccomp filters, cgroup): nothing of the isolation differs. A run takes one
(``claim``), which makes it the run's (``LocalSandbox.assign``: the run's spec and
lifetime, a fresh egress identity, the start page); it is destroyed after the run like
any sandbox and **never** goes back: the pool boots a new one in the background.

What a desktop is booted with cannot change afterwards: the screen size, the quotas,
the cgroup's limits, the supervisors' shell bounds. Those are the pool's ``boot_key``;
a run whose spec differs in any of them gets a cold desktop, as without a pool.

Pooled desktops hold slots like live sandboxes (their leases say so, their cgroups
count against the worker's own), so the pool and the runs share the host's bound.

The pool's thread is the one that starts every pooled sandbox, and it lives as long as
the pool: bubblewrap's ``--die-with-parent`` fires when the *thread* that forked it
ends, so a desktop booted by a short-lived thread would die under its run.

A forked RQ work horse does not share its parent's pool (nor its egress proxy
thread): the pool serves runs of the process that started it, so battle workers that
use it run jobs in-process (``PoolWorker``, a ``SimpleWorker``)."""

import atexit
import contextlib
import dataclasses
import itertools
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from arena_site.hosts import process_token
from arena_site.worker import ArenaSimpleWorker
from sandboxes.base import SandboxSpec
from sandboxes.local import LocalSandbox
from sandboxes.reclaim import after_reclaim, reclaims_wait

logger = logging.getLogger(__name__)

# An idle desktop is replaced after this long (Chromium idles cheaply, but nothing
# should live for ever); its own wall-clock limit is the backstop.
MAX_IDLE_S = 3600
IDLE_LIFETIME_S = 2 * MAX_IDLE_S
# How often the pool's thread checks its idle desktops are alive.
HEALTH_CHECK_S = 2.0
# After a failed boot the pool waits this long (doubling up to the maximum).
BOOT_BACKOFF_S, BOOT_BACKOFF_MAX_S = 1.0, 60.0
# How long a failed boot waits for the reclaims under way before freeing its slot.
BOOT_FAILED_WAIT_S = 30.0


def boot_key(spec: SandboxSpec) -> SandboxSpec:
    """What of ``spec`` a desktop is booted with: everything but the run's own fields
    (its id, start page, lifetime and the host-side bounds of deliveries and
    screenshots, which ``assign`` sets)."""
    return dataclasses.replace(
        spec,
        run_id=0,
        start_url="",
        lifetime_s=0,
        deliver_max_files=0,
        deliver_max_bytes=0,
        screenshot_max_bytes=0,
    )


class PoolBackend(Protocol):
    """What the pool needs of a backend: the local one and the Docker one both are."""

    name: str
    root: Path

    def provision(
        self, spec: SandboxSpec, *, slot: int = 0, background: bool = False
    ) -> LocalSandbox: ...


class Slots(Protocol):
    """Where pooled desktops get their slots: leases in the database for a worker
    (``LeaseSlots``), a fixed list for the benchmark (``FixedSlots``)."""

    def take(self, identity: int) -> tuple[int, Any]:
        """A free slot and a token for it; ``identity`` names the desktop's run dir."""
        ...

    def booted(self, token: Any, sandbox: LocalSandbox) -> None: ...

    def claimed(self, token: Any, run_id: int | None) -> None: ...

    def release(self, token: Any) -> None: ...

    def rest(self) -> None:
        """Called by the pool's thread between boots (drop idle resources)."""
        ...


class FixedSlots:
    """Slots from a list, no database (the benchmark, tests of the pool alone)."""

    def __init__(self, slots: list[int]) -> None:
        self.free = list(slots)
        self.lock = threading.Lock()

    def take(self, identity: int) -> tuple[int, Any]:
        with self.lock:
            if not self.free:
                raise RuntimeError("no free slot for a pooled desktop")
            slot = self.free.pop(0)
        return slot, slot

    def booted(self, token: Any, sandbox: LocalSandbox) -> None:
        pass

    def claimed(self, token: Any, run_id: int | None) -> None:
        pass

    def release(self, token: Any) -> None:
        with self.lock:
            self.free.append(token)

    def rest(self) -> None:
        pass


class LeaseSlots:
    """Slot leases like every live sandbox's (``sandboxes.services``): a pooled desktop's
    lease has no run until one claims it, and its path names its run dir, so the
    janitor reaps what a dead worker's pool left."""

    def __init__(self, backend: PoolBackend) -> None:
        self.backend = backend

    def take(self, identity: int) -> tuple[int, Any]:
        from sandboxes.services import lease_acquire

        lease = lease_acquire(
            backend=self.backend.name,
            run_id=None,
            path=str(self.backend.root / f"run-{identity}-*"),
        )
        return lease.slot, lease

    def booted(self, token: Any, sandbox: LocalSandbox) -> None:
        from sandboxes.models import SandboxLease

        SandboxLease.objects.filter(pk=token.pk).update(path=str(sandbox.run_dir))

    def claimed(self, token: Any, run_id: int | None) -> None:
        from sandboxes.models import SandboxLease

        SandboxLease.objects.filter(pk=token.pk).update(
            run_id=run_id, worker_pid=os.getpid(), worker_token=process_token()
        )

    def release(self, token: Any) -> None:
        from sandboxes.services import lease_release

        lease_release(lease=token)

    def rest(self) -> None:
        from django.db import connection

        connection.close()  # the pool's thread holds no idle connection between boots


@dataclass
class _Idle:
    sandbox: LocalSandbox
    token: Any
    booted_at: float


@dataclass
class Claimed:
    """A pooled desktop a run holds; ``finish`` destroys it and frees its slot."""

    sandbox: LocalSandbox
    token: Any
    pool: "DesktopPool"

    def finish(self) -> None:
        """Destroys it; its slot is freed once it is reclaimed (``sandboxes.reclaim``:
        at once for bubblewrap's, in the background for Docker's)."""
        try:
            self.sandbox.destroy()
        finally:
            after_reclaim(self.sandbox, lambda: self.pool.slots.release(self.token))


class DesktopPool:
    """Keeps ``size`` desktops of ``template``'s boot key booted and idle (module
    docstring). ``claim`` is thread-safe; ``close`` destroys the idle ones and must
    come after the last claimed one finished (their sandboxes end with the pool's
    thread)."""

    def __init__(
        self,
        backend: PoolBackend,
        template: SandboxSpec,
        size: int,
        slots: Slots,
        *,
        forget_identity: Callable[[int], object] | None = None,
    ) -> None:
        """``forget_identity`` drops what the egress proxy recorded under a pooled
        desktop's own identity (its refusals while idle) once a run has it."""
        if not template.desktop:
            raise ValueError("the pool holds desktops")
        self.backend = backend
        self.key = boot_key(template)
        self.size = size
        self.slots = slots
        self.forget_identity = forget_identity
        self.owner_pid = os.getpid()
        self.stats: Counter[str] = Counter()
        self._idle: list[_Idle] = []
        self._booting = 0
        self._closing = False
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._thread = threading.Thread(target=self._keep_full, name="desktop-pool", daemon=True)

    def start(self) -> "DesktopPool":
        self._thread.start()
        return self

    def idle(self) -> int:
        with self._cond:
            return len(self._idle)

    def wait_full(self, timeout_s: float) -> bool:
        """Waits until ``size`` desktops are idle (tests, the benchmark)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self._idle) < self.size:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    # -- the run's side ------------------------------------------------------------

    def claim(self, spec: SandboxSpec) -> Claimed | None:
        """A booted desktop made ``spec``'s run's, or None (a cold start then): another
        process than the pool's, a spec of another boot key, or no idle desktop."""
        if os.getpid() != self.owner_pid or not spec.desktop or boot_key(spec) != self.key:
            self.stats["mismatch"] += 1
            return None
        while True:
            with self._cond:
                if not self._idle:
                    self.stats["empty"] += 1
                    return None
                idle = self._idle.pop(0)  # the oldest first: none idles much longer
            identity = idle.sandbox.spec.run_id
            if not idle.sandbox.health()["ok"]:
                self._discard(idle)
                self._wake()
                continue
            try:
                idle.sandbox.assign(spec)
                self.slots.claimed(idle.token, spec.run_id)
            except Exception:
                logger.exception("a pooled desktop could not be assigned; starting cold")
                self._discard(idle)
                return None
            finally:
                # Only now: the replacement's boot would compete with the start page.
                self._wake()
            if self.forget_identity is not None:
                with contextlib.suppress(Exception):
                    self.forget_identity(identity)
            self.stats["claimed"] += 1
            return Claimed(idle.sandbox, idle.token, self)

    def _wake(self) -> None:
        """Tells the pool's thread a desktop left the pool (it boots a replacement)."""
        with self._cond:
            self._cond.notify_all()

    # -- the pool's thread ---------------------------------------------------------------

    def _keep_full(self) -> None:
        backoff = BOOT_BACKOFF_S
        while True:
            with self._cond:
                if not self._closing and len(self._idle) + self._booting >= self.size:
                    self._cond.wait(HEALTH_CHECK_S)
                if self._closing:
                    return
                short = len(self._idle) + self._booting < self.size
                self._booting += short
            if not short:
                self._drop_stale()
                continue
            try:
                idle = self._boot()
            except Exception:
                self.stats["boot_failed"] += 1
                logger.exception("booting a pooled desktop failed; retrying in %g s", backoff)
                with self._cond:
                    self._booting -= 1
                    self._cond.wait(backoff)
                backoff = min(2 * backoff, BOOT_BACKOFF_MAX_S)
                continue
            finally:
                with contextlib.suppress(Exception):
                    self.slots.rest()
            backoff = BOOT_BACKOFF_S
            with self._cond:
                self._booting -= 1
                closing = self._closing
                if not closing:
                    self._idle.append(idle)
                    self.stats["booted"] += 1
                    self._cond.notify_all()
            if closing:
                self._discard(idle)
                return

    def _boot(self) -> _Idle:
        # An identity of its own (negative: no run has it) names the run dir and the
        # egress identity until a run claims it.
        identity = -((self.owner_pid << 20) | next(self._ids))
        slot, token = self.slots.take(identity)
        spec = dataclasses.replace(self.key, run_id=identity, lifetime_s=IDLE_LIFETIME_S)
        try:
            # At a low CPU weight until claimed: a boot yields the cores to the runs.
            sandbox = self.backend.provision(spec, slot=slot, background=True)
        except BaseException:
            reclaims_wait(BOOT_FAILED_WAIT_S)  # what the failed boot made, reclaimed first
            self.slots.release(token)
            raise
        try:
            self.slots.booted(token, sandbox)
        except BaseException:
            self._discard(_Idle(sandbox, token, time.monotonic()))
            raise
        return _Idle(sandbox, token, time.monotonic())

    def _drop_stale(self) -> None:
        """Destroys idle desktops that died or idled past MAX_IDLE_S (the loop then
        boots their replacements)."""
        with self._cond:
            now = time.monotonic()
            stale = [
                i
                for i in self._idle
                if now - i.booted_at > MAX_IDLE_S or not i.sandbox.health()["ok"]
            ]
            self._idle = [i for i in self._idle if i not in stale]
        for idle in stale:
            self.stats["replaced"] += 1
            self._discard(idle)

    def _discard(self, idle: _Idle) -> None:
        """Destroys an idle desktop; its slot is freed once it is reclaimed."""

        def release() -> None:
            with contextlib.suppress(Exception):
                self.slots.release(idle.token)

        try:
            idle.sandbox.destroy()
        finally:
            after_reclaim(idle.sandbox, release)

    def close(self, timeout_s: float = 60.0) -> None:
        """Stops booting, waits for a boot under way, destroys the idle desktops and
        waits (up to ``timeout_s`` more) for their reclaims, which free their slots: it
        runs at exit, after the process's own wait for its reclaims."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        with self._cond:
            idle, self._idle = self._idle, []
        for item in idle:
            self._discard(item)
        deadline = time.monotonic() + timeout_s
        for item in idle:
            pending = getattr(item.sandbox, "reclaim", None)
            if pending is not None and not pending.wait(max(0.0, deadline - time.monotonic())):
                logger.warning("a pooled desktop was not reclaimed within %g s", timeout_s)


# -- the worker's pool ------------------------------------------------------------------

_pool: DesktopPool | None = None
_pool_lock = threading.Lock()


def pool_template() -> SandboxSpec:
    """The desktop a lane asks for with this worker's settings: the boot key of
    ``sandboxes.services.lane_sandbox_spec``, the spec every lane is built from."""
    from sandboxes.services import lane_sandbox_spec

    return boot_key(dataclasses.replace(lane_sandbox_spec(), desktop=True))


def desktop_pool_start(*, size: int | None = None) -> DesktopPool | None:
    """Starts this process's pool (the battle worker's hook at start); None when it is
    off (``ARENA_SANDBOX_POOL_SIZE=0``) or sandboxes have no desktop. On either backend:
    a pooled Docker desktop is the same two containers a cold one is. Idempotent."""
    global _pool
    from django.conf import settings

    from sandboxes.services import egress_refusals_take, sandbox_backend

    arena = settings.ARENA
    size = arena.sandbox_pool_size if size is None else size
    if size <= 0 or not arena.sandbox_desktop:
        return None
    with _pool_lock:
        if _pool is not None and _pool.owner_pid == os.getpid():
            return _pool
        backend = cast(PoolBackend, sandbox_backend())
        _pool = DesktopPool(
            backend,
            pool_template(),
            size,
            LeaseSlots(backend),
            forget_identity=egress_refusals_take,
        ).start()
    atexit.register(desktop_pool_stop)
    return _pool


def desktop_pool_claim(spec: SandboxSpec) -> Claimed | None:
    """A pooled desktop for ``spec``'s run, or None: start it cold."""
    pool = _pool
    return pool.claim(spec) if pool is not None else None


def desktop_pool_stop() -> None:
    """Destroys this process's pool (after its last run)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None and pool.owner_pid == os.getpid():
        pool.close()


class PoolWorker(ArenaSimpleWorker):
    """An RQ worker for the battles queue with a warm desktop pool: jobs run in the
    worker's own process (no work horse: a fork would share neither the pool nor the
    egress proxy's thread), with the arena workers' recovery from a Redis or
    PostgreSQL outage. ``manage.py rqworker battles --worker-class
    sandboxes.pool.PoolWorker``."""

    def work(self, *args: Any, **kwargs: Any) -> bool:
        desktop_pool_start()
        try:
            return super().work(*args, **kwargs)
        finally:
            desktop_pool_stop()
