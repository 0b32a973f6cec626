"""The one door through which a battle is decided: ``battle_decide``. Human votes (the
crowd's or, past the judging window, the submitting team's), imported judgments and,
later, automated verdicts that decide (a coding battle's tests) all come through it;
nothing else sets an outcome. A machine judge's verdict on a live battle is not a
decision: it is stored beside the votes and rated on a board of its own
(``judging.services.machine``).

A decision is final and public when it is made. In the same transaction it moves the
streaming ratings, marks the votes that produced it, freezes votes still inside their
undo window (they were cast blind and count as cast), compares judges on a redundancy
battle, and voids every open assignment of the battle: a judge who holds it without a
vote may still vote, but that vote can no longer count, because from this commit on
the leaderboard shows which agents moved (SPEC §5.1). After commit those judges are
told on their judge page, and the board frame goes out.

Lock order, everywhere: the battle row, then judge profiles (in id order), then agent
ratings (in agent id order). Nothing takes a later lock and then an earlier one. The
agent ratings come last on purpose: every decision involving an agent waits for its
row, so a decision holds it only for its final statements (the ratings, the battle row,
the commit), not while the votes and assignments are written."""

import json
import math
from collections.abc import Sequence

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.template.loader import render_to_string
from django.utils import timezone

from arena_site.exceptions import ApplicationError
from arena_site.realtime import group_send
from battles.models import Battle
from judging.models import Assignment, JudgeProfile, Vote
from judging.services.trust import profiles_locked, trust_compare, trust_uncompare
from ratings.services import rating_revert_battle, ratings_apply_battles

Source = Battle.DecisionSource
HUMAN = (Source.CROWD, Source.SUBMITTER)
# What a decision writes on the battle row (``decide_due_at``: nothing is due any more).
DECIDED_FIELDS = [
    "outcome", "evidence_weight", "status", "decision_source", "decided_at",
    "exclusion_reason", "cluster_judge", "first_judgment_at", "streaming_applied",
    "decide_due_at",
]  # fmt: skip


def judge_group(user_id: int) -> str:
    """The Channels group of one judge's open judge pages."""
    return f"judge-{user_id}"


def battle_decide(
    *,
    battle: Battle,
    outcome: str,
    weight: float,
    source: str,
    votes: Sequence[Vote] = (),
    weights: Sequence[float] = (),
    cluster_judge_id: int | None = None,
    push: bool = True,
    live_votes: Sequence[Vote] | None = None,
) -> None:
    """Decides ``battle`` with ``outcome`` and evidence weight ``weight`` (w_b), on behalf
    of ``source`` (a ``Battle.DecisionSource``). ``votes`` are the votes that produced
    it (V_b), with their trust ``weights`` when the crowd decided a redundancy battle;
    ``cluster_judge_id`` the battle's cluster in the rating intervals (default: the
    judge of the earliest of ``votes``). ``push`` off leaves the board push to the
    caller (a bulk import pushes once). ``live_votes``: every live vote of the battle,
    when the caller has just read them under the battle's lock (then the votes still
    inside their undo window are frozen only if there is one).

    A batch of one (``DecisionBatch``). Preconditions: the battle row is locked
    (``select_for_update``) with its agents loaded, and it is open for judging. Raises
    ``ApplicationError`` for an outcome, weight or source the rating cannot take."""
    batch = DecisionBatch(push=push)
    batch.decide(
        battle=battle, outcome=outcome, weight=weight, source=source, votes=votes,
        weights=weights, cluster_judge_id=cluster_judge_id, live_votes=live_votes,
    )  # fmt: skip
    batch.write()


