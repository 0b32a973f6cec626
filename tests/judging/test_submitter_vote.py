"""SPEC §5.4: the submitter's blind vote decides only while no independent judge has an
admissible vote; then it is dropped and the streaming ratings end up as if only the
independent votes had decided the battle."""

import datetime as dt

import pytest

from agents.models import Arena
from battles.models import Battle
from judging.models import Vote
from judging.selectors import self_judged_tally
from judging.services import battle_resolve
from ratings.models import AgentRating
from tests.judging.battle_factories import T0, cast, ended_battle, judge_on, people, serve


def streaming() -> dict[str, tuple[float, int, int, int, int]]:
    return {
        r.agent.slug: (r.streaming_rating, r.rated_battles, r.wins, r.losses, r.draws)
        for r in AgentRating.objects.select_related("agent")
    }


def test_the_submitters_vote_alone_decides_and_counts_as_self_judged(alice, roster):
    battle = ended_battle(alice)
    judge_on(alice, battle, "A")  # resolved with the vote

    assert battle_resolve(battle_id=battle.pk) is False  # nothing left to do

    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.self_judged) == ("decided", "A", True)
    assert battle.cluster_judge_id == alice.pk
    assert battle.evidence_weight == pytest.approx(0.5)
    assert streaming()["rulebook"][0] == pytest.approx(1024.0)
    assert self_judged_tally(arena_id=Arena.objects.public().pk) == 1


def test_an_independent_vote_replaces_the_submitters(alice, judge, roster):
    battle = ended_battle(alice)
    judge_on(alice, battle, "A")
    battle_resolve(battle_id=battle.pk)

    # still served to independent judges while self-judged
    assert serve(judge, T0 + dt.timedelta(minutes=1)).pk == battle.pk
    cast(judge, battle, "B", T0 + dt.timedelta(minutes=2))  # resolved with the vote

    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.self_judged) == ("decided", "B", False)
    assert battle.cluster_judge_id == judge.pk
    assert self_judged_tally(arena_id=battle.arena_id) == 0
    counted = dict(Vote.objects.filter(battle=battle).values_list("judge__username", "counted"))
    assert counted == {"alice": False, "judge": True}
    # as if only the independent vote had decided: B won the battle's only rating update
    ratings = streaming()
    assert ratings["rulebook"] == (pytest.approx(976.0), 1, 0, 1, 0)
    assert ratings["idle"] == (pytest.approx(1024.0), 1, 1, 0, 0)
    assert battle.streaming_applied["y"] == 0.0
    # idempotent
    assert battle_resolve(battle_id=battle.pk) is False
    assert streaming() == ratings


def test_same_result_as_an_independent_vote_alone(alice, judge, roster):
    """The replaced decision leaves no trace: compare with a battle judged only by the
    independent judge."""
    battle = ended_battle(alice)
    judge_on(alice, battle, "A")
    battle_resolve(battle_id=battle.pk)
    judge_on(judge, battle, "tie", at=T0 + dt.timedelta(minutes=1))
    battle_resolve(battle_id=battle.pk)
    replaced = streaming()

    AgentRating.objects.all().delete()
    other = ended_battle(alice)
    Battle.objects.filter(pk=battle.pk).update(status=Battle.Status.FAILED)
    (crowd,) = people(1)
    judge_on(crowd, other, "tie")
    battle_resolve(battle_id=other.pk)
    assert streaming() == replaced


def test_the_submitters_vote_is_ignored_once_an_independent_one_exists(alice, judge, roster):
    battle = ended_battle(alice)
    assert serve(alice, T0).pk == battle.pk  # served to both while judging
    judge_on(judge, battle, "B")
    cast(alice, battle, "A", T0 + dt.timedelta(minutes=1))
    battle.refresh_from_db()
    assert (battle.outcome, battle.self_judged) == ("B", False)
    assert not Vote.objects.get(judge=alice).counted


def test_on_a_redundancy_battle_one_independent_vote_reopens_it(alice, roster):
    """Target 3: the submitter's vote decides alone; a first independent vote drops it,
    and the battle waits (unrated) for three independent votes."""
    j1, j2, j3 = people(3)
    battle = ended_battle(alice, target=3)
    judge_on(alice, battle, "A")
    battle_resolve(battle_id=battle.pk)
    judge_on(j1, battle, "B", at=T0 + dt.timedelta(minutes=1))
    battle_resolve(battle_id=battle.pk)
    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.self_judged) == ("judging", "", False)
    assert streaming()["rulebook"][:2] == (pytest.approx(1000.0), 0)
    judge_on(j2, battle, "B", at=T0 + dt.timedelta(minutes=2))
    judge_on(j3, battle, "A", at=T0 + dt.timedelta(minutes=3))
    battle_resolve(battle_id=battle.pk)
    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.self_judged) == ("decided", "B", False)
    assert battle.cluster_judge_id == j1.pk


def test_an_inadmissible_independent_vote_does_not_replace_the_submitters(alice, judge, roster):
    battle = ended_battle(alice)
    judge_on(alice, battle, "A")
    battle_resolve(battle_id=battle.pk)
    serve(judge, T0 + dt.timedelta(minutes=1))
    cast(judge, battle, "B", T0 + dt.timedelta(minutes=1, seconds=2))  # too fast
    assert battle_resolve(battle_id=battle.pk) is False
    battle.refresh_from_db()
    assert (battle.outcome, battle.self_judged) == ("A", True)
