"""The decider: a process of its own that decides battles once their votes' undo
windows have passed (``python manage.py decide``; one or more per arena).

Each step is one transaction (``judging.services.resolution.battles_resolve_due``): up
to ``batch`` battles being judged whose ``Battle.decide_due_at`` has come, oldest due
first, taken with ``SELECT … FOR UPDATE SKIP LOCKED`` and resolved together (one
``DecisionBatch``). When a step takes a full batch the next follows at once; otherwise
the decider sleeps ``idle_s`` first. Several deciders share the due battles: SKIP
LOCKED gives each its own rows, and a battle is decided only while its locked row says
"judging", so none is decided twice (docs/performance.md, "Decisions"). Nothing here
uses Redis. A database outage is waited out (backoff up to 5 s); SIGTERM or SIGINT ends
the loop after the step in hand has committed."""

import logging
import threading
import time
from dataclasses import dataclass

import psycopg
from django.db import connections
from django.db.utils import InterfaceError, OperationalError

from judging.services.resolution import battles_resolve_due

logger = logging.getLogger(__name__)

DB_ERRORS = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.25, 5.0
REPORT_EVERY_S = 60.0


@dataclass
class DeciderStats:
    steps: int = 0
    taken: int = 0  # battles looked at
    changed: int = 0  # of which decided, excluded or moved on (a waiting one's due time)
    errors: int = 0


def decider_run(
    *,
    batch: int = 100,
    idle_s: float = 0.2,
    stop: threading.Event | None = None,
    until_idle: bool = False,
) -> DeciderStats:
    """Decides due battles until ``stop`` is set (or, ``until_idle``, until a step finds
    none). Returns what it did."""
    stop = stop or threading.Event()
    stats, last = DeciderStats(), DeciderStats()
    reported = time.monotonic()
    delay = BACKOFF_FIRST_S
    while not stop.is_set():
        try:
            taken, changed = battles_resolve_due(limit=batch)
        except DB_ERRORS:
            stats.errors += 1
            logger.warning("decider: the database is unavailable; retrying in %.2f s", delay,
                           exc_info=True)  # fmt: skip
            _drop_unusable_connections()
            stop.wait(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)
            continue
        delay = BACKOFF_FIRST_S
        stats.steps += 1
        stats.taken += taken
        stats.changed += len(changed)
        if time.monotonic() - reported >= REPORT_EVERY_S:
            logger.info("decider: %d battles taken, %d changed in the last %.0f s",
                        stats.taken - last.taken, stats.changed - last.changed,
                        time.monotonic() - reported)  # fmt: skip
            last, reported = DeciderStats(**vars(stats)), time.monotonic()
        if taken < batch:
            if until_idle and taken == 0:
                break
            stop.wait(idle_s)
    return stats


def _drop_unusable_connections() -> None:
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.is_usable():
            conn.close()
