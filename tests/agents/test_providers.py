"""The provider clients on the real ``anthropic`` and ``openai`` SDKs, against fake
servers on 127.0.0.1 that speak the wire formats (tests/agents/fake_providers.py).

No database; no network but loopback; backoff waits are recorded, never slept."""

import base64
import json
import logging
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from agents.providers.anthropic_client import AnthropicClient
from agents.providers.base import (
    Image,
    ProviderError,
    Text,
    ToolResult,
    ToolSpec,
    ToolUse,
    Turn,
    Usage,
)
from agents.providers.openai_client import OpenAIClient, OpenAICompatibleClient
from agents.providers.redaction import (
    REDACTED,
    RedactingFilter,
    install_log_redaction,
    redact,
)
from agents.providers.registry import ProviderDefaults, client_for
from agents.providers.retry import Backoff, retry_after_seconds
from tests.agents.conftest import loopback_outbound
from tests.agents.fake_providers import (
    FakeAnthropic,
    FakeOpenAI,
    HttpError,
    Malformed,
    RawJSON,
    Reply,
    Stall,
    ToolCall,
    text,
    tool_call,
)

KEYS = {
    "anthropic": "sk-ant-test-4f1c9e2b7a6d5830",
    "openai": "sk-test-9b8a7c6d5e4f3021",
}
FAKES: dict[str, type[FakeAnthropic] | type[FakeOpenAI]] = {
    "anthropic": FakeAnthropic,
    "openai": FakeOpenAI,
}
PROVIDERS = list(FAKES)
# Deterministic waits: 0.5, 1.0, 2.0, … with no jitter.
STEADY = Backoff(base_s=0.5, factor=2.0, cap_s=30.0, jitter=0.0)
SCREENSHOT_TOOL = ToolSpec(
    name="screenshot",
    description="Capture the screen.",
    parameters={"type": "object", "properties": {}},
)
SHELL_TOOL = ToolSpec(
    name="shell",
    description="Run a shell command.",
    parameters={"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
)
ASK = [Turn("user", [Text("List the files.")])]


def make_client(provider: str, base_url: str, **kwargs: Any) -> AnthropicClient | OpenAIClient:
    cls = AnthropicClient if provider == "anthropic" else OpenAIClient
    kwargs.setdefault("outbound", loopback_outbound())
    return cls(f"{provider}-model", KEYS[provider], base_url, **kwargs)


@contextmanager
def served(
    provider: str, script: list[Any], sleeps: list[float], **kwargs: Any
) -> Iterator[tuple[FakeAnthropic | FakeOpenAI, AnthropicClient | OpenAIClient]]:
    """A fake of ``provider`` playing ``script`` and a client pointed at it."""
    with FAKES[provider](script, api_key=KEYS[provider]) as fake:
        options = {"backoff": STEADY, "sleep": sleeps.append, **kwargs}
        yield fake, make_client(provider, fake.base_url, **options)


def complete(client: Any, turns: list[Turn] = ASK, **kwargs: Any) -> Any:
    return client.complete(
        system="You are a careful agent.",
        turns=turns,
        tools=[SHELL_TOOL, SCREENSHOT_TOOL],
        max_tokens=512,
        **kwargs,
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- Anthropic wire format ---------------------------------------------------------


def test_anthropic_tool_round_trip_sends_the_screenshot_in_the_tool_result(png, sleeps):
    script = [tool_call("screenshot", {}, id="toolu_01shot"), text("The desktop is empty.")]
    with served("anthropic", script, sleeps) as (fake, client):
        # when the model calls a tool
        first = complete(client, params={"temperature": 0.2, "base_url": "ignored"})
        # then the call is parsed
        assert first.tool_uses == [ToolUse(id="toolu_01shot", name="screenshot", arguments={})]
        assert first.stop_reason == "tool_use"
        assert first.attempts == 1
        # when the tool's result (text and screenshot) goes back
        turns = [
            *ASK,
            Turn("assistant", first.tool_uses),
            # text before the result on purpose: the client must put tool_result first
            Turn(
                "user", [Text("Here you go."), ToolResult("toolu_01shot", [Text("ok"), Image(png)])]
            ),
        ]
        second = complete(client, turns)

    assert second.text == "The desktop is empty."
    assert second.tool_uses == []
    assert second.stop_reason == "end_turn"
    sent = fake.requests[1].json
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "List the files."}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_01shot", "name": "screenshot", "input": {}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01shot",
                    "content": [
                        {"type": "text", "text": "ok"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": b64(png),
                            },
                        },
                    ],
                },
                {"type": "text", "text": "Here you go."},
            ],
        },
    ]
    assert FakeAnthropic.images(sent) == [png]
    assert sent["system"] == "You are a careful agent."
    assert sent["max_tokens"] == 512
    assert sent["tools"][0] == {
        "name": "shell",
        "description": "Run a shell command.",
        "input_schema": SHELL_TOOL.parameters,
    }
    first_sent = fake.requests[0].json
    assert first_sent["temperature"] == 0.2
    assert "base_url" not in first_sent
    headers = fake.requests[0].headers
    assert KEYS["anthropic"] in (headers.get("x-api-key"), headers.get("authorization", "")[7:])
    assert "anthropic-version" in headers
    assert sleeps == []


