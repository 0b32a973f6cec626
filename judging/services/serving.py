"""Serving battles to judges: which battle a judge gets next, the per-judge request
limits, and whether an account may judge at all.

A judge holds one battle at a time: the battle served to them stays theirs (a reload
gives it back) until they vote or skip (an abstention), or until it is decided without
them. So nobody can shop for a battle by reloading."""

import time

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Prefetch
from django.urls import reverse
from django.utils import timezone

from accounts.selectors import consent_is_current
from arena_site.exceptions import ApplicationError
from arena_site.ratelimit import UserWindow
from battles.models import Battle, Run
from judging.models import Assignment, JudgeProfile
from judging.selectors import dangerously_next_battle_for_judge

# The per-judge limits: each scope's window (counted in the bearer token's round trip
# when the view names it: arena_site.ratelimit.UserWindow), its setting, its noun.
RATE_WINDOWS = {
    "next": UserWindow("judge-rate:next"),
    "vote": UserWindow("judge-rate:vote"),
}
_RATE_LIMITS = {
    "next": ("judge_next_rate_per_min", "battle requests"),
    "vote": ("vote_rate_per_min", "votes"),
}


def judge_profile(user: AbstractBaseUser) -> JudgeProfile:
    profile, _ = JudgeProfile.objects.get_or_create(
        user=user, defaults={"trust": settings.ARENA.trust_new}
    )
    return profile


def judge_rate_check(*, judge: AbstractBaseUser, scope: str, counted: int | None = None) -> None:
    """Counts one request of ``scope`` ("next" or "vote") for the judge in the current
    one-minute window (an atomic increment in the shared Redis, so every web process
    counts together); over the limit raises 429 with Retry-After. ``counted`` is the
    count when the request's authentication already took it (``RATE_WINDOWS``)."""
    setting, noun = _RATE_LIMITS[scope]
    limit = getattr(settings.ARENA, setting)
    window = RATE_WINDOWS[scope]
    count = window.count(judge.pk) if counted is None else counted
    if count > limit:
        retry = window.retry_after(time.time())
        raise ApplicationError(
            f"Too many {noun}: at most {limit} a minute. Try again in {retry} s.",
            code="rate_limited",
            status=429,
            headers={"Retry-After": str(retry)},
            extra={"retry_after_s": retry},
        )


def judge_approval_check(
    *, judge: AbstractBaseUser, profile: JudgeProfile | None = None, approved: bool | None = None
) -> None:
    """With ARENA_JUDGE_APPROVAL on, an account judges only once an operator approved it
    (staff always may): 403 otherwise. ``approved`` is the answer when the caller read it
    already (the vote's locking read), ``profile`` the judge's profile when at hand."""
    if not settings.ARENA.judge_approval or judge.is_staff:
        return
    if approved is None:
        profile = profile or JudgeProfile.objects.filter(user=judge).first()
        approved = profile is not None and profile.approved_at is not None
    if not approved:
        raise ApplicationError(
            "Your judge account awaits an operator's approval; you will be able to judge "
            "once it is approved.",
            code="judge_not_approved",
            status=403,
        )


def judge_consent_check(*, judge: AbstractBaseUser) -> None:
    """Judging publishes what a judge chose: the current consent terms first (403)."""
    if not consent_is_current(judge):
        judge_consent_refuse()


def judge_consent_refuse() -> None:
    """The 403 of ``judge_consent_check`` (for a caller that read the consent itself)."""
    raise ApplicationError(
        "Accept the current publication consent terms before judging.",
        code="consent_required",
        status=403,
        extra={"consent_url": reverse("accounts:consent")},
    )


def judge_next(*, judge: AbstractBaseUser, rate_counted: int | None = None) -> Battle | None:
    """The battle this judge should judge now. The one they hold (served, no live vote,
    not voided) comes first; otherwise, among the battles open for judging that they
    have no live vote on, were not voided for, and do not have a conflict of interest
    with (their team entered one of its agents: SPEC §5.1), battles of other teams
    before their own team's (their vote there is a submitter vote); among those, for a
    judge's first ``FIRST_BATTLES`` battles, web tasks first (a start page or a web
    address in the instruction: the task's, never what an agent did); then those with
    the fewest admissible votes, then the oldest. Serving records ``served_at`` once
    (re-serving keeps the first time). Rate limited per judge; refused without current
    consent and while the account awaits approval. ``rate_counted``: as
    ``judge_rate_check``'s ``counted``."""
    judge_rate_check(judge=judge, scope="next", counted=rate_counted)
    judge_consent_check(judge=judge)
    profile = judge_profile(judge)  # every judge who can vote has one (trust ω, standing)
    judge_approval_check(judge=judge, profile=profile)
    found = dangerously_next_battle_for_judge(judge_id=judge.pk)
    if found is None:
        return None
    battle_id, held = found
    # the runs (with their agents and steps) come along: the payload and the reading
    # time read them from here, not again
    battle = (
        Battle.objects.select_related("task")
        .prefetch_related(
            Prefetch("runs", queryset=Run.objects.select_related("agent").prefetch_related("steps"))
        )
        .get(pk=battle_id)
    )
    if not held:
        # one INSERT … ON CONFLICT DO NOTHING: a concurrent serve of the same battle keeps
        # the first served_at, as get_or_create would (unique judge + battle)
        Assignment.objects.bulk_create(
            [Assignment(judge=judge, battle=battle, served_at=timezone.now())],
            ignore_conflicts=True,
        )
    return battle
