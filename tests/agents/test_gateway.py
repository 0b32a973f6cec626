"""The model gateway (agents/gateway.py) through a real egress proxy, as a sandbox uses
it: raw proxy requests on the run's unix socket, and the real ``anthropic`` and
``openai`` SDKs pointed at ``http://models.arena.internal/...`` through the proxy's
TCP listener for the run. Upstreams are the fake providers (tests/agents/fake_providers.py)
and a fake streaming provider (tests/agents/fake_sse.py), all on 127.0.0.1; no name is
ever resolved."""

import ipaddress
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest

from agents.gateway import HOST, MAX_BODY_BYTES, GatewayCall, Grant, ModelGateway, grant_for
from agents.gateway_http import NO_GRANT, NO_STAMP
from agents.gateway_usage import (
    CHAT,
    MAX_EVENT_BYTES,
    MESSAGES,
    RESPONSES,
    CallUsage,
    StreamUsage,
)
from agents.providers.base import ProviderError
from sandboxes.egress import EgressProxy, EgressProxyThread
from sandboxes.egress_stamp import run_stamp
from sandboxes.netpolicy import OutboundPolicy
from tests.agents.conftest import loopback_outbound
from tests.agents.fake_providers import FakeAnthropic, FakeOpenAI, RawJSON, text
from tests.agents.fake_sse import (
    FakeSSE,
    Stream,
    anthropic_stream,
    chat_stream,
    responses_stream,
    sse,
    typed,
)

pytestmark = pytest.mark.timeout(60)

RUN_ID = 8801
OTHER_RUN_ID = 8802  # a second sandbox on the same proxy
KEY = "sk-arena-secret-0123456789abcdef"
CLAUDE = "claude-test-1"
GPT = "gpt-test"


class World:
    """A gateway and a real egress proxy that serves it as ``models.arena.internal``:
    RUN_ID's sandbox on a unix socket and a TCP port (for the SDKs), OTHER_RUN_ID's on a
    unix socket. ``spans`` is what ``on_span`` received."""

    def __init__(self, tmp_path: Path) -> None:
        self.spans: list[tuple[int, GatewayCall]] = []
        self.gateway = ModelGateway(
            on_span=lambda run_id, call: self.spans.append((run_id, call)),
            outbound=loopback_outbound(),
        ).start()
        self.names: list[str] = []
        self.proxy: EgressProxyThread = EgressProxy(
            resolver=lambda host, port: self.names.append(host) or [],
            simulated={HOST: self.gateway.simulated_host()},
            stamp_key=self.gateway.stamp_key,
        ).run_in_thread()
        self.paths = {
            run_id: self.proxy.serve_unix(tmp_path / f"egress-{run_id}.sock", run_id)
            for run_id in (RUN_ID, OTHER_RUN_ID)
        }
        self.tcp_port = self.proxy.serve_tcp(RUN_ID)

    def close(self) -> None:
        self.proxy.close()
        self.gateway.close()

    def calls(self, count: int = 1) -> list[tuple[int, GatewayCall]]:
        """The spans once ``count`` have come. An SDK returns as soon as it has read a
        stream's last event, and the gateway reports the call when its relay ends, a
        moment later."""
        deadline = time.monotonic() + 10
        while len(self.spans) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.spans

    def grant(self, upstream_base_url: str, **overrides) -> Grant:
        provider = overrides.pop("provider", "anthropic")
        run_id = overrides.pop("run_id", RUN_ID)
        fields = {
            "provider": provider,
            "model": CLAUDE if provider == "anthropic" else GPT,
            "upstream_base_url": upstream_base_url,
            "api_key": KEY,
            "max_calls": 10,
            "max_tokens": 100_000,
            "max_cost_usd": 1.0,
            "price": None,
            **overrides,
        }
        grant = Grant(**fields)
        self.gateway.grant(run_id, grant)
        return grant

    def connect(self, run_id: int = RUN_ID) -> socket.socket:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(10)
        client.connect(self.paths[run_id])
        return client

    def send(self, raw: bytes, run_id: int = RUN_ID) -> "Answer":
        with self.connect(run_id) as client:
            client.sendall(raw)
            return Answer.read(client)

    def http_client(self) -> httpx2.Client:
        """What a CLI's SDK does with HTTP_PROXY set: plain-HTTP requests in absolute
        form to the proxy."""
        return httpx2.Client(proxy=f"http://127.0.0.1:{self.tcp_port}", trust_env=False)

    def anthropic_sdk(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url=f"http://{HOST}/anthropic",
            api_key="sandbox-has-no-key",
            max_retries=0,
            http_client=self.http_client(),
        )

    def openai_sdk(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"http://{HOST}/openai/v1",
            api_key="sandbox-has-no-key",
            max_retries=0,
            http_client=self.http_client(),
        )