class DecisionBatch:
    """The door in its general form: battles decided one after another in memory, in
    order, as ``battle_decide`` would decide each in turn, then written together in one
    transaction with a fixed number of statements, whatever their count (the votes'
    flags, the frozen undo windows, the trust comparisons, the voided assignments, the
    agents' rating rows, the battle rows). The judges' profiles a redundancy decision
    compares are shared across the batch (``profiles``, by user id: a later battle's
    ballots see an earlier one's comparisons, as when decided one at a time), locked
    when first needed unless the caller locked them first (a batch of many must: the
    lock order). ``established``: a judge left probation in this batch.

    Preconditions: every battle row locked with its agents loaded; nothing but
    ``decide`` changes them until ``write``, which takes the agents' rating rows last."""

    def __init__(
        self, *, push: bool = True, profiles: dict[int, JudgeProfile] | None = None, now=None
    ) -> None:
        self.push = push
        self.profiles = profiles if profiles is not None else {}
        self.now = now or timezone.now()
        self.established = False
        self._battles: list[Battle] = []
        self._counted: list[int] = []
        self._agreed: dict[int, bool] = {}
        self._freeze: list[int] = []
        self._compared: dict[int, JudgeProfile] = {}

    def __len__(self) -> int:
        return len(self._battles)

    def decide(
        self,
        *,
        battle: Battle,
        outcome: str,
        weight: float,
        source: str,
        votes: Sequence[Vote] = (),
        weights: Sequence[float] = (),
        cluster_judge_id: int | None = None,
        live_votes: Sequence[Vote] | None = None,
    ) -> None:
        """``battle_decide``'s arguments; decided in memory, written by ``write``."""
        _decision_check(battle, outcome=outcome, weight=weight, source=source)
        if any(b.pk == battle.pk for b in self._battles):
            raise ApplicationError(f"Battle {battle.pk} is decided twice in one batch.")
        now = self.now
        battle.outcome = outcome
        battle.evidence_weight = float(weight)
        battle.status = Battle.Status.DECIDED
        battle.decision_source = source
        battle.decided_at = now
        battle.exclusion_reason = ""
        battle.decide_due_at = None
        if cluster_judge_id is None and votes:
            cluster_judge_id = min(votes, key=lambda v: (v.voted_at, v.pk)).judge_id
        battle.cluster_judge_id = cluster_judge_id
        if votes and battle.first_judgment_at is None and source in HUMAN:
            # h of SPEC §6 is a live judgment: an import or a machine verdict has none
            battle.first_judgment_at = min(v.voted_at for v in votes)
        for vote in votes:
            vote.counted = True
            self._counted.append(vote.pk)
        # Votes still in their undo window were cast blind: they stand as cast.
        if live_votes is None or any(v.final_at > now for v in live_votes):
            self._freeze.append(battle.pk)
        if source == Source.CROWD and battle.redundancy_target > 1 and weights:
            self._compare(votes, weights)
        self._battles.append(battle)

    def _compare(self, votes: Sequence[Vote], weights: Sequence[float]) -> None:
        missing = {v.judge_id for v in votes} - self.profiles.keys()
        if missing:
            self.profiles.update(profiles_locked(missing))
        agreed = trust_compare(votes, weights, self.profiles, now=self.now)
        for vote in votes:
            if vote.pk in agreed:
                vote.agreed = agreed[vote.pk]
                profile = self.profiles[vote.judge_id]
                self._compared[profile.pk] = profile
                if profile.established_at == self.now and not profile.is_untrusted:
                    self.established = True
        self._agreed.update(agreed)

    def write(self) -> None:
        """Writes every decision of the batch; the board pushes and the judges' news go
        out after commit."""
        if not self._battles:
            return
        now, ids = self.now, [b.pk for b in self._battles]
        if self._counted:
            Vote.objects.filter(pk__in=self._counted).update(counted=True)
        if self._freeze:
            Vote.objects.filter(
                battle_id__in=self._freeze, retracted=False, final_at__gt=now
            ).update(final_at=now)
        for agreed in (True, False):
            compared = [pk for pk, value in self._agreed.items() if value is agreed]
            if compared:
                Vote.objects.filter(pk__in=compared).update(agreed=agreed)
        for _, profile in sorted(self._compared.items()):
            profile.save(update_fields=["seen_count", "agree_count", "trust", "established_at"])
        _assignments_void(ids, now)
        # Last (the lock order): the agents' rating rows, then the battle rows.
        ratings_apply_battles(self._battles, push=self.push)  # sets streaming_applied
        _battles_write(self._battles)
        self._battles = []


