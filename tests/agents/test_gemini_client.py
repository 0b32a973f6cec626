"""The Gemini client on the real ``google-genai`` SDK, against FakeGemini on 127.0.0.1
(tests/agents/fake_providers.py), which speaks the Gemini REST wire format.

No database; no network but loopback; backoff waits are recorded, never slept.

The SDK writes some fields in their proto spelling (``mime_type``,
``parameters_json_schema``) and bytes as URL-safe base64; the API's JSON parser takes
both spellings and both alphabets, and the exact bodies below pin what goes out."""

import base64
import ipaddress
import json
import logging
import socket
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import pytest

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
from agents.providers.gemini_client import SAMPLING_PARAMS, GeminiClient
from agents.providers.redaction import REDACTED
from agents.providers.retry import Backoff
from sandboxes.netpolicy import Allowlist, OutboundPolicy
from tests.agents.conftest import loopback_outbound
from tests.agents.fake_providers import (
    FakeGemini,
    HttpError,
    Malformed,
    RawJSON,
    Reply,
    Stall,
    ToolCall,
    text,
    tool_call,
)

pytestmark = pytest.mark.timeout(30)

KEY = "AIzaSyTest-4f1c9e2b7a6d5830c1b2a3"
MODEL = "gemini-test"
GENERATE = f"/v1beta/models/{MODEL}:generateContent"
STEADY = Backoff(base_s=0.5, factor=2.0, cap_s=30.0, jitter=0.0)
SCREENSHOT_TOOL = ToolSpec(
    name="screenshot", description="Capture the screen.", parameters={"type": "object"}
)
SHELL_TOOL = ToolSpec(
    name="shell",
    description="Run a shell command.",
    parameters={
        "type": "object",
        "properties": {"cmd": {"type": "string"}},
        "required": ["cmd"],
        "additionalProperties": False,
    },
)
ASK = [Turn("user", [Text("List the files.")])]


def make_client(base_url: str, **kwargs: Any) -> GeminiClient:
    kwargs.setdefault("outbound", loopback_outbound())
    return GeminiClient(MODEL, kwargs.pop("api_key", KEY), base_url, **kwargs)


@contextmanager
def served(
    script: list[Any], sleeps: list[float], *, fake_options: dict[str, Any] | None = None, **kwargs
) -> Iterator[tuple[FakeGemini, GeminiClient]]:
    """A FakeGemini playing ``script`` (checking the key) and a client pointed at it."""
    with FakeGemini(script, api_key=KEY, **(fake_options or {})) as fake:
        client = make_client(fake.base_url, backoff=STEADY, sleep=sleeps.append, **kwargs)
        try:
            yield fake, client
        finally:
            client.close()


def complete(client: GeminiClient, turns: list[Turn] = ASK, **kwargs: Any) -> Any:
    kwargs.setdefault("system", "You are a careful agent.")
    kwargs.setdefault("tools", [SHELL_TOOL, SCREENSHOT_TOOL])
    kwargs.setdefault("max_tokens", 512)
    return client.complete(turns=turns, **kwargs)


def inline(png: bytes) -> dict[str, Any]:
    """An image part as the SDK writes it."""
    return {
        "inlineData": {"data": base64.urlsafe_b64encode(png).decode(), "mime_type": "image/png"}
    }


def candidate_body(parts: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}
    candidate.update(fields.pop("candidate", {}))
    return {"candidates": [candidate], **fields}


# -- the request ---------------------------------------------------------------------


def test_a_text_reply(sleeps):
    script = [Reply(text="Two files.", usage=(120, 7), model="gemini-test-001")]
    with served(script, sleeps, price=(2.0, 10.0)) as (fake, client):
        reply = complete(client)

    assert reply.text == "Two files."
    assert reply.tool_uses == []
    assert reply.usage == Usage(input_tokens=120, output_tokens=7)
    assert reply.cost_usd == pytest.approx((120 * 2.0 + 7 * 10.0) / 1_000_000)
    assert reply.stop_reason == "end_turn"
    assert reply.model == "gemini-test-001"
    assert reply.attempts == 1
    assert reply.extra["price_known"] is True
    assert reply.extra["provider_stop_reason"] == "STOP"
    assert reply.request_id == reply.extra["response_id"] != ""
    sent = fake.last_request
    assert (sent.method, sent.path) == ("POST", GENERATE)
    assert sent.headers["x-goog-api-key"] == KEY
    assert sent.json["contents"] == [{"parts": [{"text": "List the files."}], "role": "user"}]
    assert sleeps == []