def test_anthropic_error_tool_result_and_text_only_reply(sleeps):
    script = [text("I give up: the command failed.", usage=(1234, 56))]
    turns = [
        *ASK,
        Turn("assistant", [Text("Running ls."), ToolUse("toolu_1", "shell", {"cmd": "ls"})]),
        Turn("user", [ToolResult("toolu_1", [Text("ls: permission denied")], is_error=True)]),
    ]
    with served("anthropic", script, sleeps, price=(3.0, 15.0)) as (fake, client):
        reply = complete(client, turns)

    assert reply.text == "I give up: the command failed."
    assert reply.tool_uses == []
    assert reply.usage == Usage(input_tokens=1234, output_tokens=56)
    assert reply.cost_usd == pytest.approx((1234 * 3.0 + 56 * 15.0) / 1e6)
    assert reply.model == "anthropic-model"
    assert reply.request_id.startswith("req_")
    assert reply.extra["price_known"] is True
    assert reply.extra["response_id"].startswith("msg_")
    result = fake.last_request.json["messages"][2]["content"][0]
    assert result == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "ls: permission denied"}],
        "is_error": True,
    }


def test_anthropic_replays_a_non_object_tool_use_as_an_empty_input(sleeps):
    turns = [
        *ASK,
        Turn("assistant", [ToolUse("toolu_1", "shell", None, raw='"ls"')]),
        Turn("user", [ToolResult("toolu_1", [Text("arguments must be an object")], is_error=True)]),
    ]
    with served("anthropic", [text("ok")], sleeps) as (fake, client):
        complete(client, turns)

    assert fake.last_request.json["messages"][1]["content"][0]["input"] == {}


# -- OpenAI wire format ------------------------------------------------------------


