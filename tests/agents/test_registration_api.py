"""A team owner registers the team's agents through the API: a remote agent (the
arena's HMAC secret shown once) or a scaffold agent with the team's own provider key,
encrypted at rest and never shown again. Entries wait for an admin's approval. Every
rule tried to be broken: a member or another team's owner registering, the key in any
answer, the admin's pages or the logs, a tampered or transplanted ciphertext, no
key-encryption key, the arena's environment variables named in params."""

import json
import logging
import time
from collections.abc import Iterator

import pytest
import time_machine
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from accounts.models import Team
from agents.keys import KeyEncryptionError, key_ring, provider_key_open, provider_key_seal
from agents.models import Agent
from agents.policies import Observation
from agents.registration import ENTRY_CHECKS, agent_approve, agent_reject
from agents.services import AgentFailure, policy_for
from arena_site.exceptions import ApplicationError
from arena_site.secret import KEK_ENV_NAME, KEK_FILE_NAME, key_encryption_keys_load
from examples.remote_entrant.server import ACT_PATH, EntrantServer
from tests.agents.conftest import entrant_serving
from tests.agents.fake_providers import FakeAnthropic, text
from tests.conftest import api_client_for

TEAM_KEY = "sk-ant-team-acme-0123456789abcdef"
ARENA_KEY = "sk-ant-arena-own-key-must-not-be-used"


@pytest.fixture(autouse=True)
def kek(monkeypatch) -> str:
    key = Fernet.generate_key().decode()
    monkeypatch.setenv(KEK_ENV_NAME, key)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ARENA_KEY)
    return key


@pytest.fixture
def acme(alice) -> Team:
    return Team.objects.get(name="Acme")


@pytest.fixture
def entrant() -> Iterator[EntrantServer]:
    with entrant_serving(b"not-the-agents-secret-yet") as server:
        yield server


def scaffold_body(**changes) -> dict:
    body = {
        "kind": "scaffold",
        "display_name": "Acme Claude",
        "provider": "anthropic",
        "model_id": "claude-test-1",
        "provider_key": TEAM_KEY,
        "params": {"max_tokens": 256},
    }
    return {**body, **changes}


def register(user, body: dict):
    return api_client_for(user).post(reverse("api:agents"), body, format="json")


def registered(user, body: dict) -> dict:
    answer = register(user, body)
    assert answer.status_code == 201, answer.content
    return answer.json()


def leaks(text: str | bytes, agent: Agent) -> list[str]:
    """Which forms of the team's key or its ciphertext appear in ``text``."""
    text = text.decode(errors="replace") if isinstance(text, bytes) else text
    sealed = bytes(agent.provider_key_encrypted or b"")
    forms = {"plain key": TEAM_KEY, "ciphertext": sealed.decode(), "hex": sealed.hex()}
    return [name for name, value in forms.items() if value and value in text]


# --- a scaffold agent with the team's own key ------------------------------------------------


def test_an_owner_registers_a_scaffold_agent_its_key_sealed_and_never_shown(acme, alice):
    body = registered(alice, scaffold_body())

    agent = Agent.objects.get(pk=body["id"])
    assert (agent.team, agent.kind, agent.slug, agent.approval) == (
        acme, "scaffold", "acme-claude", "pending",
    )  # fmt: skip
    assert body["approval"] == "pending" and body["has_provider_key"] is True
    assert body["remote_secret"] is None and "provider_key" not in body
    # sealed at rest: not the key, and it opens (for this agent) to the key
    assert TEAM_KEY.encode() not in bytes(agent.provider_key_encrypted)
    assert provider_key_open(agent_id=agent.pk, sealed=agent.provider_key_encrypted) == TEAM_KEY
    assert TEAM_KEY not in json.dumps(agent.params)
    # never in any answer
    client = api_client_for(alice)
    for answer in (
        json.dumps(body),
        client.get(reverse("api:agents")).content,
        client.get(reverse("api:agent", args=[agent.pk])).content,
        client.post(reverse("api:agent-check", args=[agent.pk])).content,
    ):
        assert leaks(answer, agent) == []
    # a pending entry is never drawn
    assert not Agent.objects.active().filter(pk=agent.pk).exists()