class Answer:
    def __init__(self, raw: bytes) -> None:
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.raw = raw
        self.status = int(lines[0].split(" ")[1])
        self.headers = {
            name.lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:])
        }
        self.body = dechunk(body) if self.headers.get("transfer-encoding") == "chunked" else body

    @classmethod
    def read(cls, client: socket.socket) -> "Answer":
        chunks = []
        while chunk := client.recv(65536):
            chunks.append(chunk)
        return cls(b"".join(chunks))

    @property
    def json(self):
        return json.loads(self.body)


def read_until(client: socket.socket, marker: bytes) -> bytes:
    """What ``client`` received up to and including the chunk that completes ``marker``;
    fails if the connection closes first."""
    received = b""
    while marker not in received:
        chunk = client.recv(65536)
        assert chunk, f"the connection closed before {marker!r}"
        received += chunk
    return received


def dechunk(body: bytes) -> bytes:
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return bytes(out)


def post(path: str, payload: dict, extra: str = "") -> bytes:
    body = json.dumps(payload).encode()
    return (
        f"POST http://{HOST}{path} HTTP/1.1\r\nHost: {HOST}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def claude_request(model: str = CLAUDE, **more) -> dict:
    return {
        "model": model,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
        **more,
    }


def chat_request(model: str = GPT, **more) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **more}


@pytest.fixture
def world(tmp_path) -> Iterator[World]:
    running = World(tmp_path)
    yield running
    running.close()


@pytest.fixture
def fake_sse() -> Iterator[FakeSSE]:
    with FakeSSE() as fake:
        yield fake


# --- the key, the stamp, the grant ----------------------------------------------------------


def test_the_key_reaches_the_upstream_and_no_client_credential_does(world):
    with FakeAnthropic([text("hello", usage=(100, 20))], api_key=KEY) as upstream:
        world.grant(upstream.base_url)
        # Given a sandbox that sends credentials of its own (and a cookie)
        extra = (
            "x-api-key: sandbox-guess\r\nAuthorization: Bearer stolen\r\napi-key: x\r\n"
            "Cookie: session=1\r\nanthropic-version: 2023-06-01\r\nanthropic-beta: tools-1\r\n"
        )
        answer = world.send(post("/anthropic/v1/messages", claude_request(), extra))

    assert answer.status == 200
    assert answer.json["content"] == [{"type": "text", "text": "hello"}]
    sent = upstream.last_request
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["anthropic-beta"] == "tools-1"
    for name in ("authorization", "api-key", "cookie", "x-arena-run"):
        assert name not in sent.headers
    assert KEY.encode() not in answer.raw
    assert world.names == []  # models.arena.internal is never looked up


def test_the_openai_sdk_through_the_proxy_gets_its_answer_and_only_the_granted_model(world):
    with FakeOpenAI([text("hi there", usage=(30, 5))], api_key=KEY, models=[GPT, "gpt-big"]) as up:
        world.grant(up.base_url, provider="openai")
        client = world.openai_sdk()

        reply = client.chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": "hi"}]
        )
        models = [m.id for m in client.models.list()]

    assert reply.choices[0].message.content == "hi there"
    assert up.last_request.headers["authorization"] == f"Bearer {KEY}"
    assert models == [GPT]  # listed by the gateway, not asked upstream
    assert [r.path for r in up.requests] == ["/v1/chat/completions"]
    ((run_id, call),) = world.calls()
    assert run_id == RUN_ID
    assert (call.name, call.status, call.stream) == (f"openai chat.completions {GPT}", 200, False)
    assert (call.input_tokens, call.output_tokens, call.cost_usd, call.error) == (30, 5, None, "")


def test_the_anthropic_sdk_through_the_proxy_gets_its_answer(world):
    with FakeAnthropic([text("done", usage=(11, 3))], api_key=KEY) as upstream:
        world.grant(upstream.base_url, price=(3.0, 15.0))

        reply = world.anthropic_sdk().messages.create(
            model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )

    assert reply.content[0].text == "done"
    ((_, call),) = world.calls()
    assert call.cost_usd == pytest.approx((11 * 3.0 + 3 * 15.0) / 1e6, abs=1e-15)