def test_openai_parallel_tool_calls_with_screenshots_go_in_a_user_message_after_the_tools(
    png, sleeps
):
    other_png = png + b"\x00"  # a different image, to prove the order
    script = [
        Reply(
            text="Looking.",
            tool_calls=(
                ToolCall("screenshot", {}, id="call_a"),
                ToolCall("shell", {"cmd": "ls"}, id="call_b"),
            ),
        ),
        text("Two files."),
    ]
    with served("openai", script, sleeps) as (fake, client):
        first = complete(client)
        turns = [
            *ASK,
            Turn("assistant", [Text(first.text), *first.tool_uses]),
            Turn(
                "user",
                [
                    ToolResult("call_a", [Image(png)]),
                    ToolResult("call_b", [Text("a.txt\nb.txt"), Image(other_png)]),
                ],
            ),
        ]
        second = complete(client, turns)

    assert first.tool_uses == [
        ToolUse("call_a", "screenshot", {}, raw="{}"),
        ToolUse("call_b", "shell", {"cmd": "ls"}, raw='{"cmd": "ls"}'),
    ]
    assert first.stop_reason == "tool_use"
    assert first.extra["provider_stop_reason"] == "tool_calls"
    assert second.text == "Two files."
    assert second.stop_reason == "end_turn"
    sent = fake.requests[1].json
    assert sent["messages"] == [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "List the files."},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "screenshot", "arguments": "{}"},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "shell", "arguments": '{"cmd": "ls"}'},
                },
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_a",
            "content": "[1 image from this call follows in the next user message]",
        },
        {
            "role": "tool",
            "tool_call_id": "call_b",
            "content": "a.txt\nb.txt\n[1 image from this call follows in the next user message]",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Image(s) returned by tool call call_a:"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(png)}"}},
                {"type": "text", "text": "Image(s) returned by tool call call_b:"},
                {
                    "type": "image_url",
                    "image_url": {"url": f"data:image/png;base64,{b64(other_png)}"},
                },
            ],
        },
    ]
    assert FakeOpenAI.images(sent) == [png, other_png]
    assert sent["max_completion_tokens"] == 512
    assert sent["tools"][0] == {
        "type": "function",
        "function": {
            "name": "shell",
            "description": "Run a shell command.",
            "parameters": SHELL_TOOL.parameters,
        },
    }
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEYS['openai']}"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"cmd": "ls"', None),  # cut off
        ('["ls"]', None),  # JSON, but not an object
        ("", {}),  # servers send "" for a tool without parameters
        ('{"cmd": "ls"}', {"cmd": "ls"}),
    ],
)
def test_openai_malformed_arguments_come_back_raw_without_a_retry(arguments, expected, sleeps):
    with served("openai", [tool_call("shell", arguments, id="call_1")], sleeps) as (fake, client):
        reply = complete(client)

    assert reply.tool_uses == [ToolUse("call_1", "shell", expected, raw=arguments)]
    assert reply.attempts == 1
    assert len(fake.requests) == 1


def test_openai_replays_malformed_arguments_as_the_model_sent_them(sleeps):
    turns = [
        *ASK,
        Turn("assistant", [ToolUse("call_1", "shell", None, raw='{"cmd": ')]),
        Turn("user", [ToolResult("call_1", [Text("bad arguments")], is_error=True)]),
    ]
    with served("openai", [text("sorry")], sleeps) as (fake, client):
        complete(client, turns)

    messages = fake.last_request.json["messages"]
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == '{"cmd": '
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "Error: bad arguments",
    }


def test_openai_compatible_server_without_key_ids_or_usage(sleeps):
    # given a llama.cpp-like server: no ids on tool calls, no usage block
    body = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"function": {"name": "shell", "arguments": '{"cmd": "pwd"}'}}],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    with FakeOpenAI([RawJSON(body)]) as fake:
        client = OpenAICompatibleClient(
            "qwen2.5-7b-instruct",
            base_url=fake.base_url,
            sleep=sleeps.append,
            price=None,
            outbound=loopback_outbound(),
        )
        reply = complete(client, params={"extra_body": {"top_k": 20}})

    assert reply.tool_uses == [ToolUse("call_0", "shell", {"cmd": "pwd"}, raw='{"cmd": "pwd"}')]
    assert reply.usage == Usage(0, 0)
    assert reply.cost_usd == 0.0
    assert reply.model == "qwen2.5-7b-instruct"
    assert reply.extra["usage_reported"] is False
    assert reply.extra["price_known"] is False
    sent = fake.last_request
    assert sent.headers["authorization"] == "Bearer not-needed"
    assert sent.json["max_tokens"] == 512
    assert "max_completion_tokens" not in sent.json
    assert sent.json["top_k"] == 20
    assert client.provider == "openai_compatible"


def test_openai_compatible_client_requires_a_base_url():
    with pytest.raises(ProviderError, match="base_url"):
        OpenAICompatibleClient("llama3")


# -- retries, backoff, timeouts ----------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_429_waits_as_long_as_retry_after_says(provider, sleeps):
    script = [HttpError(429, retry_after="7"), text("ok")]
    with served(provider, script, sleeps) as (fake, client):
        reply = complete(client)

    assert reply.text == "ok"
    assert reply.attempts == 2
    assert sleeps == [7.0]  # the server's 7 s, not the backoff's 0.5 s
    assert len(fake.requests) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_retry_after_ms_header_wins_over_retry_after(provider, sleeps):
    script = [HttpError(429, retry_after="9", headers=(("retry-after-ms", "1500"),)), text("ok")]
    with served(provider, script, sleeps) as (_, client):
        complete(client)

    assert sleeps == [1.5]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [500, 502, 503, 529])
