"""Reclaiming a destroyed Docker sandbox in the background (docs/sandboxes.md, "The
Docker backend").

A Docker sandbox's ``destroy`` is two phases. It stops the run (every container killed
and confirmed not running by the engine, channels and tunnels closed, the run's egress
listeners released) and returns: nothing of the run can act any more. What the engine
and the host still have to remove (the containers, a remote run's downloads volume, the
run's cgroup, quota mounts, the run dir: 130–170 ms of the engine's alone) is a
:class:`Reclaim`, run by this process's reclaimer, one daemon thread with a queue made
on first use. Whoever holds the sandbox's slot (``sandboxes.services.sandbox_session``'s
lease, ``sandboxes.pool.Claimed``'s token) frees it with :func:`after_reclaim`: only once
the reclaim confirmed every container gone, so no new sandbox gets the slot's uids
while anything of the old one is left.

A reclaim that cannot confirm its containers gone (the engine refuses or does not
answer) runs no callback: the slot stays leased, by a live worker, so the janitor
leaves it alone (``sandboxes.services._docker_janitor`` spares the runs of live
leases) until the worker exits. Then the lease's pid is dead: ``sandbox_janitor`` kills
what runs under the slot's uids, removes the run dir and frees the lease, and the Docker
janitor removes the run's containers (and volumes) now that no live lease holds their
run. A worker killed between the two phases leaves the same: a lease of a dead pid.

A forked child forgets its parent's reclaimer (``arena_site.perprocess.PerProcess``: the
thread is not copied, a lock may be held); its own is made on first use. A process
waits for its pending reclaims at exit (``atexit``); a forked RQ work horse, which
leaves by ``os._exit``, waits at the end of each job (``battles.worker.BattleWorker``)."""

import atexit
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from arena_site.perprocess import PerProcess

logger = logging.getLogger(__name__)

# How long a process waits for its pending reclaims: at exit (atexit), at the end of a
# battle job (battles.worker.BattleWorker), before closing an engine client
# (sandboxes.docker_backend.DockerBackend.close).
RECLAIM_WAIT_S = 60.0
# One more try after this long when a reclaim could not confirm its containers gone.
RETRY_AFTER_S = 2.0


class Reclaim:
    """One destroyed sandbox's background work: ``work`` returns whether everything is
    gone (its containers above all). Callbacks added with :meth:`then` run once, on
    the reclaimer's thread, after a ``work`` that returned True; never after one that
    returned False or raised. :meth:`wait` returns once ``work`` and the callbacks ran."""

    def __init__(self, name: str, work: Callable[[], bool]) -> None:
        self.name = name
        self.work = work
        self.ok: bool | None = None  # None until done
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] | None = []  # None once they ran
        self._done = threading.Event()
        self._submitted = False

    def submit(self) -> None:
        """Queues it on this process's reclaimer (once)."""
        with self._lock:
            if self._submitted:
                return
            self._submitted = True
        _reclaimer.get().put(self)

    def then(self, callback: Callable[[], None]) -> None:
        """Runs ``callback`` once the reclaim succeeded: on the reclaimer's thread, or
        here and now if it has already."""
        with self._lock:
            if self._callbacks is not None:
                self._callbacks.append(callback)
                return
            ok = self.ok
        if ok:
            callback()

    def wait(self, timeout_s: float) -> bool:
        """Whether the reclaim (and its callbacks) ran within ``timeout_s``."""
        return self._done.wait(timeout_s)

    def run(self) -> None:
        ok = False
        for attempt in range(2):
            try:
                ok = bool(self.work())
            except Exception:
                logger.exception("reclaiming %s failed", self.name)
            if ok or attempt:
                break
            time.sleep(RETRY_AFTER_S)
        if not ok:
            logger.warning(
                "%s: its containers could not be confirmed gone; its slot stays leased "
                "until the janitor reaps it",
                self.name,
            )
        with self._lock:
            self.ok = ok
            callbacks, self._callbacks = self._callbacks or [], None
        for callback in callbacks if ok else []:
            try:
                callback()
            except Exception:
                logger.exception("a callback after reclaiming %s failed", self.name)
        self._done.set()


def after_reclaim(sandbox: Any, callback: Callable[[], None]) -> None:
    """Runs ``callback`` (a slot's release) once the destroyed ``sandbox`` is
    reclaimed: now for a sandbox destroyed synchronously (bubblewrap's), else when its
    :class:`Reclaim` succeeded."""
    pending: Reclaim | None = getattr(sandbox, "reclaim", None)
    if pending is None:
        callback()
    else:
        pending.then(callback)


class _Reclaimer:
    """One daemon thread running the process's reclaims in turn."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Reclaim] = queue.SimpleQueue()
        self.pending: set[Reclaim] = set()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name="sandbox-reclaimer", daemon=True)
        self.thread.start()

    def put(self, item: Reclaim) -> None:
        with self.lock:
            self.pending.add(item)
        self.queue.put(item)

    def _loop(self) -> None:
        while True:
            item = self.queue.get()
            try:
                item.run()
            finally:
                _close_db_connection()  # the callbacks free leases: no idle connection kept
                with self.lock:
                    self.pending.discard(item)

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self.lock:
            pending = list(self.pending)
        return all(item.wait(max(0.0, deadline - time.monotonic())) for item in pending)


def _close_db_connection() -> None:
    from django.conf import settings

    if settings.configured:  # (the benchmark runs sandboxes without Django)
        from django.db import connection

        connection.close()


def _start_reclaimer() -> _Reclaimer:
    reclaimer = _Reclaimer()
    atexit.register(reclaims_wait, RECLAIM_WAIT_S)
    return reclaimer


# In a forked child the parent's thread does not exist and its reclaims are the
# parent's: the child makes its own reclaimer on first use.
_reclaimer: PerProcess[_Reclaimer] = PerProcess(_start_reclaimer)


def reclaims_wait(timeout_s: float) -> bool:
    """Waits up to ``timeout_s`` for every reclaim this process queued; whether they
    all ran."""
    instance = _reclaimer.peek()
    return True if instance is None else instance.wait(timeout_s)
