"""Reads for judging: what judges may be served, exclusion counts, the rated corpus."""

from django.db.models import Count, Q, QuerySet

from battles.models import Battle


def dangerously_battles_open_for_judging() -> QuerySet:
    """Every team's battles awaiting judgment: judging, or decided by the submitter's
    own vote alone (an independent judge's vote would replace it, SPEC §5.4). Crowd
    judging crosses teams by design; callers must present them blind
    (``battles.presenters.battle_payload(reveal=False)``)."""
    return Battle.objects.filter(
        Q(status=Battle.Status.JUDGING) | Q(status=Battle.Status.DECIDED, self_judged=True)
    )


def exclusion_counts(*, arena_id: int) -> dict[str, int]:
    """Excluded battles of the arena per SPEC §5.3 reason, every reason in rule order
    (zeros included)."""
    rows = (
        Battle.objects.filter(arena_id=arena_id, status=Battle.Status.EXCLUDED)
        .exclude(exclusion_reason="")
        .values("exclusion_reason")
        .annotate(n=Count("pk"))
    )
    found = {row["exclusion_reason"]: row["n"] for row in rows}
    return {reason: found.get(reason, 0) for reason in Battle.ExclusionReason.values}


def self_judged_tally(*, arena_id: int) -> int:
    """Decided battles whose outcome rests on the submitter's own blind vote alone."""
    return Battle.objects.filter(
        arena_id=arena_id, status=Battle.Status.DECIDED, self_judged=True
    ).count()


def rated_battles(*, arena_id: int) -> QuerySet:
    """The battles that enter the arena's rating: decided, with an outcome, not excluded
    (self-judged ones included; each carries evidence_weight and cluster_judge)."""
    return Battle.objects.filter(
        arena_id=arena_id, status=Battle.Status.DECIDED, exclusion_reason=""
    ).exclude(outcome="")
