"""Resolving battles: their live votes, read as ``Ballot``s, go through the decision rule
(``judging.decision.decide``) and the verdicts are carried out, through the one door
(``judging.services.decisions``: ``DecisionBatch``, of which ``battle_decide`` is a
batch of one) or rule 7's exclusion. Safe to run any number of times, concurrently too
(the battle rows are locked; a battle no longer being judged is left as it is). One
battle or many, the same code: ``_resolve_many`` resolves the battles in order as if
one after another. Every path that can change a verdict comes here:

- a vote with no undo window, in the vote's own transaction (``resolve_here``);
- the end of a vote's undo window: the decider (``judging.decider``, which takes due
  battles by ``Battle.decide_due_at``: ``battles_resolve_due``), or the judge's page
  asking first (``voting.vote_status``);
- an operator's change of a judge's trust (``resolve_after_commit``);
- the sweep every minute (``battles_resolve_pending``): anything the decider missed,
  battles open past JUDGING_TTL, decided battles a counted vote of which stopped being
  admissible.

Nothing here needs Redis: a resolution that cannot run now marks its battle due, and
the decider takes it."""

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import batched

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, Q
from django.db.utils import InterfaceError, OperationalError
from django.utils import timezone

from battles.models import Battle
from judging.decision import DECIDE, EXCLUDE, Ballot, Case, Verdict, decide
from judging.models import JudgeProfile, Vote
from judging.services.decisions import DecisionBatch, battle_undecide
from judging.services.exclusions import battle_exclude_locked, battle_readmit_locked
from judging.services.tallies import battle_votes_tally, battles_votes_tally
from judging.services.trust import probation_applies, profiles_locked

logger = logging.getLogger(__name__)
Reason = Battle.ExclusionReason
# Decisions that follow the votes; an import or a machine verdict stands on its own record.
HUMAN_SOURCES = (Battle.DecisionSource.CROWD, Battle.DecisionSource.SUBMITTER)
# The sweep resolves what it finds in transactions of this many battles.
SWEEP_BATCH = 100
# A battle the decider failed to resolve is tried again this much later.
RETRY_FAILED_S = 60


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
        battle_votes_tally(battle_id=battle.pk)  # an operator's trust change lands here
        return bool(_resolve_many([battle], now=timezone.now()).changed)


def battles_resolve_due(*, limit: int, now: datetime | None = None) -> tuple[int, list[int]]:
    """The decider's step, one transaction: up to ``limit`` battles being judged whose
    ``decide_due_at`` has come, oldest due first, locked with SKIP LOCKED (a battle
    another decider, a vote or a page holds is left to it), resolved together. Returns
    how many were taken and the ids of those that changed. Should the batch fail for
    another reason than the database (a battle the code cannot resolve), its battles
    are resolved one transaction each, and one that fails again is put off by
    RETRY_FAILED_S (logged): one bad battle never holds up the others."""
    now = now or timezone.now()
    taken: list[int] = []
    try:
        with transaction.atomic():
            battles = list(
                Battle.objects.select_for_update(of=("self",), skip_locked=True)
                .select_related("agent_a", "agent_b")
                .filter(status=Battle.Status.JUDGING, decide_due_at__lte=now)
                .order_by("decide_due_at", "pk")[:limit]
            )
            taken = [b.pk for b in battles]
            if not battles:
                return 0, []
            battles_votes_tally(battle_ids=taken)
            return len(battles), _resolve_many(battles, now=now).changed
    except (OperationalError, InterfaceError):
        raise  # the database itself: the caller waits and tries again
    except Exception:
        if not taken:
            raise
        logger.exception("resolving %d due battles together failed; one at a time", len(taken))
    changed = []
    for battle_id in taken:
        try:
            changed += battles_resolve(battle_ids=[battle_id], now=now)
        except (OperationalError, InterfaceError):
            raise
        except Exception:
            logger.exception("resolving battle %s failed", battle_id)
            _put_off(battle_id, now)
    return len(taken), changed


