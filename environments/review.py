"""An operator's review of training environments: rejecting one, with the reason kept
(docs/environments.md). A rejected environment is no longer listed publicly
nor downloadable (``environments.selectors``)."""

from django.db import transaction
from django.utils import timezone

from arena_site.exceptions import ApplicationError
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
    environment = Environment.objects.select_for_update().filter(pk=environment_id).first()
    if environment is None:
        raise ApplicationError(f"No environment {environment_id}.", code="not_found", status=404)
    environment.status = Environment.Status.REJECTED
    environment.rejected_reason = reason
    environment.rejected_by = actor
    environment.rejected_at = timezone.now()
    environment.save(update_fields=["status", "rejected_reason", "rejected_by", "rejected_at"])
    return environment
