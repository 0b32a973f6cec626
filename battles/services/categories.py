"""Tasks' categories (battles.classify): set at admission; this fills the ones written
before categories existed or made another way (imports, tournaments)."""

from django.db import transaction

from battles.classify import categorize
from battles.models import Task

BACKFILL_BATCH = 500


def task_categories_backfill(*, task_ids: list[int] | None = None, limit: int | None = None) -> int:
    """Gives every task without a category (of ``task_ids`` when given) the one its
    instruction and start URL read as, in batches of BACKFILL_BATCH in id order, and
    returns how many it set. A category already set is never changed (the conditional
    UPDATE of each batch skips a task someone categorised meanwhile). Idempotent: a
    second run finds nothing to do."""
    done = 0
    after = 0
    while limit is None or done < limit:
        size = BACKFILL_BATCH if limit is None else min(BACKFILL_BATCH, limit - done)
        rows = Task.objects.filter(category="", pk__gt=after).order_by("pk")
        if task_ids is not None:
            rows = rows.filter(pk__in=task_ids)
        batch = list(rows.values_list("pk", "instruction", "start_url")[:size])
        if not batch:
            break
        by_category: dict[str, list[int]] = {}
        for pk, instruction, start_url in batch:
            by_category.setdefault(categorize(instruction, start_url=start_url), []).append(pk)
        with transaction.atomic():
            for category, ids in by_category.items():
                done += Task.objects.filter(pk__in=ids, category="").update(category=category)
        after = batch[-1][0]
    return done
