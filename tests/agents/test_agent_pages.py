"""A team's agent pages (/my-agents/new/, /my-agents/<id>/): an owner registers,
edits, checks, pauses and resumes, rotates and withdraws an agent from the browser,
through the same services as the API. Every rule tried to be broken: another team's
member gets a 404 for every page and action (like a missing agent) and changes
nothing; a member who is not an owner is refused (403) every change."""

from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet
from django.test import Client
from django.urls import reverse

from accounts.models import Team
from agents.keys import provider_key_open
from agents.models import Agent
from arena_site.secret import KEK_ENV_NAME
from examples.remote_entrant.server import ACT_PATH, EntrantServer
from tests.agents.conftest import entrant_serving

TEAM_KEY = "sk-ant-team-acme-0123456789abcdef"


@pytest.fixture(autouse=True)
def kek(monkeypatch) -> None:
    monkeypatch.setenv(KEK_ENV_NAME, Fernet.generate_key().decode())


@pytest.fixture
def acme(alice, bob) -> Team:  # alice owns Acme, bob is a member
    return Team.objects.get(name="Acme")


@pytest.fixture
def entrant() -> Iterator[EntrantServer]:
    with entrant_serving(b"not-yet") as server:
        yield server


def page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def act_url(entrant: EntrantServer, path: str = ACT_PATH) -> str:
    return f"http://127.0.0.1:{entrant.server_address[1]}{path}"


def register_remote(user, team: Team, entrant: EntrantServer, **changes):
    form = {"kind": "remote", "team": team.pk, "display_name": "Acme Remote",
            "endpoint": act_url(entrant), **changes}  # fmt: skip
    return page(user).post(reverse("battles:agent-new"), form)


def state(agent_id: int) -> dict:
    return Agent.objects.filter(pk=agent_id).values().get()


# --- registering ------------------------------------------------------------------------------


def test_the_navigation_leads_to_my_agents_and_the_team(acme, alice):
    home = page(alice).get(reverse("battles:agents-status")).content.decode()

    assert 'href="/my-agents/">My agents</a>' in home
    assert 'href="/accounts/team/">Team</a>' in home
    assert 'href="/my-agents/new/"' in home
    assert page(alice).get("/accounts/team/")["Location"] == f"/accounts/teams/{acme.pk}/"


def test_the_form_says_which_kinds_need_a_key_and_what_needs_none(acme, alice):
    form = page(alice).get(reverse("battles:agent-new")).content.decode()

    assert "anthropic, openai, gemini, openrouter need your team's own provider key" in form
    assert "openai_compatible" in form and "docs/local-models.md" in form
    assert "built-in agents need no key" in form
    for name in ("kind", "team", "display_name", "slug", "endpoint", "provider", "model_id",
                 "provider_key", "system_prompt", "params"):  # fmt: skip
        assert f'name="{name}"' in form


def test_an_owner_registers_a_remote_agent_and_sees_its_secret_once(acme, alice, entrant):
    answer = register_remote(alice, acme, entrant)

    agent = Agent.objects.get(team=acme)
    assert answer.status_code == 200
    assert f'<code id="remote-secret">{agent.remote_secret}</code>' in answer.content.decode()
    assert (agent.kind, agent.approval) == ("remote", "pending")
    assert agent.params == {"endpoint": act_url(entrant)}
    again = page(alice).get(reverse("battles:agent", args=[agent.pk])).content.decode()
    assert agent.remote_secret not in again


def test_an_owner_registers_a_scaffold_agent_its_key_sealed(acme, alice):
    form = {"kind": "scaffold", "team": acme.pk, "display_name": "Acme Claude",
            "provider": "anthropic", "model_id": "claude-test-1", "provider_key": TEAM_KEY,
            "params": '{"max_tokens": 256}'}  # fmt: skip

    answer = page(alice).post(reverse("battles:agent-new"), form)

    agent = Agent.objects.get(team=acme)
    assert answer.status_code == 302 and answer["Location"] == f"/my-agents/{agent.pk}/"
    assert provider_key_open(agent_id=agent.pk, sealed=agent.provider_key_encrypted) == TEAM_KEY
    assert agent.params == {"max_tokens": 256}
    assert TEAM_KEY not in page(alice).get(answer["Location"]).content.decode()