def _put_off(battle_id: int, now: datetime) -> None:
    later = now + timedelta(seconds=RETRY_FAILED_S)
    logger.error("battle %s could not be resolved; tried again at %s", battle_id, later)
    Battle.objects.filter(pk=battle_id, status=Battle.Status.JUDGING).update(decide_due_at=later)


def battles_resolve(*, battle_ids: list[int], now: datetime | None = None) -> list[int]:
    """These battles, those still being judged and not locked by another transaction,
    resolved in one transaction in id order; the ids of those that changed."""
    now = now or timezone.now()
    with transaction.atomic():
        battles = list(
            Battle.objects.select_for_update(of=("self",), skip_locked=True)
            .select_related("agent_a", "agent_b")
            .filter(pk__in=battle_ids, status=Battle.Status.JUDGING)
            .order_by("pk")
        )
        if not battles:
            return []
        battles_votes_tally(battle_ids=[b.pk for b in battles])
        return _resolve_many(battles, now=now).changed


def resolve_here(battle: Battle, *, tallied: bool = False) -> frozenset[int] | None:
    """Resolves the battle (row locked by the caller) inside the caller's transaction;
    should that fail, the caller's writes still commit (the savepoint keeps them) and the
    battle is marked due for the decider. ``tallied``: the caller has just counted the
    battle's admissible votes in this transaction (``battle_votes_tally``). Returns the
    ids of the battle's votes that count once it is resolved (the battle object holds
    its new status), or None when the resolution failed (the battle object may then
    differ from its row)."""
    battle_id = battle.pk
    try:
        with transaction.atomic():
            if not tallied:
                battle_votes_tally(battle_id=battle_id)
            votes = _resolve_many([battle], now=timezone.now()).votes[battle_id]
    except Exception:
        logger.exception("resolving battle %s in place failed; left to the decider", battle_id)
        _due_now(battle_id)
        return None
    return frozenset(v.pk for v in votes if v.counted)


def resolve_after_commit(battle_id: int) -> None:
    """After the surrounding transaction commits, resolve the battle in this process;
    should that fail, the decider does it."""

    def resolve() -> None:
        try:
            battle_resolve(battle_id=battle_id)
        except Exception:
            logger.exception("in-process resolve of battle %s failed; left to the decider",
                             battle_id)  # fmt: skip
            _due_now(battle_id)

    transaction.on_commit(resolve)


def _due_now(battle_id: int) -> None:
    """The decider takes the battle at its next step. Logged when even that fails (the
    database away): the sweep finds the battle by its votes."""
    try:
        with transaction.atomic():
            Battle.objects.filter(pk=battle_id, status=Battle.Status.JUDGING).update(
                decide_due_at=timezone.now()
            )
    except Exception:
        logger.exception("marking battle %s due failed; the sweep resolves it", battle_id)


def battles_resolve_pending(*, now: datetime | None = None) -> list[int]:
    """The sweep: battles open for judging that are due or whose votes reached the end of
    their undo window, or that are open past JUDGING_TTL (resolved SWEEP_BATCH at a
    time); decided battles a counted vote of which stopped being admissible. Returns
    the ids of those it changed."""
    now = now or timezone.now()
    expired = now - timedelta(seconds=settings.ARENA.judging_ttl_s)
    judging = Battle.objects.filter(status=Battle.Status.JUDGING)
    due = judging.filter(
        Q(decide_due_at__lte=now)
        | Q(votes__retracted=False, votes__final_at__lte=now)
        | Q(ended_at__lt=expired)
    )
    stale = Battle.objects.filter(
        status=Battle.Status.DECIDED, votes__counted=True, votes__admissible=False
    )
    changed = []
    for chunk in batched(sorted(set(due.values_list("pk", flat=True))), SWEEP_BATCH):
        changed += battles_resolve(battle_ids=list(chunk), now=now)
    for battle_id in sorted(set(stale.values_list("pk", flat=True))):
        if battle_resolve(battle_id=battle_id):
            changed.append(battle_id)
    return sorted(changed)


@dataclass
class _Resolved:
    changed: list[int] = field(default_factory=list)
    votes: dict[int, list[Vote]] = field(default_factory=dict)


