"""Fake Anthropic and OpenAI servers on 127.0.0.1 that speak the real wire formats, for
driving the real SDK clients (and the whole scaffold) without the network.

``FakeAnthropic`` answers ``POST /v1/messages`` (base URL ``http://127.0.0.1:<port>``,
as the ``anthropic`` SDK expects); ``FakeOpenAI`` answers ``POST /v1/chat/completions``
(base URL ``http://127.0.0.1:<port>/v1``, as the ``openai`` SDK and every compatible
server expect); ``FakeGemini`` answers ``POST /v1beta/models/{model}:generateContent``
and ``GET /v1beta/models`` (base URL ``http://127.0.0.1:<port>``, as the ``google-genai``
SDK expects; see its docstring). All are context managers serving from a thread.

What they answer comes from a SCRIPT, consumed in order, one entry per request:

- ``Reply(text=..., tool_calls=(ToolCall(name, arguments), ...), usage=(in, out))``, or
  the shorthands :func:`text` and :func:`tool_call`: a well-formed reply in the
  provider's shape (ids, usage, ``stop_reason``/``finish_reason``, ``request-id`` /
  ``x-request-id`` headers). A ``ToolCall`` whose ``arguments`` is a ``str`` sends it
  verbatim: OpenAI's arguments string (so ``"{oops"`` is malformed JSON), Anthropic's
  ``input`` (so it is not an object);
- ``HttpError(status, retry_after=...)``: an error status with the provider's error
  body (``rate_limit_error``, ``overloaded_error``, …) and optional ``retry-after``;
- ``Malformed(body)``: a 200 whose body is not what the API promises (default: cut-off
  JSON);
- ``RawJSON(body)``: any JSON body verbatim, for shapes the helpers do not make;
- ``Stall(seconds, then=...)``: answer only after ``seconds`` (a client with a shorter
  timeout gives up first); the stall ends early when the server closes;
- a callable ``(request_json) -> entry``: a POLICY answering from the conversation it
  was sent. The ``policy=`` argument is such a callable used once the script is
  empty, so a fake can drive a whole scaffold run.

With the script and the policy exhausted the fake answers 400 ``fake: script
exhausted`` (not retried by the clients, so the test fails at once, saying why). A
policy that raises gets the client a 400 too, and the exception is raised again when
the fake's ``with`` block exits (also kept in ``fake.errors``).

Every request is recorded (:class:`Recorded`: path, lower-cased headers, JSON body)
for assertions, and checked like the real API would check it (``strict=True``): a
request the real API would refuse (a ``tool_result`` not answering the previous
``tool_use``, an image in an OpenAI ``tool`` message, …) gets the real 400. With
``api_key=`` set, a request without that key (Anthropic: ``x-api-key`` or
``Authorization: Bearer``; OpenAI: ``Authorization: Bearer``) gets the real 401
(FakeOpenAI's echoes the wrong key whole, as a careless compatible server would: the
clients must redact it).

Helpers read requests back: ``FakeAnthropic.images(request)`` and
``FakeOpenAI.images(request)`` (every PNG sent, in order), ``.tool_result_texts``.
"""

import base64
import json
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

# -- script entries ----------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: tuple[int, int] = (100, 20)
    # Of usage's prompt tokens, (read from the prompt cache, written to it), in each
    # provider's fields: Anthropic's input_tokens counts only the rest; OpenAI and
    # Gemini report the reads (they have no cache writes to report).
    cache: tuple[int, int] = (0, 0)
    # The wire value; None derives it (tool_use/tool_calls when calling, else
    # end_turn/stop).
    stop_reason: str | None = None
    model: str | None = None  # None echoes the request's model


@dataclass(frozen=True)
class HttpError:
    status: int
    retry_after: str | None = None
    message: str = ""
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Malformed:
    body: str | bytes = '{"id": "msg_cut_off", "content": ['
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class RawJSON:
    body: Any
    status: int = 200


@dataclass(frozen=True)
class Stall:
    seconds: float
    then: "Entry | None" = None  # None: a short text reply


type Entry = Reply | HttpError | Malformed | RawJSON | Stall | Callable[[dict[str, Any]], Entry]


def text(message: str, *, usage: tuple[int, int] = (100, 20)) -> Reply:
    return Reply(text=message, usage=usage)


def tool_call(
    name: str,
    arguments: dict[str, Any] | str | None = None,
    *,
    id: str | None = None,
    text: str = "",
    usage: tuple[int, int] = (100, 20),
) -> Reply:
    call = ToolCall(name=name, arguments={} if arguments is None else arguments, id=id)
    return Reply(text=text, tool_calls=(call,), usage=usage)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    json: Any  # None when the body was not JSON
    body: bytes
    answered: str = ""  # what the fake did: the entry's class name, or the 4xx reason


def _hex(n: int) -> str:
    return secrets.token_hex(n)


