"""SPEC §5.2/§5.4: consensus on redundancy battles, trust ω from agreement with the
other judges, evidence weight w_b = γ_b · mean ω, untrusted judges."""

import datetime as dt

import pytest

from judging.decision import consensus, plurality
from judging.models import JudgeProfile, Vote
from judging.services import battle_resolve, judge_trust_set
from tests.judging.battle_factories import T0, ended_battle, judge_on, people

MINUTE = dt.timedelta(minutes=1)


def omega(user) -> tuple[float, int, int]:
    p = JudgeProfile.objects.get(user=user)
    return (pytest.approx(p.trust), p.agree_count, p.seen_count)


def judged(battle, choices, crowd, start=T0):
    for i, (person, choice) in enumerate(zip(crowd, choices, strict=True)):
        judge_on(person, battle, choice, at=start + i * MINUTE)
    battle_resolve(battle_id=battle.pk)
    battle.refresh_from_db()
    return battle


@pytest.mark.parametrize(
    ("votes", "top"),
    [
        ([("A", 0.5), ("A", 0.5), ("B", 1.1)], "B"),
        ([("A", 0.5), ("A", 0.5), ("B", 0.9)], "A"),
        ([("A", 0.5), ("B", 0.5)], None),
        ([("A", 0.1 + 0.2), ("B", 0.3)], None),  # equal up to rounding is a tie
        ([("tie", 0.5)], "tie"),
        ([], None),
    ],
)
def test_plurality_names_no_winner_on_a_tie_at_the_top(votes, top):
    assert plurality(votes) == top
    if votes:
        assert consensus(votes) == (top or "tie")


def test_three_judges_decide_by_weighted_plurality_and_trust_moves(alice, roster):
    crowd = people(3)
    battle = judged(ended_battle(alice, target=3), ["A", "A", "B"], crowd)

    assert (battle.status, battle.outcome) == ("decided", "A")
    # w_b uses the ω the judges had when their votes produced the consensus (new: 0.5)
    assert battle.evidence_weight == pytest.approx(0.5)
    assert battle.cluster_judge_id == crowd[0].pk
    assert set(Vote.objects.filter(counted=True).values_list("judge_id", flat=True)) == {
        p.pk for p in crowd
    }
    # each judge against the others' consensus: A vs {A,B} → no consensus (skipped);
    # B vs {A,A} → A, disagrees
    assert omega(crowd[0]) == (0.5, 0, 0)
    assert omega(crowd[1]) == (0.5, 0, 0)
    assert omega(crowd[2]) == (pytest.approx(1 / 3), 0, 1)


def test_agreement_raises_trust_and_weights_the_next_battle(alice, roster):
    crowd = people(3)
    judged(ended_battle(alice, target=3), ["B", "B", "B"], crowd)
    for person in crowd:
        assert omega(person) == (pytest.approx(2 / 3), 1, 1)  # (1 + 1) / (1 + 2)
    second = judged(ended_battle(alice, target=3), ["A", "A", "A"], crowd, T0 + 10 * MINUTE)
    # on probation (fewer than PROBATION_VOTES = 5 compared votes) ω counts at most 0.5
    assert second.evidence_weight == pytest.approx(0.5)
    for person in crowd:
        assert omega(person) == (pytest.approx(3 / 4), 2, 2)


def test_probation_ends_after_five_compared_votes_and_then_full_trust_counts(alice, roster):
    crowd = people(3)
    for k in range(5):
        judged(ended_battle(alice, target=3), ["B", "B", "B"], crowd, T0 + 10 * k * MINUTE)
    profiles = JudgeProfile.objects.filter(user__in=crowd)
    assert all(p.established_at is not None for p in profiles)
    assert [p.seen_count for p in profiles] == [5, 5, 5]
    sixth = judged(ended_battle(alice, target=3), ["A", "A", "A"], crowd, T0 + 60 * MINUTE)
    assert sixth.evidence_weight == pytest.approx(6 / 7)  # (5 + 1) / (5 + 2), uncapped


def test_trust_is_clipped_at_the_floor(alice, roster):
    crowd = people(3)
    JudgeProfile.objects.create(user=crowd[2], trust=0.1, agree_count=0, seen_count=20)
    judged(ended_battle(alice, target=3), ["A", "A", "B"], crowd)
    assert omega(crowd[2]) == (pytest.approx(0.1), 0, 21)  # 1/23 < 0.1


def test_a_trusted_minority_outweighs_two_new_judges(alice, roster):
    crowd = people(3)
    for person in crowd[:2]:
        JudgeProfile.objects.create(user=person, trust=0.4, agree_count=1, seen_count=3)
    JudgeProfile.objects.create(
        user=crowd[2], trust=1.0, agree_count=30, seen_count=30, established_at=T0
    )
    battle = judged(ended_battle(alice, target=3), ["A", "A", "B"], crowd)
    assert battle.outcome == "B"  # 1.0 for B against 0.4 + 0.4 for A
    assert battle.evidence_weight == pytest.approx((0.4 + 0.4 + 1.0) / 3)


def test_equal_weight_on_top_is_a_tie(alice, roster):
    crowd = people(2)
    battle = judged(ended_battle(alice, target=2), ["A", "B"], crowd)
    assert battle.outcome == "tie"


def test_single_judge_battles_do_not_move_trust(alice, judge, roster):
    judged(ended_battle(alice), ["A"], [judge])
    assert omega(judge) == (0.5, 0, 0)


def test_calibration_battles_weigh_a_quarter(alice, judge, roster):
    battle = judged(ended_battle(alice, calibration=True), ["A"], [judge])
    assert battle.evidence_weight == pytest.approx(0.25 * 0.5)


def test_an_untrusted_judges_votes_are_inadmissible(alice, judge, roster, admin_user):
    judge_trust_set(judge_id=judge.pk, untrusted=True, note="bot-like clicks", actor=admin_user)
    battle = ended_battle(alice)
    vote = judge_on(judge, battle, "A")
    assert (vote.admissible, vote.inadmissible_reason) == (False, "untrusted_judge")
    battle_resolve(battle_id=battle.pk)
    battle.refresh_from_db()
    assert battle.outcome == ""


def test_untrusting_a_judge_takes_back_their_decisions(alice, judge, roster, admin_user):
    from ratings.models import AgentRating

    battle = judged(ended_battle(alice), ["A"], [judge])
    assert battle.outcome == "A"
    judge_trust_set(judge_id=judge.pk, untrusted=True, note="paid to vote", actor=admin_user)
    assert Vote.objects.get(judge=judge).inadmissible_reason == "untrusted_judge"
    # (the service resolves the battle after commit; this test's transaction never commits)
    battle_resolve(battle_id=battle.pk)
    battle.refresh_from_db()
    # back in the pool, not excluded: one judge's bad votes remove no evidence
    assert (battle.status, battle.outcome, battle.exclusion_reason) == ("judging", "", "")
    for rating, count in AgentRating.objects.values_list("streaming_rating", "rated_battles"):
        assert (rating, count) == (pytest.approx(1000.0), 0)
    # trusted again: the vote counts again (it passed the reading time)
    judge_trust_set(judge_id=judge.pk, untrusted=False, note="appeal upheld", actor=admin_user)
    vote = Vote.objects.get(judge=judge)
    assert (vote.admissible, vote.inadmissible_reason) == (True, "")
    battle_resolve(battle_id=battle.pk)
    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.exclusion_reason) == ("decided", "A", "")
    assert not battle.exclusion_log.exists()
