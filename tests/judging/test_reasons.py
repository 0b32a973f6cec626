"""Reasons with votes (docs/method.md, "Reasons with votes"): after voting, a judge tags
each side from the fixed taxonomy and may add a note; the tallies per agent count only
admissible, independent votes on decided battles. Every refusal is tried: tags before a
vote, on a battle never served (another team's: 404), an unknown code, a side that does
not exist, a note too long; and every way a hostile judge might move a tally cheaply."""

import datetime as dt

import pytest
import time_machine
from django.contrib.auth import get_user_model

from judging.models import VoteReason
from judging.reason_selectors import agent_reason_counts, arena_reason_counts, taxonomy
from judging.services import battle_exclude, judge_standing_set, judge_trust_set, vote_undo
from tests.judging.battle_factories import READ, T0, cast, ended_battle, judge_on, people, serve

URL = "/api/battles/{}/votes/mine/reasons/"


def put(api, user, battle, body):
    return api(user).put(URL.format(battle.pk), body, format="json")


def counts(slug: str) -> dict:
    from agents.models import Agent

    tally = agent_reason_counts(agent_id=Agent.objects.get(slug=slug).pk)
    by_code = {t["code"]: t["count"] for t in tally["wrong"] + tally["right"]}
    return {"tagged": tally["tagged"], **{k: v for k, v in by_code.items() if v}}


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_user("operator", password="x", is_staff=True)


def test_the_taxonomy_is_short_fixed_and_defined():
    tags = taxonomy()
    wrong = [t for t in tags if t["kind"] == "wrong"]
    right = [t for t in tags if t["kind"] == "right"]
    assert 8 <= len(wrong) <= 12 and 4 <= len(right) <= 6
    assert [t["code"] for t in tags] == VoteReason.Tag.values
    assert all(t["definition"] and t["label"] for t in tags)
    assert len({t["code"] for t in tags}) == len(tags)


def test_the_taxonomy_api_lists_it_to_any_signed_in_account(api, client, charlie):
    assert client.get("/api/vote-reasons/tags/").status_code == 401
    response = api(charlie).get("/api/vote-reasons/tags/")
    assert response.status_code == 200
    assert [t["code"] for t in response.json()] == VoteReason.Tag.values


def test_after_voting_a_judge_tags_both_sides_and_reads_them_back(api, alice, judge, roster):
    battle = ended_battle(alice)
    vote = judge_on(judge, battle, "A")

    response = put(
        api,
        judge,
        battle,
        {
            "A": {"tags": ["efficient", "completed", "completed"], "note": "  fast and right  "},
            "B": {"tags": ["gave_up"]},
        },
    )

    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["vote"], body["battle"]) == (vote.pk, battle.pk)
    # distinct, in taxonomy order; the note trimmed
    assert body["sides"]["A"]["tags"] == ["completed", "efficient"]
    assert body["sides"]["A"]["note"] == "fast and right"
    assert body["sides"]["B"]["tags"] == ["gave_up"] and body["sides"]["B"]["note"] == ""
    assert api(judge).get(URL.format(battle.pk)).json()["sides"] == body["sides"]
    assert VoteReason.objects.filter(vote=vote).count() == 2


def test_editing_replaces_the_set_and_never_adds_a_second_one(api, alice, judge, roster):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    for _ in range(3):
        assert put(api, judge, battle, {"B": {"tags": ["gave_up", "planning"]}}).status_code == 200
    assert put(api, judge, battle, {"B": {"tags": ["planning"], "note": "x"}}).status_code == 200

    assert VoteReason.objects.count() == 1
    assert counts("idle") == {"tagged": 1, "planning": 1}
    # a side not named keeps what it had
    put(api, judge, battle, {"A": {"tags": ["completed"]}})
    sides = api(judge).get(URL.format(battle.pk)).json()["sides"]
    assert sides["B"] == {**sides["B"], "tags": ["planning"], "note": "x"}


def test_tags_before_voting_are_400_and_store_nothing(api, alice, judge, roster):
    battle = ended_battle(alice)
    assert serve(judge).pk == battle.pk  # served, not voted

    response = put(api, judge, battle, {"A": {"tags": ["completed"]}})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "no_vote"
    assert "vote first" in response.json()["error"]["message"]
    assert api(judge).get(URL.format(battle.pk)).status_code == 404
    assert not VoteReason.objects.exists()


def test_an_outsider_gets_404_for_another_teams_battle_and_changes_nothing(
    api, alice, judge, charlie, roster
):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    put(api, judge, battle, {"A": {"tags": ["completed"]}})

    for body in ({"A": {"tags": ["false_success"]}}, {"C": {"tags": ["nonsense"]}}):
        response = put(api, charlie, battle, body)
        assert response.status_code == 404, body
        assert response.json()["error"]["code"] == "not_found"
    assert api(charlie).get(URL.format(battle.pk)).status_code == 404
    assert api(charlie).put(URL.format(10**9), {"A": {}}, format="json").status_code == 404
    assert list(VoteReason.objects.values_list("tags", flat=True)) == [["completed"]]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"C": {"tags": ["completed"]}}, "invalid_side"),
        ({"A": {"tags": ["completed"]}, "C": {"tags": []}}, "invalid_side"),
        ({"A": {"tags": ["hallucination"]}}, "unknown_tag"),
        ({"A": {"tags": "completed"}}, "invalid_tags"),
        ({"A": {"tags": [1]}}, "invalid_tags"),
        ({"A": {"note": "x" * 501}}, "note_too_long"),
        ({"A": {"note": 5}}, "invalid_note"),
        ({"A": {"tags": [], "why": "?"}}, "invalid_body"),
        ({"A": ["completed"]}, "invalid_body"),
        ([], "invalid_body"),
        ({}, "no_sides"),
    ],
)
def test_bad_input_is_400_with_its_code_and_stores_nothing(api, alice, judge, roster, body, code):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")

    response = put(api, judge, battle, body)

    assert response.status_code == 400, response.json()
    assert response.json()["error"]["code"] == code
    assert not VoteReason.objects.exists()


