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

import math
from collections.abc import Sequence

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.template.loader import render_to_string
from django.utils import timezone

from arena_site.exceptions import ApplicationError
from arena_site.realtime import group_send
from battles.models import Battle
from judging.models import Assignment, Vote
from judging.services.trust import trust_compare, trust_uncompare
from ratings.services import rating_apply_battle, rating_revert_battle

Source = Battle.DecisionSource
HUMAN = (Source.CROWD, Source.SUBMITTER)


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

    Preconditions: the battle row is locked (``select_for_update``) with its agents
    loaded, and it is open for judging. Raises ``ApplicationError`` for an outcome,
    weight or source the rating cannot take."""
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
    now = timezone.now()
    battle.outcome = outcome
    battle.evidence_weight = float(weight)
    battle.status = Battle.Status.DECIDED
    battle.decision_source = source
    battle.decided_at = now
    battle.exclusion_reason = ""
    if cluster_judge_id is None and votes:
        cluster_judge_id = min(votes, key=lambda v: (v.voted_at, v.pk)).judge_id
    battle.cluster_judge_id = cluster_judge_id
    if votes and battle.first_judgment_at is None and source in HUMAN:
        # h of SPEC §6 is a live judgment: an import or a machine verdict has none
        battle.first_judgment_at = min(v.voted_at for v in votes)
    if votes:
        Vote.objects.filter(pk__in=[v.pk for v in votes]).update(counted=True)
        for vote in votes:
            vote.counted = True
    # Votes still in their undo window were cast blind: they stand as cast.
    if live_votes is None or any(v.final_at > now for v in live_votes):
        Vote.objects.filter(battle=battle, retracted=False, final_at__gt=now).update(final_at=now)
    if source == Source.CROWD and battle.redundancy_target > 1 and weights:
        trust_compare(votes, weights)
    _assignments_void(battle, now)
    # Last (the lock order): the agents' rating rows, then the battle row with the deltas.
    rating_apply_battle(battle=battle, record=False, push=push)  # sets streaming_applied
    battle.save(
        update_fields=[
            "outcome", "evidence_weight", "status", "decision_source", "decided_at",
            "exclusion_reason", "cluster_judge", "first_judgment_at", "streaming_applied",
        ]
    )  # fmt: skip


def _assignments_void(battle: Battle, now) -> None:
    """Voids the assignments of judges who hold the battle without a live vote, and tells
    their pages after commit."""
    live_vote = Vote.objects.filter(battle=battle, judge=OuterRef("judge"), retracted=False)
    open_ones = Assignment.objects.filter(battle=battle, voided_at=None).filter(~Exists(live_vote))
    judges = list(open_ones.values_list("judge_id", flat=True))
    if not judges:
        return
    open_ones.update(voided_at=now)
    html = render_to_string("judging/_voided.html", {"battle_id": battle.pk})

    def tell() -> None:
        for judge_id in judges:
            group_send(
                judge_group(judge_id),
                {"type": "judge.voided", "battle": battle.pk, "html": html},
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
    battle.save(
        update_fields=[
            "outcome", "evidence_weight", "status", "decision_source", "decided_at",
            "cluster_judge",
        ]
    )  # fmt: skip