def test_a_forged_run_header_is_replaced_by_the_proxys_stamp(world):
    with FakeAnthropic([text("for the other run")], api_key=KEY) as upstream:
        # Given the other run has a grant and this one has none
        world.grant(upstream.base_url, run_id=OTHER_RUN_ID)
        # When this run's sandbox claims the other run, even with its genuine stamp
        genuine = run_stamp(world.gateway.stamp_key, OTHER_RUN_ID)
        answer = world.send(post("/v1/messages", claude_request(), f"X-Arena-Run: {genuine}\r\n"))

    # Then the proxy's stamp names this run, which has no model access
    assert answer.status == 403
    assert answer.json == {
        "type": "error",
        "error": {"type": "permission_error", "message": NO_GRANT},
    }
    assert upstream.requests == []
    assert world.spans == []


def test_a_request_that_bypasses_the_proxy_is_refused(world):
    # Anything on the host reaching the gateway's port directly has no valid stamp
    for stamp in ("", f"X-Arena-Run: {RUN_ID}.{'0' * 64}\r\n"):
        with socket.create_connection(("127.0.0.1", world.gateway.port), timeout=5) as client:
            body = json.dumps(chat_request()).encode()
            client.sendall(
                f"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\n{stamp}"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            answer = Answer.read(client)

        assert answer.status == 403
        assert answer.json["error"]["message"] == NO_STAMP


def test_no_grant_is_a_403_in_the_providers_shape(world):
    answer = world.send(post("/openai/v1/chat/completions", chat_request()))

    assert answer.status == 403
    assert answer.json["error"]["message"] == NO_GRANT
    assert answer.headers["content-type"] == "application/json"


def test_revoking_a_grant_ends_access_and_returns_the_runs_usage(world):
    with FakeAnthropic([text("one", usage=(10, 2))], api_key=KEY) as upstream:
        world.grant(upstream.base_url)
        assert world.send(post("/anthropic/v1/messages", claude_request())).status == 200

        spent = world.gateway.revoke(RUN_ID)
        after = world.send(post("/anthropic/v1/messages", claude_request()))

    assert (spent.calls, spent.input_tokens, spent.output_tokens) == (1, 10, 2)
    assert after.status == 403
    assert world.gateway.usage(RUN_ID) is None


# --- what a call may be -------------------------------------------------------------------


def test_another_model_is_a_400_naming_the_allowed_one(world):
    with FakeOpenAI(api_key=KEY) as upstream:
        world.grant(upstream.base_url, provider="openai")

        answer = world.send(post("/openai/v1/chat/completions", chat_request("gpt-big")))

    assert answer.status == 400
    assert answer.json["error"]["message"] == (
        f"this run may call only {GPT} (the model its agent is rated as); "
        "the request asks for 'gpt-big'"
    )
    assert upstream.requests == []
    assert world.gateway.usage(RUN_ID).refused == {"model": 1}


def test_a_route_of_the_other_provider_names_the_right_one(world):
    with FakeAnthropic(api_key=KEY) as upstream:
        world.grant(upstream.base_url)

        answer = world.send(post("/v1/chat/completions", chat_request(CLAUDE)))

    assert answer.status == 404
    assert f"http://{HOST}/anthropic/v1" in answer.json["error"]["message"]


def test_a_body_over_the_bound_is_a_413_and_nothing_is_forwarded(world):
    with FakeAnthropic(api_key=KEY) as upstream:
        world.grant(upstream.base_url)
        head = (
            f"POST http://{HOST}/anthropic/v1/messages HTTP/1.1\r\nHost: {HOST}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
        ).encode()
        with world.connect() as client:
            client.sendall(head + b"{" + b" " * 65536)
            answer = Answer.read(client)

    assert answer.status == 413
    assert answer.json["error"]["type"] == "request_too_large"
    assert str(MAX_BODY_BYTES) in answer.json["error"]["message"]
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ({"max_calls": 1}, "this run has made its 1 model calls"),
        ({"max_tokens": 120}, "this run has used 120 tokens of its budget of 120"),
        (
            {"max_cost_usd": 0.0006, "price": (3.0, 15.0)},  # the first call costs 0.0006
            "this run has spent $0.0006 of its $0.0006 model budget",
        ),
    ],
)
def test_an_exhausted_budget_is_a_429_and_no_upstream_call(world, budget, message):
    with FakeAnthropic([text("one", usage=(100, 20))], api_key=KEY) as upstream:
        world.grant(upstream.base_url, **budget)
        first = world.send(post("/anthropic/v1/messages", claude_request()))

        second = world.send(post("/anthropic/v1/messages", claude_request()))

    assert first.status == 200
    assert second.status == 429
    assert second.json["error"]["type"] == "rate_limit_error"
    assert second.json["error"]["message"].startswith(message)
    assert second.headers["x-should-retry"] == "false"  # the SDKs do not retry it
    assert len(upstream.requests) == 1
    usage = world.gateway.usage(RUN_ID)
    assert (usage.calls, usage.tokens, usage.refused) == (1, 120, {"budget": 1})
    assert len(world.calls()) == 1


