"""Writes for judging: serving battles, casting and retracting votes, the exclusion
rules of SPEC §5.3, resolving a battle's outcome (§5.2, §5.4) and judge trust.

Lock order, everywhere: the battle row, then agent ratings (in agent id order), then
judge profiles (in id order). Nothing takes a later lock and then an earlier one."""

import logging
import math
import time
from collections.abc import Sequence
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone

from agents.models import Agent
from arena_site.exceptions import ApplicationError
from arena_site.redis import queue, redis_client
from battles.models import Battle, Run
from judging import vote_db
from judging.leaks import LeakScanner, judge_visible_texts
from judging.models import Assignment, ExclusionLogEntry, JudgeProfile, JudgeTrustLogEntry, Vote
from judging.selectors import dangerously_battles_open_for_judging

logger = logging.getLogger(__name__)

Reason = Battle.ExclusionReason


def reading_time_s(battle: Battle) -> float:
    """SPEC §5.3: t_read = max(MIN_READ_S, words(final messages of both sides) / 4 w/s)."""
    return reading_time_of([run.final_message for run in battle.runs.all()])


def reading_time_of(final_messages: Sequence[str | None]) -> float:
    words = sum(len((message or "").split()) for message in final_messages)
    return max(settings.ARENA.min_read_s, words / settings.ARENA.read_words_per_s)


def judge_profile(user: AbstractBaseUser) -> JudgeProfile:
    profile, _ = JudgeProfile.objects.get_or_create(
        user=user, defaults={"trust": settings.ARENA.trust_new}
    )
    return profile


# --- rate limits ----------------------------------------------------------------------

_RATE_LIMITS = {
    "next": ("judge_next_rate_per_min", "battle requests"),
    "vote": ("vote_rate_per_min", "votes"),
}


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


# --- serving and voting -----------------------------------------------------------------