def test_a_member_who_is_not_an_owner_cannot_register(acme, bob):
    answer = register(bob, scaffold_body())

    assert answer.status_code == 403
    assert answer.json()["error"] == {
        "code": "not_team_owner",
        "message": "Only an owner of team Acme may register agents; ask one of its owners.",
    }
    assert not Agent.objects.filter(team__isnull=False).exists()


def test_another_teams_owner_can_neither_register_for_acme_nor_see_its_agents(
    acme, alice, bob, charlie
):
    mine = registered(alice, scaffold_body())
    client = api_client_for(charlie)

    for_acme = register(charlie, scaffold_body(display_name="Sneaky", team=acme.pk))
    detail = client.get(reverse("api:agent", args=[mine["id"]]))
    check = client.post(reverse("api:agent-check", args=[mine["id"]]))
    listed = client.get(reverse("api:agents")).json()

    assert for_acme.status_code == 400
    assert for_acme.json()["error"]["message"] == "team: not one of your teams."
    assert detail.status_code == check.status_code == 404
    assert listed["results"] == []
    assert list(Agent.objects.filter(team__isnull=False).values_list("slug", flat=True)) == [
        "acme-claude"
    ]
    # bob, a member of Acme, reads Acme's agents (no secrets)
    seen = api_client_for(bob).get(reverse("api:agents")).json()["results"]
    assert [a["slug"] for a in seen] == ["acme-claude"]


@pytest.mark.parametrize(
    ("changes", "code", "words"),
    [
        ({"params": {"api_key_env": "ACME_API_KEY"}}, "forbidden_param", "api_key_env"),
        ({"params": {"api_key": TEAM_KEY}}, "forbidden_param", "provider_key"),
        ({"provider_key": ""}, "key_missing", "provider_key is required"),
        ({"provider_key": "sk ant with spaces"}, "invalid_key", "without spaces"),
        ({"provider": "mystery"}, "invalid", "provider"),
        ({"model_id": ""}, "invalid", "model_id is required"),
        ({"kind": "builtin"}, "invalid", "kind"),
        ({"endpoint": "https://example.org/agent"}, "invalid", "no endpoint"),
        # the address policy: a base URL on an internal address is refused (no traffic)
        ({"params": {"base_url": "http://10.1.2.3:8000"}}, "entry_refused", "params: "),
        ({"params": {"base_url": "http://169.254.169.254/"}}, "entry_refused", "params: "),
        ({"params": ["not", "an", "object"]}, "invalid", "params"),
    ],
)
def test_a_registration_that_could_not_run_is_refused_in_words(alice, changes, code, words):
    answer = register(alice, scaffold_body(**changes))

    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["code"] == code and words in error["message"]
    assert TEAM_KEY not in answer.content.decode()
    assert not Agent.objects.filter(team__isnull=False).exists()


def test_a_taken_slug_is_a_409(alice, roster):
    answer = register(alice, scaffold_body(slug=roster[0].slug))

    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "slug_taken"


@pytest.mark.parametrize("name", ["Rulebook", "RuIebook", "Ｒｕｌｅｂｏｏｋ", "rule book"])
def test_an_entry_cannot_take_another_agents_name(alice, roster, name):
    # a team's "Rulebook" (capital I for l, full-width letters, a space) would pass for
    # the arena's own on the board and in every reveal
    answer = register(alice, scaffold_body(display_name=name, slug="my-own-slug"))

    assert answer.status_code == 409, answer.json()
    assert answer.json()["error"]["code"] == "name_taken"
    assert not Agent.objects.filter(slug="my-own-slug").exists()


def test_the_scaffold_calls_its_provider_with_the_teams_key_never_the_arenas(acme, alice, png):
    with FakeAnthropic([text("Done.")], api_key=TEAM_KEY) as fake:
        agent = Agent.objects.get(
            pk=registered(alice, scaffold_body(params={"base_url": fake.base_url}))["id"]
        )
        policy = policy_for(agent, tools=("shell",), session="s1")
        policy.next_action(observation(png))

        sent = fake.last_request.headers
    assert TEAM_KEY in (sent.get("x-api-key"), sent.get("authorization", "")[7:])
    assert ARENA_KEY not in json.dumps(sent)
    assert leaks(json.dumps([span.__dict__ for span in policy.spans], default=str), agent) == []


