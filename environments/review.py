"""An operator's review of training environments (docs/environments.md): rejecting
one, with the reason kept (a rejected environment is no longer listed publicly nor
downloadable, ``environments.selectors``), and supplying the grader of one that awaits
it, which sends it on to its replays."""

from django.db import transaction
from django.utils import timezone

from arena_site.exceptions import ApplicationError
from environments.graders import GraderInvalid, grader_validate
from environments.jobs import validation_enqueue
from environments.models import Environment

REASON_MAX_CHARS = 2000


@transaction.atomic
def environment_reject(*, environment_id: int, reason: str, actor) -> Environment:
    """Rejects the environment for ``reason`` (required), whatever its status: a
    validated one leaves the public list and its package is no longer served.
    Rejecting a rejected one again replaces the reason, the actor and the time. Locks
    the row."""
    reason = (reason or "").strip()
    if not reason:
        raise ApplicationError(
            "Say why the environment is rejected: the reason is kept with it and shown to "
            "operators.",
            code="reason_required",
        )
    if len(reason) > REASON_MAX_CHARS:
        raise ApplicationError(
            f"The reason is {len(reason)} characters; at most {REASON_MAX_CHARS}.",
            code="reason_too_long",
        )
    environment = _locked(environment_id)
    environment.status = Environment.Status.REJECTED
    environment.rejected_reason = reason
    environment.rejected_by = actor
    environment.rejected_at = timezone.now()
    environment.save(update_fields=["status", "rejected_reason", "rejected_by", "rejected_at"])
    return environment


def _locked(environment_id: int) -> Environment:
    environment = Environment.objects.select_for_update().filter(pk=environment_id).first()
    if environment is None:
        raise ApplicationError(f"No environment {environment_id}.", code="not_found", status=404)
    return environment


@transaction.atomic
def environment_grader_supply(*, environment_id: int, grader: object, actor) -> Environment:
    """Gives a ``needs_grader`` environment the operator's ``grader`` (checked and
    normalised by ``grader_validate``) and sends it on to its replays: it becomes
    ``graded`` and its validation is enqueued once the transaction commits. Only an
    environment with a reference run and a state can be validated (the reference replay
    must pass the grader); any other is refused. Locks the row."""
    environment = _locked(environment_id)
    if environment.status != Environment.Status.NEEDS_GRADER:
        raise ApplicationError(
            f"{environment} is {environment.status} ({environment.get_status_display()}), "
            "not awaiting a grader: only a needs_grader environment takes one.",
            code="not_awaiting_grader",
        )
    if environment.reference_run_id is None or not environment.state:
        raise ApplicationError(
            f"{environment} has no reference run or no state: a grader alone cannot "
            "validate it, as the reference replay must pass the grader. Reject it instead.",
            code="no_reference",
        )
    try:
        normalised = grader_validate(grader)
    except GraderInvalid as exc:
        raise ApplicationError(str(exc), code="invalid_grader") from None
    environment.grader = normalised
    environment.status = Environment.Status.GRADED
    environment.status_detail = f"grader supplied by {actor}"
    environment.save(update_fields=["grader", "status", "status_detail"])
    transaction.on_commit(lambda: validation_enqueue(environment_id))
    return environment
