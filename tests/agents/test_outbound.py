"""The worker's own calls go through the address policy (issue #12, deliverable 4):
remote-agent endpoints and provider base URLs are checked when an operator enters them
and at every connection the real clients make (the reference entrant, the real
Anthropic and OpenAI SDKs against the fakes of fake_providers.py, all on 127.0.0.1).
Without the operator's allow-list the same calls the rest of tests/agents makes are
refused with a clear error; with it they pass, and a name is dialled at exactly the
address that was checked.

Names are resolved by a fake resolver (the process boundary): no DNS query leaves.
"""

import ipaddress
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.exceptions import ImproperlyConfigured

from agents.models import Agent, Arena
from agents.policies import Observation
from agents.providers.anthropic_client import AnthropicClient
from agents.providers.base import ProviderError, Text, Turn
from agents.providers.openai_client import OpenAIClient
from agents.providers.registry import ProviderDefaults, client_for
from agents.remote import RemoteAgentError, RemotePolicy, session_token
from agents.services import AgentFailure, policy_for
from arena_site.config import ArenaConfig
from examples.remote_entrant.server import EntrantServer
from sandboxes.netpolicy import Allowlist, OutboundPolicy
from tests.agents.fake_providers import FakeAnthropic, FakeOpenAI, text

pytestmark = pytest.mark.timeout(30)

SECRET = "entrant-secret-for-outbound"
KEY = "sk-ant-test-outbound-0123456789"
ASK = [Turn("user", [Text("List the files.")])]
LOOPBACK = ipaddress.ip_address("127.0.0.1")