def test_a_refused_key_fails_the_lane_without_the_key_in_the_message_or_logs(
    acme, alice, png, caplog
):
    caplog.set_level(logging.DEBUG)
    with FakeAnthropic([text("Done.")], api_key="sk-ant-another-key-entirely") as fake:
        agent = Agent.objects.get(
            pk=registered(alice, scaffold_body(params={"base_url": fake.base_url}))["id"]
        )
        policy = policy_for(agent, tools=("shell",), session="s1")
        with pytest.raises(AgentFailure) as failed:
            policy.next_action(observation(png))

    assert "401" in str(failed.value) and TEAM_KEY not in str(failed.value)
    # whatever logged, the handlers' redaction (LOGGING "redact") sees the key registered
    from agents.providers.redaction import redact

    assert TEAM_KEY not in redact(caplog.text)
    assert leaks(json.dumps([span.__dict__ for span in policy.spans], default=str), agent) == []


def observation(png: bytes) -> Observation:
    return Observation(
        step=0, instruction="say done", start_url="", last_result=None, steps_left=5,
        seconds_left=60.0, screenshot_png=png,
    )  # fmt: skip


# --- the ciphertext and the key-encryption key -----------------------------------------------


def test_a_tampered_ciphertext_fails_the_lane_with_a_clear_reason(acme, alice):
    agent = Agent.objects.get(pk=registered(alice, scaffold_body())["id"])
    sealed = bytearray(bytes(agent.provider_key_encrypted))
    sealed[40] = ord("A") if sealed[40] != ord("A") else ord("B")
    Agent.objects.filter(pk=agent.pk).update(provider_key_encrypted=bytes(sealed))
    agent.refresh_from_db()

    with pytest.raises(
        AgentFailure, match="stored provider key cannot be decrypted: it was altered"
    ):
        policy_for(agent, tools=("shell",), session="s1")


def test_a_ciphertext_copied_onto_another_agent_does_not_open(acme, alice):
    first = Agent.objects.get(pk=registered(alice, scaffold_body())["id"])
    second = Agent.objects.get(
        pk=registered(
            alice, scaffold_body(display_name="Acme Two", provider_key="sk-ant-two-xxxxxxxx")
        )["id"]
    )
    Agent.objects.filter(pk=second.pk).update(provider_key_encrypted=first.provider_key_encrypted)
    second.refresh_from_db()

    with pytest.raises(AgentFailure, match="sealed for another agent"):
        policy_for(second, tools=("shell",), session="s1")


def test_a_key_sealed_under_another_key_encryption_key_does_not_open(monkeypatch):
    sealed = provider_key_seal(agent_id=7, plain=TEAM_KEY)
    monkeypatch.setenv(KEK_ENV_NAME, Fernet.generate_key().decode())

    with pytest.raises(KeyEncryptionError, match="no longer in ARENA_KEY_ENCRYPTION_KEY"):
        provider_key_open(agent_id=7, sealed=sealed)


def test_without_a_key_encryption_key_registration_is_a_503_and_nothing_is_stored(
    alice, monkeypatch, settings, tmp_path, caplog
):
    monkeypatch.delenv(KEK_ENV_NAME)
    settings.DATA_DIR = tmp_path  # a production data dir: no generated key file

    answer = register(alice, scaffold_body())

    assert answer.status_code == 503
    assert answer.json()["error"] == {
        "code": "key_storage_unavailable",
        "message": "The arena cannot store provider keys right now: its operator has not "
        "set a key-encryption key. Try again later, or tell the operator.",
    }
    assert not Agent.objects.filter(team__isnull=False).exists()
    # the operator's log says what to do
    assert (
        f"No key-encryption key: {KEK_ENV_NAME} is not set and {tmp_path / KEK_FILE_NAME}"
        in caplog.text
    )
    assert list(tmp_path.iterdir()) == []  # nothing generated behind the operator's back