def _decision_check(battle: Battle, *, outcome: str, weight: float, source: str) -> None:
    if outcome not in Battle.Outcome.values:
        raise ApplicationError(f"outcome must be one of {', '.join(Battle.Outcome.values)}.",
                               code="invalid_outcome")  # fmt: skip
    if source not in Source.values:
        raise ApplicationError(f"source must be one of {', '.join(Source.values)}.",
                               code="invalid_source")  # fmt: skip
    if not (isinstance(weight, int | float) and math.isfinite(weight) and weight >= 0):
        raise ApplicationError("weight must be a finite number ≥ 0.", code="invalid_weight")
    if battle.status != Battle.Status.JUDGING:
        raise ApplicationError(
            f"Battle {battle.pk} is {battle.status}; only a battle being judged can be decided.",
            code="not_judging",
            status=409,
        )


def _battles_write(battles: list[Battle]) -> None:
    """The decided battles' rows: one UPDATE from a VALUES list on PostgreSQL, a save
    each elsewhere (and for one)."""
    if len(battles) == 1 or connection.vendor != "postgresql":
        for battle in battles:
            battle.save(update_fields=DECIDED_FIELDS)
        return
    table = connection.ops.quote_name(Battle._meta.db_table)
    rows, params = [], []
    row = (
        "(%s::bigint, %s::varchar, %s::float8, %s::varchar, %s::timestamptz, %s::bigint,"
        " %s::timestamptz, %s::jsonb)"
    )
    for b in battles:
        rows.append(row)
        applied = json.dumps(b.streaming_applied)
        params += [b.pk, b.outcome, b.evidence_weight, b.decision_source, b.decided_at,
                   b.cluster_judge_id, b.first_judgment_at, applied]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS b SET outcome = v.outcome, evidence_weight = v.weight,"  # noqa: S608 (names from models)
            " status = 'decided', decision_source = v.source, decided_at = v.decided_at,"
            " exclusion_reason = '', cluster_judge_id = v.cluster, first_judgment_at = v.first,"
            " streaming_applied = v.applied, decide_due_at = NULL"
            f" FROM (VALUES {', '.join(rows)})"
            " AS v(id, outcome, weight, source, decided_at, cluster, first, applied)"
            " WHERE b.id = v.id",
            params,
        )


def _assignments_void(battle_ids: list[int], now) -> None:
    """Voids the assignments of judges who hold one of the battles without a live vote,
    and tells their pages after commit."""
    live_vote = Vote.objects.filter(
        battle=OuterRef("battle"), judge=OuterRef("judge"), retracted=False
    )
    open_ones = list(
        Assignment.objects.filter(battle_id__in=battle_ids, voided_at=None)
        .filter(~Exists(live_vote))
        .values_list("pk", "battle_id", "judge_id")
    )
    if not open_ones:
        return
    Assignment.objects.filter(pk__in=[pk for pk, _, _ in open_ones]).update(voided_at=now)

    def tell() -> None:
        html = {}
        for _, battle_id, judge_id in open_ones:
            if battle_id not in html:
                html[battle_id] = render_to_string("judging/_voided.html", {"battle_id": battle_id})
            group_send(
                judge_group(judge_id),
                {"type": "judge.voided", "battle": battle_id, "html": html[battle_id]},
            )

    transaction.on_commit(tell)


def battle_undecide(battle: Battle) -> None:
    """Takes a decision back (a vote that produced it became inadmissible, or an operator
    excludes the battle): the streaming update is reverted exactly, the counted flags and
    trust comparisons it made are undone, and the battle is open for judging again.
    Assignments voided by the decision stay voided: those judges saw the result.
    Precondition: the battle row is locked."""
    votes = list(battle.votes.filter(Q(counted=True) | Q(agreed__isnull=False)))
    trust_uncompare(votes)
    Vote.objects.filter(pk__in=[v.pk for v in votes]).update(counted=False, agreed=None)
    rating_revert_battle(battle=battle)  # last (the lock order)
    battle.outcome = ""
    battle.evidence_weight = None
    battle.status = Battle.Status.JUDGING
    battle.decision_source = ""
    battle.decided_at = None
    battle.cluster_judge = None
    battle.decide_due_at = timezone.now()  # open again: the decider looks at it
    battle.save(
        update_fields=[
            "outcome", "evidence_weight", "status", "decision_source", "decided_at",
            "cluster_judge", "decide_due_at",
        ]
    )  # fmt: skip
