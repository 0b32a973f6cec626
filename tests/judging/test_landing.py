"""Where log-in lands when no page asked for one: the page of what the person did last
(judging.selectors.landing_url, docs/pages.md "Where log-in lands")."""

import datetime as dt

import pytest

from agents.models import Agent
from battles.models import Task
from judging.models import Assignment
from tests.conftest import make_person
from tests.judging.battle_factories import T0, ended_battle, people, serve

PASSWORD = "a long passphrase 42"


def log_in(client, user, **query) -> str:
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    response = client.post(
        "/accounts/login/" + (f"?next={query['next']}" if query else ""),
        {"username": user.username, "password": PASSWORD},
    )
    assert response.status_code == 302
    return response["Location"]


def lands(client, user) -> str:
    """Where ``user`` ends up after logging in: the log-in's redirect, then the landing's."""
    assert log_in(client, user) == "/start/"
    response = client.get("/start/")
    assert response.status_code == 302
    return response["Location"]


def test_a_new_crowd_judge_lands_on_the_judge_page(client, terms):
    (newcomer,) = people(1)
    assert lands(client, newcomer) == "/judge/"


def test_a_submitter_lands_on_submit_until_they_judge_again(client, alice, roster):
    # Given alice submitted a task
    battle = ended_battle(alice)
    Task.objects.filter(pk=battle.task_id).update(created_at=T0)
    assert lands(client, alice) == "/submit/"
    # When she is served a battle of another team after it
    other = ended_battle(make_person("otto", "Other team", None))
    assert serve(alice, T0 + dt.timedelta(minutes=1)).pk == other.pk
    # Then she lands on the judge page; a newer task sends her back to submit
    client.logout()
    assert lands(client, alice) == "/judge/"
    Task.objects.filter(pk=battle.task_id).update(created_at=T0 + dt.timedelta(minutes=2))
    client.logout()
    assert lands(client, alice) == "/submit/"


def test_a_new_entrant_lands_on_its_agents_until_it_judges(client, judge, roster, alice):
    Agent.objects.filter(slug="surveyor").update(team=judge.memberships.first().team)
    assert lands(client, judge) == "/my-agents/"
    battle = ended_battle(alice)
    Assignment.objects.create(judge=judge, battle=battle, served_at=T0)
    client.logout()
    assert lands(client, judge) == "/judge/"


@pytest.mark.parametrize("asked", ["/submit/", "/metrics/"])
def test_a_page_asked_for_wins(client, alice, asked):
    assert log_in(client, alice, next=asked) == asked


def test_the_landing_asks_for_a_log_in(client):
    response = client.get("/start/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/start/")