@pytest.mark.parametrize(
    ("changes", "status", "words"),
    [
        ({"kind": "scaffold", "endpoint": "", "provider": "anthropic", "model_id": "m"}, 400,
         "provider_key is required"),
        ({"endpoint": "http://10.0.0.7/agent"}, 400, "params: "),
        ({"params": "[1, 2]"}, 400, "A JSON object"),
        ({"params": "{nope"}, 400, "Not valid JSON"),
        ({"params": '{"api_key_env": "X"}'}, 400, "params api_key_env is not accepted"),
    ],
)  # fmt: skip
def test_a_bad_registration_is_refused_in_words_and_makes_nothing(
    acme, alice, entrant, changes, status, words
):
    answer = register_remote(alice, acme, entrant, **changes)

    assert answer.status_code == status and words in answer.content.decode()
    assert not Agent.objects.filter(team=acme).exists()


def test_a_member_who_is_not_an_owner_cannot_register(acme, bob, charlie, entrant):
    shown = page(bob).get(reverse("battles:agent-new")).content.decode()
    posted = register_remote(bob, acme, entrant)
    outsider = register_remote(charlie, acme, entrant)  # Acme is not among charlie's teams

    assert 'id="not-an-owner"' in shown and 'name="display_name"' not in shown
    assert posted.status_code == 400 and outsider.status_code == 400
    assert not Agent.objects.filter(team=acme).exists()


# --- changing it ------------------------------------------------------------------------------


@pytest.fixture
def agent(acme, alice, entrant) -> Agent:
    register_remote(alice, acme, entrant, endpoint=act_url(entrant, "/ack"))  # a typo
    agent = Agent.objects.get(team=acme)
    entrant.secret = agent.remote_secret.encode()
    return agent


def post(user, agent: Agent, **form):
    return page(user).post(reverse("battles:agent", args=[agent.pk]), form)


def test_a_typod_endpoint_is_corrected_on_the_page_and_the_check_then_passes(alice, agent, entrant):
    failed = post(alice, agent, action="check")
    edited = post(alice, agent, action="edit", display_name="Acme Remote",
                  endpoint=act_url(entrant), params="")  # fmt: skip
    passed = post(alice, agent, action="check")

    assert "The check found problems" in failed.content.decode()
    assert edited.status_code == 302
    assert Agent.objects.get(pk=agent.pk).params == {"endpoint": act_url(entrant)}
    assert "The check passed" in passed.content.decode()


def test_an_edit_the_rules_refuse_is_a_clear_error_and_changes_nothing(alice, agent, roster):
    before = state(agent.pk)

    taken = post(alice, agent, action="edit", display_name="Rulebook", endpoint="http://x/")
    bad = post(alice, agent, action="edit", display_name="X", endpoint="ftp://127.0.0.1/")

    assert (
        taken.status_code == 409 and "reads as an agent already entered" in taken.content.decode()
    )
    assert bad.status_code == 400 and "params: " in bad.content.decode()
    assert state(agent.pk) == before