def test_the_model_is_the_requested_one_when_the_reply_names_none(sleeps):
    with served([RawJSON(candidate_body([{"text": "hi"}]))], sleeps) as (_, client):
        reply = complete(client)

    assert (reply.model, reply.usage, reply.cost_usd) == (MODEL, Usage(0, 0), 0.0)
    assert reply.extra["price_known"] is False


def test_tool_round_trip_answers_by_function_name_with_the_screenshot(png, sleeps):
    script = [tool_call("screenshot", {}), text("The desktop is empty.")]
    with served(script, sleeps) as (fake, client):
        # when the model calls a tool (Gemini sends no call id)
        first = complete(client)
        # then the call gets a generated id
        assert first.tool_uses == [ToolUse(id="call_1", name="screenshot", arguments={})]
        assert first.stop_reason == "tool_use"
        # when the result (text and screenshot) goes back, after a text on purpose
        turns = [
            *ASK,
            Turn("assistant", first.tool_uses),
            Turn("user", [Text("Here you go."), ToolResult("call_1", [Text("ok"), Image(png)])]),
        ]
        second = complete(client, turns)

    assert second.text == "The desktop is empty."
    assert second.stop_reason == "end_turn"
    # then the response comes first, named after the call, without the made-up id
    assert fake.requests[1].json["contents"] == [
        {"parts": [{"text": "List the files."}], "role": "user"},
        {"parts": [{"functionCall": {"args": {}, "name": "screenshot"}}], "role": "model"},
        {
            "parts": [
                {
                    "functionResponse": {
                        "name": "screenshot",
                        "response": {"output": "ok\n[1 image follows in this message]"},
                    }
                },
                {"text": "Image(s) returned by the screenshot call:"},
                inline(png),
                {"text": "Here you go."},
            ],
            "role": "user",
        },
    ]
    assert FakeGemini.images(fake.requests[1].json) == [png]


def test_ids_gemini_gives_are_echoed_and_an_error_result_is_an_error(sleeps):
    script = [tool_call("shell", {"cmd": "ls"}, id="fc-7", text="Looking."), text("Sorry.")]
    with served(script, sleeps) as (fake, client):
        first = complete(client)
        turns = [
            *ASK,
            Turn("assistant", [Text(first.text), *first.tool_uses]),
            Turn("user", [ToolResult("fc-7", [Text("permission denied")], is_error=True)]),
        ]
        complete(client, turns)

    assert first.text == "Looking."
    assert first.tool_uses == [ToolUse("fc-7", "shell", {"cmd": "ls"})]
    assert fake.requests[1].json["contents"][1:] == [
        {
            "parts": [
                {"text": "Looking."},
                {"functionCall": {"id": "fc-7", "args": {"cmd": "ls"}, "name": "shell"}},
            ],
            "role": "model",
        },
        {
            "parts": [
                {
                    "functionResponse": {
                        "id": "fc-7",
                        "name": "shell",
                        "response": {"error": "permission denied"},
                    }
                }
            ],
            "role": "user",
        },
    ]


def test_generated_ids_are_unique_across_the_clients_calls(sleeps):
    parallel = Reply(tool_calls=(ToolCall("shell", {"cmd": "ls"}), ToolCall("screenshot")))
    with served([parallel, tool_call("shell", {"cmd": "pwd"})], sleeps) as (fake, client):
        first = complete(client)
        turns = [
            *ASK,
            Turn("assistant", first.tool_uses),
            Turn("user", [ToolResult("call_2", [Text("shot")]), ToolResult("call_1", [])]),
        ]
        second = complete(client, turns)

    assert [u.id for u in first.tool_uses] == ["call_1", "call_2"]
    assert [u.id for u in second.tool_uses] == ["call_3"]
    assert FakeGemini.function_responses(fake.requests[1].json) == [
        {"name": "screenshot", "response": {"output": "shot"}},
        {"name": "shell", "response": {"output": "(no output)"}},
    ]


def test_a_tool_result_answering_no_tool_use_fails_before_any_request(sleeps):
    turns = [*ASK, Turn("user", [ToolResult("call_ghost", [Text("out")])])]
    with (
        served([text("never")], sleeps) as (fake, client),
        pytest.raises(ProviderError, match="'call_ghost' answers no earlier tool use"),
    ):
        complete(client, turns)

    assert fake.requests == []