def _resolve(entry: Entry | None, request: dict[str, Any]) -> Entry | None:
    """Call policies until they give a reply (a policy may return another policy)."""
    while callable(entry):
        entry = entry(request)
    return entry


# -- the server --------------------------------------------------------------------


class _FakeServer:
    """The machinery both fakes share; subclasses give the wire shapes."""

    path = ""
    provider = ""

    def __init__(
        self,
        script: Iterable[Entry] = (),
        *,
        policy: Callable[[dict[str, Any]], Entry] | None = None,
        api_key: str | None = None,
        strict: bool = True,
    ) -> None:
        self._script: deque[Entry] = deque(script)
        self.policy = policy
        self.api_key = api_key
        self.strict = strict
        self.requests: list[Recorded] = []
        # Exceptions raised while answering (a policy's failed assertion, say): the
        # client only sees a 400, so ``__exit__`` raises the first one in the test.
        self.errors: list[Exception] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle

    def start(self) -> Self:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.0: one request per connection, so no client ever reuses a
            # connection the fake has given up on (a stalled one, say).
            protocol_version = "HTTP/1.0"

            def do_POST(self) -> None:
                fake._handle_safely(self)

            def do_GET(self) -> None:
                fake._handle_safely(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test's output is for the test

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            # A short poll: shutdown() waits up to one interval, in every test.
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"fake-{self.provider}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()  # ends stalls
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

    @property
    def base_url(self) -> str:
        raise NotImplementedError

    # the script

    def push(self, *entries: Entry) -> None:
        with self._lock:
            self._script.extend(entries)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    @property
    def last_request(self) -> Recorded:
        with self._lock:
            assert self.requests, "the fake received no request"
            return self.requests[-1]

    def _next_entry(self, request: dict[str, Any]) -> Entry | None:
        with self._lock:
            entry: Entry | None = self._script.popleft() if self._script else self.policy
        # Callables run outside the lock: a policy may take its time, or push.
        return _resolve(entry, request)

    # one request

    def _handle_safely(self, handler: BaseHTTPRequestHandler) -> None:
        try:
            self._handle(handler)
        except Exception as error:
            with self._lock:
                self.errors.append(error)
            message = f"fake: {type(error).__name__} while answering: {error}"
            # A 400, not a dropped connection or a 5xx: the clients do not retry it,
            # so the run stops at once, and __exit__ raises the original.
            self._send_json(handler, 400, self.error_body(400, message))

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in handler.headers.items()}
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None

        def record(answered: str) -> None:
            with self._lock:
                self.requests.append(
                    Recorded(handler.command, handler.path, headers, payload, body, answered)
                )

        if handler.command != "POST" or handler.path.split("?")[0] != self.path:
            record("404")
            self._send_json(handler, 404, self.error_body(404, f"no route {handler.path}"))
            return
        if self.api_key is not None and not self.key_matches(headers):
            record("401")
            self._send_json(handler, 401, self.error_body(401, self.bad_key_message(headers)))
            return
        if not isinstance(payload, dict):
            record("400")
            self._send_json(handler, 400, self.error_body(400, "body is not a JSON object"))
            return
        problem = self.validate(payload, headers) if self.strict else None
        if problem:
            record(f"400: {problem}")
            self._send_json(handler, 400, self.error_body(400, problem))
            return
        entry = self._next_entry(payload)
        record(type(entry).__name__ if entry is not None else "exhausted")
        self._answer(handler, entry, payload)

    def _answer(
        self, handler: BaseHTTPRequestHandler, entry: Entry | None, payload: dict[str, Any]
    ) -> None:
        if entry is None:
            self._send_json(handler, 400, self.error_body(400, "fake: script exhausted"))
        elif isinstance(entry, Stall):
            if self._closing.wait(entry.seconds):
                return
            self._answer(handler, _resolve(entry.then, payload) or text("(late)"), payload)
        elif isinstance(entry, HttpError):
            extra = dict(entry.headers)
            if entry.retry_after is not None:
                extra["retry-after"] = entry.retry_after
            body = self.error_body(entry.status, entry.message)
            self._send_json(handler, entry.status, body, extra)
        elif isinstance(entry, Malformed):
            raw = entry.body.encode() if isinstance(entry.body, str) else entry.body
            self._send(handler, entry.status, raw, entry.content_type)
        elif isinstance(entry, RawJSON):
            self._send_json(handler, entry.status, entry.body)
        elif isinstance(entry, Reply):
            body, extra = self.reply_body(entry, payload)
            self._send_json(handler, 200, body, extra)
        else:
            raise TypeError(f"not a script entry: {entry!r}")

    def _send_json(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        body: Any,
        headers: dict[str, str] | None = None,
    ) -> None:
        headers = {**self.response_headers(), **(headers or {})}
        self._send(handler, status, json.dumps(body).encode(), "application/json", headers)

    def _send(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        raw: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        try:
            handler.send_response(status)
            handler.send_header("content-type", content_type)
            handler.send_header("content-length", str(len(raw)))
            for name, value in (headers or {}).items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout): nobody to answer

    # per provider

    def key_matches(self, headers: dict[str, str]) -> bool:
        raise NotImplementedError

    def bad_key_message(self, headers: dict[str, str]) -> str:
        raise NotImplementedError

    def validate(self, request: dict[str, Any], headers: dict[str, str]) -> str | None:
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def reply_body(
        self, reply: Reply, request: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        raise NotImplementedError

    def response_headers(self) -> dict[str, str]:
        raise NotImplementedError


# -- Anthropic ---------------------------------------------------------------------

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _b64_png(data: object) -> bytes | None:
    try:
        return base64.b64decode(str(data), validate=True)
    except ValueError:
        return None


class FakeAnthropic(_FakeServer):
    """``POST /v1/messages`` as the Anthropic API answers it (see the module doc)."""

    path = "/v1/messages"
    provider = "anthropic"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def key_matches(self, headers: dict[str, str]) -> bool:
        # The API takes the key either way; SDK 2.x sends it as a bearer token.
        return self.api_key is not None and self.api_key in (
            headers.get("x-api-key"),
            headers.get("authorization", "").removeprefix("Bearer "),
        )

    def bad_key_message(self, headers: dict[str, str]) -> str:
        return "invalid x-api-key"

    def response_headers(self) -> dict[str, str]:
        return {"request-id": f"req_{_hex(12)}"}

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        return {
            "type": "error",
            "error": {"type": kind, "message": message or kind.replace("_", " ")},
        }

    def reply_body(
        self, reply: Reply, request: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        content: list[dict[str, Any]] = []
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for call in reply.tool_calls:
            content.append(
                {
                    "type": "tool_use",
                    "id": call.id or f"toolu_01{_hex(11)}",
                    "name": call.name,
                    "input": call.arguments,
                }
            )
        stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
        body = {
            "id": f"msg_01{_hex(11)}",
            "type": "message",
            "role": "assistant",
            "model": reply.model or request.get("model"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.usage[0] - sum(reply.cache),
                "output_tokens": reply.usage[1],
                "cache_creation_input_tokens": reply.cache[1],
                "cache_read_input_tokens": reply.cache[0],
            },
        }
        return body, {}

    def validate(self, request: dict[str, Any], headers: dict[str, str]) -> str | None:
        """The checks of the real API that a client's translation could fail."""
        if "anthropic-version" not in headers:
            return "anthropic-version: header is required"
        if not isinstance(request.get("model"), str):
            return "model: Field required"
        if not isinstance(request.get("max_tokens"), int) or request["max_tokens"] < 1:
            return "max_tokens: Field required"
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: at least one message is required"
        for tool in request.get("tools") or []:
            if not isinstance(tool.get("name"), str) or not isinstance(
                tool.get("input_schema"), dict
            ):
                return "tools: each tool needs name and input_schema"
        pending: set[str] = set()  # tool_use ids the next user message must answer
        for i, message in enumerate(messages):
            role, content = message.get("role"), message.get("content")
            if role not in ("user", "assistant"):
                return f"messages.{i}.role: must be user or assistant"
            if i == 0 and role != "user":
                return "messages: first message must use the user role"
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list) or not blocks:
                return f"messages.{i}.content: must be a non-empty list"
            answered: set[str] = set()
            seen_other = False
            for j, block in enumerate(blocks):
                where = f"messages.{i}.content.{j}"
                kind = block.get("type")
                if kind == "text":
                    if not block.get("text"):
                        return f"{where}: text content blocks must be non-empty"
                    seen_other = True
                elif kind == "image":
                    problem = self._check_image(block, where)
                    if problem:
                        return problem
                    seen_other = True
                elif kind == "tool_use":
                    if role != "assistant":
                        return f"{where}: tool_use is only allowed in assistant messages"
                    if not isinstance(block.get("input"), dict):
                        return f"{where}.input: Input should be a valid dictionary"
                    answered.add(block["id"])
                elif kind == "tool_result":
                    if role != "user" or seen_other:
                        return f"{where}: tool_result blocks must come first in a user message"
                    if block.get("tool_use_id") not in pending:
                        return f"{where}: unexpected tool_use_id in tool_result blocks"
                    pending.discard(block["tool_use_id"])
                    for k, inner in enumerate(block.get("content") or []):
                        if inner.get("type") == "image":
                            problem = self._check_image(inner, f"{where}.content.{k}")
                            if problem:
                                return problem
                        elif inner.get("type") != "text" or not inner.get("text"):
                            return f"{where}.content.{k}: text or image blocks only"
                else:
                    return f"{where}: unknown block type {kind!r}"
            if pending:
                return (
                    f"messages.{i}: tool_use ids were found without tool_result blocks "
                    f"immediately after: {', '.join(sorted(pending))}"
                )
            pending = answered
        return None

    @staticmethod
    def _check_image(block: dict[str, Any], where: str) -> str | None:
        source = block.get("source") or {}
        if source.get("type") != "base64" or source.get("media_type") not in (
            "image/png",
            "image/jpeg",
            "image/gif",
            "image/webp",
        ):
            return f"{where}.source: base64 source with an image media_type required"
        if _b64_png(source.get("data")) is None:
            return f"{where}.source.data: invalid base64"
        return None

    @staticmethod
    def images(request: dict[str, Any]) -> list[bytes]:
        """Every image the request carries, in order (in messages and tool results)."""
        found: list[bytes] = []

        def walk(blocks: Any) -> None:
            for block in blocks if isinstance(blocks, list) else []:
                if block.get("type") == "image":
                    found.append(base64.b64decode(block["source"]["data"]))
                elif block.get("type") == "tool_result":
                    walk(block.get("content"))

        for message in request.get("messages", []):
            walk(message.get("content"))
        return found

    @staticmethod
    def tool_result_texts(request: dict[str, Any]) -> list[str]:
        """The text of every ``tool_result``, in order."""
        texts: list[str] = []
        for message in request.get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_result":
                    inner = block.get("content") or []
                    texts.append("\n".join(b["text"] for b in inner if b.get("type") == "text"))
        return texts


# -- OpenAI ------------------------------------------------------------------------

_OPENAI_ERRORS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


class FakeOpenAI(_FakeServer):
    """``POST /v1/chat/completions`` as OpenAI (and compatible servers) answer it, and
    ``GET /v1/models`` listing ``models`` (the key checked as for completions)."""

    path = "/v1/chat/completions"
    provider = "openai"

    def __init__(
        self, script: Iterable[Entry] = (), *, models: Iterable[str] = ("gpt-test",), **kwargs
    ) -> None:
        super().__init__(script, **kwargs)
        self.models = tuple(models)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.command != "GET" or handler.path.split("?")[0] != "/v1/models":
            super()._handle(handler)
            return
        headers = {k.lower(): v for k, v in handler.headers.items()}
        ok = self.api_key is None or self.key_matches(headers)
        with self._lock:
            self.requests.append(
                Recorded("GET", handler.path, headers, None, b"", "models" if ok else "401")
            )
        if not ok:
            self._send_json(handler, 401, self.error_body(401, self.bad_key_message(headers)))
            return
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        self._send_json(handler, 200, {"object": "list", "data": data})

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def key_matches(self, headers: dict[str, str]) -> bool:
        return headers.get("authorization") == f"Bearer {self.api_key}"

    def bad_key_message(self, headers: dict[str, str]) -> str:
        # The real API masks the middle of the key it echoes; compatible servers may
        # not, so the fake echoes it whole: the clients must redact it.
        sent = headers.get("authorization", "").removeprefix("Bearer ")
        return f"Incorrect API key provided: {sent}."

    def response_headers(self) -> dict[str, str]:
        return {"x-request-id": f"req_{_hex(16)}", "openai-processing-ms": "42"}

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind, code = _OPENAI_ERRORS.get(status, ("server_error", None))
        return {
            "error": {
                "message": message or f"The server had an error ({status}).",
                "type": kind,
                "param": None,
                "code": code,
            }
        }

    def reply_body(
        self, reply: Reply, request: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.text or None,
            "refusal": None,
            "annotations": [],
        }
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_{_hex(12)}",
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.arguments
                        if isinstance(call.arguments, str)
                        else json.dumps(call.arguments),
                    },
                }
                for call in reply.tool_calls
            ]
        finish = reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")
        prompt, completion = reply.usage
        body = {
            "id": f"chatcmpl-{_hex(14)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": reply.model or request.get("model"),
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": reply.cache[0], "audio_tokens": 0},
            },
            "system_fingerprint": f"fp_{_hex(5)}",
        }
        return body, {}

    def validate(self, request: dict[str, Any], headers: dict[str, str]) -> str | None:
        """The checks of the real API that a client's translation could fail."""
        if not isinstance(request.get("model"), str):
            return "you must provide a model parameter"
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            return "'messages' must contain at least one message"
        for tool in request.get("tools") or []:
            function = tool.get("function") or {}
            if tool.get("type") != "function" or not isinstance(function.get("name"), str):
                return "tools: each tool needs type function and function.name"
        pending: list[str] = []  # tool_call ids the tool messages must answer next
        for i, message in enumerate(messages):
            role, content = message.get("role"), message.get("content")
            where = f"messages[{i}]"
            if role != "tool" and pending:
                return (
                    "An assistant message with 'tool_calls' must be followed by tool "
                    "messages responding to each 'tool_call_id'. The following "
                    f"tool_call_ids did not have response messages: {', '.join(pending)}"
                )
            if role in ("system", "developer"):
                if not isinstance(content, str):
                    return f"{where}.content: must be a string"
            elif role == "user":
                problem = self._check_user_content(content, where)
                if problem:
                    return problem
            elif role == "assistant":
                calls = message.get("tool_calls") or []
                if content is None and not calls:
                    return f"{where}: content is required without tool_calls"
                for call in calls:
                    if call.get("type") != "function" or not isinstance(
                        call.get("function", {}).get("arguments"), str
                    ):
                        return f"{where}.tool_calls: function with string arguments required"
                pending = [call["id"] for call in calls]
            elif role == "tool":
                if message.get("tool_call_id") not in pending:
                    return (
                        "Messages with role 'tool' must be a response to a preceeding "
                        "message with 'tool_calls'."
                    )
                pending.remove(message["tool_call_id"])
                text_only = isinstance(content, str) or (
                    isinstance(content, list) and all(p.get("type") == "text" for p in content)
                )
                if not text_only:
                    return f"{where}: Image URLs are only allowed for messages with role 'user'"
            else:
                return f"{where}.role: invalid value {role!r}"
        return None

    @staticmethod
    def _check_user_content(content: Any, where: str) -> str | None:
        if isinstance(content, str):
            return None
        if not isinstance(content, list) or not content:
            return f"{where}.content: string or non-empty list of parts required"
        for k, part in enumerate(content):
            if part.get("type") == "text":
                if not isinstance(part.get("text"), str):
                    return f"{where}.content[{k}].text: string required"
            elif part.get("type") == "image_url":
                url = (part.get("image_url") or {}).get("url", "")
                prefix = "data:image/png;base64,"
                if not url.startswith(("http://", "https://", "data:image/")):
                    return f"{where}.content[{k}]: Invalid image URL"
                if url.startswith(prefix) and _b64_png(url[len(prefix) :]) is None:
                    return f"{where}.content[{k}]: Invalid base64 image"
            else:
                return f"{where}.content[{k}].type: invalid value"
        return None

    @staticmethod
    def images(request: dict[str, Any]) -> list[bytes]:
        """Every data-URL image the request carries, in order."""
        found: list[bytes] = []
        for message in request.get("messages", []):
            content = message.get("content")
            for part in content if isinstance(content, list) else []:
                url = (part.get("image_url") or {}).get("url", "")
                if part.get("type") == "image_url" and url.startswith("data:"):
                    found.append(base64.b64decode(url.split(",", 1)[1]))
        return found

    @staticmethod
    def tool_result_texts(request: dict[str, Any]) -> list[str]:
        """The content of every ``tool`` message, in order."""
        return [
            m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
            for m in request.get("messages", [])
            if m.get("role") == "tool"
        ]


