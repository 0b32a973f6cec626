"""Streaming fake model providers on 127.0.0.1, speaking what the real CLI coding agents
send and expect, for running those CLIs for real (tests/coding/test_cli_agents.py).

- :class:`FakeAnthropicStream`: ``POST /v1/messages`` as Claude Code calls it, with
  ``"stream": true`` (server-sent events: ``message_start``, ``content_block_start`` /
  ``_delta`` / ``_stop`` for text and ``tool_use`` blocks, the tool input sent as
  ``input_json_delta`` pieces, ``message_delta`` with the stop reason and the usage,
  cache tokens included, ``message_stop``) or without (one JSON message); and
  ``POST /v1/messages/count_tokens``. Base URL ``http://<host>``.
- :class:`FakeResponses`: OpenAI's Responses API, ``POST /v1/responses`` streamed as
  the Codex CLI reads it (``response.created``, ``response.output_item.added`` /
  ``.done`` for messages and function calls with their text and argument deltas,
  ``response.completed`` with the usage). Base URL ``http://<host>/v1``.
- :class:`FakeChatCompletions`: ``POST /v1/chat/completions`` streamed (chunks, then a
  usage chunk when ``stream_options.include_usage``, then ``[DONE]``) or not, as Aider
  (through litellm and the openai SDK) calls it. Base URL ``http://<host>/v1``.

What each answers is up to a POLICY: a function from the request's JSON to a list of
content blocks (:class:`Text`, :class:`ToolUse`), with the usage to report from
``usage=`` (a :class:`Usage`, or a function of the request). The same blocks come out in
each provider's own shape; a policy that raises gets the client a 400 and the error is
raised again when the fake's ``with`` block exits.

Every request is recorded (:class:`Recorded`). ``api_key`` is the key the client must
send (else 401, as the API answers). ``secret_keys`` are strings no request may carry,
anywhere in its head or body (a provider key that must stay on the arena's side): such a
request is answered 403 and listed in ``leaks``. Real-looking keys (``sk-ant-…``,
``sk-proj-…``) other than ``api_key`` are leaks too.

The servers answer HTTP/1.1 with ``Connection: close`` and end each streamed body by
closing it, as the egress proxy between a sandbox and them expects (it relays one
request per connection and never parses responses).
"""

import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

# -- what a policy answers -----------------------------------------------------------


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: dict[str, Any] = field(default_factory=dict)
    id: str = ""  # "" draws one
    # Responses API only: "custom" sends a freeform tool's call (``custom_tool_call``
    # with ``input["input"]`` as its text), as Codex's apply_patch is for some models.
    kind: str = "function"


type Block = Text | ToolUse
type Policy = Callable[[dict[str, Any]], list[Block]]


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 1200
    output_tokens: int = 80
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    json: Any  # None when the body was not JSON
    body: bytes
    answered: str  # "stream", "json", or the 4xx reason


# Keys of real providers, as they look; the dummy key a sandbox holds looks like none.
REAL_KEY = re.compile(rb"sk-ant-[A-Za-z0-9_-]{8,}|sk-proj-[A-Za-z0-9_-]{8,}")


def _id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def _pieces(text: str, size: int = 24) -> Iterator[str]:
    """A text in the small pieces a model streams it in."""
    for start in range(0, len(text), size):
        yield text[start : start + size]