def test_a_note_of_exactly_the_bound_is_kept(api, alice, judge, roster):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    assert put(api, judge, battle, {"A": {"note": "é" * 500}}).status_code == 200
    assert VoteReason.objects.get().note == "é" * 500


def test_an_undone_votes_tags_stop_counting_and_it_takes_no_more(
    api, alice, judge, roster, settings
):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=60)
    battle = ended_battle(alice)
    assert serve(judge).pk == battle.pk
    voted = T0 + READ
    cast(judge, battle, "A", voted)
    with time_machine.travel(voted + dt.timedelta(seconds=5), tick=False):
        assert put(api, judge, battle, {"A": {"tags": ["completed"]}}).status_code == 200
        vote_undo(judge=judge, battle_id=battle.pk)
        response = put(api, judge, battle, {"A": {"tags": ["completed"]}})
    assert (response.status_code, response.json()["error"]["code"]) == (400, "no_vote")
    assert VoteReason.objects.get().vote.retracted
    assert counts("rulebook") == {"tagged": 0}


def test_tallies_count_only_decided_battles_and_no_tally_moves_while_one_is_open(
    api, alice, judge, roster, settings
):
    """Inside the undo window (and while a battle waits for more judges) the judge's
    tags change no published count: a count that moved would tell them which agent was
    which side before their vote stands."""
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=60)
    battle = ended_battle(alice)
    serve(judge)
    voted = T0 + READ
    cast(judge, battle, "B", voted)
    with time_machine.travel(voted + dt.timedelta(seconds=5), tick=False):
        body = {"A": {"tags": ["false_success"]}, "B": {"tags": ["completed"]}}
        answer = put(api, judge, battle, body).content.decode().lower()
        names = [n for a in (battle.agent_a, battle.agent_b) for n in a.identity_strings()]
        assert [n for n in names if n.lower() in answer] == []
        assert counts("rulebook") == counts("idle") == {"tagged": 0}
        assert arena_reason_counts(arena_id=battle.arena_id) == []
    # the window passes and the battle is decided: now they count, per side's agent
    with time_machine.travel(voted + dt.timedelta(seconds=61), tick=False):
        api(judge).get(f"/api/battles/{battle.pk}/votes/mine/")  # resolves it
        battle.refresh_from_db()
        assert battle.status == "decided"
        assert counts("rulebook") == {"tagged": 1, "false_success": 1}
        assert counts("idle") == {"tagged": 1, "completed": 1}
        table = {r["agent"]: r for r in arena_reason_counts(arena_id=battle.arena_id)}
    assert set(table) == {"rulebook", "idle"}
    codes = VoteReason.Tag.values
    assert table["rulebook"]["counts"][codes.index("false_success")] == 1
    assert sum(table["rulebook"]["counts"]) == 1


def test_inadmissible_votes_tags_are_kept_but_never_counted(api, alice, judge, roster):
    battle = ended_battle(alice)
    fast, slow = judge, people(1)[0]
    serve(fast)
    cast(fast, battle, "B", T0 + dt.timedelta(seconds=1))  # before the reading time
    judge_on(slow, battle, "A", at=T0)  # decides it
    battle.refresh_from_db()
    assert battle.status == "decided"
    assert put(api, fast, battle, {"A": {"tags": ["unsafe"]}}).status_code == 200
    assert put(api, slow, battle, {"A": {"tags": ["completed"]}}).status_code == 200

    assert counts("rulebook") == {"tagged": 1, "completed": 1}


def test_an_abstention_and_a_submitter_vote_tag_nothing_that_counts(api, alice, bob, roster):
    battle = ended_battle(alice, target=1)
    judge_on(bob, battle, "abstain")  # bob is in alice's team: a submitter, and a skip
    assert put(api, bob, battle, {"B": {"tags": ["gave_up"]}}).status_code == 200
    assert counts("idle") == {"tagged": 0}


def test_an_excluded_battles_tags_and_an_untrusted_judges_stop_counting(
    api, alice, judge, roster, staff
):
    first, second = ended_battle(alice), ended_battle(alice)
    judge_on(judge, first, "A")
    put(api, judge, first, {"B": {"tags": ["gave_up"]}})
    other = people(1)[0]
    judge_on(other, second, "A")
    put(api, other, second, {"B": {"tags": ["gave_up", "planning"]}})
    assert counts("idle") == {"tagged": 2, "gave_up": 2, "planning": 1}

    battle_exclude(battle_id=first.pk, reason="budget_mismatch", note="test", actor=staff)
    assert counts("idle") == {"tagged": 1, "gave_up": 1, "planning": 1}

    judge_trust_set(judge_id=other.pk, untrusted=True, note="spam", actor=staff)
    assert counts("idle") == {"tagged": 0}


def test_while_probation_applies_only_established_judges_tags_count(
    api, alice, judge, roster, staff
):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    put(api, judge, battle, {"A": {"tags": ["completed"]}})
    assert counts("rulebook") == {"tagged": 1, "completed": 1}  # no established judge yet

    veteran = people(1, prefix="veteran")[0]
    judge_standing_set(judge_id=veteran.pk, action="establish", note="known", actor=staff)
    assert counts("rulebook") == {"tagged": 0}
    judge_standing_set(judge_id=judge.pk, action="establish", note="known", actor=staff)
    assert counts("rulebook") == {"tagged": 1, "completed": 1}
