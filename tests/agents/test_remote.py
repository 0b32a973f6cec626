"""RemotePolicy over real sockets on 127.0.0.1: against the reference entrant in
``examples/remote_entrant``, and against a scripted stub for the failure modes.
Backoff sleeps are recorded, not slept; only the timeout test waits, and briefly."""

import base64
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.policies import Action, GiveUp, Observation
from agents.protocol import (
    MAX_REPLY_BYTES,
    RETRY_AFTER_CAP_S,
    ProtocolError,
    observation_schema,
    verify,
)
from agents.remote import RemoteAgentError, RemotePolicy, session_token
from examples.remote_entrant.server import EntrantServer, ReplyCache
from sandboxes.base import ToolResult
from tests.agents.conftest import entrant_serving, loopback_outbound

pytestmark = pytest.mark.timeout(10)

SECRET = "entrant-secret-4711"
LISTING = (
    "total 16\n"
    "drwxr-xr-x 2 arena arena 4096 Jan  1 12:00 .\n"
    "drwxr-xr-x 3 arena arena 4096 Jan  1 12:00 ..\n"
    "-rw-r--r-- 1 arena arena   12 Jan  1 12:00 notes.txt\n"
    "-rw-r--r-- 1 arena arena   40 Jan  1 12:00 data file.csv\n"
)
GOOD_REPLY = b'{"action": {"tool": "screenshot"}}'


def observation(step: int = 0, **changes) -> Observation:
    values = {
        "step": step,
        "instruction": "What files are in the workspace?",
        "start_url": "",
        "last_result": None,
        "steps_left": 30 - step,
        "seconds_left": 600.0,
        "screenshot_png": None,
    }
    return Observation(**{**values, **changes})


@pytest.fixture
def entrant() -> Iterator[EntrantServer]:
    with entrant_serving(SECRET.encode()) as server:
        yield server


# --- a scripted stub --------------------------------------------------------------------


@dataclass
class Answer:
    status: int = 200
    body: bytes = GOOD_REPLY
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


class StubServer(ThreadingHTTPServer):
    """Answers POSTs from a script (the last answer repeats) and keeps each request's
    headers and body."""

    daemon_threads = True

    def __init__(self, script: list[Answer]) -> None:
        super().__init__(("127.0.0.1", 0), StubHandler)
        self.script = list(script)
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.release = threading.Event()  # ends every delay at teardown
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/act"

    def request_ids(self) -> list[str]:
        return [headers["x-arena-request-id"] for headers, _ in self.requests]


class StubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StubServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            headers = {name.lower(): value for name, value in self.headers.items()}
            self.server.requests.append((headers, body))
            script = self.server.script
            answer = script.pop(0) if len(script) > 1 else script[0]
        if answer.delay_s:
            self.server.release.wait(answer.delay_s)
        try:
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)
        except OSError:
            pass  # the arena stopped waiting

    def handle(self) -> None:
        # The arena hung up (it stopped waiting, or dropped an idle connection).
        with contextlib.suppress(ConnectionError):
            super().handle()

    def log_message(self, format, *args) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[Callable[..., StubServer]]:
    servers: list[StubServer] = []

    def start(*script: Answer) -> StubServer:
        server = StubServer(list(script))
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def remote(sleeps) -> Iterator[Callable[..., RemotePolicy]]:
    """Builds policies that record their backoff sleeps in ``sleeps``; closes them."""
    policies: list[RemotePolicy] = []

    def build(url: str, **options) -> RemotePolicy:
        options.setdefault("session", session_token())
        options.setdefault("outbound", loopback_outbound())
        secret = options.pop("secret", SECRET)
        policies.append(RemotePolicy(url, secret, sleep=sleeps.append, **options))
        return policies[-1]

    yield build
    for policy in policies:
        policy.close()


# --- against the reference entrant ------------------------------------------------------


def test_two_steps_with_the_reference_entrant(remote, entrant, sleeps):
    # Given the reference entrant and a policy that knows its secret
    with remote(entrant.url) as policy:
        # When it is asked for step 0, then it lists the workspace
        first = policy.next_action(observation(0))
        assert first == Action("shell", {"command": "ls -la", "timeout_s": 10})
        exchange = policy.last_exchange
        assert (exchange.attempts, exchange.status, exchange.error) == (1, 200, "")
        assert exchange.thought == "Look at the workspace before anything else."
        assert exchange.request_id == f"{policy.session}:0"
        assert exchange.request_bytes > 0 and exchange.response_bytes > 0
        # and, shown the listing, it delivers a summary of it
        result = ToolResult(ok=True, tool="shell", stdout=LISTING, exit_code=0).as_dict()
        second = policy.next_action(observation(1, last_result=result))
    assert second == Action(
        "deliver", {"message": "The workspace holds 2 entries: notes.txt, data file.csv."}
    )
    assert policy.last_exchange.thought == "Report what the listing showed."
    assert sleeps == []