class TableResolver:
    """Answers names from a table and records every question."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list:
        self.calls.append((host, port))
        return [ipaddress.ip_address(a) for a in self.table.get(host, [])]


def observation() -> Observation:
    return Observation(
        step=0,
        instruction="What files are in the workspace?",
        start_url="",
        last_result=None,
        steps_left=10,
        seconds_left=60.0,
        screenshot_png=None,
    )


def strict(resolver=None) -> OutboundPolicy:
    """The policy with no allow-list (the default deployment)."""
    return OutboundPolicy(resolver=resolver)


@pytest.fixture
def entrant() -> Iterator[EntrantServer]:
    server = EntrantServer(("127.0.0.1", 0), SECRET.encode())
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


class _Recorder(BaseHTTPRequestHandler):
    """Answers every request with the class's ``status`` and ``location``; counts hits."""

    status = 200
    location = ""
    hits: list[str]

    def _answer(self) -> None:
        self.hits.append(self.path)
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        self.send_response(self.status)
        if self.location:
            self.send_header("Location", self.location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def redirect_pair() -> Iterator[tuple[str, list[str], list[str]]]:
    """A server answering 307 to a second one on loopback: (first URL, first's hits,
    second's hits)."""
    servers = []
    hits: list[list[str]] = [[], []]
    target = type("Target", (_Recorder,), {"hits": hits[1]})
    servers.append(ThreadingHTTPServer(("127.0.0.1", 0), target))
    location = f"http://127.0.0.1:{servers[0].server_address[1]}/elsewhere"
    first = type("First", (_Recorder,), {"hits": hits[0], "status": 307, "location": location})
    servers.append(ThreadingHTTPServer(("127.0.0.1", 0), first))
    for server in servers:
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{servers[1].server_address[1]}", hits[0], hits[1]
    for server in servers:
        server.shutdown()
        server.server_close()


# --- remote-agent endpoints -------------------------------------------------------------


def test_without_the_allowlist_a_loopback_endpoint_is_refused_naming_its_class(entrant):
    with pytest.raises(ValueError) as refused:
        RemotePolicy(entrant.url, SECRET, session=session_token(), outbound=strict())

    assert str(refused.value) == (
        "a remote agent's endpoint must be reachable: 127.0.0.1 is refused by the address "
        "policy (loopback): the arena calls only public addresses unless an operator lists "
        "the host or its block in ARENA_INTERNAL_ALLOWLIST"
    )


@pytest.mark.parametrize(
    ("endpoint", "reason"),
    [
        ("http://10.0.0.5/act", "private"),
        ("http://169.254.169.254/latest/", "metadata"),
        ("http://[::ffff:127.0.0.1]:8000/act", "loopback"),
        ("http://0x7f.1:8000/act", "loopback"),
        ("http://localhost:8000/act", "loopback"),
        ("http://100.64.0.1/act", "cgnat"),
    ],
)
def test_internal_endpoints_are_refused_at_registration(endpoint, reason):
    with pytest.raises(ValueError, match=rf"\({reason}\)"):
        RemotePolicy(endpoint, SECRET, session="s", outbound=strict())


def test_a_name_that_resolves_inside_is_refused_when_dialled_and_not_retried(entrant):
    resolver = TableResolver({"entrant.test": ["127.0.0.1"]})
    sleeps: list[float] = []
    url = entrant.url.replace("127.0.0.1", "entrant.test")
    # Registration without DNS lets a name through; the dial resolves and refuses it.
    with (
        RemotePolicy(
            url, SECRET, session=session_token(), sleep=sleeps.append, outbound=strict(resolver)
        ) as policy,
        pytest.raises(RemoteAgentError) as failed,
    ):
        policy.next_action(observation())

    assert str(failed.value) == (
        "the endpoint is refused: entrant.test is refused by the address policy (loopback): "
        "the arena calls only public addresses unless an operator lists the host or its "
        "block in ARENA_INTERNAL_ALLOWLIST"
    )
    assert (failed.value.attempts, sleeps) == (1, [])
    assert resolver.calls == [("entrant.test", entrant.server_address[1])]
    assert policy.last_exchange is not None and "loopback" in policy.last_exchange.error


def test_an_allow_listed_name_is_dialled_at_the_address_that_was_checked(entrant):
    resolver = TableResolver({"entrant.test": ["127.0.0.1"]})
    outbound = OutboundPolicy(allowlist=Allowlist.parse("entrant.test"), resolver=resolver)
    url = entrant.url.replace("127.0.0.1", "entrant.test")

    with RemotePolicy(url, SECRET, session=session_token(), outbound=outbound) as policy:
        decision = policy.next_action(observation())

    # The system resolver knows no entrant.test: the answer came from the policy's one
    # lookup, and the connection went to the address it returned.
    assert decision is not None
    assert resolver.calls == [("entrant.test", entrant.server_address[1])]


def test_a_redirect_from_an_endpoint_is_not_followed(redirect_pair):
    url, first_hits, target_hits = redirect_pair
    outbound = OutboundPolicy(allowlist=Allowlist.parse("127.0.0.0/8"), resolver=None)

    with (
        RemotePolicy(f"{url}/act", SECRET, session="s", outbound=outbound) as policy,
        pytest.raises(RemoteAgentError, match="HTTP 307; not retried"),
    ):
        policy.next_action(observation())

    assert (first_hits, target_hits) == (["/act"], [])


def test_policy_for_builds_the_policy_from_the_settings(settings, entrant, db):
    agent = Agent(
        arena=Arena.objects.public(), slug="team", display_name="Team", kind="remote",
        params={"endpoint": entrant.url}, remote_secret=SECRET,
    )  # fmt: skip
    settings.ARENA = settings.ARENA.replace(internal_allowlist="")
    with pytest.raises(AgentFailure, match=r"127\.0\.0\.1 is refused by the address policy"):
        policy_for(agent, tools=("shell",), session="s")

    settings.ARENA = settings.ARENA.replace(internal_allowlist="127.0.0.1")
    allowed = policy_for(agent, tools=("shell",), session="s")
    assert allowed.next_action(observation()) is not None
    allowed.policy.close()


# --- provider base URLs -----------------------------------------------------------------


def test_without_the_allowlist_a_provider_call_to_loopback_is_refused_and_not_retried():
    sleeps: list[float] = []
    with FakeAnthropic([text("never")], api_key=KEY) as fake:
        client = AnthropicClient(
            "claude-test", KEY, fake.base_url, sleep=sleeps.append, outbound=strict()
        )
        with pytest.raises(ProviderError) as failed:
            client.complete(system="", turns=ASK, tools=[], max_tokens=16)
        client.close()

        assert fake.requests == []
    assert str(failed.value) == (
        "base URL refused: 127.0.0.1 is refused by the address policy (loopback): the arena "
        "calls only public addresses unless an operator lists the host or its block in "
        "ARENA_INTERNAL_ALLOWLIST"
    )
    assert (failed.value.attempts, sleeps) == (1, [])


def test_the_sdk_dials_an_allow_listed_name_at_the_checked_address():
    resolver = TableResolver({"llm.internal": ["127.0.0.1"]})
    outbound = OutboundPolicy(allowlist=Allowlist.parse("llm.internal"), resolver=resolver)
    with FakeOpenAI([text("hello")], api_key="sk-test-outbound-123456") as fake:
        base_url = fake.base_url.replace("127.0.0.1", "llm.internal")
        client = OpenAIClient("gpt-test", "sk-test-outbound-123456", base_url, outbound=outbound)
        reply = client.complete(system="", turns=ASK, tools=[], max_tokens=16)
        client.close()
        port = fake.port

    assert reply.text == "hello"
    assert fake.last_request.headers["host"] == f"llm.internal:{port}"
    assert resolver.calls == [("llm.internal", port)]


def test_a_name_that_turns_internal_is_refused_at_the_next_connection():
    # Public when the operator registered it, 10.0.0.5 when the worker dials it (DNS
    # rebinding): the dial checks what it dials, so the second answer is the one that
    # counts, and the public address is never dialled either.
    resolver = TableResolver({"api.example": ["93.184.216.34"]})
    outbound = strict(resolver)
    registered = outbound.check_registration("https://api.example/v1")
    resolver.table["api.example"] = ["10.0.0.5"]
    client = OpenAIClient(
        "gpt-test", "sk-test-outbound-123456", "https://api.example/v1", outbound=outbound
    )
    with pytest.raises(ProviderError, match=r"api\.example is refused .* \(private\)"):
        client.complete(system="", turns=ASK, tools=[], max_tokens=16)
    client.close()

    assert registered is not None and str(registered.address) == "93.184.216.34"
    assert resolver.calls == [("api.example", 443), ("api.example", 443)]


def test_a_provider_redirect_is_not_followed(redirect_pair):
    url, first_hits, target_hits = redirect_pair
    outbound = OutboundPolicy(allowlist=Allowlist.parse("127.0.0.0/8"), resolver=None)
    client = OpenAIClient("gpt-test", "sk-test-outbound-123456", f"{url}/v1", outbound=outbound)

    with pytest.raises(ProviderError, match="HTTP 307"):
        client.complete(system="", turns=ASK, tools=[], max_tokens=16)
    client.close()

    assert (first_hits, target_hits) == (["/v1/chat/completions"], [])


@pytest.mark.parametrize(
    ("params", "environ", "message"),
    [
        (
            {"base_url": "http://10.1.2.3:8000/v1", "api_key_env": "TEAM_API_KEY"},
            {"TEAM_API_KEY": "team-key-0123456789"},
            "anthropic: base_url 10.1.2.3 is refused by the address policy (private)",
        ),
        (
            {},
            {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": "http://169.254.169.254/"},
            "anthropic: ANTHROPIC_BASE_URL 169.254.169.254 is refused by the address policy "
            "(metadata)",
        ),
        (
            {},
            {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": "http://localhost:4000"},
            "anthropic: ANTHROPIC_BASE_URL localhost is refused by the address policy (loopback)",
        ),
    ],
)
def test_the_registry_checks_base_urls_from_params_and_environment(params, environ, message):
    defaults = ProviderDefaults(outbound=strict())
    with pytest.raises(ProviderError) as refused:
        client_for("anthropic", "claude-test", params=params, defaults=defaults, environ=environ)
    assert str(refused.value).startswith(message)


def test_metadata_stays_refused_even_when_its_block_is_allow_listed():
    defaults = ProviderDefaults(
        outbound=OutboundPolicy(allowlist=Allowlist.parse("169.254.0.0/16"), resolver=None)
    )
    environ = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": "http://169.254.169.254/"}
    with pytest.raises(ProviderError, match=r"\(metadata\)"):
        client_for("anthropic", "claude-test", params={}, defaults=defaults, environ=environ)
    environ["ANTHROPIC_BASE_URL"] = "http://169.254.1.1/"  # link-local, but listed
    client_for("anthropic", "claude-test", params={}, defaults=defaults, environ=environ).close()


# --- registration in the admin, and the knob ------------------------------------------


def admin_form(**changes) -> dict:
    form = {
        "arena": Arena.objects.public().pk,
        "slug": "team-system",
        "display_name": "Team System",
        "kind": "remote",
        "aliases": "[]",
        "params": '{"endpoint": "http://10.0.0.5:8000/act"}',
        "tool_set": "[]",
        "remote_secret": "a-secret-for-the-entrant",
        "step_budget": "",
        "wall_budget_s": "",
    }
    return {**form, **changes}


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({}, "private"),
        ({"params": '{"endpoint": "http://127.0.0.1:9/act"}'}, "loopback"),
        (
            {
                "kind": "scaffold",
                "provider": "openai_compatible",
                "model_id": "llama3",
                "params": '{"base_url": "http://169.254.169.254/v1"}',
            },
            "metadata",
        ),
    ],
)
def test_the_admin_refuses_an_internal_destination_naming_its_class(
    client, django_user_model, settings, changes, reason
):
    settings.ARENA = settings.ARENA.replace(internal_allowlist="")
    admin = django_user_model.objects.create_superuser("root", password="pw-for-admin-42")
    client.force_login(admin)

    page = client.post("/admin/agents/agent/add/", admin_form(**changes))

    assert page.status_code == 200  # the form again, with the error
    assert f"is refused by the address policy ({reason})" in page.content.decode()
    assert not Agent.objects.filter(slug="team-system").exists()


def test_the_admin_accepts_an_allow_listed_destination(
    client, django_user_model, settings, entrant
):
    # The endpoint must answer the protocol's health call too (tests/agents/
    # test_entry_checks.py): the reference entrant on allow-listed loopback does.
    settings.ARENA = settings.ARENA.replace(internal_allowlist="127.0.0.0/8")
    admin = django_user_model.objects.create_superuser("root", password="pw-for-admin-42")
    client.force_login(admin)

    page = client.post(
        "/admin/agents/agent/add/",
        admin_form(params=f'{{"endpoint": "{entrant.url}"}}', remote_secret=SECRET),
    )

    assert page.status_code == 302, page.content.decode()[:3000]
    assert Agent.objects.get(slug="team-system").params == {"endpoint": entrant.url}


@pytest.mark.parametrize("value", ["10.0.0.0/33", "llm internal", "0x7f.1", "10.0.0.1,,bad/"])
def test_a_bad_allowlist_stops_start_up_naming_the_entry(value):
    with pytest.raises(ImproperlyConfigured, match="ARENA_INTERNAL_ALLOWLIST"):
        ArenaConfig.from_env({"ARENA_INTERNAL_ALLOWLIST": value})


def test_the_allowlist_is_read_from_the_environment():
    config = ArenaConfig.from_env({"ARENA_INTERNAL_ALLOWLIST": "10.8.0.0/16, llm.internal"})
    assert Allowlist.parse(config.internal_allowlist) == Allowlist(
        networks=(ipaddress.ip_network("10.8.0.0/16"),), names=frozenset({"llm.internal"})
    )
    assert ArenaConfig.from_env({}).internal_allowlist == ""


# --- a whole lane: the refusal is recorded with the run ---------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_refused_destination_ends_the_lane_with_the_reason_recorded(alice, settings, monkeypatch):
    from battles.models import Battle, Run
    from battles.services import battle_run, task_submit

    settings.ARENA = settings.ARENA.replace(internal_allowlist="", sandbox_desktop=False)
    arena = Arena.objects.public()
    scaffold = Agent.objects.create(
        arena=arena, slug="claude-internal", display_name="Claude Internal", kind="scaffold",
        provider="anthropic", model_id="claude-test",
        params={"base_url": "http://127.0.0.1:9/", "api_key_env": "LANE_OUTBOUND_API_KEY"},
    )  # fmt: skip
    remote = Agent.objects.create(
        arena=arena, slug="team-internal", display_name="Team Internal", kind="remote",
        params={"endpoint": "http://10.0.0.5:8000/act"}, remote_secret=SECRET,
    )  # fmt: skip
    monkeypatch.setenv("LANE_OUTBOUND_API_KEY", KEY)
    battle = task_submit(user=alice, instruction="List the files", rng=random.Random(0))
    Battle.objects.filter(pk=battle.pk).update(agent_a=scaffold, agent_b=remote)
    Run.objects.filter(battle=battle, side="A").update(agent=scaffold)
    Run.objects.filter(battle=battle, side="B").update(agent=remote)
    battle_run(battle_id=battle.pk)

    a, b = Run.objects.filter(battle=battle).order_by("side")
    assert a.end_reason == b.end_reason == "error"
    assert "base_url 127.0.0.1 is refused by the address policy (loopback)" in a.error
    assert "10.0.0.5 is refused by the address policy (private)" in b.error


# --- an agent that could not make one call is refused on save ---------------------------


def _scaffold_form(**changes):
    return admin_form(**{
        "kind": "scaffold", "provider": "anthropic", "model_id": "claude-x",
        "params": "{}", "remote_secret": "", **changes,
    })  # fmt: skip


def test_the_admin_refuses_a_scaffold_agent_whose_key_is_not_set(
    client, django_user_model, monkeypatch
):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("LAB_API_KEY", raising=False)
    admin = django_user_model.objects.create_superuser("root", password="pw-for-admin-42")
    client.force_login(admin)

    page = client.post("/admin/agents/agent/add/", _scaffold_form())
    assert page.status_code == 200  # the form again, with the error
    assert "ANTHROPIC_API_KEY is not set" in page.content.decode()
    named = client.post(
        "/admin/agents/agent/add/", _scaffold_form(params='{"api_key_env": "LAB_API_KEY"}')
    )
    assert "LAB_API_KEY is not set" in named.content.decode()
    unknown = client.post("/admin/agents/agent/add/", _scaffold_form(provider="mistral"))
    assert unknown.status_code == 200
    assert not Agent.objects.filter(slug="team-system").exists()

    monkeypatch.setenv("LAB_API_KEY", "sk-lab-test")  # the key present: saved
    saved = client.post(
        "/admin/agents/agent/add/", _scaffold_form(params='{"api_key_env": "LAB_API_KEY"}')
    )
    assert saved.status_code == 302, saved.content.decode()[:3000]
    assert Agent.objects.get(slug="team-system").params == {"api_key_env": "LAB_API_KEY"}


def test_an_openai_compatible_agent_naming_no_key_needs_none(client, django_user_model, settings):
    settings.ARENA = settings.ARENA.replace(internal_allowlist="10.0.0.0/24")
    admin = django_user_model.objects.create_superuser("root", password="pw-for-admin-42")
    client.force_login(admin)
    page = client.post("/admin/agents/agent/add/", _scaffold_form(
        provider="openai_compatible", params='{"base_url": "http://10.0.0.5:8000/v1"}'
    ))  # fmt: skip
    assert page.status_code == 302, page.content.decode()[:3000]
