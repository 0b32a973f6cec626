"""The arena's RQ worker classes and cron scheduler: long-lived processes that survive a
Redis or PostgreSQL restart by themselves, plus the test-only pause points of a worker.

- Redis: RQ retries a lost connection only while it waits for a job; anywhere else in
  its loop (suspension check, maintenance, heartbeat, finishing a job) a
  ``ConnectionError`` ends ``work()`` and the process. ``ArenaWorker.work`` waits with
  backoff until Redis answers and starts the loop again under the same name. RQ's cron
  scheduler has no retry at all: ``ResilientCronScheduler.start`` keeps it going.
- PostgreSQL: a long-lived worker keeps Django's connection across jobs; after a
  restart that connection is dead. Before each job unusable connections are dropped
  (one ``SELECT 1``), after it ``close_old_connections``; a job that failed because the
  database was unreachable waits for it and is retried (RQ's own retry, DB_RETRIES
  times) — jobs are idempotent.

Selected by ``RQ["WORKER_CLASS"]`` (settings) and ``--worker-class`` (scripts/run_arena.py);
the scheduler runs as ``python -m arena_site.worker arena_site.cron``."""

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psycopg
import redis
from django.db import close_old_connections, connections
from django.db.utils import InterfaceError, OperationalError
from rq.worker import SimpleWorker, Worker

logger = logging.getLogger(__name__)

REDIS_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
# Django's wrappers, and psycopg's own (its pool's PoolTimeout is an OperationalError).
DB_ERRORS = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)
BACKOFF_FIRST_S = 0.25
BACKOFF_MAX_S = 5.0
# A job failed by an unreachable database is retried this often, each time once the
# database answers again (waiting at most DB_WAIT_S for it).
DB_RETRIES = 3
DB_WAIT_S = 60.0


def fault_point(name: str) -> None:
    """Test-only: with ARENA_FAULT_PAUSE=<name>, the first process to reach this point
    writes ``<ARENA_FAULT_DIR>/<name>`` (its pid) and stops here, so a test can kill it
    at that phase; its other threads stop here too when they come by (a battle's other
    lane must not run on to its end meanwhile), while other processes (the re-run) pass.
    A no-op otherwise."""
    if os.environ.get("ARENA_FAULT_PAUSE") != name:
        return
    marker = Path(os.environ.get("ARENA_FAULT_DIR", "/tmp")) / name  # noqa: S108
    pid = str(os.getpid())
    # written whole under another name, then linked: a reader never sees it half-written
    draft = marker.with_name(f".{name}.{pid}.{threading.get_ident()}")
    draft.write_text(pid)
    try:
        os.link(draft, marker)
    except FileExistsError:
        if marker.read_text().strip() != pid:
            return  # another process paused here first
    finally:
        draft.unlink()
    time.sleep(600)  # the test kills us long before


def _backoff():
    delay = BACKOFF_FIRST_S
    while True:
        yield delay
        delay = min(delay * 2, BACKOFF_MAX_S)


def _drop_unusable_connections() -> None:
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.is_usable():
            conn.close()