def test_a_non_object_tool_use_and_an_empty_turn_are_replayed_as_the_api_accepts(sleeps):
    turns = [
        *ASK,
        Turn("assistant", [Text(""), ToolUse("call_9", "shell", None, raw="ls -la")]),
        Turn("user", [ToolResult("call_9", [Text("bad arguments")], is_error=True)]),
        Turn("assistant", [Text("")]),
        Turn("user", [Text("Go on.")]),
    ]
    with served([text("ok")], sleeps) as (fake, client):
        complete(client, turns)

    contents = fake.last_request.json["contents"]
    assert contents[1] == {
        "parts": [{"functionCall": {"args": {}, "name": "shell"}}],
        "role": "model",
    }
    assert contents[3] == {"parts": [{"text": "(empty)"}], "role": "model"}


def test_an_image_in_a_user_turn_is_inline_base64_png(png, sleeps):
    turns = [Turn("user", [Text("What is this?"), Image(png)])]
    with served([text("A pixel.")], sleeps) as (fake, client):
        complete(client, turns)

    sent = fake.last_request.json
    assert sent["contents"] == [{"parts": [{"text": "What is this?"}, inline(png)], "role": "user"}]
    assert FakeGemini.images(sent) == [png]


@pytest.mark.parametrize(
    ("system", "expected"),
    [
        ("Be brief.", {"parts": [{"text": "Be brief."}], "role": "user"}),
        ("", None),
    ],
)
def test_the_system_instruction_is_sent_only_when_there_is_one(system, expected, sleeps):
    with served([text("ok")], sleeps) as (fake, client):
        complete(client, system=system)

    assert fake.last_request.json.get("systemInstruction") == expected


@pytest.mark.parametrize(
    ("params", "generation_config"),
    [
        (None, {"maxOutputTokens": 512}),
        ({"temperature": 0.2}, {"temperature": 0.2, "maxOutputTokens": 512}),
        (
            {
                "temperature": 0,
                "top_p": 0.9,
                "top_k": 40,
                "stop_sequences": ["END"],
                "base_url": "ignored",
                "api_key_env": "ignored",
                "max_retries": 9,
            },
            {
                "temperature": 0.0,
                "topP": 0.9,
                "topK": 40.0,
                "maxOutputTokens": 512,
                "stopSequences": ["END"],
            },
        ),
    ],
    ids=["no params", "temperature", "every sampling param and configuration"],
)
def test_generation_config_carries_max_tokens_and_only_sampling_params(
    params, generation_config, sleeps
):
    with served([text("ok")], sleeps) as (fake, client):
        complete(client, params=params)

    assert fake.last_request.json["generationConfig"] == generation_config
    assert {"temperature", "top_p", "top_k", "stop_sequences"} == SAMPLING_PARAMS


def test_tools_are_function_declarations_with_their_json_schema(sleeps):
    with served([text("ok"), text("ok")], sleeps) as (fake, client):
        complete(client)
        complete(client, tools=[])

    assert fake.requests[0].json["tools"] == [
        {
            "functionDeclarations": [
                {
                    "description": "Run a shell command.",
                    "name": "shell",
                    "parameters_json_schema": SHELL_TOOL.parameters,
                },
                {
                    "description": "Capture the screen.",
                    "name": "screenshot",
                    "parameters_json_schema": {"type": "object"},
                },
            ]
        }
    ]
    assert "tools" not in fake.requests[1].json


def test_a_sampling_value_the_sdk_refuses_fails_before_any_request(sleeps):
    with (
        served([text("never")], sleeps) as (fake, client),
        pytest.raises(ProviderError, match=r"invalid sampling params \(temperature\)"),
    ):
        complete(client, params={"temperature": "hot"})

    assert fake.requests == []