def judge_next(*, judge: AbstractBaseUser) -> Battle | None:
    """The next battle this judge may judge: open for judging and never voted on by
    them (a retracted vote counts: they saw the reveal); battles they did not submit
    first, then those short of their target, oldest first. Serving it records
    ``served_at`` once (re-serving keeps the first time). Rate limited per judge."""
    judge_rate_check(judge=judge, scope="next")
    candidates = (
        dangerously_battles_open_for_judging()
        .exclude(votes__judge=judge)
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
    judge_profile(judge)  # every judge who can vote has a profile (trust ω, admin flag)
    return battle


def _inadmissible_reason(
    *,
    battle: Battle,
    choice: str,
    served_at: datetime,
    voted_at: datetime,
    untrusted: bool,
    read_s: float | None = None,
) -> str:
    if choice == Vote.Choice.ABSTAIN:
        return "abstain"
    if untrusted:
        return "untrusted_judge"
    if read_s is None:
        read_s = reading_time_s(battle)
    if (voted_at - served_at).total_seconds() < read_s:
        return "too_fast"
    return ""


def vote_cast(*, judge: AbstractBaseUser, battle_id: int, choice: str) -> Vote:
    """Stores the judge's vote. Preconditions: the battle was served to this judge.
    One live vote per (judge, battle) is a database constraint: a second answers 409,
    and so does a vote after a retraction (the judge has seen the reveal). Every vote
    is kept; an inadmissible one (abstain, untrusted judge, faster than the reading
    time) is stored with its reason. The battle is resolved in the same transaction."""
    if choice not in Vote.Choice.values:
        raise ApplicationError(
            f"choice must be one of {', '.join(Vote.Choice.values)}.", code="invalid_choice"
        )
    judge_rate_check(judge=judge, scope="vote")
    try:
        with transaction.atomic():
            battle = _battle_for_vote(judge=judge, battle_id=battle_id)
            voted_at = timezone.now()
            reason = _inadmissible_reason(
                battle=battle,
                choice=choice,
                served_at=battle.served_at,
                voted_at=voted_at,
                untrusted=battle.judge_untrusted,
                read_s=reading_time_of([battle.final_a, battle.final_b]),
            )
            vote = Vote.objects.create(
                judge=judge,
                battle=battle,
                choice=choice,
                served_at=battle.served_at,
                voted_at=voted_at,
                is_submitter=battle.task_submitter_id == judge.pk,
                admissible=not reason,
                inadmissible_reason=reason,
            )
            if not reason and battle.first_judgment_at is None:
                Battle.objects.filter(pk=battle.pk, first_judgment_at=None).update(
                    first_judgment_at=voted_at
                )
            # Resolved in the same transaction: the vote and what it decides commit
            # together, and the streaming frame leaves right after that one commit.
            _battle_resolve_here(battle)
    except IntegrityError as exc:
        raise ApplicationError(
            "You have already voted on this battle.", code="already_voted", status=409
        ) from exc
    return vote


def _battle_for_vote(*, judge: AbstractBaseUser, battle_id: int) -> Battle:
    """The battle, row-locked (votes on one battle are resolved one at a time), with
    everything the vote needs in the same statement: when it was served to this judge,
    whether they retracted a vote on it, whether they are untrusted, and both final
    messages (the reading time). Raises 404 when it was not served to them and 409
    when it takes no vote from them."""
    battle = vote_db.battle_for_vote(battle_id=battle_id, judge_id=judge.pk)
    if battle is None or battle.served_at is None:
        # Not served to this judge: indistinguishable from a battle that does not exist.
        raise ApplicationError("No such battle.", code="not_found", status=404)
    if battle.status not in (Battle.Status.JUDGING, Battle.Status.DECIDED):
        raise ApplicationError(
            f"This battle is {battle.status}; it cannot take votes.", code="not_judging", status=409
        )
    if battle.retracted_before:
        raise ApplicationError(
            "You retracted your vote on this battle after its reveal; you cannot vote on it again.",
            code="vote_retracted",
            status=409,
        )
    return battle


def vote_retract(*, judge: AbstractBaseUser, battle_id: int) -> Vote:
    """Takes back the judge's live vote within VOTE_RETRACT_WINDOW_S of casting it: 404
    when there is none, 409 after the window. A vote that decided the battle reopens
    it: the streaming update is reverted and the outcome re-resolved from the votes
    that remain, in this transaction."""
    judge_rate_check(judge=judge, scope="vote")
    window = settings.ARENA.vote_retract_window_s
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
                "You have no vote on this battle to retract.", code="not_found", status=404
            )
        now = timezone.now()
        age = (now - vote.voted_at).total_seconds()
        if age > window:
            raise ApplicationError(
                f"A vote can be retracted within {window} s of casting it; yours was cast "
                f"{int(age)} s ago.",
                code="retract_window_closed",
                status=409,
            )
        vote.retracted = True
        vote.retracted_at = now
        vote.save(update_fields=["retracted", "retracted_at"])
        if _resolvable(battle):
            _battle_reconcile(battle)
    return vote


# --- resolution ---------------------------------------------------------------------------


def plurality(votes: Sequence[tuple[str, float]]) -> str | None:
    """The choice with the largest total weight; None when several share the top."""
    totals: dict[str, float] = {}
    for choice, weight in votes:
        totals[choice] = totals.get(choice, 0.0) + weight
    if not totals:
        return None
    best = max(totals.values())
    leaders = [choice for choice, total in totals.items() if math.isclose(total, best)]
    return leaders[0] if len(leaders) == 1 else None


def consensus(votes: Sequence[tuple[str, float]]) -> str:
    """SPEC §5.2: weighted plurality of (choice, weight) pairs; a tie at the top gives
    "tie". Precondition: at least one vote."""
    return plurality(votes) or "tie"


def battle_resolve_after_commit(battle_id: int) -> None:
    """After the surrounding transaction commits, resolve the battle in this process at
    once, so a deciding vote moves the streaming board within milliseconds. Should that
    fail, the ``judging`` job retries it on a worker. The job is not enqueued on
    success: on a busy host its worker would compete with the next vote for the CPU.
    ``battles_resolve_pending`` sweeps up after a process that died in between."""

    def resolve() -> None:
        try:
            battle_resolve(battle_id=battle_id)
        except Exception:
            logger.exception("in-process resolve of battle %s failed; enqueued", battle_id)
            _enqueue_resolve(battle_id)

    transaction.on_commit(resolve)