def test_the_missing_key_message_says_what_to_do(tmp_path):
    with pytest.raises(Exception) as missing:
        key_encryption_keys_load(tmp_path, environ={})

    assert str(missing.value) == (
        f"No key-encryption key: {KEK_ENV_NAME} is not set and {tmp_path / KEK_FILE_NAME} "
        "does not exist, so teams' provider keys can be neither stored nor used. Set "
        f"{KEK_ENV_NAME} (e.g. to the output of `python -c 'from cryptography.fernet import "
        "Fernet; print(Fernet.generate_key().decode())'`), or run `make setup`, which "
        f"generates {tmp_path / KEK_FILE_NAME}."
    )


def test_a_malformed_key_encryption_key_is_named(monkeypatch, kek):
    monkeypatch.setenv(KEK_ENV_NAME, f"{kek},not-a-fernet-key")

    with pytest.raises(KeyEncryptionError, match="key 2 of 2 is not a Fernet key"):
        key_ring()


def test_the_data_dir_key_file_serves_when_the_variable_is_unset(monkeypatch, settings, tmp_path):
    from arena_site.secret import key_encryption_key_generate

    monkeypatch.delenv(KEK_ENV_NAME)
    settings.DATA_DIR = tmp_path
    path = key_encryption_key_generate(tmp_path)
    first = path.read_text()
    assert key_encryption_key_generate(tmp_path).read_text() == first  # never overwritten
    assert oct(path.stat().st_mode & 0o777) == "0o600"

    assert (
        provider_key_open(agent_id=3, sealed=provider_key_seal(agent_id=3, plain="k" * 20))
        == "k" * 20
    )


def test_rotation_re_encrypts_every_key_under_the_new_first_key(acme, alice, monkeypatch, kek):
    agent = Agent.objects.get(pk=registered(alice, scaffold_body())["id"])
    new = Fernet.generate_key().decode()
    monkeypatch.setenv(KEK_ENV_NAME, f"{new},{kek}")

    call_command("agent_keys_rotate")

    agent.refresh_from_db()
    monkeypatch.setenv(KEK_ENV_NAME, new)  # the old key dropped
    assert provider_key_open(agent_id=agent.pk, sealed=agent.provider_key_encrypted) == TEAM_KEY
    monkeypatch.setenv(KEK_ENV_NAME, kek)  # and no longer needed
    with pytest.raises(KeyEncryptionError):
        provider_key_open(agent_id=agent.pk, sealed=agent.provider_key_encrypted)
    with pytest.raises(CommandError, match="open under none of the keys"):
        call_command("agent_keys_rotate")  # with only the old key, the new ciphertext is unreadable


# --- a remote agent: the secret shown once, the health call, approval --------------------


def remote_body(entrant: EntrantServer, **changes) -> dict:
    port = entrant.server_address[1]
    return {"kind": "remote", "display_name": "Acme Remote",
            "endpoint": f"http://127.0.0.1:{port}{ACT_PATH}", **changes}  # fmt: skip


def test_a_remote_agent_gets_its_secret_once_and_passes_the_health_call_once_configured(
    acme, alice, entrant
):
    body = registered(alice, remote_body(entrant))
    secret = body["remote_secret"]
    agent = Agent.objects.get(pk=body["id"])
    assert len(secret) >= 40 and agent.remote_secret == secret
    assert body["endpoint"] == f"http://127.0.0.1:{entrant.server_address[1]}{ACT_PATH}"
    assert (body["approval"], body["has_provider_key"], body["provider"]) == ("pending", False, "")
    client = api_client_for(alice)
    check = reverse("api:agent-check", args=[agent.pk])

    # the endpoint does not hold the secret yet: the check says so, in words
    before = client.post(check).json()
    entrant.secret = secret.encode()
    after = client.post(check).json()

    assert before["ok"] is False and "refused the arena's signature" in before["problems"]["params"]
    assert after == {"ok": True, "problems": {}}
    for answer in (
        client.get(reverse("api:agents")),
        client.get(reverse("api:agent", args=[agent.pk])),
    ):
        assert secret not in answer.content.decode()