def _resolve_many(battles: list[Battle], *, now: datetime) -> _Resolved:
    """Resolves the battles in order, as one after another would, with their votes and
    judges read once and every decision written together (``DecisionBatch``).
    Preconditions: the battle rows locked, their agents loaded, their tallies counted;
    a batch of more than one holds battles being judged only (a decision taken back in
    the batch would change profiles it shares)."""
    votes = _live_votes(battles)
    batch = DecisionBatch(profiles=_profiles_to_compare(battles, votes), now=now)
    _profiles_share(votes, batch.profiles)
    probation = _Probation(votes)
    resolved = _Resolved(votes=votes)
    waiting = []
    for battle in battles:
        state = _resolve_with(battle, votes[battle.pk], batch, probation, now)
        if state.changed:
            resolved.changed.append(battle.pk)
        if state.due is not None:
            waiting.append((battle, state))
    batch.write()
    _waiting_write(waiting)
    return resolved


def _live_votes(battles: list[Battle]) -> dict[int, list[Vote]]:
    """Each battle's live votes in the order they were cast, with their judges' profiles
    and, on each, whether probation binds now (``probation_applies``, in the same
    statement): one query for them all."""
    established = JudgeProfile.objects.filter(established_at__isnull=False, is_untrusted=False)
    by_battle: dict[int, list[Vote]] = {b.pk: [] for b in battles}
    rows = (
        Vote.objects.filter(battle_id__in=list(by_battle), retracted=False)
        .select_related("judge__judge_profile")
        .annotate(probation=Exists(established))
        .order_by("battle_id", "voted_at", "pk")
    )
    for vote in rows:
        by_battle[vote.battle_id].append(vote)
    return by_battle


def _profiles_to_compare(
    battles: list[Battle], votes: dict[int, list[Vote]]
) -> dict[int, JudgeProfile]:
    """The profiles a redundancy decision of this batch may compare, locked (id order)
    before any decision, so that the lock order holds across the batch: battle rows,
    then judge profiles, then agent ratings."""
    judges = {
        v.judge_id
        for b in battles
        if b.status == Battle.Status.JUDGING and b.redundancy_target > 1
        for v in votes[b.pk]
        if v.admissible and not v.is_submitter
    }
    return profiles_locked(judges) if judges and len(battles) > 1 else {}


def _profiles_share(votes: dict[int, list[Vote]], locked: dict[int, JudgeProfile]) -> None:
    """One profile object per judge across the batch (the locked one when there is one,
    made if the judge had none), so that a comparison made by one decision weighs in
    the next one's ballots."""
    shared = dict(locked)
    for battle_votes in votes.values():
        for vote in battle_votes:
            profile = shared.get(vote.judge_id) or getattr(vote.judge, "judge_profile", None)
            if profile is not None:
                vote.judge.judge_profile = shared.setdefault(vote.judge_id, profile)


class _Probation:
    """Whether probation binds (SPEC §5.4) for the battle being resolved: as read with
    the votes (or asked, when no battle has one), or since a decision of this batch
    ended a probation."""

    def __init__(self, votes: dict[int, list[Vote]]) -> None:
        self.read = next((vs[0].probation for vs in votes.values() if vs), None)

    def now(self, batch: DecisionBatch) -> bool:
        if self.read is None:
            self.read = probation_applies()
        return self.read or batch.established


@dataclass(frozen=True)
class _State:
    changed: bool
    due: datetime | None = None  # left waiting: when it is next worth resolving
    stamped: bool = False  # its first judgment was stamped now


