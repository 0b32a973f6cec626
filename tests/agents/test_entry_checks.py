"""An agent is checked before it can be drawn (issue 14, point 3): one door,
``agents.services.entry_problems``, behind the admin form and the API's registration.
Remote endpoints are real HTTP servers on 127.0.0.1 (the reference entrant, and small
servers that answer the health call wrongly); loopback is allow-listed by
tests/agents/conftest.py, and refused without it (tests/agents/test_outbound.py)."""

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.models import Agent, Arena
from agents.protocol import (
    PROTOCOL_VERSION,
    REQUEST_ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    protocol_document,
    verify,
)
from agents.services import entry_problems
from examples.remote_entrant.server import EntrantServer
from tests.servers import free_port

pytestmark = pytest.mark.timeout(30)

SECRET = "entry-check-secret"


def serve(server) -> None:
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()


@pytest.fixture
def entrant() -> Iterator[EntrantServer]:
    server = EntrantServer(("127.0.0.1", 0), SECRET.encode())
    serve(server)
    yield server
    server.shutdown()
    server.server_close()


class Scripted(BaseHTTPRequestHandler):
    """Answers every POST with the class's ``status`` and ``body`` after ``delay_s``,
    and records what it received (headers and body)."""

    status = 200
    body = b""
    delay_s = 0.0
    received: list[tuple[dict, bytes]]

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.received.append((dict(self.headers), data))
        time.sleep(self.delay_s)
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator:
    """Starts a Scripted server answering as told: ``scripted(status=, body=)`` returns
    (endpoint URL, received requests)."""
    servers = []

    def start(**answer):
        received: list = []
        handler = type("Handler", (Scripted,), {"received": received, **answer})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        serve(server)
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/act", received

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def remote(endpoint: str, **fields) -> Agent:
    values = {
        "arena": Arena(slug="public", name="Public arena"),
        "slug": "lab-system",
        "display_name": "Lab System",
        "kind": "remote",
        "params": {"endpoint": endpoint},
        "remote_secret": SECRET,
        **fields,
    }
    return Agent(**values)


# --- remote agents: the health call -------------------------------------------------------


def test_a_healthy_reference_entrant_passes(entrant):
    assert entry_problems(remote(entrant.url)) == {}


def test_the_health_call_is_signed_and_says_what_it_is(scripted):
    url, received = scripted(body=json.dumps({"protocol": PROTOCOL_VERSION, "ok": True}).encode())

    assert entry_problems(remote(url)) == {}

    ((headers, body),) = received
    assert json.loads(body) == {"protocol": PROTOCOL_VERSION, "health": True}
    assert headers[REQUEST_ID_HEADER].startswith("health:")
    assert verify(
        SECRET.encode(), headers[TIMESTAMP_HEADER], body, headers[SIGNATURE_HEADER], time.time()
    )
    assert not verify(
        b"another secret", headers[TIMESTAMP_HEADER], body, headers[SIGNATURE_HEADER], time.time()
    )


def test_an_endpoint_holding_another_secret_is_refused_saying_so(entrant):
    problems = entry_problems(remote(entrant.url, remote_secret="not-the-entrant-secret"))
    assert set(problems) == {"params"}
    assert "refused the arena's signature (HTTP 401)" in problems["params"]
    assert "same secret" in problems["params"]


def test_an_endpoint_nobody_listens_on_is_refused():
    problems = entry_problems(remote(f"http://127.0.0.1:{free_port()}/act"))
    assert "did not pass the protocol's health call: connection failed" in problems["params"]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"status": 404, "body": b"{}"}, "answered the health call with HTTP 404, not 200"),
        ({"body": b"<html>hello</html>"}, "the reply is not JSON"),
        (
            {"body": b'{"protocol": "arena-agent/0", "ok": true}'},
            "names protocol 'arena-agent/0'; the arena speaks 'arena-agent/1'",
        ),
        ({"body": b'{"protocol": "arena-agent/1"}'}, 'must say "ok": true'),
        ({"body": b"[1, 2]"}, "must be a JSON object, not an array"),
        ({"body": b'{"pad": "' + b"x" * 20_000 + b'"}'}, "larger than 10000 bytes"),
    ],
)
def test_a_wrong_answer_to_the_health_call_is_refused_naming_it(scripted, answer, expected):
    url, _ = scripted(**answer)
    problems = entry_problems(remote(url))
    assert set(problems) == {"params"}
    assert expected in problems["params"]


