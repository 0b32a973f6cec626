"""When the crowd's votes decide a battle, and what they decide (SPEC §5.2–§5.4, with the
arena's choices in docs/method.md). Pure: no ORM; the resolution service turns rows
into ``Ballot``s, calls ``decide`` and carries out the ``Verdict`` through the one door,
``judging.services.decisions.battle_decide``.

The rule, in order:

1. Only votes past their undo window (``final``) can trigger a decision. Votes of members
   of the submitting team are *submitter* votes; the others are *independent*.
2. Decided by the crowd when the final, admissible, independent votes reach the battle's
   target and, where probation applies (the arena has an established judge), at least one
   of them is an established judge's. V_b is every admissible independent vote cast so
   far, final or still in its undo window: all were cast blind, before any result.
3. The outcome is the weighted plurality of V_b (weights ω, a probationary judge's capped
   at 0.5 by the caller), except that probationary votes cannot overturn established
   ones: when the established votes in V_b have a unique leader, that is the outcome;
   only an established tie is broken by the rest. A tie at the top is "tie".
4. A battle open past JUDGING_TTL is decided with what it has: by its admissible
   independent votes (one established among them where probation applies), else by the
   submitter team's admissible votes (self-judged), else excluded (rule 7).
5. Before that, it is excluded early only when ``rule6_factor × target`` distinct
   independent judges abstained or voted too fast and no admissible vote exists: no one
   account can remove a battle from the rating.
6. Otherwise it waits (back in the pool).

Evidence weight: w_b = γ_b · mean ω over V_b.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

WAIT, DECIDE, EXCLUDE = "wait", "decide", "exclude"
CROWD, SUBMITTER = "crowd", "submitter"
# Inadmissible for reasons that say the battle is hard to judge (rule 7's early count);
# an untrusted judge's or a late vote says nothing about the battle.
EARLY_EXCLUSION_REASONS = frozenset({"abstain", "too_fast"})


@dataclass(frozen=True)
class Ballot:
    """One live vote as the rule sees it, in voting order."""

    vote_id: int
    judge_id: int
    choice: str
    submitter: bool  # cast by a member of the submitting team (SPEC §5.4)
    admissible: bool
    final: bool  # past its undo window: it can no longer be taken back
    trust: float  # ω, already capped while the judge is on probation
    established: bool  # past probation (or approved directly by an operator)
    reason: str = ""  # why it is inadmissible ("" when admissible)


@dataclass(frozen=True)
class Case:
    target: int  # independent admissible votes wanted (1, or 3 on a redundancy battle)
    gamma: float  # γ_b: γ_cal on a calibration showcase, else 1
    expired: bool  # open for judging longer than JUDGING_TTL
    probation_applies: bool  # the arena has an established judge
    rule6_factor: int = 6


@dataclass(frozen=True)
class Verdict:
    action: str  # WAIT, DECIDE or EXCLUDE
    outcome: str = ""
    weight: float | None = None
    source: str = ""  # CROWD or SUBMITTER
    counted: tuple[int, ...] = ()  # vote ids of V_b
    cluster_judge: int | None = None  # the judge of V_b's earliest vote (SPEC §7.3)
    note: str = ""


def plurality(votes: Sequence[tuple[str, float]]) -> str | None:
    """The choice with the largest total weight; None when several share the top (or
    there is no vote)."""
    totals: dict[str, float] = {}
    for choice, weight in votes:
        totals[choice] = totals.get(choice, 0.0) + weight
    if not totals:
        return None
    best = max(totals.values())
    leaders = [choice for choice, total in totals.items() if math.isclose(total, best)]
    return leaders[0] if len(leaders) == 1 else None


def consensus(votes: Sequence[tuple[str, float]]) -> str:
    """SPEC §5.2: the weighted plurality; a tie at the top gives "tie". Precondition: at
    least one vote."""
    return plurality(votes) or "tie"


def outcome_of(ballots: Sequence[Ballot]) -> str:
    """Rule 3: the established votes' unique leader if there is one, else the consensus
    of all (probationary votes only break an established tie)."""
    established = plurality([(b.choice, b.trust) for b in ballots if b.established])
    return established or consensus([(b.choice, b.trust) for b in ballots])


def _decided(case: Case, ballots: Sequence[Ballot], source: str) -> Verdict:
    weights = [b.trust for b in ballots]
    return Verdict(
        action=DECIDE,
        outcome=outcome_of(ballots),
        weight=case.gamma * sum(weights) / len(weights),
        source=source,
        counted=tuple(b.vote_id for b in ballots),
        cluster_judge=ballots[0].judge_id,
    )


def decide(case: Case, ballots: Sequence[Ballot]) -> Verdict:
    """The verdict on a battle still open for judging, from its live votes in voting
    order (see the module docstring)."""
    independent = [b for b in ballots if b.admissible and not b.submitter]
    final_independent = [b for b in independent if b.final]
    submitter = [b for b in ballots if b.admissible and b.submitter and b.final]

    def backed(votes: Sequence[Ballot]) -> bool:
        return not case.probation_applies or any(b.established for b in votes)

    if len(final_independent) >= case.target and backed(final_independent):
        return _decided(case, independent, CROWD)
    if case.expired:
        if final_independent and backed(final_independent):
            return _decided(case, independent, CROWD)
        if submitter:
            return _decided(case, submitter, SUBMITTER)
        return Verdict(
            action=EXCLUDE,
            note="no admissible vote within the judging window"
            + (" (only probationary judges voted)" if final_independent else ""),
        )
    refusals = {
        b.judge_id
        for b in ballots
        if b.final and not b.submitter and b.reason in EARLY_EXCLUSION_REASONS
    }
    if not independent and not submitter and len(refusals) >= case.rule6_factor * case.target:
        return Verdict(
            action=EXCLUDE,
            note=f"{len(refusals)} judges abstained or voted too fast; no admissible vote",
        )
    return Verdict(action=WAIT)