def _enqueue_resolve(battle_id: int) -> None:

    queue("judging").enqueue("judging.jobs.battle_resolve", battle_id)


def battles_resolve_pending() -> list[int]:
    """The sweep: resolves every battle still judging that has a live vote (a process
    died between a vote's commit and its resolve). Returns the ids of those changed."""
    pending = (
        Battle.objects.filter(status=Battle.Status.JUDGING, votes__retracted=False)
        .values_list("pk", flat=True)
        .distinct()
    )
    return [battle_id for battle_id in pending if battle_resolve(battle_id=battle_id)]


def battle_resolve(*, battle_id: int) -> bool:
    """Brings the battle's outcome in line with its live votes (SPEC §5.2–§5.4); True
    when something changed. Safe to run any number of times, concurrently too (the
    battle row is locked). Rule 6 is a function of the votes: a battle it excluded is
    re-admitted when an admissible vote appears (a judge trusted again)."""
    with transaction.atomic():
        battle = (
            Battle.objects.select_for_update(of=("self",))
            .select_related("task", "agent_a", "agent_b")
            .filter(pk=battle_id)
            .first()
        )
        if battle is None or not _resolvable(battle):
            return False
        return _battle_reconcile(battle)


def _battle_resolve_here(battle: Battle) -> None:
    """Resolves the battle (row locked by the caller) inside the caller's transaction;
    should that fail, the vote still commits (the savepoint keeps it) and the
    ``judging`` job resolves the battle on a worker. ``battles_resolve_pending`` sweeps
    up after a process that died."""
    battle_id = battle.pk
    try:
        with transaction.atomic():
            if _resolvable(battle):
                _battle_reconcile(battle)
    except Exception:
        logger.exception("resolving battle %s with its vote failed; enqueued", battle_id)
        transaction.on_commit(lambda: _enqueue_resolve(battle_id))


def _resolvable(battle: Battle) -> bool:
    return battle.status in (Battle.Status.JUDGING, Battle.Status.DECIDED) or (
        battle.status == Battle.Status.EXCLUDED
        and battle.exclusion_reason == Reason.NO_ADMISSIBLE_VOTE
    )


def _battle_reconcile(battle: Battle) -> bool:
    """Precondition: the battle row is locked and ``_resolvable``.

    - n independent admissible votes ≥ target → decided by their consensus;
    - none, but the submitter's blind vote is admissible → decided by it, self-judged;
    - some, fewer than the target → judging (the submitter's vote is dropped);
    - no admissible vote at all though as many independent judges as the target voted
      → excluded, no_admissible_vote (rule 6).
    A decision stands while every vote that produced it is live and admissible and, when
    self-judged, no independent admissible vote has arrived; votes arriving after an
    independent decision do not move it (they are kept, and count if it reopens)."""
    votes = list(
        battle.votes.select_related("judge", "judge__judge_profile").order_by("voted_at", "pk")
    )
    live = [v for v in votes if not v.retracted]
    independent = [v for v in live if v.admissible and not v.is_submitter]
    submitter = [v for v in live if v.admissible and v.is_submitter]
    changed = False
    if battle.status == Battle.Status.EXCLUDED:
        if not (independent or submitter):
            return False
        _battle_readmit(battle, note="an admissible vote exists again", actor=None)
        changed = True
    if battle.status == Battle.Status.DECIDED:
        counted = [v for v in votes if v.counted]
        stands = counted and all(v.admissible and not v.retracted for v in counted)
        if stands and not (battle.self_judged and independent):
            return False
        _battle_undecide(battle, votes)
        changed = True
    if len(independent) >= battle.redundancy_target:
        _battle_decide(battle, independent, self_judged=False)
    elif not independent and submitter:
        _battle_decide(battle, submitter, self_judged=True)
    elif (
        not independent
        and not submitter
        and sum(1 for v in live if not v.is_submitter) >= battle.redundancy_target
    ):
        _battle_exclude(
            battle,
            reason=Reason.NO_ADMISSIBLE_VOTE,
            note="every vote was retracted, abstained, too fast or from an untrusted judge",
            actor=None,
        )
    else:
        return changed
    return True


