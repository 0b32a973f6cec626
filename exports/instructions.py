"""The published instructions: each task's instruction redacted once
(``exports.models.RedactedInstruction``) before any export names it. Presidio reads an
instruction in ~0.4 s, so the redactions are made ahead, every few minutes, for the
battles about to be published (``instructions_redact_pending``), and the export makes
the few still missing before it writes (``instructions_redact``). The submitter's
follow-ups to a battle's sides are their words too: redacted the same way, once each
(``exports.models.RedactedFollowUp``, ``follow_ups_redact``)."""

from collections import Counter

from django.db.models import Q, QuerySet

from battles.models import Battle, FollowUp, Task
from exports.models import RedactedFollowUp, RedactedInstruction
from exports.redaction import redact_text

PENDING_BATCH = 200


def instructions_redact(task_ids: QuerySet, *, limit: int | None = None) -> int:
    """Makes the redactions the tasks ``task_ids`` selects (a subquery of task ids) do
    not have yet, at most ``limit``, oldest task first; returns how many it made. One
    query finds them, whatever the number of tasks."""
    missing = (
        Task.objects.filter(pk__in=task_ids, redacted__isnull=True)
        .order_by("pk")
        .values_list("pk", "instruction")
    )
    return _redact_into(RedactedInstruction, "task_id", missing, limit)


def _redact_into(model, key: str, missing: QuerySet, limit: int | None) -> int:
    """Redacts each (id, text) of ``missing`` (at most ``limit``) into ``model``'s row
    for that id; rows made meanwhile by another process are kept."""
    made = []
    for pk, text in missing[:limit] if limit is not None else missing:
        redacted = redact_text(text)
        counts = Counter(r.entity_type for r in redacted.replacements)
        made.append(model(**{key: pk}, text=redacted.text, entities=counts))
    model.objects.bulk_create(made, ignore_conflicts=True)
    return len(made)


def follow_ups_redact(on_battles: Q, *, limit: int | None = None) -> int:
    """Makes the redactions the follow-ups of the battles ``on_battles`` selects (a
    condition on ``battle_id``) do not have yet, at most ``limit``, oldest first;
    returns how many it made."""
    missing = (
        FollowUp.objects.filter(on_battles, redacted__isnull=True)
        .order_by("pk")
        .values_list("pk", "text")
    )
    return _redact_into(RedactedFollowUp, "follow_up_id", missing, limit)


def instructions_redact_pending(*, limit: int = PENDING_BATCH) -> int:
    """Redacts ahead the instructions and follow-ups of decided or excluded battles (each
    published once its delay has passed) that have none yet, at most ``limit`` of each,
    oldest first; returns how many it made."""
    due = Battle.objects.filter(
        status__in=(Battle.Status.DECIDED, Battle.Status.EXCLUDED), arena__demo=False
    )  # (the demo board's battles are never published)
    made = instructions_redact(due.values("task_id"), limit=limit)
    return made + follow_ups_redact(Q(battle_id__in=due.values("pk")), limit=limit)