# -- the reply -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("finish", "calls", "expected"),
    [
        ("STOP", False, "end_turn"),
        ("STOP", True, "tool_use"),
        (None, True, "tool_use"),
        ("MAX_TOKENS", False, "max_tokens"),
        ("MAX_TOKENS", True, "max_tokens"),
        ("MALFORMED_FUNCTION_CALL", False, "malformed_function_call"),
        ("OTHER", False, "other"),
    ],
)
def test_stop_reasons(finish, calls, expected, sleeps):
    parts: list[dict[str, Any]] = [{"text": "Hm."}]
    if calls:
        parts.append({"functionCall": {"name": "shell", "args": {"cmd": "ls"}}})
    body = candidate_body(parts, candidate={"finishReason": finish})
    with served([RawJSON(body)], sleeps) as (_, client):
        reply = complete(client)

    assert reply.stop_reason == expected
    assert reply.extra["provider_stop_reason"] == (finish or "")
    assert len(reply.tool_uses) == (1 if calls else 0)


def test_thinking_tokens_count_as_output_and_thought_parts_are_not_text(sleeps):
    body = candidate_body(
        [
            {"text": "Let me think about files.", "thought": True},
            {"text": "Two "},
            {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
            {"text": "files."},
        ],
        usageMetadata={
            "promptTokenCount": 1000,
            "candidatesTokenCount": 10,
            "thoughtsTokenCount": 90,
            "totalTokenCount": 1100,
        },
        modelVersion="gemini-test-002",
    )
    with served([RawJSON(body)], sleeps, price=(1.0, 4.0)) as (_, client):
        reply = complete(client)

    assert reply.text == "Two files."
    assert reply.usage == Usage(input_tokens=1000, output_tokens=100)
    assert reply.cost_usd == pytest.approx((1000 * 1.0 + 100 * 4.0) / 1_000_000)
    assert reply.extra["thoughts_tokens"] == 90


def test_a_thought_signature_goes_back_with_its_call(sleeps):
    signature = b"\x01opaque-signature\xff"
    body = candidate_body(
        [
            {
                "functionCall": {"name": "shell", "args": {"cmd": "ls"}},
                "thoughtSignature": base64.b64encode(signature).decode(),
            }
        ]
    )
    with served([RawJSON(body), text("done")], sleeps) as (fake, client):
        first = complete(client)
        turns = [
            *ASK,
            Turn("assistant", first.tool_uses),
            Turn("user", [ToolResult(first.tool_uses[0].id, [Text("a.txt")])]),
        ]
        complete(client, turns)

    replayed = fake.requests[1].json["contents"][1]["parts"][0]
    assert base64.urlsafe_b64decode(replayed["thoughtSignature"]) == signature
    assert replayed["functionCall"] == {"args": {"cmd": "ls"}, "name": "shell"}


# -- retries -------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503])
def test_429_and_5xx_are_retried_with_exponential_backoff(status, sleeps):
    script = [HttpError(status), HttpError(status), text("ok")]
    with served(script, sleeps) as (fake, client):
        reply = complete(client)

    assert reply.text == "ok"
    assert reply.attempts == 3
    assert sleeps == [0.5, 1.0]
    assert [r.answered for r in fake.requests] == ["HttpError", "HttpError", "Reply"]


def test_429_waits_as_long_as_retry_after_says(sleeps):
    with served([HttpError(429, retry_after="7"), text("ok")], sleeps) as (_, client):
        assert complete(client).attempts == 2

    assert sleeps == [7.0]


def test_429_waits_as_long_as_googles_retry_info_says(sleeps):
    quota = {
        "error": {
            "code": 429,
            "message": "You exceeded your current quota.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}],
        }
    }
    with served([RawJSON(quota, status=429), text("ok")], sleeps) as (_, client):
        assert complete(client).attempts == 2

    assert sleeps == [37.0]


def test_the_sdk_makes_no_retries_of_its_own(sleeps):
    with (
        served([HttpError(503), HttpError(503), text("ok")], sleeps, max_retries=0) as (
            fake,
            client,
        ),
        pytest.raises(ProviderError) as caught,
    ):
        complete(client)

    assert (caught.value.status, caught.value.attempts) == (503, 1)
    assert len(fake.requests) == 1
    assert sleeps == []


def test_gives_up_after_max_retries_with_the_last_status(sleeps):
    with (
        served([HttpError(503)] * 5, sleeps, max_retries=2) as (fake, client),
        pytest.raises(ProviderError) as caught,
    ):
        complete(client)

    assert caught.value.status == 503
    assert caught.value.attempts == 3
    assert str(caught.value) == (
        "gemini gemini-test: HTTP 503 (UNAVAILABLE: The model is overloaded. Please try "
        "again later.) (gave up after 3 attempts)"
    )
    assert sleeps == [0.5, 1.0]
    assert len(fake.requests) == 3


MALFORMED = {
    "cut-off JSON": Malformed('{"candidates": ['),
    "HTML from a proxy": Malformed("<html>502 Bad Gateway</html>", content_type="text/html"),
    "an empty body": Malformed(""),
    "a JSON array": RawJSON([1, 2, 3]),
    "no candidates": RawJSON({"usageMetadata": {"promptTokenCount": 5}}),
    "a candidate that is not an object": RawJSON({"candidates": ["text"]}),
    "a candidate without content": RawJSON({"candidates": [{"finishReason": "STOP"}]}),
    "content without parts": RawJSON({"candidates": [{"content": {"role": "model"}}]}),
    "a text that is not a string": RawJSON(candidate_body([{"text": 5}])),
    "a functionCall without a name": RawJSON(candidate_body([{"functionCall": {"args": {}}}])),
    "functionCall args not an object": RawJSON(
        candidate_body([{"functionCall": {"name": "shell", "args": "ls"}}])
    ),
}


@pytest.mark.parametrize("malformed", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_reply_is_retried(malformed, sleeps):
    with served([malformed, tool_call("shell", {"cmd": "ls"})], sleeps) as (_, client):
        reply = complete(client)

    # the failed attempt used up no generated id
    assert reply.tool_uses == [ToolUse("call_1", "shell", {"cmd": "ls"})]
    assert reply.attempts == 2
    assert sleeps == [0.5]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"candidates": [{"finishReason": "SAFETY", "index": 0}]},
            "reply blocked by the safety filters: the candidate has no content (SAFETY)",
        ),
        (
            {"candidates": [{"content": {"role": "model"}, "finishReason": "RECITATION"}]},
            "reply blocked by the safety filters: the candidate has no content (RECITATION)",
        ),
        (
            {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}},
            "reply blocked: the prompt was blocked (PROHIBITED_CONTENT)",
        ),
        (
            {"candidates": [{"content": {"parts": []}, "finishReason": "MAX_TOKENS"}]},
            "malformed reply: the candidate has no content (finishReason MAX_TOKENS)",
        ),
    ],
    ids=["no content", "no parts", "blocked prompt", "out of tokens"],
)
def test_a_blocked_or_empty_candidate_is_an_error_that_says_why(body, message, sleeps):
    with (
        served([RawJSON(body), RawJSON(body)], sleeps, max_retries=1) as (_, client),
        pytest.raises(ProviderError) as caught,
    ):
        complete(client)

    assert str(caught.value) == f"gemini gemini-test: {message} (gave up after 2 attempts)"
    assert caught.value.status is None
    assert sleeps == [0.5]