@pytest.mark.parametrize(
    ("endpoint", "words"),
    [("http://10.0.0.7/agent", "params: "), ("ftp://127.0.0.1/", "params: "), ("", "endpoint")],
)
def test_a_remote_endpoint_the_policy_refuses_is_refused_at_once(alice, endpoint, words):
    answer = register(alice, {"kind": "remote", "display_name": "Bad", "endpoint": endpoint})

    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "entry_refused"
    assert words in answer.json()["error"]["message"]
    assert not Agent.objects.filter(team__isnull=False).exists()


def test_a_remote_agent_takes_no_provider_key(alice, entrant):
    answer = register(alice, remote_body(entrant, provider_key=TEAM_KEY))

    assert answer.status_code == 400 and "no provider" in answer.json()["error"]["message"]
    assert TEAM_KEY not in answer.content.decode()


def test_approval_checks_the_entry_and_the_team_reads_the_decision(
    acme, alice, entrant, admin_user
):
    body = registered(alice, remote_body(entrant))
    agent = Agent.objects.get(pk=body["id"])

    # the endpoint does not answer with its secret: it cannot be approved
    with pytest.raises(ApplicationError, match="Not approved: params: The endpoint did not pass"):
        agent_approve(agent=agent, actor=admin_user)
    entrant.secret = body["remote_secret"].encode()
    with pytest.raises(ApplicationError, match="Say why"):
        agent_reject(agent=agent, actor=admin_user, note="  ")
    agent_approve(agent=agent, actor=admin_user, note="Welcome.")

    seen = api_client_for(alice).get(reverse("api:agent", args=[agent.pk])).json()
    assert (seen["approval"], seen["approval_note"]) == ("approved", "Welcome.")
    assert seen["approved_at"] is not None and "approved_by" not in seen
    assert Agent.objects.active().filter(pk=agent.pk).exists()

    agent_reject(agent=agent, actor=admin_user, note="It reveals its name in every answer.")
    seen = api_client_for(alice).get(reverse("api:agent", args=[agent.pk])).json()
    assert (seen["approval"], seen["approval_note"]) == (
        "rejected", "It reveals its name in every answer.",
    )  # fmt: skip
    assert not Agent.objects.active().filter(pk=agent.pk).exists()


# --- the admin: actions, and no key on any page ----------------------------------------------


def test_the_admin_approves_and_rejects_with_a_note_and_never_shows_the_key(
    acme, alice, admin_user
):
    first = Agent.objects.get(pk=registered(alice, scaffold_body())["id"])
    second = Agent.objects.get(
        pk=registered(
            alice, scaffold_body(display_name="Acme Two", provider_key="sk-ant-two-yyyyyyyyy")
        )["id"]
    )
    client = Client()
    client.force_login(admin_user)
    changelist = reverse("admin:agents_agent_changelist")

    rejected_without_note = client.post(
        changelist, {"action": "reject_entries", "_selected_action": [second.pk], "note": ""},
        follow=True,
    )  # fmt: skip
    assert b"Say why the entry is rejected" in rejected_without_note.content
    client.post(
        changelist, {"action": "approve_entries", "_selected_action": [first.pk], "note": "ok"}
    )
    client.post(
        changelist,
        {
            "action": "reject_entries",
            "_selected_action": [second.pk],
            "note": "Use your own model id.",
        },
    )

    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.approval, first.approval_note, first.approved_by) == (
        "approved",
        "ok",
        admin_user,
    )
    assert (second.approval, second.approval_note) == ("rejected", "Use your own model id.")
    for url in (
        reverse("admin:agents_agent_change", args=[first.pk]),
        reverse("admin:agents_agent_change", args=[second.pk]),
        changelist,
        changelist + "?approval__exact=pending",
    ):
        page = client.get(url)
        assert page.status_code == 200
        assert leaks(page.content, first) == [] and leaks(page.content, second) == []
        assert b"sk-ant-two-yyyyyyyyy" not in page.content
    change = client.get(reverse("admin:agents_agent_change", args=[first.pk])).content
    assert b"Team&#x27;s own provider key" in change or b"Team's own provider key" in change