def test_5xx_is_retried_with_exponential_backoff(provider, status, sleeps):
    script = [HttpError(status), HttpError(status), text("ok")]
    with served(provider, script, sleeps) as (fake, client):
        reply = complete(client)

    assert reply.text == "ok"
    assert reply.attempts == 3
    assert sleeps == [0.5, 1.0]
    assert len(fake.requests) == 3


@pytest.mark.parametrize("provider", PROVIDERS)
def test_gives_up_after_max_retries_with_the_last_status(provider, sleeps):
    with (
        served(provider, [HttpError(503)] * 5, sleeps, max_retries=2) as (fake, client),
        pytest.raises(ProviderError) as caught,
    ):
        complete(client)

    assert caught.value.status == 503
    assert caught.value.attempts == 3
    assert "gave up after 3 attempts" in str(caught.value)
    assert sleeps == [0.5, 1.0]
    assert len(fake.requests) == 3


MALFORMED = {
    "cut-off JSON": Malformed(),
    "HTML from a proxy": Malformed("<html>502 Bad Gateway</html>", content_type="text/html"),
    "a JSON array": RawJSON([1, 2, 3]),
    "no content / no choices": RawJSON({"id": "x", "usage": {}}),
}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("malformed", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_reply_is_retried(provider, malformed, sleeps):
    with served(provider, [malformed, text("ok")], sleeps) as (_, client):
        reply = complete(client)

    assert reply.text == "ok"
    assert reply.attempts == 2
    assert sleeps == [0.5]


def test_anthropic_tool_use_whose_input_is_not_an_object_is_retried(sleeps):
    script = [tool_call("shell", "ls -la"), tool_call("shell", {"cmd": "ls -la"}, id="toolu_2")]
    with served("anthropic", script, sleeps) as (_, client):
        reply = complete(client)

    assert reply.tool_uses == [ToolUse("toolu_2", "shell", {"cmd": "ls -la"})]
    assert reply.attempts == 2


def test_openai_tool_call_without_a_name_is_retried(sleeps):
    nameless = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "tool_calls": [{"id": "c", "function": {}}]},
                "finish_reason": "tool_calls",
            }
        ],
    }
    with served("openai", [RawJSON(nameless), text("ok")], sleeps) as (_, client):
        assert complete(client).attempts == 2


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [400, 401, 403, 404, 408, 409, 413, 422])
def test_other_4xx_fail_at_once(provider, status, sleeps):
    with (
        served(provider, [HttpError(status, message="nope"), text("never")], sleeps) as (
            fake,
            client,
        ),
        pytest.raises(ProviderError) as caught,
    ):
        complete(client)

    assert caught.value.status == status
    assert caught.value.attempts == 1
    assert "nope" in str(caught.value)
    assert sleeps == []
    assert len(fake.requests) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_request_the_api_would_refuse_is_a_400_not_a_retry(provider, sleeps):
    # a tool result answering a call the assistant never made
    turns = [*ASK, Turn("user", [ToolResult("call_ghost", [Text("out")])])]
    with (
        served(provider, [text("never")], sleeps) as (fake, client),
        pytest.raises(ProviderError) as caught,
    ):
        complete(client, turns)

    assert caught.value.status == 400
    assert fake.remaining == 1
    assert sleeps == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stalled_server_times_out_and_is_retried(provider, sleeps):
    with served(provider, [Stall(5.0), text("ok")], sleeps, timeout_s=0.2) as (_, client):
        started = time.monotonic()
        reply = complete(client)

    assert reply.text == "ok"
    assert reply.attempts == 2
    assert sleeps == [0.5]
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_server_that_keeps_stalling_ends_in_provider_error(provider, sleeps):
    script = [Stall(5.0), Stall(5.0)]
    with served(provider, script, sleeps, timeout_s=0.2, max_retries=1) as (_, client):
        started = time.monotonic()
        with pytest.raises(ProviderError, match="timed out") as caught:
            complete(client)

    assert caught.value.attempts == 2
    assert caught.value.status is None
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize("provider", PROVIDERS)
def test_connection_refused_is_retried_then_fails(provider, sleeps):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}" + ("/v1" if provider == "openai" else "")
    client = make_client(provider, base_url, sleep=sleeps.append, backoff=STEADY, max_retries=2)

    with pytest.raises(ProviderError, match="connection failed") as caught:
        complete(client)

    assert caught.value.attempts == 3
    assert sleeps == [0.5, 1.0]