# -- Gemini ------------------------------------------------------------------------

# google.rpc.Code names, as the Gemini API puts them in ``error.status``.
_GEMINI_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_GEMINI_MESSAGES = {
    429: "Resource has been exhausted (e.g. check quota).",
    500: "An internal error has occurred. Please retry or report in "
    "https://developers.generativeai.google/guide/troubleshooting",
    503: "The model is overloaded. Please try again later.",
}
_GEMINI_ROUTE = re.compile(r"/v1beta/models/(?P<model>[^/:?]+):generateContent")
_GEMINI_LISTING = "/v1beta/models"
# Fields the fake knows, by message; the API's JSON parser (proto3) takes each under its
# lowerCamel name or its proto name, so both spellings are accepted (the SDK sends some
# in snake_case: ``mime_type``, ``parameters_json_schema``).
_GEMINI_FIELDS = {
    "request": {
        "contents",
        "systemInstruction",
        "generationConfig",
        "tools",
        "toolConfig",
        "safetySettings",
        "cachedContent",
    },
    "content": {"role", "parts"},
    "part": {
        "text",
        "inlineData",
        "functionCall",
        "functionResponse",
        "fileData",
        "thought",
        "thoughtSignature",
    },
    "inlineData": {"mimeType", "data"},
    "functionCall": {"id", "name", "args"},
    "functionResponse": {"id", "name", "response", "willContinue", "parts"},
    "generationConfig": {
        "maxOutputTokens",
        "temperature",
        "topP",
        "topK",
        "stopSequences",
        "candidateCount",
        "seed",
        "thinkingConfig",
        "responseMimeType",
    },
    "tool": {"functionDeclarations", "codeExecution", "googleSearch"},
    "functionDeclaration": {"name", "description", "parameters", "parametersJsonSchema"},
}
_GEMINI_PART_DATA = ("text", "inlineData", "functionCall", "functionResponse", "fileData")
_GEMINI_FUNCTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]{0,63}")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _proto_fields(obj: Any, kind: str, where: str) -> tuple[dict[str, Any], str | None]:
    """``obj``'s fields under their lowerCamel names, or the API's 400 for a field the
    message does not have."""
    if not isinstance(obj, dict):
        return {}, f"Invalid value at '{where}': expected an object"
    fields: dict[str, Any] = {}
    for key, value in obj.items():
        name = _camel(key)
        if name not in _GEMINI_FIELDS[kind]:
            return {}, (
                f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': "
                "Cannot find field."
            )
        fields[name] = value
    return fields, None