def test_a_silent_endpoint_is_refused_within_its_timeout(scripted):
    url, _ = scripted(body=b"{}", delay_s=3.0)
    started = time.monotonic()
    problems = entry_problems(remote(url, params={"endpoint": url, "timeout_s": 0.5}))
    assert time.monotonic() - started < 2.5
    assert "no answer within 0.5 s" in problems["params"]


def test_an_endpoint_is_required_and_so_is_a_secret():
    problems = entry_problems(remote("", params={}, remote_secret=""))
    assert set(problems) == {"params", "remote_secret"}
    assert 'needs params {"endpoint": URL}' in problems["params"]
    assert "needs a secret" in problems["remote_secret"]


def test_a_malformed_or_internal_endpoint_is_refused_before_any_call(settings, scripted):
    url, received = scripted(body=b"{}")
    assert "http:// or https://" in entry_problems(remote("ftp://example.test/act"))["params"]
    settings.ARENA = settings.ARENA.replace(internal_allowlist="")
    assert "refused by the address policy (loopback)" in entry_problems(remote(url))["params"]
    assert received == []  # the address policy refused before any connection


def test_an_agent_saved_out_of_play_is_not_called(scripted):
    """An admin can always pause (or retire) an agent whose endpoint is down."""
    url, received = scripted(status=500)
    assert entry_problems(remote(url, is_paused=True)) == {}
    assert received == []
    assert set(entry_problems(remote(url))) == {"params"}  # resuming it checks again


def test_the_protocol_document_publishes_the_health_call():
    health = protocol_document()["health"]
    assert health["request"]["required"] == ["protocol", "health"]
    assert health["response"]["required"] == ["protocol", "ok"]
    assert health["timeout_s"] == 5.0


# --- scaffold and built-in agents ---------------------------------------------------------


def scaffold(**fields) -> Agent:
    values = {"kind": "scaffold", "provider": "anthropic", "model_id": "claude-x", "params": {}}
    return Agent(slug="lab-model", display_name="Lab Model", **{**values, **fields})


def test_a_scaffold_agent_needs_a_known_provider_and_its_key(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert "Unknown provider 'mistral'" in entry_problems(scaffold(provider="mistral"))["provider"]
    assert "ANTHROPIC_API_KEY is not set" in entry_problems(scaffold())["params"]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert entry_problems(scaffold()) == {}


def test_a_team_key_stored_with_the_agent_is_a_key_present(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert entry_problems(scaffold(provider_key_encrypted=b"sealed")) == {}


def test_a_paused_scaffold_without_its_key_can_be_saved(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert entry_problems(scaffold(is_paused=True)) == {}


def test_a_built_in_needs_a_policy_that_exists():
    agent = Agent(kind="builtin", builtin_policy="no-such-policy")
    assert "Unknown built-in policy 'no-such-policy'" in entry_problems(agent)["builtin_policy"]
    assert entry_problems(Agent(kind="builtin", builtin_policy="idle")) == {}


# --- the admin form goes through the door -------------------------------------------------


def admin_form(endpoint: str, **changes) -> dict:
    form = {
        "arena": Arena.objects.public().pk,
        "slug": "lab-system",
        "display_name": "Lab System",
        "kind": "remote",
        "aliases": "[]",
        "params": json.dumps({"endpoint": endpoint}),
        "tool_set": "[]",
        "remote_secret": SECRET,
        "step_budget": "",
        "wall_budget_s": "",
        "approval": "approved",
    }
    return {**form, **changes}


@pytest.fixture
def admin_client_(client, django_user_model, db):
    admin = django_user_model.objects.create_superuser("root", password="pw-for-admin-42")
    client.force_login(admin)
    return client


def test_the_admin_saves_a_remote_agent_that_answers_its_health_call(admin_client_, entrant):
    page = admin_client_.post("/admin/agents/agent/add/", admin_form(entrant.url))
    assert page.status_code == 302, page.content.decode()[:3000]
    assert Agent.objects.get(slug="lab-system").params == {"endpoint": entrant.url}


def test_the_admin_refuses_one_that_does_not_saying_why(admin_client_):
    page = admin_client_.post(
        "/admin/agents/agent/add/", admin_form(f"http://127.0.0.1:{free_port()}/act")
    )
    assert page.status_code == 200  # the form again, with the error
    assert "did not pass the protocol&#x27;s health call" in page.content.decode()
    assert not Agent.objects.filter(slug="lab-system").exists()

    paused = admin_client_.post(
        "/admin/agents/agent/add/",
        admin_form(f"http://127.0.0.1:{free_port()}/act", is_paused="on"),
    )
    assert paused.status_code == 302, paused.content.decode()[:3000]
    assert Agent.objects.get(slug="lab-system").is_paused
