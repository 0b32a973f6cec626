"""Blind judging: serving, voting, the reveal, the reading-time floor, resolution."""

import datetime as dt
import random

import pytest
import time_machine
from django.utils import timezone

from agents.models import Agent
from arena_site.exceptions import _flatten_detail
from battles.models import Battle, Run
from battles.services import task_submit
from judging.api import VoteInput
from judging.decision import consensus
from judging.models import Vote
from judging.services import battle_resolve, vote_cast
from ratings.models import AgentRating
from tests.judging.battle_factories import T0


@pytest.fixture
def finished_battle(alice, roster):
    """A battle whose lanes ended: rulebook (A) delivered, idle (B) gave up."""
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(0))
    a, b = Agent.objects.get(slug="rulebook"), Agent.objects.get(slug="idle")
    Battle.objects.filter(pk=battle.pk).update(
        agent_a=a, agent_b=b, status=Battle.Status.JUDGING, ended_at=T0, redundancy_target=1
    )
    Run.objects.filter(battle=battle, side="A").update(
        agent=a, status="ended", end_reason="delivered", final_message="6*7 = 42"
    )
    Run.objects.filter(battle=battle, side="B").update(
        agent=b, status="ended", end_reason="gave_up", final_message="I was unable to do it."
    )
    battle.refresh_from_db()
    return battle


def serve(api, user, at=T0):
    with time_machine.travel(at, tick=False):
        return api(user).get("/api/judge/next/")


def vote(api, user, battle, choice="A", at=T0 + dt.timedelta(seconds=30)):
    with time_machine.travel(at, tick=False):
        return api(user).post(f"/api/battles/{battle.pk}/votes/", {"choice": choice}, format="json")


def test_next_serves_the_battle_blind(api, judge, finished_battle):
    response = serve(api, judge)
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == finished_battle.pk
    assert set(body["sides"]) == {"A", "B"}
    text = response.content.decode()
    for agent in Agent.objects.all():
        for identity in agent.identity_strings():
            assert identity not in text, identity
    assert "identity" not in body["sides"]["A"]


def test_nothing_to_judge_is_204(api, judge, db):
    assert api(judge).get("/api/judge/next/").status_code == 204


def test_vote_returns_the_reveal(api, judge, finished_battle):
    serve(api, judge)
    response = vote(api, judge, finished_battle, "A")
    assert response.status_code == 201
    body = response.json()
    assert body["admissible"] is True
    assert body["reveal"]["A"]["agent"] == "Rulebook"
    assert body["reveal"]["B"]["agent"] == "Idle baseline"


def test_after_voting_the_battle_api_reveals_identities(api, judge, finished_battle):
    serve(api, judge)
    before = api(judge).get(f"/api/battles/{finished_battle.pk}/").json()
    assert "identity" not in before["sides"]["A"]
    vote(api, judge, finished_battle)
    after = api(judge).get(f"/api/battles/{finished_battle.pk}/").json()
    assert after["sides"]["A"]["identity"]["agent"] == "Rulebook"


def test_second_live_vote_is_409_and_changes_nothing(api, judge, finished_battle):
    serve(api, judge)
    assert vote(api, judge, finished_battle, "A").status_code == 201
    response = vote(api, judge, finished_battle, "B")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "already_voted"
    assert list(Vote.objects.values_list("choice", flat=True)) == ["A"]


def test_a_too_fast_vote_is_stored_but_inadmissible(api, judge, finished_battle):
    serve(api, judge)
    response = vote(api, judge, finished_battle, "A", at=T0 + dt.timedelta(seconds=4))
    assert response.status_code == 201
    assert response.json()["admissible"] is False
    assert response.json()["inadmissible_reason"] == "too_fast"
    assert Vote.objects.get().admissible is False


def test_reading_time_grows_with_the_final_messages(api, judge, finished_battle):
    Run.objects.filter(battle=finished_battle, side="A").update(final_message="word " * 100)
    serve(api, judge)
    # 101 words / 4 words per second = 25.25 s > MIN_READ_S
    assert (
        vote(api, judge, finished_battle, at=T0 + dt.timedelta(seconds=25)).json()[
            "inadmissible_reason"
        ]
        == "too_fast"
    )


def test_reading_time_counts_from_the_first_serve(api, judge, finished_battle):
    serve(api, judge, at=T0)
    serve(api, judge, at=T0 + dt.timedelta(seconds=20))  # a reload does not restart the clock
    response = vote(api, judge, finished_battle, at=T0 + dt.timedelta(seconds=21))
    assert response.json()["admissible"] is True


def test_voting_on_an_unserved_battle_is_404(api, judge, finished_battle):
    response = vote(api, judge, finished_battle)
    assert response.status_code == 404
    assert Vote.objects.count() == 0


@pytest.mark.parametrize("choice", ["C", "", "a", None, 1, ["A"], {"A": 1}, True, "A "])
def test_bad_choice_is_400(api, judge, finished_battle, choice):
    serve(api, judge)
    response = vote(api, judge, finished_battle, choice)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert Vote.objects.count() == 0
    # the view checks the body by hand (the hot path): word for word as VoteInput would
    expected = VoteInput(data={"choice": choice})
    assert not expected.is_valid()
    assert response.json()["error"]["message"] == _flatten_detail(expected.errors)