@pytest.mark.parametrize(
    ("retry_number", "retry_after", "random_value", "expected"),
    [
        (1, None, 0.0, 1.0),
        (2, None, 0.0, 2.0),
        (3, None, 0.0, 4.0),
        (10, None, 0.0, 30.0),  # capped
        (1, None, 1.0, 0.75),  # the most jitter takes a quarter off
        (3, None, 0.5, 3.5),
        (1, 7.0, 0.0, 7.0),  # retry-after is a floor ...
        (4, 2.0, 0.0, 8.0),  # ... not a ceiling
        (1, 3600.0, 0.0, 60.0),  # an hour-long hint is clamped
    ],
)
def test_backoff_delays(retry_number, retry_after, random_value, expected):
    class Fixed:
        def random(self) -> float:
            return random_value

    backoff = Backoff(base_s=1.0, factor=2.0, cap_s=30.0, jitter=0.25, retry_after_cap_s=60.0)
    wait = backoff.delay(retry_number, retry_after_s=retry_after, rng=Fixed())  # type: ignore[arg-type]
    assert wait == pytest.approx(expected)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "12"}, 12.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "retry-after": "12"}, 0.25),
        ({"retry-after": "Mon, 30 Nov 2026 12:00:30 GMT"}, 30.0),
        ({"retry-after": "Mon, 30 Nov 2026 11:00:00 GMT"}, 0.0),  # in the past
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, 0.0),
    ],
)
def test_retry_after_header_parsing(headers, expected):
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds(headers, now=lambda: now) == expected


# -- the fakes as a policy ---------------------------------------------------------


def test_a_fake_can_answer_from_the_conversation(sleeps):
    """What an end-to-end test does: the fake plays a model that reacts to results."""

    def policy(request: dict[str, Any]) -> Reply:
        results = FakeAnthropic.tool_result_texts(request)
        if not results:
            return tool_call("shell", {"cmd": "cat answer.txt"})
        return text(f"The answer is {results[-1]}.")

    with FakeAnthropic(policy=policy) as fake:
        client = make_client("anthropic", fake.base_url, sleep=sleeps.append)
        call = complete(client).tool_uses[0]
        turns = [*ASK, Turn("assistant", [call]), Turn("user", [ToolResult(call.id, [Text("42")])])]
        reply = complete(client, turns)

    assert call.arguments == {"cmd": "cat answer.txt"}
    assert reply.text == "The answer is 42."
    assert [r.answered for r in fake.requests] == ["Reply", "Reply"]


def test_a_failing_policy_stops_the_client_and_resurfaces_in_the_test(sleeps):
    def policy(request: dict[str, Any]) -> Reply:
        raise AssertionError("the agent should have sent a screenshot")

    with (
        pytest.raises(AssertionError, match="should have sent a screenshot"),
        FakeOpenAI(policy=policy) as fake,  # raises the policy's error on exit
    ):
        client = make_client("openai", fake.base_url, sleep=sleeps.append)
        with pytest.raises(ProviderError) as caught:
            complete(client)

    assert caught.value.status == 400
    assert sleeps == []


def test_an_exhausted_script_fails_fast_and_says_so(fake_openai, sleeps):
    client = make_client("openai", fake_openai.base_url, sleep=sleeps.append)
    with pytest.raises(ProviderError, match="script exhausted"):
        complete(client)
    assert fake_openai.last_request.answered == "exhausted"


# -- registry ----------------------------------------------------------------------

ARENA = ProviderDefaults(
    prices={"claude-test": [3.0, 15.0], "gpt-test": [1.25, 10]}, outbound=loopback_outbound()
)


