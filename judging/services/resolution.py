"""Resolving a battle: its live votes, read as ``Ballot``s, go through the decision rule
(``judging.decision.decide``) and the verdict is carried out, through ``battle_decide``
or rule 7's exclusion. Safe to run any number of times, concurrently too (the battle row
is locked); every path that can change a verdict calls it:

- a vote with no undo window, in the vote's own transaction (``resolve_here``);
- the end of a vote's undo window: the judging job scheduled for it (``resolve_later``),
  or the judge's page asking first (``voting.vote_status``);
- an operator's change of a judge's trust (``resolve_after_commit``);
- the sweep every minute (``battles_resolve_pending``): windows that passed unnoticed
  (a process died), and battles open past JUDGING_TTL."""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, Q
from django.utils import timezone

from arena_site.redis import queue
from battles.models import Battle
from judging.decision import DECIDE, EXCLUDE, Ballot, Case, Verdict, decide
from judging.models import JudgeProfile, Vote
from judging.services.decisions import battle_decide, battle_undecide
from judging.services.exclusions import battle_exclude_locked, battle_readmit_locked
from judging.services.tallies import battle_votes_tally
from judging.services.trust import probation_applies

logger = logging.getLogger(__name__)
Reason = Battle.ExclusionReason
# Decisions that follow the votes; an import or a machine verdict stands on its own record.
HUMAN_SOURCES = (Battle.DecisionSource.CROWD, Battle.DecisionSource.SUBMITTER)


def battle_resolve(*, battle_id: int) -> bool:
    """Brings the battle in line with its live votes; True when something changed."""
    with transaction.atomic():
        battle = (
            Battle.objects.select_for_update(of=("self",))
            .select_related("agent_a", "agent_b")
            .filter(pk=battle_id)
            .first()
        )
        if battle is None:
            return False
        return _resolve_locked(battle)


def resolve_here(battle: Battle, *, tallied: bool = False) -> frozenset[int] | None:
    """Resolves the battle (row locked by the caller) inside the caller's transaction;
    should that fail, the caller's writes still commit (the savepoint keeps them) and the
    ``judging`` job resolves the battle on a worker; the sweep catches a process that
    died in between. ``tallied``: the caller has just counted the battle's admissible
    votes in this transaction (``battle_votes_tally``). Returns the ids of the battle's
    votes that count once it is resolved (the battle object holds its new status), or
    None when the resolution failed (the battle object may then differ from its row)."""
    battle_id = battle.pk
    try:
        with transaction.atomic():
            if not tallied:
                battle_votes_tally(battle_id=battle_id)
            votes = _live_votes(battle)
            _resolve_with(battle, votes)
    except Exception:
        logger.exception("resolving battle %s in place failed; enqueued", battle_id)
        # robust: Redis away too, the vote still stands and the sweep resolves it
        transaction.on_commit(lambda: _enqueue(battle_id), robust=True)
        return None
    return frozenset(v.pk for v in votes if v.counted)


def resolve_later(battle_id: int, *, at: datetime) -> None:
    """The judging job resolves the battle at ``at`` (a vote's undo window ends then). A
    worker of the ``judging`` queue started with --with-scheduler runs it; if none does,
    the sweep or the judge's own page does the same a little later."""
    try:
        queue("judging").enqueue_at(at, "judging.jobs.battle_resolve", battle_id)
    except Exception:  # Redis away: the sweep resolves it within a minute
        logger.exception("scheduling the resolution of battle %s failed", battle_id)


def resolve_after_commit(battle_id: int) -> None:
    """After the surrounding transaction commits, resolve the battle in this process;
    should that fail, the ``judging`` job does it on a worker."""

    def resolve() -> None:
        try:
            battle_resolve(battle_id=battle_id)
        except Exception:
            logger.exception("in-process resolve of battle %s failed; enqueued", battle_id)
            _enqueue(battle_id)

    transaction.on_commit(resolve)


def _enqueue(battle_id: int) -> None:
    queue("judging").enqueue("judging.jobs.battle_resolve", battle_id)


def battles_resolve_pending(*, now: datetime | None = None) -> list[int]:
    """The sweep: battles open for judging whose votes reached the end of their undo
    window, or that are open past JUDGING_TTL; decided battles a counted vote of which
    stopped being admissible. Returns the ids of those it changed."""
    now = now or timezone.now()
    expired = now - timedelta(seconds=settings.ARENA.judging_ttl_s)
    judging = Battle.objects.filter(status=Battle.Status.JUDGING)
    due = judging.filter(
        Q(votes__retracted=False, votes__final_at__lte=now) | Q(ended_at__lt=expired)
    )
    stale = Battle.objects.filter(
        status=Battle.Status.DECIDED, votes__counted=True, votes__admissible=False
    )
    ids = sorted(set(due.values_list("pk", flat=True)) | set(stale.values_list("pk", flat=True)))
    return [battle_id for battle_id in ids if battle_resolve(battle_id=battle_id)]