def test_a_stalled_server_times_out_and_is_retried(sleeps):
    with served([Stall(5.0), text("ok")], sleeps, timeout_s=0.2) as (_, client):
        started = time.monotonic()
        reply = complete(client)

    assert reply.text == "ok"
    assert reply.attempts == 2
    assert sleeps == [0.5]
    assert time.monotonic() - started < 1.5


def test_a_server_that_keeps_stalling_ends_in_provider_error(sleeps):
    script = [Stall(5.0), Stall(5.0)]
    with (
        served(script, sleeps, timeout_s=0.2, max_retries=1) as (_, client),
        pytest.raises(ProviderError, match="request timed out") as caught,
    ):
        complete(client)

    assert (caught.value.attempts, caught.value.status) == (2, None)


def test_connection_refused_is_retried_then_fails(sleeps):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = make_client(
        f"http://127.0.0.1:{port}", sleep=sleeps.append, backoff=STEADY, max_retries=2
    )

    with pytest.raises(ProviderError, match=r"connection failed \(ConnectError\)") as caught:
        complete(client)
    client.close()

    assert caught.value.attempts == 3
    assert sleeps == [0.5, 1.0]


# -- final errors and the key --------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "INVALID_ARGUMENT"), (403, "PERMISSION_DENIED"), (404, "NOT_FOUND"), (409, "ABORTED")],
)
def test_other_4xx_fail_at_once_without_the_key(status, kind, sleeps):
    echo = f"nope, key {KEY}"
    with (
        served([HttpError(status, message=echo), text("never")], sleeps) as (fake, client),
        pytest.raises(ProviderError) as caught,
    ):
        complete(client)

    assert str(caught.value) == f"HTTP {status} ({kind}: nope, key {REDACTED})"
    assert (caught.value.status, caught.value.attempts) == (status, 1)
    assert sleeps == []
    assert len(fake.requests) == 1
    assert KEY not in repr(client)
    assert repr(client).startswith("GeminiClient(model='gemini-test', base_url='http://127.0.0.1:")