def test_registry_builds_an_anthropic_client_with_the_env_key_and_the_price():
    environ = {"ANTHROPIC_API_KEY": KEYS["anthropic"]}
    with FakeAnthropic([text("hi", usage=(2_000_000, 100_000))], api_key=KEYS["anthropic"]) as fake:
        environ["ANTHROPIC_BASE_URL"] = fake.base_url
        client = client_for("anthropic", "claude-test", params={}, defaults=ARENA, environ=environ)
        reply = complete(client)

    assert isinstance(client, AnthropicClient)
    assert (client.timeout_s, client.max_retries) == (60.0, 4)
    assert reply.cost_usd == pytest.approx(2 * 3.0 + 0.1 * 15.0)
    assert reply.extra["price_known"] is True


def test_registry_unknown_model_costs_nothing_and_says_so():
    with FakeOpenAI([text("hi")], api_key="sk-test-own-key-123456") as fake:
        params = {
            "base_url": fake.base_url,
            "api_key_env": "MY_OPENAI_API_KEY",
            "timeout_s": 5,
            "max_retries": 0,
        }
        client = client_for(
            "openai",
            "gpt-unpriced",
            params=params,
            defaults=ARENA,
            environ={"MY_OPENAI_API_KEY": "sk-test-own-key-123456"},
        )
        reply = complete(client)

    assert reply.cost_usd == 0.0
    assert reply.extra["price_known"] is False
    assert (client.timeout_s, client.max_retries) == (5.0, 0)


def test_registry_openai_compatible_sends_a_key_only_when_named():
    with FakeOpenAI([text("a"), text("b")]) as fake:
        environ = {"OPENAI_API_KEY": KEYS["openai"], "VLLM_API_KEY": "vllm-token-abcdef"}
        anonymous = client_for(
            "openai_compatible",
            "llama3",
            params={"base_url": fake.base_url},
            defaults=ARENA,
            environ=environ,
        )
        named = client_for(
            "openai_compatible",
            "llama3",
            params={"base_url": fake.base_url, "api_key_env": "VLLM_API_KEY"},
            defaults=ARENA,
            environ=environ,
        )
        complete(anonymous)
        complete(named)

    assert [r.headers["authorization"] for r in fake.requests] == [
        "Bearer not-needed",
        "Bearer vllm-token-abcdef",
    ]


@pytest.mark.parametrize(
    ("provider", "params", "environ", "message"),
    [
        ("anthropic", {}, {}, "set ANTHROPIC_API_KEY"),
        ("openai", {}, {}, "set OPENAI_API_KEY"),
        ("openai", {"api_key_env": "TEAM_X_API_KEY"}, {}, "set TEAM_X_API_KEY"),
        ("mistral", {}, {}, "unknown provider 'mistral'"),
        ("openai_compatible", {}, {}, "params base_url"),
        ("openai", {"api_key_env": "ARENA_SECRET_KEY"}, {}, "ending in _API_KEY"),
        ("openai", {"api_key_env": "DATABASE_URL"}, {}, "ending in _API_KEY"),
        ("openai", {"api_key_env": "ARENA_X_API_KEY"}, {}, "not ARENA_"),
        # the arena's key never goes to a URL an agent chose
        ("anthropic", {"base_url": "http://evil.test"}, {}, "must name its own key variable"),
        (
            "openai_compatible",
            {"base_url": "http://evil.test", "api_key_env": "OPENAI_API_KEY"},
            {},
            "cannot use the arena's OPENAI_API_KEY",
        ),
        ("anthropic", {}, {"ANTHROPIC_API_KEY": "k" * 20, "ANTHROPIC_BASE_URL": "ftp://x"}, "http"),
        ("anthropic", {"timeout_s": "soon"}, {"ANTHROPIC_API_KEY": "k" * 20}, "timeout_s"),
        ("anthropic", {"timeout_s": 0}, {"ANTHROPIC_API_KEY": "k" * 20}, "timeout_s"),
        ("anthropic", {"max_retries": 1.5}, {"ANTHROPIC_API_KEY": "k" * 20}, "max_retries"),
    ],
)
def test_registry_refusals(provider, params, environ, message):
    with pytest.raises(ProviderError, match=message.replace("(", r"\(")):
        client_for(provider, "some-model", params=params, defaults=ARENA, environ=environ)