def _resolve_locked(battle: Battle) -> bool:
    """Precondition: the battle row is locked, its agents loaded."""
    battle_votes_tally(battle_id=battle.pk)  # an operator's trust change lands here
    return _resolve_with(battle, _live_votes(battle))


def _live_votes(battle: Battle) -> list[Vote]:
    """The battle's live votes in the order they were cast, with their judges' profiles
    and, on each, whether probation binds now (``probation_applies``, in the same
    statement)."""
    established = JudgeProfile.objects.filter(established_at__isnull=False, is_untrusted=False)
    return list(
        battle.votes.filter(retracted=False)
        .select_related("judge__judge_profile")
        .annotate(probation=Exists(established))
        .order_by("voted_at", "pk")
    )


def _resolve_with(battle: Battle, votes: list[Vote]) -> bool:
    """``_resolve_locked`` on the live votes as read (``_live_votes``); each keeps its
    ``counted`` up to date."""
    changed = False
    if battle.status == Battle.Status.EXCLUDED:
        # Rule 7 follows the votes: an operator trusting a judge again can re-admit it.
        if battle.exclusion_reason != Reason.NO_ADMISSIBLE_VOTE or not any(
            v.admissible and v.final_at <= timezone.now() for v in votes
        ):
            return False
        battle_readmit_locked(battle, note="an admissible vote exists again", actor=None)
        changed = True
    if battle.status == Battle.Status.DECIDED:
        if battle.decision_source not in HUMAN_SOURCES:
            return False
        counted = [v for v in votes if v.counted]
        if counted and all(v.admissible for v in counted):
            return False  # a final vote cannot be undone: only its admissibility can change
        battle_undecide(battle)
        votes = [_uncounted(v) for v in votes]
        changed = True
    if battle.status != Battle.Status.JUDGING:
        return changed
    probation = votes[0].probation if votes else probation_applies()
    verdict = decide(_case(battle, probation=probation), [_ballot(v) for v in votes])
    if verdict.action == DECIDE:
        _carry_out(battle, verdict, votes)
        return True
    if verdict.action == EXCLUDE:
        battle_exclude_locked(
            battle, reason=Reason.NO_ADMISSIBLE_VOTE, note=verdict.note, actor=None
        )
        return True
    _stamp_first_judgment(battle, votes)
    return changed


def _uncounted(vote: Vote) -> Vote:
    vote.counted, vote.agreed = False, None
    return vote


def _case(battle: Battle, *, probation: bool) -> Case:
    arena = settings.ARENA
    opened = battle.ended_at or battle.submitted_at
    return Case(
        target=battle.redundancy_target,
        gamma=arena.calibration_gamma if battle.is_calibration else 1.0,
        expired=timezone.now() - opened > timedelta(seconds=arena.judging_ttl_s),
        probation_applies=probation,
        rule6_factor=arena.rule6_factor,
    )


def _ballot(vote: Vote) -> Ballot:
    profile = getattr(vote.judge, "judge_profile", None)
    arena = settings.ARENA
    if profile is None:
        trust, established = min(arena.trust_new, arena.probation_trust_cap), False
    else:
        trust = profile.weight(probation_cap=arena.probation_trust_cap)
        established = not profile.on_probation
    return Ballot(
        vote_id=vote.pk,
        judge_id=vote.judge_id,
        choice=vote.choice,
        submitter=vote.is_submitter,
        admissible=vote.admissible,
        final=vote.final_at <= timezone.now(),
        trust=trust,
        established=established,
        reason=vote.inadmissible_reason,
    )


def _carry_out(battle: Battle, verdict: Verdict, votes: list[Vote]) -> None:
    by_id = {v.pk: v for v in votes}
    counted = [by_id[pk] for pk in verdict.counted]
    ballots = {b.vote_id: b for b in map(_ballot, counted)}
    battle_decide(
        battle=battle,
        outcome=verdict.outcome,
        weight=verdict.weight,
        source=verdict.source,
        votes=counted,
        weights=[ballots[v.pk].trust for v in counted],
        cluster_judge_id=verdict.cluster_judge,
        live_votes=votes,
    )


def _stamp_first_judgment(battle: Battle, votes: list[Vote]) -> None:
    """h of SPEC §6: the first admissible judgment that became final (an undone vote was
    never a judgment)."""
    if battle.first_judgment_at is not None:
        return
    now = timezone.now()
    final = [v.voted_at for v in votes if v.admissible and v.final_at <= now]
    if final:
        battle.first_judgment_at = min(final)
        Battle.objects.filter(pk=battle.pk, first_judgment_at=None).update(
            first_judgment_at=battle.first_judgment_at
        )
