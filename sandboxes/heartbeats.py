"""Worker hosts' heartbeats (docs/deployment.md). Each battle worker beats its host's
row, and the live leases of its host, from a thread of its own (``battles.worker``);
any host's janitor reads which hosts went silent and re-queues their battles
(``battles.services.orchestration.battles_recover_dead_hosts``). A dead host's
sandboxes cannot be reached from another machine: the host reaps them itself at its
next start (``sandboxes.services.sandbox_janitor``)."""

import os
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models.functions import Now

from arena_site.dbclock import db_now
from arena_site.hosts import app_version, host_id, machine_id, process_token
from sandboxes.models import SandboxLease, WorkerHost
from sandboxes.selectors import fleet_times
from sandboxes.services import backend_name


class HostIdTaken(RuntimeError):
    """Another machine beats this host id: two hosts sharing an id would reap each
    other's sandboxes and re-queue each other's battles."""


def host_beat(*, starting: bool = False) -> WorkerHost:
    """Beats this host's row (created on its first beat) and its live leases; a beat
    clears a ``lost_at`` another janitor set. ``starting``: a worker starts, so the
    host's current life starts now if it had been declared lost or never beat, and the
    row becomes this machine's, unless another machine beat it within
    ``ARENA_HOST_DEAD_AFTER_S`` and was not declared lost: then :class:`HostIdTaken`,
    and nothing changes. Every time here is the database's (``arena_site.dbclock``): a
    host whose clock runs late does not look dead."""
    machine = machine_id()
    with transaction.atomic():
        now = db_now()
        host, created = WorkerHost.objects.select_for_update().get_or_create(
            host_id=host_id(), defaults={"started_at": now, "heartbeat_at": now, "machine": machine}
        )
        changes = {"heartbeat_at": now, "lost_at": None, **_what_runs(host, now)}
        if not created and starting:
            _refuse_if_taken(host, machine, now)
            changes["machine"] = machine
            if host.lost_at is not None:
                changes["started_at"] = now
        WorkerHost.objects.filter(pk=host.pk).update(**changes)
    SandboxLease.objects.filter(host=host.host_id, released_at=None).update(heartbeat_at=now)
    return host


def _what_runs(host: WorkerHost, now: datetime, *, leaving: bool = False) -> dict:
    """The row's record of this host: its backend, version and load, and its battle
    workers (this process's beat now, or gone when ``leaving``; those silent past the
    fleet's dead-after dropped)."""
    _, dead_after_s = fleet_times()
    oldest = now - timedelta(seconds=dead_after_s)
    workers = {
        token: at
        for token, at in (host.workers or {}).items()
        if isinstance(at, str) and _time(at) is not None and _time(at) >= oldest
    }
    token = f"{machine_id()} {process_token()}"
    if leaving:
        workers.pop(token, None)
    else:
        workers[token] = now.isoformat()
    return {
        "workers": workers,
        "backend": backend_name(),
        "version": app_version(),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def _time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def host_leave() -> None:
    """This worker process stops: it leaves its host's workers (the fleet's capacity)
    at once rather than after the dead-after time."""
    with transaction.atomic():
        host = WorkerHost.objects.select_for_update().filter(host_id=host_id()).first()
        if host is not None:
            changes = _what_runs(host, db_now(), leaving=True)
            WorkerHost.objects.filter(pk=host.pk).update(workers=changes["workers"])


def _refuse_if_taken(host: WorkerHost, machine: str, now) -> None:
    if not host.machine or host.machine == machine or host.lost_at is not None:
        return  # (a row from before machines were recorded is anyone's)
    silent_s = (now - host.heartbeat_at).total_seconds()
    _, dead_after_s = fleet_times()
    if silent_s >= dead_after_s:
        return  # that machine is gone (a janitor will say so): this one takes the id over
    raise HostIdTaken(
        f"the host id {host.host_id!r} (ARENA_HOST_ID) is in use by another machine "
        f"({host.machine}, last beat {max(silent_s, 0):.0f} s ago): give every worker "
        f"host an id of its own, or start this one once that machine has been silent "
        f"for the fleet's dead-after time ({dead_after_s:g} s)"
    )


def host_mark_lost(*, host: str) -> bool:
    """Records that a janitor took ``host`` for dead (once per silence)."""
    return bool(WorkerHost.objects.filter(host_id=host, lost_at=None).update(lost_at=Now()))