def test_saving_a_team_agent_in_the_admin_keeps_its_sealed_key(acme, alice, admin_user):
    agent = Agent.objects.get(pk=registered(alice, scaffold_body())["id"])
    sealed = bytes(agent.provider_key_encrypted)
    client = Client()
    client.force_login(admin_user)
    url = reverse("admin:agents_agent_change", args=[agent.pk])
    page = client.get(url)
    form = page.context["adminform"].form
    data = {
        name: ("" if value is None else value)
        for name, value in form.initial.items()
        if name in form.fields
    }
    data.update(
        arena=agent.arena_id, team=acme.pk, params=json.dumps(agent.params), aliases="[]",
        tool_set="[]", display_name="Acme Claude Renamed", remote_secret="", standing_note="",
        step_budget="", wall_budget_s="", retired_at="",
    )  # fmt: skip
    data = {k: v for k, v in data.items() if v is not False}

    saved = client.post(url, data)

    assert saved.status_code == 302, page.context and saved.content[:2000]
    agent.refresh_from_db()
    assert (
        agent.display_name == "Acme Claude Renamed"
        and bytes(agent.provider_key_encrypted) == sealed
    )


def test_a_team_cannot_have_the_arena_call_its_endpoint_without_end(acme, alice, entrant):
    # Each check is a health call of up to 5 s from a web thread, to an address of the
    # team's choosing: a team that asks for one after another is told to wait.
    agent = Agent.objects.get(pk=registered(alice, remote_body(entrant))["id"])
    client = api_client_for(alice)
    check = reverse("api:agent-check", args=[agent.pk])
    # From the start of the next window: the checks take seconds, and a window ending
    # among them would give a fresh allowance.
    window_s = ENTRY_CHECKS.window_s
    with time_machine.travel((time.time() // window_s + 1) * window_s + 1, tick=True):
        answers = [client.post(check) for _ in range(ENTRY_CHECKS.limit + 1)]

        assert [a.status_code for a in answers[:-1]] == [200] * ENTRY_CHECKS.limit
        refused = answers[-1]
        assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
        assert refused.json()["error"]["code"] == "rate_limited"
        assert "Try again in" in refused.json()["error"]["message"]
        # per team, not per agent: a second agent of the team does not get a fresh allowance
        other = registered(alice, remote_body(entrant, display_name="Acme Remote 2"))["id"]
        assert client.post(reverse("api:agent-check", args=[other])).status_code == 429


# --- PATCH and DELETE: a team changes and withdraws its own agents ------------------------


def edit(user, agent_id: int, body: dict):
    return api_client_for(user).patch(reverse("api:agent", args=[agent_id]), body, format="json")


def test_a_typod_endpoint_is_corrected_by_patch_and_the_agent_passes_its_check(
    acme, alice, entrant
):
    port = entrant.server_address[1]
    body = registered(alice, remote_body(entrant, endpoint=f"http://127.0.0.1:{port}/ack"))
    entrant.secret = body["remote_secret"].encode()
    check = reverse("api:agent-check", args=[body["id"]])
    assert api_client_for(alice).post(check).json()["ok"] is False  # nothing answers /ack

    answer = edit(alice, body["id"], {"endpoint": f"http://127.0.0.1:{port}{ACT_PATH}"})

    assert answer.status_code == 200, answer.content
    assert answer.json()["endpoint"] == f"http://127.0.0.1:{port}{ACT_PATH}"
    assert answer.json()["remote_secret"] is None  # not rotated: not shown
    assert api_client_for(alice).post(check).json() == {"ok": True, "problems": {}}


def test_a_change_of_what_runs_sends_an_approved_agent_back_to_an_admin(
    acme, alice, admin_user, entrant
):
    body = registered(alice, remote_body(entrant))
    entrant.secret = body["remote_secret"].encode()
    agent_approve(agent=Agent.objects.get(pk=body["id"]), actor=admin_user)

    renamed = edit(alice, body["id"], {"display_name": "Acme Remote Two"}).json()
    moved = edit(alice, body["id"], {"params": {"timeout_s": 10}}).json()

    assert (renamed["display_name"], renamed["approval"]) == ("Acme Remote Two", "approved")
    assert moved["approval"] == "pending" and "waiting for an admin" in moved["approval_note"]
    assert moved["params"] == {"timeout_s": 10} and moved["endpoint"] == body["endpoint"]
    assert not Agent.objects.active().filter(pk=body["id"]).exists()


def test_rotating_the_secret_shows_the_new_one_once_and_the_old_one_stops(acme, alice, entrant):
    body = registered(alice, remote_body(entrant))
    entrant.secret = body["remote_secret"].encode()

    answer = edit(alice, body["id"], {"rotate_secret": True}).json()

    new = answer["remote_secret"]
    assert new and new != body["remote_secret"]
    assert Agent.objects.get(pk=body["id"]).remote_secret == new
    check = api_client_for(alice).post(reverse("api:agent-check", args=[body["id"]])).json()
    assert check["ok"] is False and "signature" in check["problems"]["params"]
    assert (
        new
        not in api_client_for(alice).get(reverse("api:agent", args=[body["id"]])).content.decode()
    )


def test_a_scaffold_key_is_replaced_sealed_and_never_shown(acme, alice):
    body = registered(alice, scaffold_body())
    new_key = "sk-ant-team-acme-rotated-000000000"

    answer = edit(alice, body["id"], {"provider_key": new_key})

    agent = Agent.objects.get(pk=body["id"])
    assert answer.status_code == 200 and new_key not in answer.content.decode()
    assert provider_key_open(agent_id=agent.pk, sealed=agent.provider_key_encrypted) == new_key
    assert answer.json()["approval"] == "pending"  # (it was pending; a key keeps the state)


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"kind": "remote"}, 400, "not_editable"),
        ({"slug": "other"}, 400, "not_editable"),
        ({"team": 1}, 400, "not_editable"),
        ({"display_name": ""}, 400, "invalid"),
        ({"endpoint": "http://127.0.0.1:1/"}, 400, "invalid"),  # a scaffold has none
        ({"params": {"api_key_env": "ANTHROPIC_API_KEY"}}, 400, "forbidden_param"),
        ({"params": {"base_url": "http://10.0.0.7/v1"}}, 400, "entry_refused"),
        ({"provider": "openai"}, 400, "key_missing"),  # another provider, no key of its own
        ({"provider_key": "has spaces in it"}, 400, "invalid_key"),
        ({"rotate_secret": True}, 400, "invalid"),  # a scaffold has no secret
        ({"display_name": "Rule book"}, 409, "name_taken"),  # a built-in's, spaced
    ],
)
def test_a_bad_patch_is_refused_in_words_and_changes_nothing(
    acme, alice, roster, change, status, code
):
    body = registered(alice, scaffold_body())
    before = Agent.objects.filter(pk=body["id"]).values().get()

    answer = edit(alice, body["id"], change)

    assert answer.status_code == status, answer.content
    assert answer.json()["error"]["code"] == code and answer.json()["error"]["message"]
    assert Agent.objects.filter(pk=body["id"]).values().get() == before


