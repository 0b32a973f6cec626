"""Judge trust (SPEC §5.4): agreement with the other judges on redundancy battles moves
ω and ends probation. Operators' changes of a judge's standing are
``judging.services.standing``."""

from collections.abc import Sequence

from django.conf import settings

from judging.decision import plurality
from judging.models import JudgeProfile, Vote


def profiles_locked(user_ids: set[int]) -> dict[int, JudgeProfile]:
    """The judges' profiles, created when missing, locked in id order (one statement
    when they all exist)."""
    locking = JudgeProfile.objects.select_for_update().filter(user_id__in=user_ids)
    rows = list(locking.order_by("pk"))
    if len(rows) < len(user_ids):
        for user_id in sorted(user_ids):
            JudgeProfile.objects.get_or_create(
                user_id=user_id, defaults={"trust": settings.ARENA.trust_new}
            )
        rows = list(locking.order_by("pk"))
    return {p.user_id: p for p in rows}


def trust_compare(
    votes: Sequence[Vote], weights: Sequence[float], profiles: dict[int, JudgeProfile], *, now
) -> dict[int, bool]:
    """On a redundancy battle the crowd decided: each judge's vote against the weighted
    plurality of the other judges' votes (skipped when the others have none or tie at
    the top). A judge whose compared votes reach PROBATION_VOTES leaves probation.
    In memory: ``profiles`` (locked, by user id, holding every compared judge's) are
    updated, the caller saves them; returns whether each compared vote agreed, by id."""
    weighted = [(v.choice, w) for v, w in zip(votes, weights, strict=True)]
    outcomes: dict[int, bool] = {}
    for i, vote in enumerate(votes):
        reference = plurality(weighted[:i] + weighted[i + 1 :])
        if reference is not None:
            outcomes[vote.pk] = vote.choice == reference
    if not outcomes:
        return outcomes
    by_vote = {v.pk: v.judge_id for v in votes}
    touched = {by_vote[pk]: profiles[by_vote[pk]] for pk in outcomes}
    for vote_pk, agreed in outcomes.items():
        profile = touched[by_vote[vote_pk]]
        profile.seen_count += 1
        profile.agree_count += int(agreed)
    for profile in touched.values():
        profile.trust_recompute(trust_min=settings.ARENA.trust_min)
        if profile.established_at is None and profile.seen_count >= settings.ARENA.probation_votes:
            profile.established_at = now
    return outcomes


def trust_uncompare(votes: Sequence[Vote]) -> None:
    """Takes back the comparisons a decision made (it is being undone). A probation that
    ended stays ended: it was earned on the votes as they stood."""
    compared = [v for v in votes if v.agreed is not None]
    if not compared:
        return
    profiles = profiles_locked({v.judge_id for v in compared})
    for vote in compared:
        profile = profiles[vote.judge_id]
        profile.seen_count -= 1
        profile.agree_count -= int(vote.agreed)
    for profile in profiles.values():
        profile.trust_recompute(trust_min=settings.ARENA.trust_min)
        profile.save(update_fields=["seen_count", "agree_count", "trust"])


def probation_applies() -> bool:
    """Probation binds once the arena has an established judge; before that, new judges'
    votes decide (SPEC §5.4)."""
    return JudgeProfile.objects.filter(established_at__isnull=False, is_untrusted=False).exists()