@pytest.mark.parametrize("body", [{}, {"choise": "A"}, [], ["A"], "A", 3])
def test_a_body_without_a_choice_is_400(api, judge, finished_battle, body):
    serve(api, judge)
    with time_machine.travel(T0 + dt.timedelta(seconds=30), tick=False):
        response = api(judge).post(f"/api/battles/{finished_battle.pk}/votes/", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    expected = VoteInput(data=body)
    assert not expected.is_valid()
    assert response.json()["error"]["message"] == _flatten_detail(expected.errors)
    assert Vote.objects.count() == 0


def test_judges_are_served_others_battles_before_their_own(api, alice, judge, finished_battle):
    own = task_submit(user=judge, instruction="list the files", rng=random.Random(1))
    Battle.objects.filter(pk=own.pk).update(status=Battle.Status.JUDGING, ended_at=T0)
    assert serve(api, judge).json()["id"] == finished_battle.pk


def test_admissible_vote_decides_the_battle_and_moves_streaming_elo(
    api, judge, finished_battle, django_capture_on_commit_callbacks
):
    serve(api, judge)
    vote(api, judge, finished_battle, "A")  # resolved in the vote's transaction

    assert battle_resolve(battle_id=finished_battle.pk) is False  # nothing left to do

    finished_battle.refresh_from_db()
    assert finished_battle.status == "decided" and finished_battle.outcome == "A"
    assert finished_battle.evidence_weight == pytest.approx(0.5)  # γ = 1, new judge ω = 0.5
    assert finished_battle.first_judgment_at == T0 + dt.timedelta(seconds=30)
    ratings = {r.agent.slug: r for r in AgentRating.objects.select_related("agent")}
    assert ratings["rulebook"].streaming_rating == pytest.approx(1024.0)
    assert ratings["idle"].streaming_rating == pytest.approx(976.0)
    assert ratings["rulebook"].rated_battles == ratings["idle"].rated_battles == 1
    # idempotent: a second resolve moves nothing
    assert battle_resolve(battle_id=finished_battle.pk) is False
    assert AgentRating.objects.get(agent__slug="rulebook").streaming_rating == pytest.approx(1024.0)


def test_an_inadmissible_vote_does_not_decide(api, judge, finished_battle):
    serve(api, judge)
    vote(api, judge, finished_battle, "A", at=T0 + dt.timedelta(seconds=1))  # too fast
    battle_resolve(battle_id=finished_battle.pk)
    finished_battle.refresh_from_db()
    assert finished_battle.outcome == ""
    assert AgentRating.objects.filter(rated_battles__gt=0).count() == 0
    # one instant vote consumes nothing: the battle stays in the pool (SPEC §5.3 rule 7)
    assert (finished_battle.status, finished_battle.exclusion_reason) == ("judging", "")


def test_abstain_is_a_live_vote_but_not_evidence(api, judge, finished_battle):
    serve(api, judge)
    body = vote(api, judge, finished_battle, "abstain").json()
    assert body["admissible"] is False and body["inadmissible_reason"] == "abstain"
    assert Vote.objects.get().retracted is False
    battle_resolve(battle_id=finished_battle.pk)
    finished_battle.refresh_from_db()
    # a skip: the battle waits for another judge
    assert (finished_battle.outcome, finished_battle.status) == ("", "judging")


@pytest.mark.parametrize(
    ("votes", "outcome"),
    [
        ([("A", 1.0)], "A"),
        ([("A", 0.5), ("B", 0.5)], "tie"),
        ([("A", 0.5), ("B", 0.4), ("B", 0.4)], "B"),
        ([("both_bad", 1.0), ("tie", 0.3)], "both_bad"),
    ],
)
def test_consensus_is_weighted_plurality(votes, outcome):
    assert consensus(votes) == outcome


def test_judge_page_hides_identities_and_reveals_after_vote(client, judge, finished_battle):
    client.force_login(judge)
    with time_machine.travel(T0, tick=False):
        page = client.get("/judge/").content.decode()
    for agent in Agent.objects.all():
        assert agent.display_name not in page
    with time_machine.travel(T0 + dt.timedelta(seconds=30), tick=False):
        reveal = client.post(f"/judge/{finished_battle.pk}/vote/", {"choice": "B"})
    assert reveal.status_code == 201
    assert "Rulebook" in reveal.content.decode() and "Idle baseline" in reveal.content.decode()


def test_vote_cast_service_refuses_a_battle_not_open_for_judging(judge, finished_battle):
    from judging.models import Assignment

    Assignment.objects.create(judge=judge, battle=finished_battle, served_at=timezone.now())
    Battle.objects.filter(pk=finished_battle.pk).update(status=Battle.Status.RUNNING)
    from arena_site.exceptions import ApplicationError

    with pytest.raises(ApplicationError) as raised:
        vote_cast(judge=judge, battle_id=finished_battle.pk, choice="A")
    assert raised.value.status == 409


def test_event_times_r_and_l_are_stamped_once(api, judge, finished_battle, client):
    from ratings.refit import arena_refit
    from tests.ratings.stamps import ell_of, r_of, stamps_of

    serve(api, judge)
    vote(api, judge, finished_battle, "A")
    battle_resolve(battle_id=finished_battle.pk)
    # the streaming value is not the published rating: r waits for the refit
    assert r_of(finished_battle) is None
    arena_refit(arena_id=finished_battle.arena_id)
    r, served = stamps_of([finished_battle])[finished_battle.pk]
    # the refit pushes the new board to the sockets: that serve stamps ℓ
    assert r is not None and served is not None and served >= r
    client.get("/api/leaderboard/")
    client.get("/")
    assert ell_of(finished_battle) == served  # the first serve only


def test_the_judge_api_checks_consent_like_the_judge_page(api, judge, finished_battle):
    """A judge whose accepted terms are not the current ones is refused by the API too."""
    from accounts.services import consent_terms_publish

    consent_terms_publish(text="New terms: votes are published with the battle.")
    response = api(judge).get("/api/judge/next/")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "consent_required"
    from judging.models import Assignment

    assert not Assignment.objects.exists()