def _profiles_locked(user_ids: set[int]) -> dict[int, JudgeProfile]:
    for user_id in sorted(user_ids):
        JudgeProfile.objects.get_or_create(
            user_id=user_id, defaults={"trust": settings.ARENA.trust_new}
        )
    rows = JudgeProfile.objects.select_for_update().filter(user_id__in=user_ids).order_by("pk")
    return {p.user_id: p for p in rows}


def _trust_of(vote: Vote, default: float) -> float:
    """ω of the vote's judge (loaded with the vote); a judge without a profile is new."""
    profile = getattr(vote.judge, "judge_profile", None)
    return profile.trust if profile is not None else default


def _battle_decide(battle: Battle, votes: list[Vote], *, self_judged: bool) -> None:
    """Sets the outcome from ``votes`` (the V_b of SPEC §5.4), its evidence weight
    w_b = γ_b · mean ω, the cluster judge, moves the streaming ratings, and on a
    redundancy battle updates each judge's agreement with the others' consensus."""
    from ratings.services import rating_apply_battle

    arena = settings.ARENA
    weighted = [(v.choice, _trust_of(v, arena.trust_new)) for v in votes]
    gamma = arena.calibration_gamma if battle.is_calibration else 1.0
    battle.outcome = consensus(weighted)
    battle.evidence_weight = gamma * sum(w for _, w in weighted) / len(weighted)
    battle.status = Battle.Status.DECIDED
    battle.self_judged = self_judged
    battle.cluster_judge_id = votes[0].judge_id  # votes come in voting order
    battle.exclusion_reason = ""
    # the streaming deltas go into the same UPDATE as the decision
    rating_apply_battle(battle=battle, record=False)
    battle.save(
        update_fields=[
            "outcome",
            "evidence_weight",
            "status",
            "self_judged",
            "cluster_judge",
            "exclusion_reason",
            "streaming_applied",
        ]
    )
    Vote.objects.filter(pk__in=[v.pk for v in votes]).update(counted=True)
    for vote in votes:
        vote.counted = True
    if battle.redundancy_target > 1 and not self_judged:
        _trust_compare(votes, weighted)


def _trust_compare(votes: list[Vote], weighted: list[tuple[str, float]]) -> None:
    """Each judge's vote against the consensus of the other judges' votes (skipped when
    the others have none: no other vote, or a tie at the top)."""
    outcomes: dict[int, bool] = {}
    for i, vote in enumerate(votes):
        others = weighted[:i] + weighted[i + 1 :]
        reference = plurality(others)
        if reference is not None:
            outcomes[vote.pk] = vote.choice == reference
    if not outcomes:
        return
    by_judge = {v.pk: v.judge_id for v in votes}
    profiles = _profiles_locked({by_judge[pk] for pk in outcomes})
    for vote_pk, agreed in outcomes.items():
        profile = profiles[by_judge[vote_pk]]
        profile.seen_count += 1
        profile.agree_count += int(agreed)
        Vote.objects.filter(pk=vote_pk).update(agreed=agreed)
    for profile in profiles.values():
        profile.trust_recompute(trust_min=settings.ARENA.trust_min)
        profile.save(update_fields=["seen_count", "agree_count", "trust"])


def _battle_undecide(battle: Battle, votes: list[Vote]) -> None:
    """Takes a decision back: the streaming update, the counted flags and the trust
    comparisons it made. The battle is left judging."""
    from ratings.services import rating_revert_battle

    rating_revert_battle(battle=battle)
    compared = [v for v in votes if v.agreed is not None]
    if compared:
        profiles = _profiles_locked({v.judge_id for v in compared})
        for vote in compared:
            profile = profiles[vote.judge_id]
            profile.seen_count -= 1
            profile.agree_count -= int(vote.agreed)
        for profile in profiles.values():
            profile.trust_recompute(trust_min=settings.ARENA.trust_min)
            profile.save(update_fields=["seen_count", "agree_count", "trust"])
    Vote.objects.filter(battle=battle).filter(Q(counted=True) | Q(agreed__isnull=False)).update(
        counted=False, agreed=None
    )
    for vote in votes:
        vote.counted, vote.agreed = False, None
    battle.outcome = ""
    battle.evidence_weight = None
    battle.status = Battle.Status.JUDGING
    battle.self_judged = False
    battle.cluster_judge = None
    battle.save(
        update_fields=["outcome", "evidence_weight", "status", "self_judged", "cluster_judge"]
    )