def test_pausing_and_resuming_through_patch(acme, alice, admin_user, entrant):
    body = registered(alice, remote_body(entrant))
    entrant.secret = body["remote_secret"].encode()
    agent_approve(agent=Agent.objects.get(pk=body["id"]), actor=admin_user)

    paused = edit(alice, body["id"], {"is_paused": True, "paused_reason": "moving servers"})
    assert not Agent.objects.active().filter(pk=body["id"]).exists()
    entrant.secret = b"a-secret-that-does-not-match"
    refused = edit(alice, body["id"], {"is_paused": False})
    entrant.secret = body["remote_secret"].encode()
    resumed = edit(alice, body["id"], {"is_paused": False})

    assert (paused.json()["is_paused"], paused.json()["paused_reason"]) == (True, "moving servers")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "entry_refused"
    assert resumed.status_code == 200 and resumed.json()["is_paused"] is False
    assert Agent.objects.active().filter(pk=body["id"]).exists()
    log = [(e.changes, e.actor) for e in Agent.objects.get(pk=body["id"]).standing_log.all()]
    assert log == [({"is_paused": [True, False]}, alice), ({"is_paused": [False, True]}, alice)]


def test_a_pause_an_admin_made_is_not_the_teams_to_lift(acme, alice, admin_user, entrant):
    from agents.services import agent_standing_log

    body = registered(alice, remote_body(entrant))
    agent = Agent.objects.get(pk=body["id"])
    agent_standing_log(agent=agent, changes={"is_paused": [False, True]}, note="It spams.",
                       actor=admin_user)  # fmt: skip
    Agent.objects.filter(pk=agent.pk).update(is_paused=True, paused_reason="It spams.")

    answer = edit(alice, body["id"], {"is_paused": False})

    assert answer.status_code == 403 and answer.json()["error"]["code"] == "paused_by_admin"
    assert Agent.objects.get(pk=agent.pk).is_paused is True