def test_a_wrong_key_is_the_apis_400_not_retried(sleeps):
    with FakeGemini([text("never")], api_key=KEY) as fake:
        wrong = "AIzaSyWrong-000000000000000000000"
        client = make_client(fake.base_url, api_key=wrong, sleep=sleeps.append)
        with pytest.raises(ProviderError) as caught:
            complete(client)
        client.close()

    assert str(caught.value) == (
        "HTTP 400 (INVALID_ARGUMENT: API key not valid. Please pass a valid API key.)"
    )
    assert fake.last_request.headers["x-goog-api-key"] == wrong
    assert (fake.remaining, sleeps) == (1, [])


def test_a_request_the_api_would_refuse_is_a_400_not_a_retry(sleeps):
    # a function name the API refuses
    bad_tool = ToolSpec(name="run shell", description="", parameters={"type": "object"})
    with (
        served([text("never")], sleeps) as (fake, client),
        pytest.raises(ProviderError, match="Invalid function name") as caught,
    ):
        complete(client, tools=[bad_tool])

    assert (caught.value.status, fake.remaining, sleeps) == (400, 1, [])


def test_the_key_is_in_no_log_record_exception_or_reply(caplog, sleeps):
    """Every failure path with DEBUG logging on everywhere and no redaction filter:
    the client itself must not leak the key, even when the server echoes it."""
    echo = f"rate limited for key {KEY}"
    caplog.set_level(logging.DEBUG)
    script = [
        HttpError(429, message=echo),
        Malformed(f"oops {KEY}", content_type="text/plain"),
        Stall(5.0),
        text("fine"),
    ]
    with served(script, sleeps, timeout_s=0.2, max_retries=3) as (fake, client):
        reply = complete(client)
        fake.push(HttpError(503, message=echo), HttpError(503, message=echo))
        impatient = make_client(fake.base_url, max_retries=1, sleep=sleeps.append)
        with pytest.raises(ProviderError) as exhausted:
            complete(impatient)
        impatient.close()
        fake.push(HttpError(400, message=echo))
        with pytest.raises(ProviderError) as refused:
            complete(client)

    assert reply.attempts == 4
    errors = [exhausted.value, refused.value]
    texts = [str(e) for e in errors] + ["".join(traceback.format_exception(e)) for e in errors]
    texts += [r.getMessage() for r in caplog.records]
    texts += [caplog.text, repr(client), repr(reply), json.dumps(reply.extra)]
    assert REDACTED in str(refused.value)
    assert [t for t in texts if KEY in t] == []


# -- the address policy --------------------------------------------------------------