def test_pause_resume_rotate_and_withdraw_on_the_page(alice, agent, entrant):
    old_secret = agent.remote_secret
    Agent.objects.filter(pk=agent.pk).update(approval="approved")  # (approved as it was)

    paused = post(alice, agent, action="pause", reason="moving servers")
    assert paused.status_code == 302 and Agent.objects.get(pk=agent.pk).paused_reason == (
        "moving servers"
    )
    # (the typo'd endpoint: resuming checks the agent first, and refuses in words)
    refused = post(alice, agent, action="resume")
    assert refused.status_code == 400 and "Not resumed" in refused.content.decode()
    Agent.objects.filter(pk=agent.pk).update(params={"endpoint": act_url(entrant)})
    resumed = post(alice, agent, action="resume")
    assert resumed.status_code == 302 and Agent.objects.active().filter(pk=agent.pk).exists()

    rotated = post(alice, agent, action="rotate")
    new_secret = Agent.objects.get(pk=agent.pk).remote_secret
    assert new_secret != old_secret and new_secret in rotated.content.decode()

    withdrawn = post(alice, agent, action="withdraw")
    assert withdrawn.status_code == 302 and withdrawn["Location"] == "/my-agents/"
    listing = page(alice).get("/my-agents/").content.decode()
    assert f'id="agent-{agent.pk}"' not in listing  # off the roster
    assert not Agent.objects.active().filter(pk=agent.pk).exists()
    assert Agent.objects.filter(pk=agent.pk).exists()  # its history stays
    after = post(alice, agent, action="edit", display_name="Back", endpoint=act_url(entrant))
    assert after.status_code == 409 and "withdrawn" in after.content.decode()


@pytest.mark.parametrize(
    "form",
    [
        {"action": "edit", "display_name": "Mine now", "endpoint": "http://127.0.0.1:1/"},
        {"action": "pause", "reason": "sabotage"},
        {"action": "resume"},
        {"action": "rotate"},
        {"action": "check"},
        {"action": "withdraw"},
    ],
)
def test_another_teams_member_gets_a_404_and_a_member_a_403_and_nothing_changes(
    alice, bob, charlie, agent, form
):
    Agent.objects.filter(pk=agent.pk).update(is_paused=form["action"] == "resume")
    before = state(agent.pk)

    outsider = post(charlie, agent, **form)
    seen = page(charlie).get(reverse("battles:agent", args=[agent.pk]))
    member = post(bob, agent, **form)

    assert outsider.status_code == 404 and seen.status_code == 404
    assert agent.display_name not in outsider.content.decode()
    if form["action"] == "check":  # a member may check (it changes nothing)
        assert member.status_code == 200
    else:
        assert member.status_code == 403
        assert "Only an owner of team Acme" in member.content.decode()
    assert state(agent.pk) == before


def test_a_member_sees_the_agent_without_the_owners_buttons(bob, agent):
    shown = page(bob).get(reverse("battles:agent", args=[agent.pk])).content.decode()

    assert 'id="not-owner"' in shown and 'id="withdraw-agent"' not in shown
    assert 'id="start-test-drive"' in shown  # members test-drive their team's agents


def test_a_test_drive_starts_from_the_agents_page(alice, agent):
    answer = page(alice).post(reverse("battles:test-drives-of", args=[agent.pk]))

    drive = agent.test_drives.get()
    assert answer.status_code == 302 and answer["Location"] == f"/test-drives/{drive.pk}/"
    assert drive.sample == "files"  # the default sample


def test_my_agents_links_each_of_your_teams_agents_to_its_page(alice, agent, admin_user):
    own = page(alice).get("/my-agents/").content.decode()
    staff = page(admin_user).get("/my-agents/").content.decode()  # staff see every agent

    assert f'<a href="/my-agents/{agent.pk}/">Acme Remote</a>' in own
    assert "Acme Remote" in staff and f'href="/my-agents/{agent.pk}/"' not in staff
    # (staff change other teams' agents in the admin)
    assert page(admin_user).get(f"/my-agents/{agent.pk}/").status_code == 404


def test_the_forms_on_the_registration_answer_act_on_the_agent(acme, alice, entrant):
    answer = register_remote(alice, acme, entrant).content.decode()

    agent = Agent.objects.get(team=acme)
    # the answer is at /my-agents/new/: its forms must not post there
    assert answer.count(f'action="/my-agents/{agent.pk}/"') == 5
    assert f'action="/my-agents/{agent.pk}/test-drives/"' in answer
