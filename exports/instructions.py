"""The published instructions: each task's instruction redacted once
(``exports.models.RedactedInstruction``) before any export names it. Presidio reads an
instruction in ~0.4 s, so the redactions are made ahead, every few minutes, for the
battles about to be published (``instructions_redact_pending``), and the export makes
the few still missing before it writes (``instructions_redact``)."""

from collections import Counter

from django.db.models import QuerySet

from battles.models import Battle, Task
from exports.models import RedactedInstruction
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
    made = []
    for task_id, instruction in missing[:limit] if limit is not None else missing:
        redacted = redact_text(instruction)
        counts = Counter(r.entity_type for r in redacted.replacements)
        made.append(RedactedInstruction(task_id=task_id, text=redacted.text, entities=counts))
    RedactedInstruction.objects.bulk_create(made, ignore_conflicts=True)
    return len(made)


def instructions_redact_pending(*, limit: int = PENDING_BATCH) -> int:
    """Redacts ahead the instructions of decided or excluded battles (each published
    once its delay has passed) that have none yet, at most ``limit`` tasks, oldest
    first; returns how many it made."""
    due = Battle.objects.filter(
        status__in=(Battle.Status.DECIDED, Battle.Status.EXCLUDED), arena__demo=False
    )  # (the demo board's battles are never published)
    return instructions_redact(due.values("task_id"), limit=limit)
