"""The undo window (VOTE_UNDO_WINDOW_S): a vote decides nothing and shows no name until
its window has passed; inside it the judge may take it back and vote again; after it the
vote is final. Votes of others still inside their window when a battle is decided stand
as cast."""

import datetime as dt

import pytest
import time_machine
from django.utils import timezone

from battles.models import Battle
from judging.models import Vote
from judging.services import battle_resolve, vote_status
from ratings.models import AgentRating
from tests.judging.battle_factories import READ, T0, cast, ended_battle, people, serve

VOTED = T0 + READ
WINDOW = 10


@pytest.fixture(autouse=True)
def undo_window(settings):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=WINDOW)


def at(seconds: float) -> dt.datetime:
    return VOTED + dt.timedelta(seconds=seconds)


def call(api, user, method: str, battle, when: dt.datetime, **data):
    with time_machine.travel(when, tick=False):
        client = api(user)
        url = f"/api/battles/{battle.pk}/votes/"
        if method == "post":
            return client.post(url, data, format="json")
        return getattr(client, method)(url + "mine/")


def rated() -> int:
    return sum(AgentRating.objects.values_list("rated_battles", flat=True))


def test_a_vote_inside_its_window_decides_nothing_and_shows_no_name(api, alice, judge, roster):
    battle = ended_battle(alice)
    serve(judge)
    response = call(api, judge, "post", battle, VOTED, choice="A")
    assert response.status_code == 201
    body = response.json()
    assert (body["final"], body["counts"], body["reveal"]) == (False, None, None)
    assert body["undo_until"] == at(WINDOW).isoformat()
    assert "undo" in body["message"]
    # nothing moved: the battle is open, no rating changed, the battle API stays blind
    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == ("judging", "")
    assert rated() == 0
    with time_machine.travel(at(5), tick=False):
        detail = api(judge).get(f"/api/battles/{battle.pk}/").json()
    assert "identity" not in detail["sides"]["A"]
    assert call(api, judge, "get", battle, at(9.9)).json()["reveal"] is None


def test_the_end_of_the_window_decides_and_reveals(api, alice, judge, roster):
    battle = ended_battle(alice)
    serve(judge)
    call(api, judge, "post", battle, VOTED, choice="A")
    # the judge's page asks when the window ends: the battle is resolved there
    body = call(api, judge, "get", battle, at(WINDOW)).json()
    assert (body["final"], body["counts"]) == (True, True)
    assert body["reveal"]["A"]["slug"] == "rulebook"
    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.decision_source) == ("decided", "A", "crowd")
    assert battle.decided_at == at(WINDOW)
    assert rated() == 2


def test_the_vote_makes_its_battle_due_at_the_end_of_the_window_for_the_decider(
    alice, judge, roster
):
    from judging.services import vote_cast
    from judging.services.resolution import battles_resolve_due

    battle = ended_battle(alice)
    serve(judge)
    with time_machine.travel(VOTED, tick=False):
        vote_cast(judge=judge, battle_id=battle.pk, choice="B")
    battle.refresh_from_db()
    assert battle.decide_due_at == at(WINDOW)  # written by the vote's tally, no job
    # the decider finds nothing before the window ends, and decides it when it has
    with time_machine.travel(at(WINDOW - 0.1), tick=False):
        assert battles_resolve_due(limit=10) == (0, [])
    with time_machine.travel(at(WINDOW), tick=False):
        assert battles_resolve_due(limit=10) == (1, [battle.pk])
    battle.refresh_from_db()
    assert (battle.outcome, battle.decided_at, battle.decide_due_at) == ("B", at(WINDOW), None)
    assert rated() == 2


def test_a_second_vote_keeps_the_earlier_due_time(alice, roster):
    from judging.services import vote_cast

    battle = ended_battle(alice, target=3)
    first, second = people(2)
    serve(first)
    serve(second)
    with time_machine.travel(VOTED, tick=False):
        vote_cast(judge=first, battle_id=battle.pk, choice="A")
    with time_machine.travel(at(4), tick=False):
        vote_cast(judge=second, battle_id=battle.pk, choice="A")
    battle.refresh_from_db()
    assert battle.decide_due_at == at(WINDOW)