# --- streaming ----------------------------------------------------------------------------


def test_streamed_events_reach_the_client_before_the_upstream_has_finished(world, fake_sse):
    start = {"input_tokens": 5, "output_tokens": 1}
    stream = Stream(anthropic_stream(CLAUDE, "hello", start, {"output_tokens": 2}), hold_after=1)
    fake_sse.push(stream)
    world.grant(fake_sse.base_url)

    with world.connect() as client:
        client.sendall(post("/anthropic/v1/messages", claude_request(stream=True)))
        # The upstream has sent message_start and now waits until the test releases it
        received = read_until(client, b"message_start")
        arrived_while_held = not stream.finished.is_set() and b"content_block_start" not in received
        stream.release.set()
        while chunk := client.recv(65536):
            received += chunk

    answer = Answer(received)
    assert arrived_while_held
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert answer.body == b"".join(stream.events)  # relayed byte for byte
    ((_, call),) = world.calls()
    assert (call.stream, call.input_tokens, call.output_tokens) == (True, 5, 2)


def test_a_client_that_leaves_mid_stream_is_still_charged_for_what_was_reported(world, fake_sse):
    start = {"input_tokens": 50, "output_tokens": 1}
    events = anthropic_stream(CLAUDE, "hello", start, {"output_tokens": 9})
    # Enough after the hold (4 MB) that the gateway is still writing when the proxy has
    # found the client gone and closed its side.
    delta = {"type": "text_delta", "text": "x" * 4096}
    more = [typed({"type": "content_block_delta", "index": 0, "delta": delta})] * 1000
    stream = Stream([*events[:2], *more, *events[2:]], hold_after=1)
    fake_sse.push(stream)
    world.grant(fake_sse.base_url)

    with world.connect() as client:
        client.sendall(post("/anthropic/v1/messages", claude_request(stream=True)))
        read_until(client, b"message_start")
    stream.release.set()  # the rest is written to a client that has gone

    ((_, call),) = world.calls()
    assert call.error == "the client closed the connection"
    assert (call.stream, call.input_tokens, call.output_tokens) == (True, 50, 1)
    assert world.gateway.usage(RUN_ID).tokens == 51


