"""Writes for judging: serving battles, casting votes, resolving a battle's outcome."""

import logging
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone

from arena_site.exceptions import ApplicationError
from battles.models import Battle
from judging.models import Assignment, JudgeProfile, Vote
from judging.selectors import dangerously_battles_open_for_judging

logger = logging.getLogger(__name__)


def reading_time_s(battle: Battle) -> float:
    """SPEC §5.3: t_read = max(MIN_READ_S, words(final messages of both sides) / 4 w/s)."""
    words = sum(len(run.final_message.split()) for run in battle.runs.all())
    return max(settings.ARENA["MIN_READ_S"], words / settings.ARENA["READ_WORDS_PER_S"])


def judge_profile(user: AbstractBaseUser) -> JudgeProfile:
    profile, _ = JudgeProfile.objects.get_or_create(
        user=user, defaults={"trust": settings.ARENA["TRUST_NEW"]}
    )
    return profile


def judge_next(*, judge: AbstractBaseUser) -> Battle | None:
    """The next battle this judge may judge: open for judging, not voted on by them;
    battles they did not submit first, then those short of their target, oldest first.
    Serving it records ``served_at`` once (re-serving keeps the first time)."""
    candidates = (
        dangerously_battles_open_for_judging()
        .exclude(votes__judge=judge, votes__retracted=False)
        .annotate(
            own=Count("pk", filter=Q(task__submitter=judge)),
            live_votes=Count("votes", filter=Q(votes__retracted=False), distinct=True),
        )
        .order_by("own", "live_votes", "ended_at", "pk")
    )
    battle = candidates.select_related("task").first()
    if battle is None:
        return None
    Assignment.objects.get_or_create(
        judge=judge, battle=battle, defaults={"served_at": timezone.now()}
    )
    return battle


def _inadmissible_reason(
    *, battle: Battle, judge: AbstractBaseUser, choice: str, served_at: datetime, voted_at: datetime
) -> str:
    if choice == Vote.Choice.ABSTAIN:
        return "abstain"
    if judge_profile(judge).is_untrusted:
        return "untrusted_judge"
    if (voted_at - served_at).total_seconds() < reading_time_s(battle):
        return "too_fast"
    return ""


def vote_cast(*, judge: AbstractBaseUser, battle_id: int, choice: str) -> Vote:
    """Stores the judge's vote. Preconditions: the battle was served to this judge.
    One live vote per (judge, battle) is a database constraint: a second answers 409."""
    if choice not in Vote.Choice.values:
        raise ApplicationError(
            f"choice must be one of {', '.join(Vote.Choice.values)}.", code="invalid_choice"
        )
    assignment = (
        Assignment.objects.select_related("battle__task")
        .filter(judge=judge, battle_id=battle_id)
        .first()
    )
    if assignment is None:
        # Not served to this judge: indistinguishable from a battle that does not exist.
        raise ApplicationError("No such battle.", code="not_found", status=404)
    battle = assignment.battle
    if battle.status not in (Battle.Status.JUDGING, Battle.Status.DECIDED):
        raise ApplicationError(
            f"This battle is {battle.status}; it cannot take votes.", code="not_judging", status=409
        )
    voted_at = timezone.now()
    reason = _inadmissible_reason(
        battle=battle, judge=judge, choice=choice, served_at=assignment.served_at, voted_at=voted_at
    )
    try:
        with transaction.atomic():
            vote = Vote.objects.create(
                judge=judge,
                battle=battle,
                choice=choice,
                served_at=assignment.served_at,
                voted_at=voted_at,
                is_submitter=battle.task.submitter_id == judge.pk,
                admissible=not reason,
                inadmissible_reason=reason,
            )
            if not reason:
                Battle.objects.filter(pk=battle.pk, first_judgment_at=None).update(
                    first_judgment_at=voted_at
                )
                transaction.on_commit(lambda: _enqueue_resolve(battle.pk))
    except IntegrityError as exc:
        raise ApplicationError(
            "You have already voted on this battle.", code="already_voted", status=409
        ) from exc
    return vote


def _enqueue_resolve(battle_id: int) -> None:
    import django_rq

    django_rq.get_queue("judging").enqueue("judging.jobs.battle_resolve", battle_id)


def consensus(votes: list[tuple[str, float]]) -> str:
    """Weighted plurality of (choice, weight) pairs; a tie at the top gives "tie"."""
    totals: dict[str, float] = {}
    for choice, weight in votes:
        totals[choice] = totals.get(choice, 0.0) + weight
    best = max(totals.values())
    leaders = [choice for choice, total in totals.items() if total == best]
    return leaders[0] if len(leaders) == 1 else "tie"


def battle_resolve(*, battle_id: int) -> bool:
    """Decides a battle once enough independent admissible votes are in, then moves the
    streaming ratings. Safe to run twice: only a battle still judging is decided."""
    from ratings.services import rating_apply_battle

    with transaction.atomic():
        battle = (
            Battle.objects.select_for_update().select_related("task").filter(pk=battle_id).first()
        )
        if battle is None or battle.status != Battle.Status.JUDGING:
            return False
        votes = list(
            Vote.objects.filter(
                battle=battle, retracted=False, admissible=True, is_submitter=False
            ).select_related("judge__judge_profile")
        )
        if len(votes) < battle.redundancy_target:
            return False
        weights = [
            (
                v.choice,
                getattr(
                    getattr(v.judge, "judge_profile", None), "trust", settings.ARENA["TRUST_NEW"]
                ),
            )
            for v in votes
        ]
        gamma = 0.25 if battle.is_calibration else 1.0
        battle.outcome = consensus(weights)
        battle.evidence_weight = gamma * sum(w for _, w in weights) / len(weights)
        battle.status = Battle.Status.DECIDED
        battle.save(update_fields=["outcome", "evidence_weight", "status"])
        rating_apply_battle(battle=battle)
    return True