def _b64_any(data: object) -> bytes | None:
    """Base64 in either alphabet (the API's JSON parser takes both; the SDK sends the
    URL-safe one)."""
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data.replace("-", "+").replace("_", "/"), validate=True)
    except ValueError:
        return None


class FakeGemini(_FakeServer):
    """The Gemini API (``generativelanguage.googleapis.com``, version ``v1beta``) as
    the ``google-genai`` SDK reaches it: base URL ``http://127.0.0.1:<port>``.

    - ``POST /v1beta/models/{model}:generateContent`` answers from the script (see the
      module doc). ``Reply`` becomes ``candidates[0].content.parts`` (text, then one
      ``functionCall`` per ``ToolCall``, with an ``id`` only when the call has one, as
      the API mostly sends none; a ``str`` ``arguments`` goes out verbatim as ``args``),
      ``finishReason`` (``Reply.stop_reason``, default ``STOP``: Gemini says STOP for
      function calls too), ``usageMetadata`` and ``modelVersion``. A model not in
      ``models`` is the API's 404.
    - ``GET /v1beta/models`` lists ``models`` as ``{"models": [{"name": "models/<id>",
      …}], "nextPageToken": …}``, ``pageSize`` (capped at ``max_page_size``) at a time.
      Its failures come from ``list_script`` (``HttpError``/``Malformed``/``RawJSON``,
      consumed one per listing request), so a listing never eats a chat reply.

    With ``api_key=``, the key must come in ``x-goog-api-key`` or ``?key=``: none is the
    API's 403 ``PERMISSION_DENIED``, a wrong one its 400 ``INVALID_ARGUMENT`` (``API key
    not valid``); neither echoes the key. Errors are ``{"error": {"code", "message",
    "status"}}``. ``strict`` checks what the real API checks and the SDK's translation
    could get wrong: unknown fields (either spelling), empty ``parts``, invalid base64,
    a ``functionResponse`` not answering the ``functionCall`` turn right before it (by
    count and names), function names the API refuses."""

    provider = "gemini"
    path = _GEMINI_LISTING

    def __init__(
        self,
        script: Iterable[Entry] = (),
        *,
        models: Iterable[str] = ("gemini-test",),
        list_script: Iterable[HttpError | Malformed | RawJSON] = (),
        max_page_size: int = 1000,
        **kwargs: Any,
    ) -> None:
        super().__init__(script, **kwargs)
        self.models = tuple(models)
        self.max_page_size = max_page_size
        self._list_script: deque[HttpError | Malformed | RawJSON] = deque(list_script)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # requests

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in handler.headers.items()}
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        split = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}

        def record(answered: str) -> None:
            with self._lock:
                self.requests.append(
                    Recorded(handler.command, handler.path, headers, payload, body, answered)
                )

        def refuse(status: int, message: str, answered: str | None = None) -> None:
            record(answered or str(status))
            self._send_json(handler, status, self.error_body(status, message))

        route = _GEMINI_ROUTE.fullmatch(split.path)
        listing = split.path == _GEMINI_LISTING
        if not (handler.command == "POST" and route) and not (handler.command == "GET" and listing):
            refuse(404, f"Method not found: {handler.command} {split.path}")
            return
        if self.api_key is not None:
            sent = headers.get("x-goog-api-key") or query.get("key")
            if not sent:
                refuse(
                    403,
                    "Method doesn't allow unregistered callers (callers without established "
                    "identity). Please use API Key or other form of API consumer identity "
                    "to call this API.",
                )
                return
            if sent != self.api_key:
                refuse(400, "API key not valid. Please pass a valid API key.")
                return
        if listing:
            self._answer_listing(handler, query, record)
            return
        assert route is not None
        model = route["model"]
        if model not in self.models:
            refuse(
                404,
                f"models/{model} is not found for API version v1beta, or is not supported "
                "for generateContent. Call ListModels to see the list of available models "
                "and their supported methods.",
            )
            return
        if not isinstance(payload, dict):
            refuse(400, "Invalid JSON payload received.", "400")
            return
        problem = self.validate(payload, headers) if self.strict else None
        if problem:
            refuse(400, problem, f"400: {problem}")
            return
        entry = self._next_entry(payload)
        record(type(entry).__name__ if entry is not None else "exhausted")
        self._answer(handler, entry, {**payload, "model": model})

    def _answer_listing(
        self,
        handler: BaseHTTPRequestHandler,
        query: dict[str, str],
        record: Callable[[str], None],
    ) -> None:
        with self._lock:
            failure = self._list_script.popleft() if self._list_script else None
        if failure is not None:
            record(type(failure).__name__)
            self._answer(handler, failure, {})
            return
        try:
            size = min(int(query.get("pageSize", "50")), self.max_page_size)
            start = int(query.get("pageToken", "0"))
        except ValueError:
            record("400")
            self._send_json(handler, 400, self.error_body(400, "Invalid page size or token"))
            return
        size = size if size > 0 else 50
        page = self.models[start : start + size]
        body: dict[str, Any] = {
            "models": [
                {
                    "name": f"models/{model}",
                    "version": "001",
                    "displayName": model,
                    "inputTokenLimit": 1048576,
                    "outputTokenLimit": 65536,
                    "supportedGenerationMethods": ["generateContent", "countTokens"],
                }
                for model in page
            ]
        }
        if start + size < len(self.models):
            body["nextPageToken"] = str(start + size)
        record("listing")
        self._send_json(handler, 200, body)

    # answers

    def response_headers(self) -> dict[str, str]:
        return {"server": "scaffolding on HTTPServer2", "x-content-type-options": "nosniff"}

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {
            "error": {
                "code": status,
                "message": message or _GEMINI_MESSAGES.get(status, f"HTTP {status}"),
                "status": _GEMINI_STATUSES.get(status, "UNKNOWN"),
            }
        }

    def reply_body(
        self, reply: Reply, request: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        parts: list[dict[str, Any]] = []
        if reply.text:
            parts.append({"text": reply.text})
        for call in reply.tool_calls:
            function_call: dict[str, Any] = {"name": call.name, "args": call.arguments}
            if call.id:
                function_call["id"] = call.id
            parts.append({"functionCall": function_call})
        prompt, completion = reply.usage
        body = {
            "candidates": [
                {
                    "content": {"parts": parts, "role": "model"},
                    "finishReason": reply.stop_reason or "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": prompt,
                "candidatesTokenCount": completion,
                "totalTokenCount": prompt + completion,
                # Sent only when a cached content served part of the prompt.
                **({"cachedContentTokenCount": reply.cache[0]} if reply.cache[0] else {}),
            },
            "modelVersion": reply.model or request.get("model"),
            "responseId": _hex(11),
        }
        return body, {}

    # checks

    def validate(self, request: dict[str, Any], headers: dict[str, str]) -> str | None:
        """The checks of the real API that a client's translation could fail."""
        fields, problem = _proto_fields(request, "request", "")
        if problem:
            return problem
        contents = fields.get("contents")
        if not isinstance(contents, list) or not contents:
            return "* GenerateContentRequest.contents: contents is not specified"
        system = fields.get("systemInstruction")
        if system is not None:
            problem = self._check_content(system, "system_instruction", system=True)
            if problem:
                return problem
        problem = self._check_config(fields.get("generationConfig"))
        if problem:
            return problem
        problem = self._check_tools(fields.get("tools"))
        if problem:
            return problem
        calls: list[str] = []  # names the content after a function call turn must answer
        for i, content in enumerate(contents):
            where = f"contents[{i}]"
            problem = self._check_content(content, where)
            if problem:
                return problem
            role = _camel_get(content, "role")
            parts = [_proto_fields(p, "part", where)[0] for p in _camel_get(content, "parts")]
            here_calls = [
                _camel_get(p["functionCall"], "name") for p in parts if "functionCall" in p
            ]
            answers = [
                _camel_get(p["functionResponse"], "name") for p in parts if "functionResponse" in p
            ]
            if here_calls and role != "model":
                return f"* GenerateContentRequest.{where}: function calls come from the model role"
            if answers and role != "user":
                return f"* GenerateContentRequest.{where}: function responses need the user role"
            if calls and len(answers) != len(calls):
                return (
                    "Please ensure that the number of function response parts is equal to the "
                    "number of function call parts of the function call turn."
                )
            if calls and sorted(answers) != sorted(calls):
                return (
                    f"* GenerateContentRequest.{where}: function response names "
                    f"{sorted(answers)} do not match the function calls {sorted(calls)}"
                )
            if answers and not calls:
                return (
                    "Please ensure that function response turn comes immediately after a "
                    "function call turn."
                )
            calls = here_calls
        if calls:
            return "* GenerateContentRequest.contents: the last function call turn is unanswered"
        return None

    def _check_content(self, content: Any, where: str, *, system: bool = False) -> str | None:
        fields, problem = _proto_fields(content, "content", where)
        if problem:
            return problem
        role = fields.get("role")
        if role not in (("user", None) if system else ("user", "model")):
            return f"* GenerateContentRequest.{where}.role: Please use a valid role: user, model."
        parts = fields.get("parts")
        if not isinstance(parts, list) or not parts:
            return f"* GenerateContentRequest.{where}.parts: contents.parts must not be empty."
        for j, part in enumerate(parts):
            at = f"{where}.parts[{j}]"
            part_fields, problem = _proto_fields(part, "part", at)
            if problem:
                return problem
            data = [name for name in _GEMINI_PART_DATA if name in part_fields]
            if len(data) != 1:
                return (
                    f"* GenerateContentRequest.{at}.data: required oneof field 'data' must "
                    "have one initialized field"
                )
            if system and data != ["text"]:
                return f"* GenerateContentRequest.{at}: system instructions take text only"
            problem = self._check_part(data[0], part_fields[data[0]], at)
            if problem:
                return problem
            if (
                "thoughtSignature" in part_fields
                and _b64_any(part_fields["thoughtSignature"]) is None
            ):
                return f"Invalid value at '{at}.thought_signature' (TYPE_BYTES), bad base64"
        return None

    @staticmethod
    def _check_part(kind: str, value: Any, at: str) -> str | None:
        if kind == "text":
            if not isinstance(value, str) or not value:
                return f"* GenerateContentRequest.{at}.text: must be a non-empty string"
            return None
        if kind == "fileData":
            return None
        fields, problem = _proto_fields(value, kind, f"{at}.{kind}")
        if problem:
            return problem
        if kind == "inlineData":
            if fields.get("mimeType") not in ("image/png", "image/jpeg", "image/webp"):
                return f"* GenerateContentRequest.{at}.inline_data.mime_type: unsupported"
            if _b64_any(fields.get("data")) is None:
                return (
                    f"Invalid value at '{at}.inline_data.data' (TYPE_BYTES), Base64 decoding failed"
                )
            return None
        if not isinstance(fields.get("name"), str) or not fields["name"]:
            return f"* GenerateContentRequest.{at}.{kind}.name: Name cannot be empty."
        if kind == "functionCall" and not isinstance(fields.get("args", {}), dict):
            return f"Invalid value at '{at}.function_call.args' (google.protobuf.Struct)"
        if kind == "functionResponse" and not isinstance(fields.get("response"), dict):
            return f"* GenerateContentRequest.{at}.function_response.response: must be an object"
        return None

    @staticmethod
    def _check_config(config: Any) -> str | None:
        if config is None:
            return None
        fields, problem = _proto_fields(config, "generationConfig", "generation_config")
        if problem:
            return problem
        tokens = fields.get("maxOutputTokens")
        if tokens is not None and (not isinstance(tokens, int) or tokens < 1):
            return "* GenerateContentRequest.generation_config.max_output_tokens: must be positive"
        temperature = fields.get("temperature")
        if temperature is not None and not (
            isinstance(temperature, (int, float)) and 0 <= temperature <= 2
        ):
            return "* GenerateContentRequest.generation_config.temperature: must be in [0, 2]"
        stops = fields.get("stopSequences")
        if stops is not None and (
            not isinstance(stops, list)
            or len(stops) > 5
            or not all(isinstance(s, str) for s in stops)
        ):
            return "* GenerateContentRequest.generation_config.stop_sequences: at most 5 strings"
        return None

    @staticmethod
    def _check_tools(tools: Any) -> str | None:
        if tools is None:
            return None
        if not isinstance(tools, list):
            return "Invalid value at 'tools': expected a list"
        for i, tool in enumerate(tools):
            fields, problem = _proto_fields(tool, "tool", f"tools[{i}]")
            if problem:
                return problem
            for j, declaration in enumerate(fields.get("functionDeclarations") or []):
                where = f"tools[{i}].function_declarations[{j}]"
                decl, problem = _proto_fields(declaration, "functionDeclaration", where)
                if problem:
                    return problem
                name = decl.get("name")
                if not isinstance(name, str) or not _GEMINI_FUNCTION_NAME.fullmatch(name):
                    return (
                        f"* GenerateContentRequest.{where}.name: Invalid function name. Must "
                        "start with a letter or an underscore. Must be alphameric (a-z, A-Z, "
                        "0-9), underscores (_), dots (.), colons (:), or dashes (-), with a "
                        "maximum length of 64."
                    )
                if "parameters" in decl and "parametersJsonSchema" in decl:
                    return (
                        f"* GenerateContentRequest.{where}: parameters and "
                        "parameters_json_schema are mutually exclusive"
                    )
        return None

    # reading requests back

    @staticmethod
    def images(request: dict[str, Any]) -> list[bytes]:
        """Every inline image the request carries, in order."""
        found: list[bytes] = []
        for content in request.get("contents", []):
            for part in _camel_get(content, "parts") or []:
                inline = _camel_get(part, "inlineData")
                if inline is not None:
                    found.append(_b64_any(_camel_get(inline, "data")) or b"")
        return found

    @staticmethod
    def function_responses(request: dict[str, Any]) -> list[dict[str, Any]]:
        """Every ``functionResponse``, in order, with lowerCamel keys."""
        return [
            {_camel(k): v for k, v in _camel_get(part, "functionResponse").items()}
            for content in request.get("contents", [])
            for part in _camel_get(content, "parts") or []
            if _camel_get(part, "functionResponse") is not None
        ]


def _camel_get(obj: Any, name: str) -> Any:
    """``obj[name]`` under its lowerCamel or snake_case spelling (None when absent)."""
    if not isinstance(obj, dict):
        return None
    if name in obj:
        return obj[name]
    snake = re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), name)
    return obj.get(snake)
