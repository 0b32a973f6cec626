"""Casting a vote, undoing it within its window, and what a judge is told about it.

A vote is stored at once and decides nothing until its undo window (VOTE_UNDO_WINDOW_S)
has passed: until then the judge may take it back (and vote again: they have seen no
name). After the window the vote is final and the battle is resolved; the names show to
the judge once the battle is decided, since before that other votes on it can still
count (SPEC §5.1). The window passing is noticed by whichever comes first: the judge's
own page asking (``vote_status``), the decider (``judging.decider``: the vote's tally
set the battle's ``decide_due_at``), or the sweep. With a window of 0 the battle is
resolved in the vote's own transaction."""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from arena_site.exceptions import ApplicationError
from battles.models import Battle
from judging import vote_db
from judging.admissibility import inadmissible_reason, reading_time_of
from judging.models import Vote
from judging.services.resolution import battle_resolve, resolve_here
from judging.services.serving import (
    judge_approval_check,
    judge_consent_check,
    judge_consent_refuse,
    judge_rate_check,
)
from judging.services.tallies import battle_votes_tally, vote_insert_tallied

logger = logging.getLogger(__name__)

# Why a vote does not count, in words a judge can act on.
REASONS = {
    "abstain": "a skip is recorded but never counts towards a rating",
    "untrusted_judge": "an operator has marked your votes as not counted",
    "too_fast": "it came before the reading time had passed",
    "identities_public": "the battle was decided while you held it, and its result is "
    "public now, so your vote could have been steered by it",
}


def reading_time_s(battle: Battle) -> float:
    """The battle's reading time (SPEC §5.3) from its runs' final messages."""
    return reading_time_of([run.final_message for run in battle.runs.all()])


def vote_cast(
    *, judge: AbstractBaseUser, battle_id: int, choice: str, rate_counted: int | None = None
) -> Vote:
    """Stores the judge's vote on a battle served to them. Refusals: 400 for an unknown
    choice, 429 over the per-judge rate, 403 without current consent, while the account
    awaits approval or when
    the judge's team entered one of the agents (SPEC §5.1), 404 when it was never served
    to them, 409 for a second live vote or a battle that takes no votes. Every other
    vote is kept; one that cannot count (a skip, too fast, an untrusted judge, a battle
    decided while they held it) is stored with its reason. A member of the submitting
    team casts a submitter vote (SPEC §5.4).

    The returned vote carries ``vote.battle`` as of the commit (decided in it when the
    vote was final at once), so ``describe`` needs no query. Once the transaction has
    committed nothing raises any more: what runs after it (the board push, telling
    judges) is logged when it fails, and the decider or the sweep
    (``battles_resolve_pending``) resolves what was left undone. ``rate_counted``: the
    vote's count in the judge's rate window when the request's authentication took it
    (``judge_rate_check``)."""
    if choice not in Vote.Choice.values:
        raise ApplicationError(
            f"choice must be one of {', '.join(Vote.Choice.values)}.", code="invalid_choice"
        )
    judge_rate_check(judge=judge, scope="vote", counted=rate_counted)
    undo_s = settings.ARENA.vote_undo_window_s
    committed = []  # set by the first commit hook: from then on the vote stands
    try:
        with transaction.atomic():
            transaction.on_commit(lambda: committed.append(True))
            battle = _battle_for_vote(judge=judge, battle_id=battle_id)
            voted_at = timezone.now()
            reason = inadmissible_reason(
                choice=choice,
                served_at=battle.served_at,
                voted_at=voted_at,
                untrusted=battle.judge_untrusted,
                read_s=reading_time_of([battle.final_a, battle.final_b]),
                voided=battle.held_voided or battle.status == Battle.Status.DECIDED,
            )
            # A vote that can never count has nothing to wait for.
            final_at = (
                voted_at
                if reason == "identities_public"
                else (voted_at + timedelta(seconds=undo_s))
            )
            vote = Vote(
                judge=judge,
                battle=battle,
                choice=choice,
                served_at=battle.served_at,
                voted_at=voted_at,
                final_at=final_at,
                is_submitter=battle.judge_in_team,
                admissible=not reason,
                inadmissible_reason=reason,
            )
            # stored with judge_next's order (admissible votes) and the decider's due
            # time (the window) recounted on the battle's row
            vote_insert_tallied(vote, due=final_at if final_at > voted_at else None)
            if final_at <= voted_at:
                vote_db.agents_load(battle)  # to decide it, and for the reveal
            if battle.status == Battle.Status.JUDGING and final_at <= voted_at:
                # the vote and what it decides commit together
                counted = resolve_here(battle, tallied=True)
                if counted is None:  # it failed: what the rows say
                    _as_resolved(vote, battle)
                else:
                    vote.counted = vote.pk in counted
    except IntegrityError as exc:
        if committed:
            logger.exception("after the commit of a vote on battle %s", battle_id)
        else:
            raise ApplicationError(
                "You have already voted on this battle.", code="already_voted", status=409
            ) from exc
    except Exception:
        if not committed:
            raise
        # The vote is stored: the judge is told so. What failed is left to the sweep.
        logger.exception("after the commit of a vote on battle %s", battle_id)
    vote.battle = battle
    return vote


def _as_resolved(vote: Vote, battle: Battle) -> None:
    """After ``resolve_here``: the vote's and the battle's outcome as stored (the
    resolution ran on rows of its own, and a failed one was rolled back). Nothing to
    read while the battle is still open: nothing decided it, so the vote did not count
    (a failed resolution leaves the battle it was changing in another status)."""
    if battle.status == Battle.Status.JUDGING:
        return
    counted, status, reason = (
        Vote.objects.filter(pk=vote.pk)
        .values_list("counted", "battle__status", "battle__exclusion_reason")
        .get()
    )
    vote.counted = counted
    battle.status, battle.exclusion_reason = status, reason