# --- exclusions -------------------------------------------------------------------------


def battle_leak_scanner() -> LeakScanner:
    """Every identity string of every agent ever entered (a retired one still names
    a model)."""
    identities: list[str] = []
    for agent in Agent.objects.all():
        identities.extend(agent.identity_strings())
    return LeakScanner(identities)


def exclusion_at_lanes_end(battle: Battle) -> tuple[str, str]:
    """Rules 1–5 of SPEC §5.3 in order, first match wins: (reason code, note for the
    log), or ("", "") when the battle may be judged."""
    runs = list(battle.runs.prefetch_related("steps").annotate(step_count=Count("steps")))
    by_side = {run.side: run for run in runs}
    leaks = battle_leak_scanner().scan(judge_visible_texts(runs))
    if leaks:
        first = leaks[0]
        return Reason.NAMED_MODEL, (
            f"{first.where} names {first.identity!r}: …{first.excerpt}… "
            f"({len(leaks)} text(s) with a name)"
        )
    for side in ("A", "B"):
        if side not in by_side:
            return Reason.NO_RUN, f"side {side} has no run record"
    for side in ("A", "B"):
        run = by_side[side]
        if run.step_count == 0 and not run.delivered_files:
            return Reason.NO_TRAJECTORY, (
                f"side {side} took no step and delivered nothing "
                f"(end reason {run.end_reason or 'none'})"
            )
    for side in ("A", "B"):
        run = by_side[side]
        if run.end_reason == Run.EndReason.ENDED_BY_SUBMITTER or run.end_requested_at:
            return Reason.ENDED_BY_SUBMITTER, f"the submitter ended side {side} early"
    if by_side["A"].step_budget != by_side["B"].step_budget:
        return Reason.BUDGET_MISMATCH, (
            f"step budgets differ: A {by_side['A'].step_budget}, B {by_side['B'].step_budget}"
        )
    return "", ""


@transaction.atomic
def battle_screen(*, battle_id: int) -> str:
    """Applies rules 1–5 when a battle's lanes have ended and it opened for judging:
    a match excludes it (never served to judges; its team still sees the replay).
    Returns the reason code, "" when none. Called in the transaction that opened it."""
    battle = Battle.objects.select_for_update().filter(pk=battle_id).first()
    if battle is None or battle.status != Battle.Status.JUDGING:
        return ""
    reason, note = exclusion_at_lanes_end(battle)
    if reason:
        _battle_exclude(battle, reason=reason, note=note, actor=None)
    return reason


def _battle_exclude(
    battle: Battle, *, reason: str, note: str, actor: AbstractBaseUser | None
) -> ExclusionLogEntry:
    """Precondition: the battle row is locked. A decided battle's decision is taken back
    first (its streaming update reverted)."""
    if battle.status == Battle.Status.DECIDED:
        _battle_undecide(battle, list(battle.votes.all()))
    battle.status = Battle.Status.EXCLUDED
    battle.exclusion_reason = reason
    battle.save(update_fields=["status", "exclusion_reason"])
    return ExclusionLogEntry.objects.create(
        battle=battle,
        action=ExclusionLogEntry.Action.EXCLUDE,
        reason=reason,
        note=note,
        actor=actor,
        at=timezone.now(),
    )


def battle_exclusion_check(*, battle: Battle, action: str, reason: str = "") -> None:
    """Whether an admin may apply ``action`` (exclude / readmit) to the battle now."""
    if action == ExclusionLogEntry.Action.EXCLUDE:
        if reason not in Reason.values:
            raise ApplicationError(
                f"reason must be one of {', '.join(Reason.values)}.", code="invalid_reason"
            )
        if battle.status not in (Battle.Status.JUDGING, Battle.Status.DECIDED):
            raise ApplicationError(
                f"Battle {battle.pk} is {battle.status}; only a battle being judged or "
                "decided can be excluded.",
                code="not_excludable",
                status=409,
            )
    elif action == ExclusionLogEntry.Action.READMIT:
        if battle.status != Battle.Status.EXCLUDED:
            raise ApplicationError(
                f"Battle {battle.pk} is {battle.status}, not excluded.",
                code="not_excluded",
                status=409,
            )
    else:
        raise ApplicationError("action must be exclude or readmit.", code="invalid_action")