class FakeStreamingServer:
    """The machinery the three fakes share; subclasses give the routes and shapes."""

    provider = ""

    def __init__(
        self,
        policy: Policy,
        *,
        usage: Usage | Callable[[dict[str, Any]], Usage] = Usage(),
        api_key: str | None = None,
        secret_keys: tuple[str, ...] = (),
        model: str | None = None,
    ) -> None:
        self.policy = policy
        self.usage = usage
        self.api_key = api_key
        self.secret_keys = tuple(key.encode() for key in secret_keys)
        self.model = model
        self.requests: list[Recorded] = []
        self.leaks: list[Recorded] = []
        self.errors: list[Exception] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle

    def start(self) -> Self:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                fake._handle_safely(self)

            def do_GET(self) -> None:
                fake._handle_safely(self)

            def do_HEAD(self) -> None:
                fake._handle_safely(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"fake-stream-{self.provider}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close()
        if exc_type is None and self.errors:
            raise self.errors[0]

    @property
    def port(self) -> int:
        assert self._server is not None, "start the fake first"
        return self._server.server_address[1]

    def calls(self, path: str) -> list[Recorded]:
        """The answered requests to ``path``."""
        with self._lock:
            return [r for r in self.requests if r.path.split("?")[0] == path]

    # one request

    def _handle_safely(self, handler: BaseHTTPRequestHandler) -> None:
        try:
            self._handle(handler)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away mid-stream
        except Exception as error:
            with self._lock:
                self.errors.append(error)
            self._send_json(handler, 400, self.error_body(400, f"fake: {error!r}"))

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in handler.headers.items()}
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None

        def record(answered: str) -> Recorded:
            recorded = Recorded(handler.command, handler.path, headers, payload, body, answered)
            with self._lock:
                self.requests.append(recorded)
            return recorded

        raw = b"\n".join(
            [handler.requestline.encode(), *(f"{k}: {v}".encode() for k, v in headers.items())]
        )
        raw += b"\n" + body
        if any(key in raw for key in self.secret_keys) or self._real_looking(raw):
            leaked = record("403: a secret key")
            with self._lock:
                self.leaks.append(leaked)
            self._send_json(handler, 403, self.error_body(403, "a provider key reached the fake"))
            return
        route = self.route(handler.command, handler.path.split("?")[0])
        if route is None:
            record("404")
            self._send_json(handler, 404, self.error_body(404, f"no route {handler.path}"))
            return
        if self.api_key is not None and self.api_key not in self.keys_sent(headers):
            record("401")
            self._send_json(handler, 401, self.error_body(401, "invalid api key"))
            return
        if handler.command == "POST" and not isinstance(payload, dict):
            record("400")
            self._send_json(handler, 400, self.error_body(400, "body is not a JSON object"))
            return
        route(handler, payload or {}, record)

    def _real_looking(self, raw: bytes) -> bool:
        allowed = self.api_key.encode() if self.api_key else None
        return any(match.group() != allowed for match in REAL_KEY.finditer(raw))

    def blocks_for(self, request: dict[str, Any]) -> tuple[list[Block], Usage]:
        blocks = self.policy(request)
        usage = self.usage(request) if callable(self.usage) else self.usage
        return blocks, usage

    # writing

    def _send_json(
        self, handler: BaseHTTPRequestHandler, status: int, body: Any, headers: dict | None = None
    ) -> None:
        raw = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(raw)))
        handler.send_header("connection", "close")
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(raw)
        handler.close_connection = True

    def _start_stream(self, handler: BaseHTTPRequestHandler, headers: dict | None = None) -> None:
        """An event stream with no length: its end is the connection's end."""
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream; charset=utf-8")
        handler.send_header("cache-control", "no-cache")
        handler.send_header("connection", "close")
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.close_connection = True

    @staticmethod
    def _event(handler: BaseHTTPRequestHandler, data: Any, event: str | None = None) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {event}\n" if event else ""
        handler.wfile.write(f"{head}data: {text}\n\n".encode())
        handler.wfile.flush()

    # per provider

    def route(self, method: str, path: str) -> Callable | None:
        raise NotImplementedError

    def keys_sent(self, headers: dict[str, str]) -> set[str]:
        bearer = headers.get("authorization", "").removeprefix("Bearer ").strip()
        return {bearer, headers.get("x-api-key", "")}

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": "invalid_request_error", "code": status}}


# -- Anthropic: Claude Code ------------------------------------------------------------