def test_delete_withdraws_the_agent_and_keeps_its_history(acme, alice, admin_user, entrant):
    body = registered(alice, remote_body(entrant))
    entrant.secret = body["remote_secret"].encode()
    agent_approve(agent=Agent.objects.get(pk=body["id"]), actor=admin_user)
    url = reverse("api:agent", args=[body["id"]])

    gone = api_client_for(alice).delete(url)
    again = api_client_for(alice).delete(url)
    shown = api_client_for(alice).get(url)
    changed = edit(alice, body["id"], {"display_name": "Back"})

    assert (gone.status_code, again.status_code) == (204, 204)
    assert shown.status_code == 200 and shown.json()["retired_at"] is not None
    assert changed.status_code == 409 and changed.json()["error"]["code"] == "agent_withdrawn"
    assert Agent.objects.filter(pk=body["id"]).exists()  # the row and its history stay
    assert not Agent.objects.active().filter(pk=body["id"]).exists()


@pytest.mark.parametrize("method", ["patch", "delete"])
def test_another_team_gets_a_404_and_a_member_a_403_and_nothing_changes(
    acme, alice, bob, charlie, entrant, method
):
    body = registered(alice, remote_body(entrant))
    url = reverse("api:agent", args=[body["id"]])
    before = Agent.objects.filter(pk=body["id"]).values().get()

    def call(user):
        client = api_client_for(user)
        if method == "delete":
            return client.delete(url)
        return client.patch(url, {"display_name": "Taken", "rotate_secret": True}, format="json")

    outsider, member = call(charlie), call(bob)
    missing = getattr(api_client_for(alice), method)(reverse("api:agent", args=[body["id"] + 999]))

    assert outsider.status_code == 404 and missing.status_code == 404
    assert outsider.json() == missing.json()  # another team's agent is like a missing one
    assert member.status_code == 403 and member.json()["error"]["code"] == "not_team_owner"
    assert Agent.objects.filter(pk=body["id"]).values().get() == before


def test_an_automatic_pause_is_the_teams_to_lift_once_the_agent_passes(
    acme, alice, admin_user, entrant, settings
):
    from agents.services import agent_lane_failed

    body = registered(alice, remote_body(entrant))
    entrant.secret = body["remote_secret"].encode()
    agent_approve(agent=Agent.objects.get(pk=body["id"]), actor=admin_user)
    for _ in range(settings.ARENA.agent_failure_pause):
        agent_lane_failed(agent_id=body["id"], error="the endpoint timed out")
    paused = Agent.objects.get(pk=body["id"])
    assert paused.is_paused and "resume it from its page" in paused.paused_reason

    answer = edit(alice, body["id"], {"is_paused": False})

    assert answer.status_code == 200 and answer.json()["is_paused"] is False
    resumed = Agent.objects.get(pk=body["id"])
    assert (resumed.failure_streak, resumed.paused_reason) == (0, "")
    assert Agent.objects.active().filter(pk=body["id"]).exists()


@pytest.mark.parametrize("payload", [[{"kind": "remote"}], ["kind"], "kind", 7])
def test_a_patch_body_that_is_not_an_object_is_a_400(acme, alice, payload):
    body = registered(alice, scaffold_body())

    answer = api_client_for(alice).patch(
        reverse("api:agent", args=[body["id"]]), json.dumps(payload),
        content_type="application/json",
    )  # fmt: skip

    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid"
