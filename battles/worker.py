"""The battle workers: RQ workers of the ``battles`` queue that carry their host's
duties (``battles.services.hosts``) — at start they reap what the host's earlier life
left, and a thread of their own beats the host's heartbeat and runs the host's janitor
for as long as the worker lives. A host is alive exactly while one of its battle
workers is.

``manage.py rqworker battles --worker-class battles.worker.BattleWorker`` (a work horse
per job) or ``battles.worker.PooledBattleWorker`` (jobs in-process, with the warm
desktop pool: ``sandboxes.pool.PoolWorker``). A work horse makes its own sandbox
backend, egress proxy, model gateway and demo web server on first use (none of its
parent's threads exist in a fork: ``sandboxes.services``)."""

import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connection

from arena_site.worker import ArenaWorker
from battles.services.hosts import host_duties, host_start
from sandboxes.pool import PoolWorker

logger = logging.getLogger(__name__)


class HostDuties:
    """The host's heartbeat and janitor in a daemon thread; ``stop`` ends it."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="host-duties", daemon=True)

    def start(self) -> "HostDuties":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        arena = settings.ARENA
        next_check = 0.0
        while not self._stop.wait(arena.host_heartbeat_s):
            check = time.monotonic() >= next_check
            try:
                requeued, failed = host_duties(check=check)
            except Exception:
                # The database is away: the next beat tries again on a new connection.
                logger.exception("the host's heartbeat failed")
                connection.close()
                continue
            if check:
                next_check = time.monotonic() + arena.fault_check_s
            if requeued or failed:
                logger.warning("janitor: battles re-queued %s, failed %s", requeued, failed)
        connection.close()


class HostDutiesMixin:
    """Mixed into an RQ worker class (before it)."""

    def work(self, *args: Any, **kwargs: Any) -> bool:
        host_start()
        connection.close()  # the thread and the jobs open their own
        duties = HostDuties().start()
        try:
            return super().work(*args, **kwargs)  # type: ignore[misc]
        finally:
            duties.stop()


class BattleWorker(HostDutiesMixin, ArenaWorker):
    """A forking battle worker carrying its host's duties."""


class PooledBattleWorker(HostDutiesMixin, PoolWorker):
    """An in-process battle worker with the warm desktop pool and its host's duties."""