class FakeAnthropicStream(FakeStreamingServer):
    provider = "anthropic"

    def route(self, method: str, path: str) -> Callable | None:
        if method == "POST" and path == "/v1/messages":
            return self._messages
        if method == "POST" and path == "/v1/messages/count_tokens":
            return self._count_tokens
        return None

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kinds = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}
        kind = kinds.get(status, "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def _count_tokens(self, handler, request, record) -> None:
        record("json")
        tokens = max(1, len(json.dumps(request.get("messages", []))) // 4)
        self._send_json(handler, 200, {"input_tokens": tokens})

    @staticmethod
    def _content(blocks: list[Block]) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        for block in blocks:
            if isinstance(block, Text):
                content.append({"type": "text", "text": block.text})
            else:
                call_id = block.id or _id("toolu_")
                content.append(
                    {"type": "tool_use", "id": call_id, "name": block.name, "input": block.input}
                )
        return content

    def _messages(self, handler, request, record) -> None:
        blocks, usage = self.blocks_for(request)
        content = self._content(blocks)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        message_id = _id("msg_")
        model = self.model or request.get("model", "claude-fake")
        usage_body = {
            "input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_creation_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "output_tokens": usage.output_tokens,
        }
        headers = {"request-id": _id("req_")}
        if not request.get("stream"):
            record("json")
            message = {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage_body,
            }
            self._send_json(handler, 200, message, headers)
            return
        record("stream")
        self._start_stream(handler, headers)
        start = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage_body, "output_tokens": 1},
        }
        self._event(handler, {"type": "message_start", "message": start}, "message_start")
        self._event(handler, {"type": "ping"}, "ping")
        for index, block in enumerate(content):
            if block["type"] == "text":
                opening = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
            else:
                opening = {**block, "input": {}}
                deltas = [
                    {"type": "input_json_delta", "partial_json": p}
                    for p in _pieces(json.dumps(block["input"]))
                ]
            self._event(
                handler,
                {"type": "content_block_start", "index": index, "content_block": opening},
                "content_block_start",
            )
            for delta in deltas:
                self._event(
                    handler,
                    {"type": "content_block_delta", "index": index, "delta": delta},
                    "content_block_delta",
                )
            self._event(
                handler, {"type": "content_block_stop", "index": index}, "content_block_stop"
            )
        self._event(
            handler,
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": usage_body,
            },
            "message_delta",
        )
        self._event(handler, {"type": "message_stop"}, "message_stop")


# -- OpenAI Responses API: the Codex CLI ---------------------------------------------


class FakeResponses(FakeStreamingServer):
    provider = "openai-responses"

    def route(self, method: str, path: str) -> Callable | None:
        if method == "POST" and path == "/v1/responses":
            return self._responses
        if method == "GET" and path == "/v1/models":
            return self._models
        return None

    def _models(self, handler, request, record) -> None:
        record("json")
        model = self.model or "gpt-fake"
        self._send_json(
            handler, 200, {"object": "list", "data": [{"id": model, "object": "model"}]}
        )

    @staticmethod
    def _items(blocks: list[Block]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for block in blocks:
            if isinstance(block, Text):
                items.append(
                    {
                        "type": "message",
                        "id": _id("msg_"),
                        "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": block.text, "annotations": []}],
                    }
                )
            elif block.kind == "custom":
                items.append(
                    {
                        "type": "custom_tool_call",
                        "id": _id("ctc_"),
                        "status": "completed",
                        "call_id": block.id or _id("call_"),
                        "name": block.name,
                        "input": block.input["input"],
                    }
                )
            else:
                items.append(
                    {
                        "type": "function_call",
                        "id": _id("fc_"),
                        "status": "completed",
                        "call_id": block.id or _id("call_"),
                        "name": block.name,
                        "arguments": json.dumps(block.input),
                    }
                )
        return items

    def _responses(self, handler, request, record) -> None:
        blocks, usage = self.blocks_for(request)
        items = self._items(blocks)
        response = {
            "id": _id("resp_"),
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "model": self.model or request.get("model", "gpt-fake"),
            "output": [],
            "usage": None,
        }
        usage_body = {
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {"cached_tokens": usage.cache_read_tokens},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.input_tokens + usage.output_tokens,
        }
        if not request.get("stream"):
            record("json")
            done = {**response, "status": "completed", "output": items, "usage": usage_body}
            self._send_json(handler, 200, done)
            return
        record("stream")
        self._start_stream(handler, {"x-request-id": _id("req_")})
        seq = iter(range(1_000_000))

        def event(kind: str, **data: Any) -> None:
            self._event(handler, {"type": kind, "sequence_number": next(seq), **data}, kind)

        event("response.created", response=response)
        event("response.in_progress", response=response)
        for index, item in enumerate(items):
            self._stream_item(event, index, item)
        done = {**response, "status": "completed", "output": items, "usage": usage_body}
        event("response.completed", response=done)

    @staticmethod
    def _stream_item(event: Callable[..., None], index: int, item: dict[str, Any]) -> None:
        kind = item["type"]
        if kind == "message":
            text = item["content"][0]["text"]
            opening = {**item, "status": "in_progress", "content": []}
            event("response.output_item.added", output_index=index, item=opening)
            part = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            event("response.content_part.added", **where, part=part)
            for piece in _pieces(text):
                event("response.output_text.delta", **where, delta=piece)
            event("response.output_text.done", **where, text=text)
            event("response.content_part.done", **where, part={**part, "text": text})
        elif kind == "function_call":
            opening = {**item, "status": "in_progress", "arguments": ""}
            event("response.output_item.added", output_index=index, item=opening)
            where = {"item_id": item["id"], "output_index": index}
            for piece in _pieces(item["arguments"]):
                event("response.function_call_arguments.delta", **where, delta=piece)
            event("response.function_call_arguments.done", **where, arguments=item["arguments"])
        else:  # custom_tool_call
            opening = {**item, "status": "in_progress", "input": ""}
            event("response.output_item.added", output_index=index, item=opening)
            where = {"item_id": item["id"], "output_index": index}
            for piece in _pieces(item["input"]):
                event("response.custom_tool_call_input.delta", **where, delta=piece)
            event("response.custom_tool_call_input.done", **where, input=item["input"])
        event("response.output_item.done", output_index=index, item=item)


