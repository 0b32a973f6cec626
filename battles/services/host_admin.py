"""An operator's hands on the fleet's worker hosts (the admin's "Worker hosts" actions;
docs/deployment.md, "Operating hosts"), each with a reason that the admin records in
its history:

- **cordon**: the host's battle workers take no new battle (the one in hand runs to
  its end); **drain**: the same, and each worker stops once it is idle (a host to be
  taken down or upgraded); **uncordon** undoes both;
- **release leases**: a silent host's slot leases are freed (its sandboxes are on a
  machine that no longer answers; when it comes back, its own janitor removes what is
  left there);
- **forget**: a silent host's row goes, its leases freed and its running battles
  queued again (or failed on their last attempt), as a dead host's are.

A host that still beats (within the fleet's dead-after time) can be cordoned or
drained, never forgotten nor stripped of its leases: its workers hold them."""

from django.db import transaction
from django.db.models.functions import Now

from arena_site.exceptions import ApplicationError
from battles.services.orchestration import battles_recover_host
from sandboxes.models import SandboxLease, WorkerHost
from sandboxes.selectors import host_beats
from sandboxes.services import lease_release


def _reason(reason: str) -> str:
    reason = " ".join(reason.split())
    if not reason:
        raise ApplicationError(
            "Say why (the reason is kept in the admin's history).", code="reason"
        )
    return reason[:500]


def host_cordon(*, host: str, reason: str, drain: bool = False) -> int:
    """Cordons (or drains) ``host``; returns how many rows changed (0: no such host)."""
    return WorkerHost.objects.filter(host_id=host).update(
        cordoned_at=Now(), draining=drain, cordon_reason=_reason(reason)
    )


def host_uncordon(*, host: str) -> int:
    return WorkerHost.objects.filter(host_id=host).update(
        cordoned_at=None, draining=False, cordon_reason=""
    )


def _refuse_if_beating(host: str) -> None:
    if host_beats(host):
        raise ApplicationError(
            f"The host {host} still beats: its workers hold its leases and battles. "
            "Drain it, stop its workers, and wait for the fleet's dead-after time.",
            code="host_alive",
            status=409,
        )


def host_leases_release(*, host: str, reason: str) -> int:
    """Frees the live slot leases of a silent ``host``; returns how many."""
    _reason(reason)
    _refuse_if_beating(host)
    leases = list(SandboxLease.objects.filter(host=host, released_at=None))
    for lease in leases:
        lease_release(lease=lease)
    return len(leases)


def host_forget(*, host: str, reason: str) -> tuple[int, list[int], list[int]]:
    """Forgets a silent ``host``: its leases freed, its running battles queued again
    (or failed on their last attempt), its row removed. Returns (leases freed,
    re-queued battle ids, failed battle ids)."""
    freed = host_leases_release(host=host, reason=reason)
    requeued, failed = battles_recover_host(host)
    with transaction.atomic():
        _refuse_if_beating(host)  # (it did not come back meanwhile)
        WorkerHost.objects.filter(host_id=host).delete()
    return freed, requeued, failed
