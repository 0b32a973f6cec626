"""SPEC §5.4 with §5.1's conflict rule: every member of the submitting team casts a
*submitter* vote. Such a vote decides only when no independent judge's vote counts by the
end of the judging window (JUDGING_TTL), and then the battle is self-judged (published in
its own tally); until then it decides nothing and publishes nothing, so the battle stays
open for independent judges, whose votes alone decide it."""

import datetime as dt

import pytest
import time_machine

from agents.models import Arena
from judging.models import Vote
from judging.services import battle_resolve, battles_resolve_pending
from ratings.models import AgentRating
from ratings.selectors import self_judged_tally
from tests.judging.battle_factories import T0, cast, ended_battle, judge_on, people, serve

TTL = dt.timedelta(days=1)
# ended_battle's lanes ended one minute before T0; the window closes a day after that
CLOSED = T0 - dt.timedelta(minutes=1) + TTL + dt.timedelta(seconds=1)


def streaming() -> dict[str, tuple[float, int, int, int, int]]:
    return {
        r.agent.slug: (r.streaming_rating, r.rated_battles, r.wins, r.losses, r.draws)
        for r in AgentRating.objects.select_related("agent")
    }


def resolve_at(battle, when):
    with time_machine.travel(when, tick=False):
        return battle_resolve(battle_id=battle.pk)


def test_a_submitter_vote_alone_waits_for_the_window_then_decides_self_judged(alice, roster):
    battle = ended_battle(alice)
    vote = judge_on(alice, battle, "A")
    assert vote.is_submitter
    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == ("judging", "")
    assert streaming() == {}  # nothing moved, nothing published
    assert resolve_at(battle, CLOSED - dt.timedelta(seconds=2)) is False

    assert resolve_at(battle, CLOSED) is True

    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.decision_source) == (
        "decided", "A", "submitter",
    )  # fmt: skip
    assert battle.cluster_judge_id == alice.pk
    assert battle.evidence_weight == pytest.approx(0.5)
    assert streaming()["rulebook"][0] == pytest.approx(1024.0)
    assert self_judged_tally(arena_id=Arena.objects.public().pk) == 1


def test_the_sweep_closes_the_window(alice, roster):
    battle = ended_battle(alice)
    judge_on(alice, battle, "B")
    with time_machine.travel(CLOSED, tick=False):
        assert battles_resolve_pending() == [battle.pk]
    battle.refresh_from_db()
    assert (battle.outcome, battle.decision_source) == ("B", "submitter")


def test_a_teammate_of_the_submitter_casts_a_submitter_vote_too(alice, bob, roster):
    """bob did not submit the task, but he is on alice's team: not independent."""
    battle = ended_battle(alice)
    vote = judge_on(bob, battle, "A")
    assert vote.is_submitter
    battle.refresh_from_db()
    assert battle.status == "judging"
    resolve_at(battle, CLOSED)
    battle.refresh_from_db()
    assert battle.decision_source == "submitter"


def test_an_independent_vote_decides_and_the_submitters_does_not_count(alice, judge, roster):
    battle = ended_battle(alice)
    judge_on(alice, battle, "A")
    # still served to independent judges
    assert serve(judge, T0 + dt.timedelta(minutes=1)).pk == battle.pk
    cast(judge, battle, "B", T0 + dt.timedelta(minutes=2))  # resolved with the vote

    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.decision_source) == ("decided", "B", "crowd")
    assert battle.cluster_judge_id == judge.pk
    assert self_judged_tally(arena_id=battle.arena_id) == 0
    counted = dict(Vote.objects.filter(battle=battle).values_list("judge__username", "counted"))
    assert counted == {"alice": False, "judge": True}
    ratings = streaming()
    assert ratings["rulebook"] == (pytest.approx(976.0), 1, 0, 1, 0)
    assert ratings["idle"] == (pytest.approx(1024.0), 1, 1, 0, 0)
    assert battle_resolve(battle_id=battle.pk) is False  # idempotent
    assert streaming() == ratings


def test_own_team_battles_are_served_last(alice, judge, roster):
    own = ended_battle(alice)
    (outsider,) = people(1, prefix="other")
    from tests.conftest import make_person

    other_team = make_person("olga", "Olgaco", None)
    theirs = ended_battle(other_team)
    assert serve(alice).pk == theirs.pk
    assert serve(outsider).pk == own.pk  # oldest first for an outsider


def test_on_a_redundancy_battle_submitter_votes_never_count_while_independents_come(alice, roster):
    j1, j2, j3 = people(3)
    battle = ended_battle(alice, target=3)
    judge_on(alice, battle, "A")
    judge_on(j1, battle, "B", at=T0 + dt.timedelta(minutes=1))
    judge_on(j2, battle, "B", at=T0 + dt.timedelta(minutes=2))
    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == ("judging", "")
    assert streaming() == {}
    judge_on(j3, battle, "A", at=T0 + dt.timedelta(minutes=3))
    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.decision_source) == ("decided", "B", "crowd")
    assert battle.cluster_judge_id == j1.pk
    assert not Vote.objects.get(judge=alice).counted


def test_an_inadmissible_independent_vote_leaves_the_decision_to_the_window(alice, judge, roster):
    battle = ended_battle(alice)
    judge_on(alice, battle, "A")
    serve(judge, T0 + dt.timedelta(minutes=1))
    cast(judge, battle, "B", T0 + dt.timedelta(minutes=1, seconds=2))  # too fast
    battle.refresh_from_db()
    assert battle.status == "judging"
    resolve_at(battle, CLOSED)
    battle.refresh_from_db()
    assert (battle.outcome, battle.decision_source) == ("A", "submitter")