def test_the_reference_entrant_gives_up_on_an_empty_instruction(remote, entrant):
    with remote(entrant.url) as policy:
        decision = policy.next_action(observation(0, instruction="   "))
    assert decision == GiveUp("The instruction is empty, so there is nothing to do.")


def test_a_wrong_secret_is_refused_with_401_and_not_retried(remote, entrant, sleeps, caplog):
    caplog.set_level(logging.DEBUG)
    policy = remote(entrant.url, secret="not-the-secret")
    with pytest.raises(RemoteAgentError) as caught:
        policy.next_action(observation(0))
    assert (caught.value.status, caught.value.attempts) == (401, 1)
    assert str(caught.value) == "the agent answered HTTP 401; not retried"
    assert sleeps == []
    assert policy.last_exchange.error == "the agent answered HTTP 401; not retried"
    assert "not-the-secret" not in caplog.text + repr(policy) + str(policy.last_exchange)


def test_an_old_signature_is_refused(remote, entrant):
    # Given an arena clock ten minutes behind the entrant's
    policy = remote(entrant.url, clock=lambda: time.time() - 600)
    with pytest.raises(RemoteAgentError) as caught:
        policy.next_action(observation(0))
    assert caught.value.status == 401


def test_the_reference_entrant_remembers_replies_by_request_id():
    cache = ReplyCache(size=2)
    calls = []

    def compute(n):
        calls.append(n)
        return {"n": n}

    assert cache.get_or_decide("s:0", lambda: compute(1)) == {"n": 1}
    assert cache.get_or_decide("s:0", lambda: compute(2)) == {"n": 1}
    cache.get_or_decide("s:1", lambda: compute(3))
    cache.get_or_decide("s:2", lambda: compute(4))
    assert cache.get_or_decide("s:0", lambda: compute(5)) == {"n": 5}  # evicted
    assert calls == [1, 3, 4, 5]


# --- the wire ---------------------------------------------------------------------------


def test_the_request_is_the_signed_observation(remote, stub):
    jsonschema = pytest.importorskip("jsonschema")
    server = stub(Answer())
    session = session_token()
    result = ToolResult(ok=False, tool="click", error="click: x must be an integer").as_dict()
    policy = remote(
        server.url,
        session=session,
        attachments=[{"name": "a.csv", "sha256": "0" * 64, "size": 3}],
    )
    policy.next_action(
        observation(3, last_result=result, screenshot_png=b"\x89PNG...", seconds_left=12.34567)
    )
    [(headers, body)] = server.requests
    sent = json.loads(body)
    jsonschema.Draft202012Validator(observation_schema()).validate(sent)
    assert sent == {
        "protocol": "arena-agent/1",
        "session": session,
        "step": 3,
        "instruction": "What files are in the workspace?",
        "start_url": "",
        "attachments": [{"name": "a.csv", "sha256": "0" * 64, "size": 3}],
        "last_result": result,
        "screenshot": {
            "media_type": "image/png",
            "data": base64.b64encode(b"\x89PNG...").decode(),
        },
        "budgets": {"steps_left": 27, "seconds_left": 12.346},
        "tools": [
            "screenshot", "mouse_move", "click", "drag", "scroll",
            "type", "key", "navigate", "shell", "deliver",
        ],
    }  # fmt: skip
    assert headers["content-type"] == "application/json"
    assert headers["x-arena-request-id"] == f"{session}:3"
    assert verify(
        SECRET.encode(),
        headers["x-arena-timestamp"],
        body,
        headers["x-arena-signature"],
        now=time.time(),
    )
    assert SECRET not in json.dumps(headers)


# --- retries ----------------------------------------------------------------------------


def test_a_503_is_retried_with_the_same_body_and_request_id(remote, stub, sleeps):
    server = stub(Answer(503), Answer(200, b'{"give_up": {"message": "no"}, "thought": "t"}'))
    policy = remote(server.url)
    assert policy.next_action(observation(5)) == GiveUp("no")
    assert server.request_ids() == [f"{policy.session}:5"] * 2
    assert server.requests[0][1] == server.requests[1][1]
    assert sleeps == [0.5]
    exchange = policy.last_exchange
    assert (exchange.attempts, exchange.status, exchange.thought) == (2, 200, "t")