class TableResolver:
    """Answers names from a table and records every question."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list:
        self.calls.append((host, port))
        return [ipaddress.ip_address(a) for a in self.table.get(host, [])]


def test_without_the_allowlist_loopback_is_refused_and_not_retried(sleeps):
    with FakeGemini([text("never")], api_key=KEY) as fake:
        client = make_client(fake.base_url, sleep=sleeps.append, outbound=OutboundPolicy())
        with pytest.raises(ProviderError) as failed:
            complete(client)
        client.close()

        assert fake.requests == []
    assert str(failed.value) == (
        "base URL refused: 127.0.0.1 is refused by the address policy (loopback): the arena "
        "calls only public addresses unless an operator lists the host or its block in "
        "ARENA_INTERNAL_ALLOWLIST"
    )
    assert (failed.value.attempts, sleeps) == (1, [])


def test_the_sdk_dials_an_allow_listed_name_at_the_checked_address(sleeps):
    resolver = TableResolver({"gemini.internal": ["127.0.0.1"]})
    outbound = OutboundPolicy(allowlist=Allowlist.parse("gemini.internal"), resolver=resolver)
    with FakeGemini([text("hello")], api_key=KEY) as fake:
        base_url = fake.base_url.replace("127.0.0.1", "gemini.internal")
        client = make_client(base_url, outbound=outbound, sleep=sleeps.append)
        reply = complete(client)
        client.close()
        port = fake.port

    assert reply.text == "hello"
    assert fake.last_request.headers["host"] == f"gemini.internal:{port}"
    assert resolver.calls == [("gemini.internal", port)]


def test_a_redirect_is_not_followed(sleeps):
    # The SDK's own HTTP client follows redirects; the checked one it was given does not.
    with FakeGemini([text("elsewhere")]) as target:
        location = f"{target.base_url}{GENERATE}"
        redirect = HttpError(307, headers=(("location", location),))
        with (
            served([redirect], sleeps) as (fake, client),
            pytest.raises(ProviderError, match="HTTP 307") as caught,
        ):
            complete(client)

        assert (caught.value.attempts, len(fake.requests), target.requests) == (1, 1, [])


def test_the_environment_cannot_move_the_default_base_url(monkeypatch, sleeps):
    # GOOGLE_GEMINI_BASE_URL would move a client built without a base URL past the
    # registry's check of base URLs: it may not.
    with FakeGemini([text("never")], api_key=KEY) as fake:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake.base_url)
        client = GeminiClient(MODEL, KEY, sleep=sleeps.append, outbound=loopback_outbound())
        with pytest.raises(ProviderError) as failed:
            complete(client)
        client.close()

        assert fake.requests == []
    # loopback_outbound() resolves no names: the default host never leaves the process
    assert str(failed.value) == (
        "base URL refused: generativelanguage.googleapis.com could not be resolved (unresolvable)"
    )


@pytest.mark.parametrize("variable", ["GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE"])
def test_the_environment_cannot_switch_the_client_to_vertex_ai(variable, monkeypatch, sleeps):
    monkeypatch.setenv(variable, "true")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "some-project")
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", "us-central1")
    with served([text("still Gemini")], sleeps) as (fake, client):
        assert complete(client).text == "still Gemini"

    assert fake.last_request.path == GENERATE


# -- close and list_models -----------------------------------------------------------


def test_close_ends_the_client_for_good(sleeps):
    with served([text("never")], sleeps) as (fake, client):
        client.close()
        client.close()  # twice is harmless
        with pytest.raises(ProviderError, match="gemini gemini-test: the client is closed"):
            complete(client)
        with pytest.raises(ProviderError, match="the client is closed"):
            client.list_models()

    assert fake.requests == []


def test_list_models_drops_the_prefix(sleeps):
    with served([], sleeps) as (fake, client):
        assert client.list_models() == ["gemini-test"]

    assert (fake.last_request.method, fake.last_request.path) == (
        "GET",
        "/v1beta/models?pageSize=1000",
    )
    assert fake.last_request.headers["x-goog-api-key"] == KEY


def test_list_models_follows_the_pages(sleeps):
    models = ["gemini-test", "gemini-a", "gemini-b", "gemini-c", "gemini-d"]
    options = {"models": models, "max_page_size": 2}
    with served([], sleeps, fake_options=options) as (fake, client):
        assert client.list_models() == models

    assert [r.path for r in fake.requests] == [
        "/v1beta/models?pageSize=1000",
        "/v1beta/models?pageSize=1000&pageToken=2",
        "/v1beta/models?pageSize=1000&pageToken=4",
    ]


def test_list_models_is_retried_like_complete(sleeps):
    failures = [
        HttpError(429, retry_after="3"),
        HttpError(503),
        Malformed("<html>oops</html>", content_type="text/html"),
        RawJSON([1, 2]),
        RawJSON({"models": 5}),
    ]
    options = {"list_script": failures}
    with served([], sleeps, fake_options=options, max_retries=5) as (fake, client):
        assert client.list_models() == ["gemini-test"]

    assert sleeps == [3.0, 1.0, 2.0, 4.0, 8.0]
    assert len(fake.requests) == 6


def test_list_models_fails_at_once_on_a_4xx(sleeps):
    options = {"list_script": [HttpError(403, message=f"denied {KEY}")]}
    with (
        served([], sleeps, fake_options=options) as (fake, client),
        pytest.raises(ProviderError) as caught,
    ):
        client.list_models()

    assert str(caught.value) == f"HTTP 403 (PERMISSION_DENIED: denied {REDACTED})"
    assert (caught.value.attempts, len(fake.requests), sleeps) == (1, 1, [])


# -- the fake's own checks -----------------------------------------------------------

CALL = {"role": "model", "parts": [{"functionCall": {"name": "shell", "args": {}}}]}
USER = {"role": "user", "parts": [{"text": "List the files."}]}


def answer(*names: str) -> dict[str, Any]:
    parts = [{"functionResponse": {"name": n, "response": {"output": ""}}} for n in names]
    return {"role": "user", "parts": parts}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"contents": []}, "contents is not specified"),
        ({"contents": [USER], "prompt": "x"}, 'Unknown name "prompt"'),
        ({"contents": [{"role": "user", "parts": []}]}, "contents.parts must not be empty"),
        ({"contents": [{"role": "system", "parts": [{"text": "x"}]}]}, "valid role"),
        ({"contents": [{"role": "user", "parts": [{"text": ""}]}]}, "non-empty string"),
        ({"contents": [{"role": "user", "parts": [{"text": "a", "inlineData": {}}]}]}, "oneof"),
        (
            {"contents": [{"role": "user", "parts": [{"inlineData": {"mimeType": "image/png"}}]}]},
            "Base64 decoding failed",
        ),
        ({"contents": [USER, answer("shell")]}, "comes immediately after a function call"),
        ({"contents": [USER, CALL, USER]}, "equal to the number of function call parts"),
        ({"contents": [USER, CALL, answer("shell", "shell")]}, "equal to the number"),
        ({"contents": [USER, CALL, answer("screenshot")]}, "do not match the function calls"),
        ({"contents": [USER, CALL]}, "last function call turn is unanswered"),
        ({"contents": [USER], "generationConfig": {"maxOutputTokens": 0}}, "must be positive"),
        ({"contents": [USER], "generationConfig": {"temperature": 3}}, "must be in [0, 2]"),
        ({"contents": [USER], "generation_config": {"top_p": 1, "bogus": 1}}, 'name "bogus"'),
    ],
)
def test_the_fake_refuses_what_the_api_refuses(body, problem):
    with FakeGemini([text("never")]) as fake:
        client = httpx2.Client()
        response = client.post(f"{fake.base_url}{GENERATE}", json=body)
        client.close()

    assert response.status_code == 400
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert problem in response.json()["error"]["message"]
    assert fake.remaining == 1


def test_the_fake_accepts_either_field_spelling_and_a_key_in_the_query(png):
    body = {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {
                        "inline_data": {
                            "mime_type": "image/png",
                            "data": base64.b64encode(png).decode(),
                        }
                    }
                ],
            },
            CALL,
            answer("shell"),
        ],
        "system_instruction": {"parts": [{"text": "Be brief."}]},
    }
    with FakeGemini([text("ok")], api_key=KEY) as fake:
        client = httpx2.Client()
        response = client.post(f"{fake.base_url}{GENERATE}?key={KEY}", json=body)
        client.close()

    assert response.status_code == 200
    assert response.json()["candidates"][0]["content"]["parts"] == [{"text": "ok"}]
    assert FakeGemini.images(fake.last_request.json) == [png]


@pytest.mark.parametrize(
    ("method", "path", "headers", "status", "kind"),
    [
        ("POST", GENERATE, {}, 403, "PERMISSION_DENIED"),
        ("POST", GENERATE, {"x-goog-api-key": "AIzaSyWrong-0000000000"}, 400, "INVALID_ARGUMENT"),
        (
            "POST",
            "/v1beta/models/gemini-nope:generateContent",
            {"x-goog-api-key": KEY},
            404,
            "NOT_FOUND",
        ),
        (
            "POST",
            "/v1/models/gemini-test:generateContent",
            {"x-goog-api-key": KEY},
            404,
            "NOT_FOUND",
        ),
        ("GET", GENERATE, {"x-goog-api-key": KEY}, 404, "NOT_FOUND"),
        ("GET", "/v1beta/models", {}, 403, "PERMISSION_DENIED"),
    ],
)
def test_the_fake_checks_the_key_route_and_model(method, path, headers, status, kind):
    with FakeGemini([text("never")], api_key=KEY) as fake:
        client = httpx2.Client()
        response = client.request(
            method, f"{fake.base_url}{path}", json={"contents": [USER]}, headers=headers
        )
        client.close()

    assert response.status_code == status
    assert response.json()["error"]["status"] == kind
    assert KEY not in response.text
    assert fake.remaining == 1
