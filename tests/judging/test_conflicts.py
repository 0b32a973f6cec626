"""Conflicts of interest (SPEC §5.1), each with the outsider, the teammate and the
entrant: members of the submitting team cast submitter votes only; members of a team
that entered an agent are never served its battles and their votes on them are refused;
the matchmaker never pairs a team's own agent on that team's task."""

import datetime as dt
import random

import pytest

from agents.models import Agent, Arena
from arena_site.exceptions import ApplicationError
from battles.models import Battle, Task
from battles.services import task_submit
from battles.services.creation import battle_create
from judging.models import Assignment, Vote
from tests.conftest import make_person
from tests.judging.battle_factories import T0, cast, ended_battle, judge_on, serve


@pytest.fixture
def entrant_team_agent(terms, roster):
    """Agent "Nimbus" entered by team Nimbusco, whose member is erin."""
    erin = make_person("erin", "Nimbusco", terms)
    agent = Agent.objects.create(
        arena=Arena.objects.public(),
        slug="nimbus",
        display_name="Nimbus",
        kind=Agent.Kind.BUILTIN,
        builtin_policy="idle",
        team=erin.memberships.get().team,
    )
    return erin, agent


def test_the_outsider_casts_an_independent_vote_that_decides(alice, charlie, roster):
    battle = ended_battle(alice)
    vote = judge_on(charlie, battle, "A")
    assert not vote.is_submitter
    battle.refresh_from_db()
    assert (battle.status, battle.decision_source) == ("decided", "crowd")


def test_the_teammate_casts_a_submitter_vote_that_does_not_decide(alice, bob, roster):
    battle = ended_battle(alice)
    vote = judge_on(bob, battle, "A")
    assert vote.is_submitter
    battle.refresh_from_db()
    assert battle.status == "judging"


def test_the_entrant_is_never_served_their_agents_battle(alice, roster, entrant_team_agent):
    erin, _ = entrant_team_agent
    battle = ended_battle(alice, a="nimbus", b="rulebook")
    assert serve(erin) is None
    other = ended_battle(alice, a="surveyor", b="rulebook")
    assert serve(erin, T0 + dt.timedelta(minutes=1)).pk == other.pk
    assert not Assignment.objects.filter(judge=erin, battle=battle).exists()


def test_the_entrants_vote_is_refused_even_with_an_assignment(alice, roster, entrant_team_agent):
    erin, _ = entrant_team_agent
    battle = ended_battle(alice, a="rulebook", b="nimbus")
    # served before her team entered the agent, say: the refusal is at the vote too
    Assignment.objects.create(judge=erin, battle=battle, served_at=T0)
    with pytest.raises(ApplicationError) as refused:
        cast(erin, battle, "B")
    assert (refused.value.status, refused.value.code) == (403, "conflict_of_interest")
    assert not Vote.objects.exists()


def test_the_entrants_vote_is_refused_through_the_api(api, alice, roster, entrant_team_agent):
    erin, _ = entrant_team_agent
    battle = ended_battle(alice, a="nimbus", b="idle")
    Assignment.objects.create(judge=erin, battle=battle, served_at=T0)
    response = api(erin).post(f"/api/battles/{battle.pk}/votes/", {"choice": "A"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "conflict_of_interest"


def test_the_matchmaker_never_draws_a_teams_own_agent_for_its_task(
    terms, roster, entrant_team_agent
):
    erin, nimbus = entrant_team_agent
    rng = random.Random(1)
    drawn = set()
    for n in range(40):
        battle = task_submit(user=erin, instruction=f"Compute {n} * {n} please", rng=rng)
        drawn |= {battle.agent_a_id, battle.agent_b_id}
    assert nimbus.pk not in drawn
    assert drawn == {a.pk for a in roster}
    # an outsider's tasks do draw it
    outsider = make_person("oscar", "Oscarco", terms)
    seen = set()
    for n in range(40):
        battle = task_submit(user=outsider, instruction=f"Add {n} and {n + 1}", rng=rng)
        seen |= {battle.agent_a_id, battle.agent_b_id}
    assert nimbus.pk in seen


def test_a_team_whose_own_agents_leave_fewer_than_two_gets_503(terms, roster, entrant_team_agent):
    erin, nimbus = entrant_team_agent
    Agent.objects.exclude(pk=nimbus.pk).exclude(slug="rulebook").update(is_paused=True)
    with pytest.raises(ApplicationError) as refused:
        task_submit(user=erin, instruction="Sort these numbers: 3 1 2", rng=random.Random(0))
    assert (refused.value.status, refused.value.code) == (503, "roster_too_small")
    assert "your team did not enter" in refused.value.message


def test_battle_create_refuses_a_teams_own_agent_on_its_task(roster, entrant_team_agent):
    erin, nimbus = entrant_team_agent
    task = Task.objects.create(
        team=erin.memberships.get().team, submitter=erin, instruction="compare"
    )
    rulebook = Agent.objects.get(slug="rulebook")
    with pytest.raises(ApplicationError) as refused:
        battle_create(task=task, agent_a=nimbus, agent_b=rulebook, redundancy_target=1)
    assert (refused.value.status, refused.value.code) == (409, "conflict_of_interest")
    assert not Battle.objects.exists()


def test_battle_create_makes_a_queued_battle_of_the_chosen_pair(alice, roster):
    task = Task.objects.create(team=alice.memberships.get().team, submitter=alice, instruction="x")
    rulebook, idle = Agent.objects.get(slug="rulebook"), Agent.objects.get(slug="idle")
    battle = battle_create(task=task, agent_a=idle, agent_b=rulebook, redundancy_target=3)
    assert (battle.status, battle.agent_a_id, battle.agent_b_id) == ("queued", idle.pk, rulebook.pk)
    assert battle.redundancy_target == 3 and battle.team_id == task.team_id
    runs = {run.side: run for run in battle.runs.all()}
    assert (runs["A"].agent_id, runs["B"].agent_id) == (idle.pk, rulebook.pk)
    assert runs["A"].step_budget == runs["B"].step_budget
    for bad in (
        {"agent_a": idle, "agent_b": idle},
        {"agent_a": idle, "agent_b": rulebook, "redundancy_target": 0},
    ):
        with pytest.raises(ApplicationError):
            battle_create(task=task, **{"redundancy_target": 1, **bad})
    Agent.objects.filter(pk=idle.pk).update(is_paused=True)
    idle.refresh_from_db()
    with pytest.raises(ApplicationError) as refused:
        battle_create(task=task, agent_a=idle, agent_b=rulebook)
    assert refused.value.code == "agent_inactive"