# -- OpenAI chat completions: Aider (litellm) ------------------------------------------


class FakeChatCompletions(FakeStreamingServer):
    provider = "openai-chat"

    def route(self, method: str, path: str) -> Callable | None:
        if method == "POST" and path == "/v1/chat/completions":
            return self._completions
        if method == "GET" and path == "/v1/models":
            return self._models
        return None

    def _models(self, handler, request, record) -> None:
        record("json")
        model = self.model or "gpt-fake"
        self._send_json(
            handler, 200, {"object": "list", "data": [{"id": model, "object": "model"}]}
        )

    def _completions(self, handler, request, record) -> None:
        blocks, usage = self.blocks_for(request)
        text = "".join(b.text for b in blocks if isinstance(b, Text))
        calls = [
            {
                "id": b.id or _id("call_"),
                "type": "function",
                "function": {"name": b.name, "arguments": json.dumps(b.input)},
            }
            for b in blocks
            if isinstance(b, ToolUse)
        ]
        finish = "tool_calls" if calls else "stop"
        base = {
            "id": _id("chatcmpl-"),
            "created": int(time.time()),
            "model": self.model or request.get("model", "gpt-fake"),
            "system_fingerprint": "fp_fake",
        }
        usage_body = {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        }
        if not request.get("stream"):
            record("json")
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = calls
            choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            body = {**base, "object": "chat.completion", "choices": [choice], "usage": usage_body}
            self._send_json(handler, 200, body)
            return
        record("stream")
        self._start_stream(handler, {"x-request-id": _id("req_")})

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            self._event(handler, {**base, "object": "chat.completion.chunk", "choices": [choice]})

        chunk({"role": "assistant", "content": ""})
        for piece in _pieces(text):
            chunk({"content": piece})
        for index, call in enumerate(calls):
            opening = {**call, "function": {"name": call["function"]["name"], "arguments": ""}}
            chunk({"tool_calls": [{"index": index, **opening}]})
            for piece in _pieces(call["function"]["arguments"]):
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        chunk({}, finish)
        if (request.get("stream_options") or {}).get("include_usage"):
            self._event(
                handler,
                {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage_body},
            )
        self._event(handler, "[DONE]")