def test_anthropic_stream_usage_and_cost_are_recorded_exactly(world, fake_sse):
    start = {
        "input_tokens": 50,
        "output_tokens": 1,
        "cache_creation_input_tokens": 10,
        "cache_read_input_tokens": 200,
    }
    fake_sse.push(Stream(anthropic_stream(CLAUDE, "Hello world", start, {"output_tokens": 30})))
    world.grant(fake_sse.base_url, price=(3.0, 15.0))

    with world.anthropic_sdk().messages.stream(
        model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        streamed = "".join(stream.text_stream)

    assert streamed == "Hello world"
    ((run_id, call),) = world.calls()
    assert run_id == RUN_ID
    assert call.name == f"anthropic messages {CLAUDE}"
    assert (call.status, call.stream, call.error) == (200, True, "")
    assert (call.input_tokens, call.output_tokens) == (260, 30)  # 50 + 10 written + 200 read
    assert (call.cache_write_tokens, call.cache_read_tokens) == (10, 200)
    # 50 at $3, 10 written at 1.25 x $3, 200 read at 0.1 x $3, 30 out at $15 (per Mtok)
    assert call.cost_usd == pytest.approx((50 * 3 + 10 * 3.75 + 200 * 0.3 + 30 * 15) / 1e6)
    assert call.started_at.tzinfo is not None and call.latency_ms >= 0
    usage = world.gateway.usage(RUN_ID)
    assert (usage.calls, usage.tokens, usage.cost_usd) == (1, 290, call.cost_usd)


def test_chat_stream_asks_for_usage_and_records_it(world, fake_sse):
    usage = {
        "prompt_tokens": 40,
        "completion_tokens": 7,
        "total_tokens": 47,
        "prompt_tokens_details": {"cached_tokens": 32},
    }
    fake_sse.push(Stream(chat_stream(GPT, "all good here", usage)))
    world.grant(fake_sse.base_url + "/v1", provider="openai", price=(2.0, 8.0))

    chunks = list(
        world.openai_sdk().chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )

    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "allgoodhere"
    sent = fake_sse.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.json["stream_options"] == {"include_usage": True}
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    ((_, call),) = world.calls()
    assert (call.input_tokens, call.output_tokens, call.cache_read_tokens) == (40, 7, 32)
    # 8 uncached at $2, 32 cached at 0.5 x $2, 7 out at $8 (per Mtok)
    assert call.cost_usd == pytest.approx((8 * 2 + 32 * 1 + 7 * 8) / 1e6)


def test_responses_stream_usage_is_read_from_response_completed(world, fake_sse):
    usage = {
        "input_tokens": 70,
        "output_tokens": 12,
        "total_tokens": 82,
        "input_tokens_details": {"cached_tokens": 64},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    fake_sse.push(Stream(responses_stream(GPT, "patched", usage)))
    world.grant(fake_sse.base_url + "/v1", provider="openai")

    events = list(world.openai_sdk().responses.create(model=GPT, input="fix it", stream=True))

    assert [e.type for e in events] == [
        "response.created",
        "response.output_text.delta",
        "response.completed",
    ]
    assert fake_sse.requests[0].path == "/v1/responses"
    assert "stream_options" not in fake_sse.requests[0].json
    ((_, call),) = world.calls()
    assert call.name == f"openai responses {GPT}"
    assert (call.input_tokens, call.output_tokens, call.cache_read_tokens) == (70, 12, 64)
    assert call.cost_usd is None  # no price in the grant


# --- the upstream's failures ----------------------------------------------------------------


def test_the_upstream_down_is_a_502_with_a_message(world):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    world.grant(f"http://127.0.0.1:{closed_port}")

    answer = world.send(post("/anthropic/v1/messages", claude_request()))

    assert answer.status == 502
    message = answer.json["error"]["message"]
    assert message.startswith("the model provider at 127.0.0.1 could not be reached")
    ((_, call),) = world.calls()
    assert (call.status, call.error) == (502, message)
    assert world.gateway.usage(RUN_ID).in_flight == 0


def test_an_upstream_refused_by_the_address_policy_is_a_502(world):
    # A run granted with the strict policy (no allow-list): its upstream on loopback is
    # refused at the dial
    with FakeOpenAI(api_key=KEY) as upstream:
        world.gateway.grant(
            RUN_ID,
            Grant("openai", GPT, upstream.base_url, KEY, 5, 1000, 1.0),
            outbound=OutboundPolicy(resolver=None),
        )
        answer = world.send(post("/openai/v1/chat/completions", chat_request()))

    assert answer.status == 502
    assert "refused by the address policy (loopback)" in answer.json["error"]["message"]
    assert upstream.requests == []


def test_the_key_is_redacted_from_whatever_the_upstream_echoes(world):
    echo = RawJSON({"error": {"message": f"bad key {KEY}", "type": "x"}}, status=401)
    with FakeOpenAI([echo], api_key=KEY) as upstream:
        world.grant(upstream.base_url, provider="openai")

        answer = world.send(post("/openai/v1/chat/completions", chat_request()))

    assert answer.status == 401
    assert KEY.encode() not in answer.raw
    assert answer.json["error"]["message"] == "bad key [redacted]"
    ((_, call),) = world.calls()
    assert KEY not in call.error and call.status == 401


# --- the grant from the environment -----------------------------------------------------------


def test_grant_for_reads_the_arenas_key_base_url_and_price():
    environ = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}

    grant = grant_for(
        "openai",
        GPT,
        max_calls=3,
        max_tokens=1000,
        max_cost_usd=0.5,
        prices={GPT: [2, 8]},
        outbound=loopback_outbound(),
        environ=environ,
    )

    assert grant == Grant("openai", GPT, "http://127.0.0.1:9/v1", KEY, 3, 1000, 0.5, (2.0, 8.0))
    assert KEY not in repr(grant)
    anthropic_default = grant_for(
        "anthropic",
        CLAUDE,
        max_calls=1,
        max_tokens=1,
        max_cost_usd=1,
        prices={},
        outbound=loopback_outbound(),
        environ={"ANTHROPIC_API_KEY": KEY},
    )
    assert (anthropic_default.upstream_base_url, anthropic_default.price) == (
        "https://api.anthropic.com",
        None,
    )


def test_grant_for_names_what_is_missing_or_refused():
    common = {"max_calls": 1, "max_tokens": 1, "max_cost_usd": 1, "prices": {}}
    with pytest.raises(ProviderError, match="set ANTHROPIC_API_KEY"):
        grant_for("anthropic", CLAUDE, outbound=loopback_outbound(), environ={}, **common)
    with pytest.raises(ProviderError, match=r"OPENAI_BASE_URL 10\.0\.0\.5 is refused .*private"):
        grant_for(
            "openai",
            GPT,
            outbound=loopback_outbound(),
            environ={"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "http://10.0.0.5/v1"},
            **common,
        )


def test_the_simulated_host_is_the_gateways_loopback_port(world):
    served = world.gateway.simulated_host()

    assert (served.name, served.port) == ("models.arena.internal", 80)
    assert (served.address, served.upstream_port) == (
        ipaddress.ip_address("127.0.0.1"),
        world.gateway.port,
    )


def test_concurrent_calls_of_one_run_are_bounded(world, fake_sse):
    streams = [
        Stream(anthropic_stream(CLAUDE, "x", {"input_tokens": 1}, {"output_tokens": 1}), 1)
        for _ in range(world.gateway.max_in_flight)
    ]
    fake_sse.push(*streams)
    world.grant(fake_sse.base_url)
    clients = [world.connect() for _ in streams]
    try:
        for client in clients:
            client.sendall(post("/anthropic/v1/messages", claude_request(stream=True)))
        for client in clients:  # each has its first event: all are in flight
            read_until(client, b"message_start")

        over = world.send(post("/anthropic/v1/messages", claude_request(stream=True)))
    finally:
        for stream in streams:
            stream.release.set()
        for client in clients:
            while client.recv(65536):
                pass
            client.close()

    assert over.status == 429
    assert (over.headers["x-should-retry"], over.headers["retry-after"]) == ("true", "1")
    assert world.gateway.usage(RUN_ID).calls == world.gateway.max_in_flight


# --- usage read from a stream, however it is cut ------------------------------------------------


def feed_in_pieces(api: str, events: list[bytes], size: int) -> StreamUsage:
    reader = StreamUsage(api)
    data = b"".join(events)
    for at in range(0, len(data), size):
        reader.feed(data[at : at + size])
    return reader


@pytest.mark.parametrize("size", [1, 7, 64, 1 << 20])
@pytest.mark.parametrize("crlf", [False, True])
def test_stream_usage_does_not_depend_on_how_the_bytes_are_cut(size, crlf):
    start = {"input_tokens": 9, "cache_read_input_tokens": 4, "output_tokens": 1}
    events = anthropic_stream(CLAUDE, "some text", start, {"output_tokens": 6})
    if crlf:
        events = [e.replace(b"\n", b"\r\n") for e in events]

    reader = feed_in_pieces(MESSAGES, events, size)

    assert reader.usage == CallUsage(
        input_tokens=13, output_tokens=6, cache_read_tokens=4, cache_write_tokens=0
    )
    assert reader.error == ""


def test_an_oversized_event_is_skipped_and_the_usage_after_it_still_read():
    huge = sse({"type": "response.output_text.delta", "delta": "x" * (MAX_EVENT_BYTES + 10)})
    usage = {"input_tokens": 3, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 1}}
    events = responses_stream(GPT, "t", usage)

    reader = feed_in_pieces(RESPONSES, [events[0], huge, *events[1:]], 4096)

    assert reader.usage == CallUsage(input_tokens=3, output_tokens=2, cache_read_tokens=1)


@pytest.mark.parametrize(
    ("api", "events", "error"),
    [
        (
            MESSAGES,
            [typed({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})],
            "overloaded_error: busy",
        ),
        (CHAT, [sse({"error": {"message": "boom", "type": "server_error"}})], "server_error: boom"),
        (
            RESPONSES,
            [
                typed(
                    {
                        "type": "response.failed",
                        "response": {"error": {"code": "x", "message": "m"}},
                    }
                )
            ],
            "x: m",
        ),
    ],
)
def test_an_error_event_is_kept_as_the_calls_error(api, events, error):
    assert feed_in_pieces(api, events, 5).error == error