def test_registry_rejects_a_malformed_price_entry():
    arena = ProviderDefaults(prices={"claude-test": [3.0]})
    with pytest.raises(ProviderError, match="MODEL_PRICES"):
        client_for(
            "anthropic",
            "claude-test",
            params={},
            defaults=arena,
            environ={"ANTHROPIC_API_KEY": KEYS["anthropic"]},
        )


# -- redaction ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("key sk-ant-api03-AbC_dEf-123456 leaked", f"key {REDACTED} leaked"),
        ("key sk-proj-abcdef123456", f"key {REDACTED}"),
        ("Authorization: Bearer eyJhbGciOi.payload.sig", f"Authorization: Bearer {REDACTED}"),
        ("{'x-api-key': 'plain-token-value'}", f"{{'x-api-key': '{REDACTED}'}}"),
        ("x-api-key: plain-token-value", f"x-api-key: {REDACTED}"),
        ("the secret vllm-token-zz99 inside", f"the secret {REDACTED} inside"),
        ("skip sk-1 and task-ids", "skip sk-1 and task-ids"),  # too short to be a key
        ("no secrets here", "no secrets here"),
    ],
)
def test_redact(raw, expected):
    assert redact(raw, ["vllm-token-zz99", "short"]) == expected


def test_redacting_filter_rewrites_args_and_tracebacks():
    secret = "custom-secret-value-77"
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "sent %s", (secret,), None)
    try:
        raise RuntimeError(f"failed with {secret}")
    except RuntimeError:
        record.exc_info = sys.exc_info()

    assert RedactingFilter([secret]).filter(record) is True
    formatted = logging.Formatter().format(record)
    assert secret not in formatted
    assert formatted.startswith(f"sent {REDACTED}")
    assert f"failed with {REDACTED}" in formatted


def test_install_log_redaction_covers_records_from_child_loggers(caplog):
    root = logging.getLogger()
    # caplog's handler sits on the root logger for the test, like a deployment's
    # console handler does for good.
    redacting = install_log_redaction(root)
    try:
        logging.getLogger("anthropic._base_client").warning("sent %s", "sk-ant-test-zzzzzzzz")
    finally:
        for handler in root.handlers:
            handler.removeFilter(redacting)

    assert caplog.records[-1].getMessage() == f"sent {REDACTED}"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_key_is_in_no_log_record_exception_or_reply(provider, caplog, sleeps):
    """Every failure path, with DEBUG logging on everywhere and no redaction filter
    installed: the clients themselves must not leak the key, even when the server
    echoes it back."""
    key = KEYS[provider]
    echo = f"rate limited for key {key}"
    caplog.set_level(logging.DEBUG)
    script = [
        HttpError(429, message=echo),
        Malformed(f"oops {key}", content_type="text/plain"),
        Stall(5.0),
        text("fine"),
    ]
    with served(provider, script, sleeps, timeout_s=0.2, max_retries=3) as (fake, client):
        reply = complete(client)
        fake.push(HttpError(503, message=echo), HttpError(503, message=echo))
        impatient = make_client(provider, fake.base_url, max_retries=1, sleep=sleeps.append)
        with pytest.raises(ProviderError) as exhausted:
            complete(impatient)
        fake.push(HttpError(400, message=echo))
        with pytest.raises(ProviderError) as refused:
            complete(client)
    with (
        FAKES[provider](api_key="sk-test-the-right-key-000") as strict_fake,
        pytest.raises(ProviderError) as unauthorised,
    ):
        complete(make_client(provider, strict_fake.base_url, sleep=sleeps.append))

    assert reply.attempts == 4
    errors = [exhausted.value, refused.value, unauthorised.value]
    assert unauthorised.value.status == 401
    texts = [str(e) for e in errors]
    texts += ["".join(traceback.format_exception(e)) for e in errors]
    texts += [r.getMessage() for r in caplog.records]
    texts += [caplog.text, repr(client), repr(reply), json.dumps(reply.extra)]
    assert REDACTED in str(refused.value)
    leaks = [t for t in texts if key in t]
    assert leaks == []
