"""The published instructions: each task's instruction redacted once
(``exports.models.RedactedInstruction``) before any export names it. Presidio reads an
instruction in ~0.4 s, so the redactions are made ahead, every few minutes, for the
battles about to be published (``instructions_redact_pending``), and the export makes
the few still missing before it writes (``instructions_redact``)."""

from collections import Counter
from collections.abc import Iterable

from django.db.models import Q

from battles.models import Battle, Task
from exports.models import RedactedInstruction
from exports.redaction import redact_text

PENDING_BATCH = 200


def instructions_redact(task_ids: Iterable[int]) -> int:
    """Makes the redactions these tasks do not have yet; returns how many it made."""
    wanted = set(task_ids)
    done = set(
        RedactedInstruction.objects.filter(task_id__in=wanted).values_list("task_id", flat=True)
    )
    made = []
    for task_id, instruction in Task.objects.filter(pk__in=wanted - done).values_list(
        "pk", "instruction"
    ):
        redacted = redact_text(instruction)
        counts = Counter(r.entity_type for r in redacted.replacements)
        made.append(RedactedInstruction(task_id=task_id, text=redacted.text, entities=counts))
    RedactedInstruction.objects.bulk_create(made, ignore_conflicts=True)
    return len(made)


def instructions_redact_pending(*, limit: int = PENDING_BATCH) -> int:
    """Redacts ahead the instructions of decided or excluded battles (each published
    once its delay has passed) that have none yet, oldest decision first, at most
    ``limit`` tasks; returns how many it made."""
    battles = Battle.objects.filter(
        Q(status=Battle.Status.DECIDED) | Q(status=Battle.Status.EXCLUDED),
        task__redacted__isnull=True,
    ).order_by("decided_at", "pk")
    task_ids = list(dict.fromkeys(battles.values_list("task_id", flat=True)[: limit * 2]))
    return instructions_redact(task_ids[:limit])
