"""Serving battles to judges: which battle a judge gets next, the per-judge request
limits, and whether an account may judge at all.

A judge holds one battle at a time: the battle served to them stays theirs (a reload
gives it back) until they vote or skip (an abstention), or until it is decided without
them. So nobody can shop for a battle by reloading."""

import math
import time

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.db.models import Case, Count, Exists, IntegerField, OuterRef, Q, Value, When
from django.urls import reverse
from django.utils import timezone

from accounts.models import Membership
from accounts.selectors import consent_is_current
from arena_site.exceptions import ApplicationError
from arena_site.redis import redis_client
from battles.models import Battle
from judging.models import Assignment, JudgeProfile, Vote
from judging.selectors import dangerously_battles_open_for_judging

_RATE_LIMITS = {
    "next": ("judge_next_rate_per_min", "battle requests"),
    "vote": ("vote_rate_per_min", "votes"),
}


def judge_profile(user: AbstractBaseUser) -> JudgeProfile:
    profile, _ = JudgeProfile.objects.get_or_create(
        user=user, defaults={"trust": settings.ARENA.trust_new}
    )
    return profile


def judge_rate_check(*, judge: AbstractBaseUser, scope: str) -> None:
    """Counts one request of ``scope`` ("next" or "vote") for the judge in the current
    one-minute window (an atomic increment in the shared Redis, so every web process
    counts together); over the limit raises 429 with Retry-After."""
    setting, noun = _RATE_LIMITS[scope]
    limit = getattr(settings.ARENA, setting)
    now = time.time()
    window = int(now // 60)
    key = cache.make_key(f"judge-rate:{scope}:{judge.pk}:{window}")
    # INCR and EXPIRE in one round trip on the cache's Redis (the same server and
    # database); the cache API would take two, and the vote path is latency-bound
    with redis_client().pipeline() as pipe:
        count, _ = pipe.incr(key).expire(key, 120).execute()
    if count > limit:
        retry = max(1, math.ceil((window + 1) * 60 - now))
        raise ApplicationError(
            f"Too many {noun}: at most {limit} a minute. Try again in {retry} s.",
            code="rate_limited",
            status=429,
            headers={"Retry-After": str(retry)},
            extra={"retry_after_s": retry},
        )


def judge_approval_check(*, judge: AbstractBaseUser, profile: JudgeProfile | None = None) -> None:
    """With ARENA_JUDGE_APPROVAL on, an account judges only once an operator approved it
    (staff always may): 403 otherwise."""
    if not settings.ARENA.judge_approval or judge.is_staff:
        return
    profile = profile or JudgeProfile.objects.filter(user=judge).first()
    if profile is None or profile.approved_at is None:
        raise ApplicationError(
            "Your judge account awaits an operator's approval; you will be able to judge "
            "once it is approved.",
            code="judge_not_approved",
            status=403,
        )


def judge_consent_check(*, judge: AbstractBaseUser) -> None:
    """Judging publishes what a judge chose: the current consent terms first (403)."""
    if not consent_is_current(judge):
        raise ApplicationError(
            "Accept the current publication consent terms before judging.",
            code="consent_required",
            status=403,
            extra={"consent_url": reverse("accounts:consent")},
        )


def judge_next(*, judge: AbstractBaseUser) -> Battle | None:
    """The battle this judge should judge now. The one they hold (served, no live vote,
    not voided) comes first; otherwise, among the battles open for judging that they
    have no live vote on, were not voided for, and do not have a conflict of interest
    with (their team entered one of its agents: SPEC §5.1), battles of other teams
    before their own team's (their vote there is a submitter vote), those with the
    fewest admissible votes first, then the oldest. Serving records ``served_at`` once
    (re-serving keeps the first time). Rate limited per judge; refused without current
    consent and while the account awaits approval."""
    judge_rate_check(judge=judge, scope="next")
    judge_consent_check(judge=judge)
    profile = judge_profile(judge)  # every judge who can vote has one (trust ω, standing)
    judge_approval_check(judge=judge, profile=profile)
    team_ids = list(Membership.objects.filter(user=judge).values_list("team_id", flat=True))
    live_vote = Vote.objects.filter(battle=OuterRef("pk"), judge=judge, retracted=False)
    voided = Assignment.objects.filter(battle=OuterRef("pk"), judge=judge, voided_at__isnull=False)
    held = Assignment.objects.filter(battle=OuterRef("pk"), judge=judge, voided_at=None)
    candidates = (
        dangerously_battles_open_for_judging()
        .filter(~Exists(live_vote), ~Exists(voided))
        .exclude(agent_a__team_id__in=team_ids)
        .exclude(agent_b__team_id__in=team_ids)
        .annotate(
            held=Exists(held),
            own=Case(
                When(team_id__in=team_ids, then=Value(1)),
                default=Value(0),
                output_field=IntegerField(),
            ),
            admissible_votes=Count(
                "votes",
                filter=Q(votes__retracted=False, votes__admissible=True),
                distinct=True,
            ),
        )
        .order_by("-held", "own", "admissible_votes", "ended_at", "pk")
    )
    battle = candidates.select_related("task").first()
    if battle is None:
        return None
    Assignment.objects.get_or_create(
        judge=judge, battle=battle, defaults={"served_at": timezone.now()}
    )
    return battle