def database_wait(timeout_s: float = DB_WAIT_S) -> bool:
    """Until every configured database answers (True) or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    for delay in _backoff():
        try:
            for conn in connections.all():
                conn.close()
                conn.ensure_connection()
            return True
        except DB_ERRORS:
            if time.monotonic() + delay > deadline:
                return False
            time.sleep(delay)
    return False  # unreachable


class ResilientWorkerMixin:
    """Mixed into an RQ worker class (before it)."""

    _redis_lost = False
    # RQ's own backoff while it waits for a job (1 s doubling) stops growing here, not
    # at RQ's 60 s: a worker is back within seconds of Redis.
    max_connection_wait_time = BACKOFF_MAX_S

    # --- PostgreSQL -----------------------------------------------------------------

    def perform_job(self, job, queue, execution):
        _drop_unusable_connections()
        try:
            return super().perform_job(job, queue, execution)
        finally:
            close_old_connections()

    def handle_exception(self, job, *exc_info):
        exc = exc_info[1] if len(exc_info) > 1 else None
        if isinstance(exc, DB_ERRORS):
            if job.retries_left is None:
                job.retries_left = DB_RETRIES
                job.retry_intervals = [0]  # at once: this worker waited for it
            if job.retries_left:
                self.log.warning("job %s: database unreachable; retried once it answers", job.id)
                database_wait()
        super().handle_exception(job, *exc_info)

    # --- Redis ----------------------------------------------------------------------

    def _mark_redis(self, method, *args, **kwargs):
        try:
            return method(*args, **kwargs)
        except REDIS_ERRORS:
            self._redis_lost = True
            raise

    def check_for_suspension(self, burst):
        return self._mark_redis(super().check_for_suspension, burst)

    def run_maintenance_tasks(self):
        return self._mark_redis(super().run_maintenance_tasks)

    def dequeue_job_and_maintain_ttl(self, *args, **kwargs):
        return self._mark_redis(super().dequeue_job_and_maintain_ttl, *args, **kwargs)

    def execute_job(self, job, queue):
        return self._mark_redis(super().execute_job, job, queue)

    def heartbeat(self, *args, **kwargs):
        return self._mark_redis(super().heartbeat, *args, **kwargs)

    def work(self, *args, **kwargs) -> bool:
        """RQ's loop, started again whenever Redis was lost, until a stop is asked."""
        worked = False
        while True:
            self._redis_lost = False
            try:
                worked = super().work(*args, **kwargs) or worked
            except REDIS_ERRORS:
                self._redis_lost = True
            if not self._redis_lost or self._stop_requested:
                return worked
            self.log.warning("Worker %s: lost Redis; working again once it answers", self.name)
            if not self._wait_for_redis():
                return worked
            if self._horse_pid:
                # A work horse may still be running its job: one job at a time per worker.
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self._horse_pid, 0)
                self._horse_pid = 0
            with contextlib.suppress(*REDIS_ERRORS):
                self.connection.delete(self.key)  # our own key, left without a death

    def _wait_for_redis(self) -> bool:
        """Pings with backoff; a stop signal meanwhile ends the wait (False)."""
        stop = {"asked": False}

        def asked(signum, frame):
            stop["asked"] = True

        previous = {s: signal.signal(s, asked) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            for delay in _backoff():
                if stop["asked"]:
                    self._stop_requested = True
                    return False
                with contextlib.suppress(*REDIS_ERRORS):
                    if self.connection.ping():
                        return True
                time.sleep(delay)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return False  # unreachable


class ArenaWorker(ResilientWorkerMixin, Worker):
    """A forking worker (one work horse per job): the battle workers."""


class ArenaSimpleWorker(ResilientWorkerMixin, SimpleWorker):
    """Jobs in the worker process itself: the judging/ratings worker and the janitors'
    worker (the default queue)."""


def _cron_scheduler_class():
    from django_rq.cron import DjangoCronScheduler
    from rq.exceptions import StopRequested

    class ResilientCronScheduler(DjangoCronScheduler):
        """RQ's cron loop, which dies on the first Redis error, with retries."""

        def start(self):
            self.log.info("CronScheduler %s: starting...", self.name)
            self._install_signal_handlers()
            born = False
            delays = _backoff()
            try:
                while True:
                    try:
                        if not born:
                            self.register_birth()
                            born = True
                        if self.enqueue_jobs():
                            self.save()
                        self.heartbeat()
                        delays = _backoff()
                        sleep_s = self.calculate_sleep_interval()
                    except REDIS_ERRORS as exc:
                        sleep_s = next(delays)
                        self.log.warning("CronScheduler %s: Redis lost (%s)", self.name, exc)
                    if sleep_s > 0:
                        time.sleep(min(sleep_s, 1.0))
            except (KeyboardInterrupt, StopRequested):
                self.log.info("CronScheduler %s: stop requested", self.name)
            finally:
                with contextlib.suppress(*REDIS_ERRORS):
                    self.register_death()

    return ResilientCronScheduler


def cron_main(config_path: str) -> None:
    """``python -m arena_site.worker <cron module>``: RQ's cron scheduler, resilient."""
    scheduler = _cron_scheduler_class()(logging_level=logging.INFO)
    scheduler.load_config_from_file(config_path)
    scheduler.start()


if __name__ == "__main__":
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
    django.setup()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cron_main(sys.argv[1] if len(sys.argv) > 1 else "arena_site.cron")
