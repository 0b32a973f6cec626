"""Human entrants (docs/human-baseline.md): the policy waits for the operator's action
and consumes it once; the operator page's writes and who may make them."""

import dataclasses
import html
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from agents.human import (
    GIVE_UP,
    HumanPolicy,
    OperatorAbsent,
    human_action_take,
    operators_ready,
)
from agents.models import Agent, Arena, BaselineOperator, HumanAction, HumanLane
from agents.policies import Action, GiveUp, Observation
from agents.services import AgentFailure, entry_problems, policy_for
from tests.conftest import api_client_for

TOOLS = ("screenshot", "click", "type", "key", "scroll", "navigate", "deliver")


@pytest.fixture
def human(alice):
    team = alice.memberships.get().team
    return Agent.objects.create(
        arena=Arena.objects.public(), slug="people", display_name="Our person",
        kind=Agent.Kind.HUMAN, team=team,
    )  # fmt: skip


@pytest.fixture
def operator(human, alice):
    return BaselineOperator.objects.create(agent=human, user=alice)


def observation(step=0, seconds_left=30.0, png=b"\x89PNG fake") -> Observation:
    return Observation(
        step=step, instruction="Send the contact form", start_url="", last_result=None,
        steps_left=20 - step, seconds_left=seconds_left, screenshot_png=png,
    )  # fmt: skip


def lane_policy(human, run_id=41, take_s=30.0) -> HumanPolicy:
    return HumanPolicy(agent=human, run_id=run_id, tools=TOOLS, take_s=take_s)


def test_human_kind_has_a_policy_and_no_entry_problems(human):
    policy = policy_for(human, tools=TOOLS, session="s", run_id=7)
    assert isinstance(policy, HumanPolicy)
    assert HumanLane.objects.get(run_id=7).tools == list(TOOLS)
    assert entry_problems(human) == {}


def test_identity_strings_name_the_operators(human, operator):
    # the leak scan looks for the operator's own name as for an agent's
    assert "alice" in human.identity_strings()


def test_an_action_is_consumed_exactly_once(human, operator):
    policy = lane_policy(human)
    HumanAction.objects.create(
        lane=policy.lane, operator=operator, step=0, tool="type", args={"text": "Ada"}
    )
    assert human_action_take(lane_id=policy.lane.pk) == Action("type", {"text": "Ada"})
    assert human_action_take(lane_id=policy.lane.pk) is None
    assert HumanAction.objects.get().consumed_at is not None