def test_429_waits_as_retry_after_says_up_to_the_cap(remote, stub, sleeps):
    server = stub(
        Answer(429, headers={"Retry-After": "3"}),
        Answer(429, headers={"Retry-After": "86400"}),
        Answer(200),
    )
    policy = remote(server.url)
    assert policy.next_action(observation(0)) == Action("screenshot", {})
    assert sleeps == [3.0, RETRY_AFTER_CAP_S]
    assert len(server.requests) == 3


def test_retries_back_off_exponentially_then_give_up(remote, stub, sleeps):
    server = stub(Answer(502), Answer(504), Answer(503))
    policy = remote(server.url, backoff_s=0.25)
    with pytest.raises(RemoteAgentError) as caught:
        policy.next_action(observation(0))
    assert str(caught.value) == "the agent gave no answer in 3 attempts (last: HTTP 503)"
    assert (caught.value.status, caught.value.attempts) == (503, 3)
    assert sleeps == [0.25, 0.5]
    assert len(server.requests) == 3


@pytest.mark.parametrize("status", [400, 404, 500, 302])
def test_other_statuses_are_not_retried(remote, stub, sleeps, status):
    server = stub(Answer(status, headers={"Location": "http://127.0.0.1:1/"}))
    policy = remote(server.url)
    with pytest.raises(RemoteAgentError) as caught:
        policy.next_action(observation(0))
    assert (caught.value.status, caught.value.attempts) == (status, 1)
    assert len(server.requests) == 1
    assert sleeps == []


def test_a_slow_entrant_times_out_each_attempt_then_errs(remote, stub, sleeps):
    server = stub(Answer(delay_s=5))
    policy = remote(server.url, timeout_s=0.3, max_retries=2, backoff_s=0.05)
    started = time.monotonic()
    with pytest.raises(RemoteAgentError) as caught:
        policy.next_action(observation(0))
    elapsed = time.monotonic() - started
    assert str(caught.value) == "the agent gave no answer in 3 attempts (last: timed out)"
    assert (caught.value.status, caught.value.attempts) == (None, 3)
    assert len(server.requests) == 3
    assert len(set(server.request_ids())) == 1
    assert sleeps == [0.05, 0.1]
    assert 0.9 <= elapsed < 3


def test_an_unreachable_entrant_is_retried_then_errs(remote, sleeps):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again below: nothing listens there
    policy = remote(f"http://127.0.0.1:{port}/act")
    with pytest.raises(RemoteAgentError) as caught:
        policy.next_action(observation(0))
    assert caught.value.attempts == 3
    assert "connection failed (ConnectError)" in str(caught.value)
    assert sleeps == [0.5, 1.0]


def test_no_retry_outlasts_the_runs_time_budget(remote, stub, sleeps):
    server = stub(Answer(503, headers={"Retry-After": "5"}))
    policy = remote(server.url)
    with pytest.raises(RemoteAgentError) as caught:
        policy.next_action(observation(0, seconds_left=2.0))
    assert "time budget ran out" in str(caught.value)
    assert caught.value.attempts == 1
    assert sleeps == []


# --- invalid replies --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"action": {"tool": "teleport"}}', "action.tool must be one of"),
        (b'{"action": {"tool": "shell"}, "give_up": {"message": "x"}}', "both"),
        (b"<html>oops</html>", "the reply is not JSON"),
        (b"", "the reply is not JSON"),
        (b"\xff\xfe", "the reply is not JSON"),
        (b" " * (MAX_REPLY_BYTES + 1), f"larger than {MAX_REPLY_BYTES} bytes"),
    ],
)
def test_an_invalid_reply_is_a_protocol_error_and_not_retried(remote, stub, sleeps, body, message):
    server = stub(Answer(200, body))
    policy = remote(server.url)
    with pytest.raises(ProtocolError) as caught:
        policy.next_action(observation(0))
    assert message in str(caught.value)
    assert len(server.requests) == 1
    assert sleeps == []
    assert policy.last_exchange.error == str(caught.value)


# --- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "endpoint",
    [
        "",
        "/act",
        "ftp://127.0.0.1/act",
        "file:///etc/passwd",
        "unix:///run/agent.sock",
        "http:///act",
        "http://user:password@127.0.0.1/act",
    ],
)
def test_endpoints_other_than_http_urls_are_refused(endpoint):
    with pytest.raises(ValueError, match="endpoint must"):
        RemotePolicy(endpoint, SECRET, session="s")


def test_a_secret_and_a_session_are_required():
    with pytest.raises(ValueError, match="secret"):
        RemotePolicy("https://agent.example/act", "", session="s")
    with pytest.raises(ValueError, match="session"):
        RemotePolicy("https://agent.example/act", SECRET, session="")


def test_session_tokens_are_fresh_and_opaque():
    tokens = {session_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(len(t) == 24 and ":" not in t for t in tokens)
