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
from battles.services.hosts import host_duties, host_start, host_takes_no_battle
from sandboxes.fleet import FleetMismatch
from sandboxes.heartbeats import HostIdTaken, host_leave
from sandboxes.pool import PoolWorker

logger = logging.getLogger(__name__)

# How often a worker that takes no battle (engine away, host cordoned) asks again.
ENGINE_RETRY_S = 2.0


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
        try:
            host_leave()  # out of the fleet's capacity at once
        except Exception:  # the database is away: the entry ages out instead
            logger.warning("could not leave the host's workers", exc_info=True)

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
    """Mixed into an RQ worker class (before it). A worker takes no battle while its
    host is cordoned by an operator or its sandbox engine does not answer
    (``host_takes_no_battle``): it waits, beating, until that ends (a burst worker
    stops), so a battle that lost its sandboxes with an engine (``SandboxLost``: queued
    again) goes to a worker whose engine answers. On a draining host it stops once
    idle."""

    def work(self, *args: Any, **kwargs: Any) -> bool:
        try:
            host_start()
        except (HostIdTaken, FleetMismatch) as exc:
            raise SystemExit(f"battle worker not started: {exc}") from None
        connection.close()  # the thread and the jobs open their own
        duties = HostDuties().start()
        try:
            return super().work(*args, **kwargs)  # type: ignore[misc]
        finally:
            duties.stop()

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None):
        waited = ""
        while refusal := host_takes_no_battle():
            problem, stop = refusal
            if problem != waited:
                logger.warning("%s", problem)
            waited = problem
            if stop or timeout is None:  # draining, or a burst worker: it stops
                return None
            self.heartbeat()  # type: ignore[attr-defined]
            self.procline(f"taking no battle: {problem}")  # type: ignore[attr-defined]
            time.sleep(ENGINE_RETRY_S)  # a stop signal meanwhile raises StopRequested
        if waited:
            logger.warning("this worker takes battles again")
        return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)  # type: ignore[misc]


class BattleWorker(HostDutiesMixin, ArenaWorker):
    """A forking battle worker carrying its host's duties."""

    def perform_job(self, *args: Any, **kwargs: Any) -> bool:
        """The job, then the background reclaims of its Docker sandboxes (their slots
        are freed when each ends): the work horse leaves by ``os._exit`` right after,
        which runs no ``atexit``, and would leave their leases held and containers on
        the engine for the janitor."""
        from sandboxes.reclaim import RECLAIM_WAIT_S
        from sandboxes.services import reclaims_wait

        try:
            return super().perform_job(*args, **kwargs)
        finally:
            if not reclaims_wait(RECLAIM_WAIT_S):
                logger.warning(
                    "a sandbox of this job was not reclaimed within %.0f s", RECLAIM_WAIT_S
                )


class PooledBattleWorker(HostDutiesMixin, PoolWorker):
    """An in-process battle worker with the warm desktop pool and its host's duties."""
