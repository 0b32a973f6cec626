"""A worker host's own duties (docs/deployment.md): at a worker's start it beats and
reaps what its earlier life left (sandboxes of dead workers, their battles re-queued);
then, from a thread of the worker (``battles.worker``), it beats every
ARENA_HOST_HEARTBEAT_S and every ARENA_FAULT_CHECK_S looks for dead workers of its own
and for hosts that stopped beating."""

import logging

from django.db import DatabaseError, connection

from arena_site.hosts import host_id
from battles.services.orchestration import (
    battles_recover_dead_hosts,
    battles_recover_dead_workers,
)
from sandboxes.fleet import fleet_join
from sandboxes.heartbeats import host_beat
from sandboxes.selectors import host_cordon_state
from sandboxes.services import sandbox_engine_problem, sandbox_janitor

logger = logging.getLogger(__name__)


def host_start() -> None:
    """A battle worker starts: the host beats, then reaps its own orphans (leases of
    dead pids with their processes, cgroups, mounts and run dirs; containers) and
    re-queues the battles its dead workers held. Nothing here waits for a heartbeat to
    go stale: on its own host a worker's death is known by its pid. First the host is
    checked against the fleet (``sandboxes.fleet``: its times and key ring)."""
    fleet_join()
    host = host_beat(starting=True)
    reaped = sandbox_janitor()
    requeued, failed = battles_recover_dead_workers()
    if reaped or requeued or failed:
        logger.warning(
            "host %s starting: reaped %d sandboxes; battles re-queued %s, failed %s",
            host.host_id, reaped, requeued, failed,
        )  # fmt: skip


def host_duties(*, check: bool) -> tuple[list[int], list[int]]:
    """One beat; with ``check``, also the janitor's look at this host's sandboxes (those
    of dead processes; on Docker, containers whose run no live lease holds: a sandbox
    whose engine was away when its worker ended is removed once the engine is back),
    at its dead workers and at silent hosts. Returns (re-queued, failed) battle ids."""
    host_beat()
    if not check:
        return [], []
    try:
        reaped = sandbox_janitor()
    except Exception as exc:  # an engine that does not answer, mostly: said once a check
        logger.warning(
            "the host's sandbox janitor failed (%s: %s); the next check tries again",
            type(exc).__name__, str(exc)[:300],
        )  # fmt: skip
    else:
        if reaped:
            logger.warning("janitor reaped %d sandboxes of dead workers", reaped)
    requeued, failed = battles_recover_dead_workers()
    again, dead = battles_recover_dead_hosts()
    return requeued + again, failed + dead


def host_takes_no_battle() -> tuple[str, bool] | None:
    """Why this host's battle workers take no battle now, and whether they should stop
    (draining): an operator cordoned or drained the host (``host_admin``), or its
    sandbox engine does not answer. None when they take battles."""
    try:
        cordoned, draining, reason = host_cordon_state(host_id())
    except DatabaseError as exc:  # a worker waits out a database outage, it never dies of it
        connection.close()
        return f"the database does not answer ({exc}); this worker takes no battle", False
    if cordoned:
        how = "draining" if draining else "cordoned"
        until = "it stops once idle" if draining else "takes none until it is uncordoned"
        why = reason or "no reason given"
        return f"this host is {how} by an operator ({why}): this worker {until}", draining
    if problem := sandbox_engine_problem():
        return f"{problem}; this worker takes no battle until it answers", False
    return None