def _battle_for_vote(*, judge: AbstractBaseUser, battle_id: int) -> Battle:
    """The battle, row-locked (votes on one battle are resolved one at a time), with what
    the vote needs about this judge (``vote_db.battle_for_vote``). 403 without current
    consent or approval (as ``judge_consent_check`` and ``judge_approval_check``, before
    anything about the battle), 404 when it was not served to them, 403 on a conflict of
    interest, 409 when it takes no vote."""
    battle = vote_db.battle_for_vote(battle_id=battle_id, judge_id=judge.pk)
    if battle is None:
        judge_consent_check(judge=judge)
        judge_approval_check(judge=judge)
    else:
        if not battle.judge_consent_current:
            judge_consent_refuse()
        if not battle.judge_approved:
            judge_approval_check(judge=judge, approved=False)
    if battle is None or battle.served_at is None:
        # Not served to this judge: indistinguishable from a battle that does not exist.
        raise ApplicationError("No such battle.", code="not_found", status=404)
    if battle.judge_entrant:
        raise ApplicationError(
            "Your team entered an agent in this battle, so you cannot judge it.",
            code="conflict_of_interest",
            status=403,
        )
    if battle.status not in (Battle.Status.JUDGING, Battle.Status.DECIDED):
        raise ApplicationError(
            f"This battle is {battle.status}; it cannot take votes.", code="not_judging", status=409
        )
    return battle


def vote_undo(*, judge: AbstractBaseUser, battle_id: int, rate_counted: int | None = None) -> Vote:
    """Takes back the judge's live vote while its undo window is open: 404 when there is
    none, 409 once the vote is final (the window passed, or the battle was decided with
    it). A pending vote decided nothing, so nothing else changes; the judge may vote on
    the battle again. ``rate_counted``: as ``vote_cast``'s."""
    judge_rate_check(judge=judge, scope="vote", counted=rate_counted)
    with transaction.atomic():
        battle = Battle.objects.select_for_update().filter(pk=battle_id).first()
        vote = (
            Vote.objects.select_for_update()
            .filter(judge=judge, battle_id=battle_id, retracted=False)
            .first()
            if battle is not None
            else None
        )
        if vote is None:
            raise ApplicationError(
                "You have no vote on this battle to undo.", code="not_found", status=404
            )
        now = timezone.now()
        if now >= vote.final_at:
            raise ApplicationError(
                f"Your vote is final: it could be undone only until {vote.final_at:%H:%M:%S} UTC.",
                code="vote_final",
                status=409,
            )
        vote.retracted, vote.retracted_at = True, now
        vote.save(update_fields=["retracted", "retracted_at"])
        battle_votes_tally(battle_id=battle_id)
    return vote


@dataclass(frozen=True)
class VoteStatus:
    """What a judge is told about their vote."""

    vote: Vote
    final: bool
    counts: bool | None  # None while that is not known yet
    message: str
    reveal: bool  # the names may be shown to this judge now


def vote_status(*, judge: AbstractBaseUser, battle_id: int) -> VoteStatus:
    """The judge's live vote on the battle and what it means now (404 when none). A vote
    whose undo window has passed is made final here if nothing else did yet (the
    battle is resolved), so the page that asks sees the outcome at once."""
    vote = _live_vote(judge, battle_id)
    now = timezone.now()
    if now >= vote.final_at and vote.battle.status == Battle.Status.JUDGING:
        battle_resolve(battle_id=battle_id)
        vote = _live_vote(judge, battle_id)
    return describe(vote, now=now)


def _live_vote(judge: AbstractBaseUser, battle_id: int) -> Vote:
    vote = (
        Vote.objects.select_related("battle")
        .filter(judge=judge, battle_id=battle_id, retracted=False)
        .first()
    )
    if vote is None:
        raise ApplicationError("You have no vote on this battle.", code="not_found", status=404)
    return vote


def describe(vote: Vote, *, now: datetime) -> VoteStatus:
    battle = vote.battle
    closed = battle.status in (Battle.Status.DECIDED, Battle.Status.EXCLUDED)
    if now < vote.final_at:
        until = f"{vote.final_at:%H:%M:%S} UTC"
        message = f"Vote recorded. You can undo it until {until}."
        return VoteStatus(vote, False, None, message, False)
    if not vote.admissible:
        reason = REASONS.get(vote.inadmissible_reason, vote.inadmissible_reason)
        return VoteStatus(vote, True, False, f"Recorded, does not count: {reason}.", closed)
    if battle.status == Battle.Status.DECIDED:
        if vote.counted:
            return VoteStatus(vote, True, True, "Your vote counts.", True)
        why = (
            "the independent judges' votes decided this battle"
            if vote.is_submitter
            else "the battle was decided before your vote became final"
        )
        return VoteStatus(vote, True, False, f"Recorded, does not count: {why}.", True)
    if battle.status == Battle.Status.EXCLUDED:
        return VoteStatus(
            vote, True, False,
            f"Recorded; the battle was excluded from the rating ({battle.exclusion_reason}).",
            True,
        )  # fmt: skip
    if vote.is_submitter:
        return VoteStatus(
            vote, True, None,
            "Your team's vote is recorded. It decides this battle only if no independent "
            "judge's vote counts within the judging window. The names show once it is decided.",
            False,
        )  # fmt: skip
    return VoteStatus(
        vote, True, None,
        "Your vote is in. The battle waits for more judges; the names show once it is "
        "decided.",
        False,
    )  # fmt: skip