@transaction.atomic
def battle_exclude(
    *, battle_id: int, reason: str, note: str, actor: AbstractBaseUser
) -> ExclusionLogEntry:
    """An admin excludes a battle with a SPEC §5.3 reason code; logged with who and why."""
    battle = Battle.objects.select_for_update().get(pk=battle_id)
    battle_exclusion_check(battle=battle, action=ExclusionLogEntry.Action.EXCLUDE, reason=reason)
    return _battle_exclude(battle, reason=reason, note=note, actor=actor)


@transaction.atomic
def battle_readmit(*, battle_id: int, note: str, actor: AbstractBaseUser) -> ExclusionLogEntry:
    """An admin re-admits an excluded battle: the reason is cleared, the battle goes
    back to judging and is resolved from its live votes at once (decided if they
    suffice; rule 6 can exclude it again if none is admissible)."""
    battle = Battle.objects.select_for_update().select_related("task").get(pk=battle_id)
    battle_exclusion_check(battle=battle, action=ExclusionLogEntry.Action.READMIT)
    entry = _battle_readmit(battle, note=note, actor=actor)
    _battle_reconcile(battle)
    return entry


def _battle_readmit(
    battle: Battle, *, note: str, actor: AbstractBaseUser | None
) -> ExclusionLogEntry:
    entry = ExclusionLogEntry.objects.create(
        battle=battle,
        action=ExclusionLogEntry.Action.READMIT,
        reason=battle.exclusion_reason,
        note=note,
        actor=actor,
        at=timezone.now(),
    )
    battle.status = Battle.Status.JUDGING
    battle.exclusion_reason = ""
    battle.save(update_fields=["status", "exclusion_reason"])
    return entry


# --- judge trust ------------------------------------------------------------------------


@transaction.atomic
def judge_trust_set(
    *, judge_id: int, untrusted: bool, note: str, actor: AbstractBaseUser
) -> JudgeTrustLogEntry:
    """An admin marks a judge untrusted (every live vote of theirs becomes inadmissible)
    or trusted again (votes made inadmissible only by that become admissible when they
    pass the other rules). Logged with who, when and why; the affected battles are
    resolved again after commit."""
    if not note.strip():
        raise ApplicationError("Say why.", code="note_required")
    profile, _ = JudgeProfile.objects.get_or_create(
        user_id=judge_id, defaults={"trust": settings.ARENA.trust_new}
    )
    profile = JudgeProfile.objects.select_for_update().get(pk=profile.pk)
    if profile.is_untrusted == untrusted:
        state = "untrusted" if untrusted else "trusted"
        raise ApplicationError(f"This judge is already {state}.", code="unchanged", status=409)
    profile.is_untrusted = untrusted
    profile.save(update_fields=["is_untrusted"])
    entry = JudgeTrustLogEntry.objects.create(
        judge_id=judge_id,
        action=JudgeTrustLogEntry.Action.UNTRUST if untrusted else JudgeTrustLogEntry.Action.TRUST,
        note=note,
        actor=actor,
        at=timezone.now(),
    )
    live = Vote.objects.filter(judge_id=judge_id, retracted=False)
    affected: set[int] = set()
    if untrusted:
        affected.update(live.filter(admissible=True).values_list("battle_id", flat=True))
        live.filter(admissible=True).update(admissible=False, inadmissible_reason="untrusted_judge")
    else:
        for vote in live.filter(inadmissible_reason="untrusted_judge").select_related("battle"):
            reason = _inadmissible_reason(
                battle=vote.battle,
                choice=vote.choice,
                served_at=vote.served_at,
                voted_at=vote.voted_at,
                untrusted=False,
            )
            vote.admissible, vote.inadmissible_reason = not reason, reason
            vote.save(update_fields=["admissible", "inadmissible_reason"])
            affected.add(vote.battle_id)
    for battle_id in sorted(affected):
        battle_resolve_after_commit(battle_id)
    return entry