@pytest.mark.django_db(transaction=True)
def test_two_readers_never_both_take_an_action(alice):
    team = alice.memberships.get().team
    human = Agent.objects.create(
        arena=Arena.objects.public(), slug="p2", display_name="P2", kind="human", team=team
    )
    operator = BaselineOperator.objects.create(agent=human, user=alice)
    policy = lane_policy(human)
    for round_ in range(5):
        HumanAction.objects.create(
            lane=policy.lane, operator=operator, step=round_, tool="key", args={"combo": "Tab"}
        )
        got, start = [], threading.Barrier(4)

        def read(start=start, got=got):
            start.wait()
            try:
                got.append(human_action_take(lane_id=policy.lane.pk))
            finally:
                connection.close()

        threads = [threading.Thread(target=read) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [g for g in got if g is not None] == [Action("key", {"combo": "Tab"})]


def test_the_policy_shows_the_observation_and_waits_for_the_operator(human, operator, alice):
    policy = lane_policy(human)
    beats = []
    policy.keepalive = lambda: beats.append(1)

    # the operator took the lane and gave up before the policy looked
    HumanLane.objects.filter(pk=policy.lane.pk).update(operator=operator, taken_at=timezone.now())
    HumanAction.objects.create(
        lane=policy.lane, operator=operator, step=0, tool=GIVE_UP, args={"message": "no"}
    )
    assert policy.next_action(observation()) == GiveUp("no")
    lane = HumanLane.objects.get(pk=policy.lane.pk)
    assert lane.instruction == "Send the contact form" and bytes(lane.screenshot) == b"\x89PNG fake"
    assert lane.steps_left == 20 and lane.deadline_at > timezone.now()


def test_an_untaken_lane_ends_as_the_entrants_failure(human, operator):
    BaselineOperator.objects.filter(pk=operator.pk).update(
        on_duty_since=timezone.now(), seen_at=timezone.now()
    )
    policy = lane_policy(human, take_s=0.3)
    started = time.monotonic()
    with pytest.raises(OperatorAbsent) as raised:
        policy.next_action(observation())
    assert isinstance(raised.value, AgentFailure)  # the lane ends with agent_fault
    assert 0.3 <= time.monotonic() - started < 3
    assert BaselineOperator.objects.get().on_duty_since is None  # not drawn again


def test_an_idle_operator_ends_on_the_wall_budget(human, operator):
    policy = lane_policy(human)
    HumanLane.objects.filter(pk=policy.lane.pk).update(operator=operator, taken_at=timezone.now())
    beats = []
    policy.keepalive = lambda: beats.append(1)
    started = time.monotonic()
    # waits out the seconds left, then one look at the screen: the lane's next check
    # finds the wall budget spent (battles.services.lanes)
    assert policy.next_action(observation(seconds_left=0.5)) == Action("screenshot")
    assert 0.5 <= time.monotonic() - started < 3


def test_the_policy_beats_while_it_waits(human, operator, monkeypatch):
    monkeypatch.setattr("agents.human.KEEPALIVE_S", 0.2)
    policy = lane_policy(human)
    HumanLane.objects.filter(pk=policy.lane.pk).update(operator=operator, taken_at=timezone.now())
    beats = []
    policy.keepalive = lambda: beats.append(1)
    policy.next_action(observation(seconds_left=1.0))
    assert len(beats) >= 3


def test_ready_means_on_duty_present_and_idle(human, operator):
    assert operators_ready(agent_ids=[human.pk]) == set()  # off duty
    now = timezone.now()
    BaselineOperator.objects.filter(pk=operator.pk).update(on_duty_since=now, seen_at=now)
    assert operators_ready(agent_ids=[human.pk]) == {human.pk}
    BaselineOperator.objects.filter(pk=operator.pk).update(seen_at=now - timedelta(minutes=5))
    assert operators_ready(agent_ids=[human.pk]) == set()  # page closed: away
    BaselineOperator.objects.filter(pk=operator.pk).update(seen_at=now)
    lane_policy(human)  # a lane not ended
    assert operators_ready(agent_ids=[human.pk]) == set()


# --- the operator page --------------------------------------------------------------------


def test_a_non_operator_cannot_go_on_duty(client, bob, human, operator):
    client.force_login(bob)  # a member of the team, not an operator
    response = client.post("/operate/duty/", {"on": "1"})
    assert response.status_code == 403
    assert "not a baseline operator" in response.content.decode()
    assert client.get("/operate/").status_code == 403
    assert BaselineOperator.objects.get().on_duty_since is None


def test_an_operator_goes_on_duty_and_the_page_marks_presence(client, alice, operator):
    client.force_login(alice)
    assert client.post("/operate/duty/", {"on": "1"}).status_code == 302
    operator.refresh_from_db()
    assert operator.on_duty_since is not None
    BaselineOperator.objects.filter(pk=operator.pk).update(seen_at=None)
    page = client.get("/operate/panel/")
    assert page.status_code == 200 and "No lane to drive" in page.content.decode()
    assert BaselineOperator.objects.get().seen_at is not None
    client.post("/operate/duty/", {"on": "0"})
    assert BaselineOperator.objects.get().on_duty_since is None


def test_the_operator_takes_the_lane_and_acts_through_the_page(client, alice, human, operator):
    policy = lane_policy(human, run_id=41)
    HumanLane.objects.filter(pk=policy.lane.pk).update(screenshot=b"png", instruction="Do it")
    client.force_login(alice)
    page = client.get("/operate/").content.decode()
    assert "Do it" in page and 'id="take-lane"' in page
    # the lane's screen live, on the operator's own socket (battles.operator_views)
    assert 'data-live-socket="/ws/operate/lanes/41/live/"' in page
    assert client.post("/operate/lanes/41/take/").status_code == 302
    assert client.get("/operate/lanes/41/screen.png").content == b"png"
    # a click on the screen image sends the pixel clicked (at.x, at.y)
    response = client.post("/operate/lanes/41/act/", {"tool": "click", "at.x": "12", "at.y": "34"})
    assert response.status_code == 302
    assert HumanAction.objects.get().args == {"x": 12, "y": 34}
    # one action waits at a time: the next is refused until the lane took it
    again = client.post("/operate/lanes/41/act/", {"tool": "type", "text": "Ada"})
    assert again.status_code == 409 and "not been taken yet" in again.content.decode()
    assert policy.next_action(observation()) == Action("click", {"x": 12, "y": 34})
    assert client.post("/operate/lanes/41/act/", {"tool": "type", "text": "Ada"}).status_code == 302
    assert policy.next_action(observation(step=1)) == Action("type", {"text": "Ada"})


def test_follow_ups_reach_the_operator_as_they_reach_an_agent(client, alice, human, operator):
    # issue 39: a follow-up reaches both lanes; on a human's lane, the operator reads it
    from agents.policies import FollowUp

    policy = lane_policy(human, run_id=41)
    HumanLane.objects.filter(pk=policy.lane.pk).update(operator=operator, taken_at=timezone.now())
    HumanAction.objects.create(lane=policy.lane, operator=operator, step=0, tool="screenshot")
    first = FollowUp(seq=1, text="Use the General topic, please")
    policy.next_action(dataclasses.replace(observation(), messages=(first,)))
    HumanAction.objects.create(lane=policy.lane, operator=operator, step=1, tool="screenshot")
    policy.next_action(observation(step=1))  # nothing new: the earlier one stays shown
    lane = HumanLane.objects.get(pk=policy.lane.pk)
    assert lane.messages == [{"seq": 1, "text": "Use the General topic, please"}]
    client.force_login(alice)
    page = client.get("/operate/").content.decode()
    assert 'id="lane-messages"' in page and "Use the General topic, please" in page


def test_an_operator_may_ask_the_submitter_where_the_battle_offers_it(
    client, alice, human, operator
):
    policy = HumanPolicy(agent=human, run_id=42, tools=(*TOOLS, "ask_user"), take_s=30.0)
    HumanLane.objects.filter(pk=policy.lane.pk).update(screenshot=b"png", instruction="Do it")
    client.force_login(alice)
    assert client.post("/operate/lanes/42/take/").status_code == 302
    assert 'id="act-ask_user"' in client.get("/operate/").content.decode()
    asked = client.post("/operate/lanes/42/act/", {"tool": "ask_user", "question": "Which topic?"})
    assert asked.status_code == 302
    assert policy.next_action(observation()) == Action("ask_user", {"question": "Which topic?"})
    # where the battle does not offer it (test drives, evaluations), it is refused
    other = lane_policy(human, run_id=43)
    HumanLane.objects.filter(pk=other.lane.pk).update(screenshot=b"png", instruction="Do it")
    assert client.post("/operate/lanes/43/take/").status_code == 302
    refused = client.post("/operate/lanes/43/act/", {"tool": "ask_user", "question": "?"})
    assert refused.status_code == 400 and "not offered" in refused.content.decode()


@pytest.mark.parametrize(
    ("form", "code", "words"),
    [
        ({"tool": "rm_rf"}, 400, "not a tool of the arena's fixed set"),
        ({"tool": "shell", "command": "id"}, 400, "shell is not offered in this battle"),
        ({"tool": "edit"}, 400, "edit is not offered in this battle"),
        ({"tool": "click", "x": "left", "y": "3"}, 400, "x must be a whole number"),
    ],
)
def test_actions_outside_the_lanes_tools_are_refused(
    client, alice, human, operator, form, code, words
):
    lane_policy(human, run_id=41)  # offers TOOLS: no shell, no edit
    client.force_login(alice)
    client.post("/operate/lanes/41/take/")
    response = client.post("/operate/lanes/41/act/", form)
    assert response.status_code == code
    assert words in html.unescape(response.content.decode())
    assert not HumanAction.objects.exists()


def test_an_operator_must_take_the_lane_before_acting(client, alice, human, operator):
    lane_policy(human, run_id=41)
    client.force_login(alice)
    response = client.post("/operate/lanes/41/act/", {"tool": "key", "combo": "Tab"})
    assert response.status_code == 409 and not HumanAction.objects.exists()


def test_another_team_cannot_see_or_drive_the_lane(client, charlie, bob, human, operator):
    policy = lane_policy(human, run_id=41)
    HumanLane.objects.filter(pk=policy.lane.pk).update(screenshot=b"png")
    # charlie operates his own team's human entrant: still not this lane
    theirs = Agent.objects.create(
        arena=Arena.objects.public(), slug="theirs", display_name="Theirs", kind="human",
        team=charlie.memberships.get().team,
    )  # fmt: skip
    BaselineOperator.objects.create(agent=theirs, user=charlie)
    for person in (charlie, bob):  # another team's operator; a member who is no operator
        client.force_login(person)
        assert client.get("/operate/lanes/41/screen.png").status_code == 404
        assert client.post("/operate/lanes/41/take/").status_code == 404
        acted = client.post("/operate/lanes/41/act/", {"tool": "key", "combo": "Tab"})
        assert acted.status_code == 404
        page = client.get("/operate/")
        assert 'data-run="41"' not in page.content.decode()
    lane = HumanLane.objects.get(pk=policy.lane.pk)
    assert lane.operator_id is None and not HumanAction.objects.exists()


def test_a_lane_taken_by_one_operator_is_a_404_to_another(client, alice, bob, human, operator):
    BaselineOperator.objects.create(agent=human, user=bob)
    lane_policy(human, run_id=41)
    client.force_login(alice)
    client.post("/operate/lanes/41/take/")
    client.force_login(bob)
    assert client.post("/operate/lanes/41/act/", {"tool": "key", "combo": "x"}).status_code == 404
    assert client.get("/operate/lanes/41/screen.png").status_code == 404


def test_an_ended_lane_takes_no_more_actions(client, alice, human, operator):
    policy = lane_policy(human, run_id=41)
    client.force_login(alice)
    client.post("/operate/lanes/41/take/")
    client.post("/operate/lanes/41/act/", {"tool": "key", "combo": "Tab"})
    policy.close("delivered")
    assert not HumanAction.objects.filter(consumed_at=None).exists()
    assert client.post("/operate/lanes/41/act/", {"tool": "key", "combo": "x"}).status_code == 409


# --- the agents API -----------------------------------------------------------------------


def test_the_agents_api_filters_by_kind_human(alice, human):
    api = api_client_for(alice)
    answer = api.get("/api/agents/?kind=human")
    assert answer.status_code == 200
    assert [a["slug"] for a in answer.json()["results"]] == ["people"]
    assert api.get("/api/agents/?kind=remote").json()["results"] == []
    refused = api.get("/api/agents/?kind=robot")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_kind"


def test_a_dead_workers_lane_neither_blocks_the_draw_nor_shows(client, alice, human, operator):
    now = timezone.now()
    BaselineOperator.objects.filter(pk=operator.pk).update(on_duty_since=now, seen_at=now)
    policy = lane_policy(human, run_id=41)
    # its wall budget ran out long ago, and nothing ended it (the worker died)
    HumanLane.objects.filter(pk=policy.lane.pk).update(deadline_at=now - timedelta(minutes=5))
    assert operators_ready(agent_ids=[human.pk]) == {human.pk}
    client.force_login(alice)
    assert 'data-run="41"' not in client.get("/operate/").content.decode()


# --- the admin marks operators ------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "agent_slug", "saved", "words"),
    [
        ("bob", "people", True, ""),  # a member of the entrant's team
        ("charlie", "people", False, "member of the team that entered"),
        ("bob", "idle", False, "Only a human entrant"),
    ],
)
def test_the_admin_marks_only_team_members_of_a_human_entrant(
    client, django_user_model, bob, charlie, human, roster, who, agent_slug, saved, words
):
    root = django_user_model.objects.create_superuser("root", password="pw-for-admin-42")
    client.force_login(root)
    person = {"bob": bob, "charlie": charlie}[who]
    agent = Agent.objects.get(slug=agent_slug)
    response = client.post(
        "/admin/agents/baselineoperator/add/", {"agent": agent.pk, "user": person.pk}
    )
    assert BaselineOperator.objects.filter(user=person).exists() is saved
    if not saved:
        assert response.status_code == 200 and words in html.unescape(response.content.decode())
