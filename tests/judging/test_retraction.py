"""Retracting a vote: DELETE /api/battles/<id>/votes/mine/ within VOTE_RETRACT_WINDOW_S;
a deciding vote's retraction reopens the battle and reverts its streaming update."""

import datetime as dt

import pytest
import time_machine

from battles.models import Battle
from judging.models import Vote
from judging.services import battle_resolve
from ratings.models import AgentRating
from tests.judging.battle_factories import READ, T0, cast, ended_battle, judge_on, people, serve

VOTED = T0 + READ


def retract(api, user, battle, at):
    with time_machine.travel(at, tick=False):
        return api(user).delete(f"/api/battles/{battle.pk}/votes/mine/")


def ratings() -> dict[str, tuple[float, int]]:
    return {
        r.agent.slug: (r.streaming_rating, r.rated_battles)
        for r in AgentRating.objects.select_related("agent")
    }


def test_retraction_inside_the_window_reopens_and_reverts(api, alice, judge, roster):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    battle_resolve(battle_id=battle.pk)
    assert ratings()["rulebook"] == (pytest.approx(1024.0), 1)

    response = retract(api, judge, battle, VOTED + dt.timedelta(seconds=120))

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["retracted"] is True and body["vote"] == Vote.objects.get().pk
    vote = Vote.objects.get()
    assert vote.retracted and not vote.counted
    assert vote.retracted_at == VOTED + dt.timedelta(seconds=120)
    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.evidence_weight) == ("judging", "", None)
    assert battle.cluster_judge_id is None and battle.streaming_applied is None
    assert ratings() == {"rulebook": (pytest.approx(1000.0), 0), "idle": (pytest.approx(1000.0), 0)}
    wins = AgentRating.objects.values_list("wins", "losses", "draws")
    assert sorted(wins) == [(0, 0, 0), (0, 0, 0)]


def test_retraction_after_the_window_is_409_and_changes_nothing(api, alice, judge, roster):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    battle_resolve(battle_id=battle.pk)

    response = retract(api, judge, battle, VOTED + dt.timedelta(seconds=121))

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "retract_window_closed"
    assert "120 s" in response.json()["error"]["message"]
    assert Vote.objects.get().retracted is False
    battle.refresh_from_db()
    assert battle.outcome == "A"


def test_the_window_is_a_setting(api, alice, judge, roster, settings):
    settings.ARENA = settings.ARENA.replace(vote_retract_window_s=10)
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    assert retract(api, judge, battle, VOTED + dt.timedelta(seconds=11)).status_code == 409
    assert retract(api, judge, battle, VOTED + dt.timedelta(seconds=10)).status_code == 200


def test_no_live_vote_is_404(api, alice, judge, roster):
    battle = ended_battle(alice)
    serve(judge)
    response = retract(api, judge, battle, VOTED)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    judge_on_other = retract(api, judge, Battle(pk=battle.pk + 999), VOTED)
    assert judge_on_other.status_code == 404


def test_a_retracted_vote_cannot_be_retracted_again_or_recast(api, alice, judge, roster):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    assert retract(api, judge, battle, VOTED + dt.timedelta(seconds=5)).status_code == 200
    assert retract(api, judge, battle, VOTED + dt.timedelta(seconds=6)).status_code == 404
    # the judge has seen the reveal: no second, unblind vote
    with time_machine.travel(VOTED + dt.timedelta(seconds=7), tick=False):
        again = api(judge).post(f"/api/battles/{battle.pk}/votes/", {"choice": "B"}, format="json")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "vote_retracted"
    # and it is not served to them again
    assert serve(judge, VOTED + dt.timedelta(seconds=8)) is None


def test_an_outsider_cannot_retract_someone_elses_vote(api, alice, judge, charlie, roster):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    response = retract(api, charlie, battle, VOTED + dt.timedelta(seconds=5))
    assert response.status_code == 404
    assert Vote.objects.get().retracted is False


def test_retracting_a_counted_vote_re_resolves_from_the_remaining_votes(api, alice, roster):
    """Target 1, decided by the first judge; a second judge's vote came in later. When
    the deciding vote is retracted, the remaining vote decides, with its own cluster."""
    first, second = people(2)
    battle = ended_battle(alice)
    served = serve(second, T0 - dt.timedelta(seconds=1))  # both were served before it decided
    assert served is not None and served.pk == battle.pk
    judge_on(first, battle, "A")
    cast(second, battle, "B", T0 + dt.timedelta(seconds=40))
    assert battle_resolve(battle_id=battle.pk) is False  # a late vote does not move it

    assert retract(api, first, battle, VOTED + dt.timedelta(seconds=60)).status_code == 200

    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.cluster_judge_id) == ("decided", "B", second.pk)
    assert ratings()["rulebook"] == (pytest.approx(976.0), 1)


def test_retracting_a_non_deciding_vote_leaves_the_decision(api, alice, roster):
    crowd = people(4)
    battle = ended_battle(alice, target=3)
    serve(crowd[3])  # served while it was still open
    for i, person in enumerate(crowd[:3]):
        judge_on(person, battle, "A", at=T0 + i * dt.timedelta(seconds=1))
    battle_resolve(battle_id=battle.pk)
    cast(crowd[3], battle, "B", T0 + dt.timedelta(seconds=5))  # too fast
    before = ratings()
    assert retract(api, crowd[3], battle, VOTED + dt.timedelta(seconds=10)).status_code == 200
    battle.refresh_from_db()
    assert battle.outcome == "A" and ratings() == before