def _resolve_with(
    battle: Battle, votes: list[Vote], batch: DecisionBatch, probation: _Probation, now: datetime
) -> _State:
    """One battle of ``_resolve_many`` on its live votes as read; each keeps its
    ``counted`` up to date."""
    changed = False
    if battle.status == Battle.Status.EXCLUDED:
        # Rule 7 follows the votes: an operator trusting a judge again can re-admit it.
        if battle.exclusion_reason != Reason.NO_ADMISSIBLE_VOTE or not any(
            v.admissible and v.final_at <= now for v in votes
        ):
            return _State(False)
        battle_readmit_locked(battle, note="an admissible vote exists again", actor=None)
        changed = True
    if battle.status == Battle.Status.DECIDED:
        if battle.decision_source not in HUMAN_SOURCES:
            return _State(False)
        counted = [v for v in votes if v.counted]
        if counted and all(v.admissible for v in counted):
            return _State(False)  # a final vote cannot be undone: only its admissibility can
        battle_undecide(battle)
        votes = [_uncounted(v) for v in votes]
        changed = True
    if battle.status != Battle.Status.JUDGING:
        return _State(changed)
    case = _case(battle, probation=probation.now(batch), now=now)
    verdict = decide(case, [_ballot(v, now) for v in votes])
    if verdict.action == DECIDE:
        _carry_out(battle, verdict, votes, batch, now)
        return _State(True)
    if verdict.action == EXCLUDE:
        battle_exclude_locked(
            battle, reason=Reason.NO_ADMISSIBLE_VOTE, note=verdict.note, actor=None
        )
        return _State(True)
    stamped = _stamp_first_judgment(battle, votes, now)
    return _State(changed, due=decide_due(battle, votes, now=now), stamped=stamped)


def decide_due(battle: Battle, votes: list[Vote], *, now: datetime) -> datetime:
    """When a battle left waiting is next worth resolving: the end of the next undo
    window among its live votes, or the moment it passes JUDGING_TTL."""
    windows = [v.final_at for v in votes if v.final_at > now]
    return min([*windows, ttl_due(battle)])


def ttl_due(battle: Battle) -> datetime:
    """The first moment the battle counts as open past JUDGING_TTL (``_case``)."""
    opened = battle.ended_at or battle.submitted_at
    return opened + timedelta(seconds=settings.ARENA.judging_ttl_s, microseconds=1)


def _waiting_write(waiting: list[tuple[Battle, _State]]) -> None:
    """The waiting battles' next due time and first judgment, where they changed (one
    statement for all)."""
    dirty = [b for b, state in waiting if b.decide_due_at != state.due or state.stamped]
    for battle, state in waiting:
        battle.decide_due_at = state.due
    if len(dirty) == 1:
        dirty[0].save(update_fields=["decide_due_at", "first_judgment_at"])
    elif dirty:
        Battle.objects.bulk_update(dirty, ["decide_due_at", "first_judgment_at"])


def _uncounted(vote: Vote) -> Vote:
    vote.counted, vote.agreed = False, None
    return vote


def _case(battle: Battle, *, probation: bool, now: datetime) -> Case:
    arena = settings.ARENA
    opened = battle.ended_at or battle.submitted_at
    return Case(
        target=battle.redundancy_target,
        gamma=arena.calibration_gamma if battle.is_calibration else 1.0,
        expired=now - opened > timedelta(seconds=arena.judging_ttl_s),
        probation_applies=probation,
        rule6_factor=arena.rule6_factor,
    )


def _ballot(vote: Vote, now: datetime) -> Ballot:
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
        final=vote.final_at <= now,
        trust=trust,
        established=established,
        reason=vote.inadmissible_reason,
    )


def _carry_out(
    battle: Battle, verdict: Verdict, votes: list[Vote], batch: DecisionBatch, now: datetime
) -> None:
    by_id = {v.pk: v for v in votes}
    counted = [by_id[pk] for pk in verdict.counted]
    ballots = {b.vote_id: b for b in (_ballot(v, now) for v in counted)}
    batch.decide(
        battle=battle,
        outcome=verdict.outcome,
        weight=verdict.weight,
        source=verdict.source,
        votes=counted,
        weights=[ballots[v.pk].trust for v in counted],
        cluster_judge_id=verdict.cluster_judge,
        live_votes=votes,
    )


def _stamp_first_judgment(battle: Battle, votes: list[Vote], now: datetime) -> bool:
    """h of SPEC §6: the first admissible judgment that became final (an undone vote was
    never a judgment). Set on the battle (``_waiting_write`` writes it); True when set."""
    if battle.first_judgment_at is not None:
        return False
    final = [v.voted_at for v in votes if v.admissible and v.final_at <= now]
    if final:
        battle.first_judgment_at = min(final)
        return True
    return False
