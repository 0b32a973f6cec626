"""``battle_decide``: the one door through which every battle is decided (crowd,
submitting team, import, later machine verdicts)."""

import math

import pytest
from django.db import transaction

from arena_site.exceptions import ApplicationError
from battles.models import Battle
from judging.models import Assignment, Vote
from judging.services import battle_decide
from ratings.models import AgentRating
from ratings.selectors import rated_battles
from tests.judging.battle_factories import T0, ended_battle, people, serve


def locked(battle: Battle) -> Battle:
    return Battle.objects.select_for_update().select_related("agent_a", "agent_b").get(pk=battle.pk)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"outcome": "C"}, "invalid_outcome"),
        ({"outcome": ""}, "invalid_outcome"),
        ({"weight": -0.1}, "invalid_weight"),
        ({"weight": math.nan}, "invalid_weight"),
        ({"weight": math.inf}, "invalid_weight"),
        ({"weight": "1"}, "invalid_weight"),
        ({"source": "oracle"}, "invalid_source"),
    ],
)
def test_the_door_refuses_what_the_rating_cannot_take(alice, roster, kwargs, code):
    battle = ended_battle(alice)
    args = {"outcome": "A", "weight": 1.0, "source": "import", **kwargs}
    with transaction.atomic(), pytest.raises(ApplicationError) as refused:
        battle_decide(battle=locked(battle), **args)
    assert refused.value.code == code
    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == ("judging", "")
    assert not AgentRating.objects.filter(rated_battles__gt=0).exists()


@pytest.mark.parametrize("status", ["screening", "decided", "excluded", "queued", "failed"])
def test_only_a_battle_being_judged_can_be_decided(alice, roster, status):
    battle = ended_battle(alice, status=status)
    with transaction.atomic(), pytest.raises(ApplicationError) as refused:
        battle_decide(battle=locked(battle), outcome="A", weight=1.0, source="import")
    assert (refused.value.status, refused.value.code) == (409, "not_judging")


def test_a_decision_moves_the_streaming_board_and_enters_the_rated_corpus(alice, roster):
    battle = ended_battle(alice)
    with transaction.atomic():
        battle_decide(battle=locked(battle), outcome="both_bad", weight=0.75, source="import")
    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.evidence_weight) == ("decided", "both_bad", 0.75)
    assert battle.decision_source == "import" and battle.decided_at is not None
    assert battle.first_judgment_at is None  # not a live judgment (SPEC §6 h)
    assert battle.streaming_applied == {"a": 0.0, "b": 0.0, "y": 0.5}
    assert list(rated_battles(arena_id=battle.arena_id)) == [battle]
    assert sorted(AgentRating.objects.values_list("draws", flat=True)) == [1, 1]


def test_a_decision_voids_the_assignments_of_judges_holding_the_battle(
    alice, roster, django_capture_on_commit_callbacks
):
    holder, voter = people(2)
    battle = ended_battle(alice)
    serve(holder)
    serve(voter)
    vote = Vote.objects.create(
        judge=voter, battle=battle, choice="A", served_at=T0, voted_at=T0, final_at=T0,
        admissible=True,
    )  # fmt: skip
    with django_capture_on_commit_callbacks() as callbacks, transaction.atomic():
        battle_decide(battle=locked(battle), outcome="A", weight=0.5, source="crowd", votes=[vote])
    held = Assignment.objects.get(judge=holder, battle=battle)
    voted = Assignment.objects.get(judge=voter, battle=battle)
    assert held.voided_at is not None and voted.voided_at is None
    vote.refresh_from_db()
    assert vote.counted
    battle.refresh_from_db()
    assert battle.cluster_judge_id == voter.pk and battle.first_judgment_at == T0
    assert len(callbacks) >= 2  # the board frame and the holder's notice