def test_undo_inside_the_window_then_vote_again(api, alice, judge, roster):
    battle = ended_battle(alice)
    serve(judge)
    call(api, judge, "post", battle, VOTED, choice="A")
    response = call(api, judge, "delete", battle, at(9))
    assert response.status_code == 200, response.content
    assert response.json()["undone"] is True
    first = Vote.objects.get()
    assert first.retracted and first.retracted_at == at(9)
    # the battle is still theirs to judge, and they may vote again (they saw no name)
    with time_machine.travel(at(10), tick=False):
        from judging.services import judge_next

        assert judge_next(judge=judge).pk == battle.pk
    again = call(api, judge, "post", battle, at(11), choice="B")
    assert again.status_code == 201
    body = call(api, judge, "get", battle, at(11 + WINDOW)).json()
    assert (body["choice"], body["counts"]) == ("B", True)
    battle.refresh_from_db()
    assert battle.outcome == "B" and rated() == 2


def test_undo_after_the_window_is_409_and_changes_nothing(api, alice, judge, roster):
    battle = ended_battle(alice)
    serve(judge)
    call(api, judge, "post", battle, VOTED, choice="A")
    response = call(api, judge, "delete", battle, at(WINDOW))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "vote_final"
    assert Vote.objects.get().retracted is False
    with time_machine.travel(at(WINDOW), tick=False):
        battle_resolve(battle_id=battle.pk)
    battle.refresh_from_db()
    assert battle.outcome == "A"


def test_a_pending_vote_of_another_judge_stands_as_cast_when_the_battle_is_decided(
    api, alice, roster
):
    battle = ended_battle(alice)
    first, second = people(2)
    serve(first)
    serve(second)
    call(api, first, "post", battle, VOTED, choice="A")
    call(api, second, "post", battle, at(2), choice="B")
    with time_machine.travel(at(WINDOW), tick=False):
        battle_resolve(battle_id=battle.pk)
    battle.refresh_from_db()
    # both were cast blind, before any result: both are V_b (ω 0.5 each: a tie)
    assert (battle.status, battle.outcome) == ("decided", "tie")
    assert sorted(Vote.objects.values_list("counted", flat=True)) == [True, True]
    # the second judge could watch the board now: their vote is frozen, not undoable
    response = call(api, second, "delete", battle, at(WINDOW + 1))
    assert response.status_code == 409 and response.json()["error"]["code"] == "vote_final"
    assert Vote.objects.get(judge=second).final_at == at(WINDOW)


def test_no_live_vote_is_404(api, alice, judge, roster):
    battle = ended_battle(alice)
    serve(judge)
    for method in ("delete", "get"):
        response = call(api, judge, method, battle, VOTED)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_a_window_of_zero_makes_votes_final_at_once(api, alice, judge, roster, settings):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=0)
    battle = ended_battle(alice)
    serve(judge)
    body = call(api, judge, "post", battle, VOTED, choice="A").json()
    assert (body["final"], body["counts"], body["reveal"]["B"]["slug"]) == (True, True, "idle")
    assert call(api, judge, "delete", battle, VOTED).status_code == 409


def test_vote_status_service_is_the_same_for_page_and_api(alice, judge, roster):
    battle = ended_battle(alice)
    serve(judge)
    cast(judge, battle, "A", at=VOTED)
    with time_machine.travel(at(3), tick=False):
        pending = vote_status(judge=judge, battle_id=battle.pk)
    assert (pending.final, pending.reveal) == (False, False)
    with time_machine.travel(at(WINDOW), tick=False):
        final = vote_status(judge=judge, battle_id=battle.pk)
        assert final.vote.final_at <= timezone.now()
    assert (final.final, final.counts, final.reveal) == (True, True, True)
    assert Battle.objects.get(pk=battle.pk).status == "decided"
