"""The model gateway's HTTP edge (:mod:`agents.gateway`): routes, checks, and the relay
of one call to the grant's upstream and back, streamed as it arrives.

Why ``http.server`` and ``httpx2``: the gateway runs inside the battle worker beside the
egress proxy (as the demo web does), serves a handful of fixed routes, and must relay a
reply chunk by chunk while reading usage out of it; a threaded server gives each call
its own thread for as long as its reply lasts, and the SDKs' own HTTP client dials the
upstream through the address policy (``agents.providers.transport``).

Every answer closes its connection: the proxy sends ``Connection: close`` and reads the
reply to EOF. A stream is sent chunked, each upstream chunk written (and so flushed to
the proxy) the moment it arrives.
"""

import contextlib
import json
import logging
import re
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import httpx2

from agents.gateway_usage import (
    CHAT,
    MESSAGES,
    RESPONSES,
    CallUsage,
    GatewayCall,
    StreamUsage,
    body_usage,
    call_cost,
    error_text,
)
from agents.providers.transport import OutboundRefused
from sandboxes.egress_stamp import STAMP_HEADER, verify_run_stamp

if TYPE_CHECKING:
    from agents.gateway import ModelGateway, RunState
    from agents.gateway_usage import Grant

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0  # the proxy's request head and body, on the socket
MAX_RESPONSE_BYTES = 32 * 1024 * 1024  # a non-streamed reply, held to read its usage
CONNECT_TIMEOUT_S = 10.0
_LINGER_S, _LINGER_MAX_BYTES = 0.5, 16 * 1024 * 1024
MODELS = "models"
MODEL = "model"

# path -> (provider, api). The provider-less paths serve the grant's provider; a
# provider-less path of the other provider is answered 404 naming the right one.
_ROUTES = {
    "/anthropic/v1/messages": ("anthropic", MESSAGES),
    "/openai/v1/chat/completions": ("openai", CHAT),
    "/openai/v1/responses": ("openai", RESPONSES),
    "/v1/messages": ("anthropic", MESSAGES),
    "/v1/chat/completions": ("openai", CHAT),
    "/v1/responses": ("openai", RESPONSES),
    "/anthropic/v1/models": ("anthropic", MODELS),
    "/openai/v1/models": ("openai", MODELS),
    "/v1/models": (None, MODELS),
}
_MODEL_PATH = re.compile(r"(?:/(anthropic|openai))?/v1/models/([^/]{1,200})")
_UPSTREAM_PATHS = {MESSAGES: "/v1/messages", CHAT: "/chat/completions", RESPONSES: "/responses"}
# Client headers forwarded upstream; nothing else is (no credential, no cookie, no stamp).
_FORWARDED = {
    "anthropic": ("accept", "anthropic-version", "anthropic-beta"),
    "openai": ("accept", "openai-beta"),
}
_HEADER_VALUE = re.compile(r"[\x20-\x7e]{1,500}")
ANTHROPIC_VERSION = "2023-06-01"
# Upstream headers relayed to the client (never set-cookie, nor the org's rate limits).
_RELAYED = (
    "content-encoding",
    "request-id",
    "x-request-id",
    "retry-after",
    "retry-after-ms",
    "x-should-retry",
    "openai-processing-ms",
)
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    411: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
}
_OPENAI_ERRORS = {
    429: ("insufficient_quota", "insufficient_quota"),
    404: ("invalid_request_error", "not_found"),
}

NO_STAMP = (
    "this request did not come through the arena's egress proxy (no valid X-Arena-Run "
    "stamp): inside a sandbox, send model calls through its HTTP proxy (HTTP_PROXY) to "
    "http://models.arena.internal/"
)
NO_GRANT = (
    "no model access for this run: the arena grants a model only while the run's lane is "
    "live and its agent is configured with one"
)


@dataclass(frozen=True)
class Route:
    provider: str | None  # None: the grant's
    api: str
    model_id: str = ""  # GET .../models/<id>


def match_route(path: str) -> Route | None:
    path = path.rstrip("/") or "/"
    if path in _ROUTES:
        provider, api = _ROUTES[path]
        return Route(provider, api)
    if found := _MODEL_PATH.fullmatch(path):
        return Route(found[1], MODEL, found[2])
    return None


def error_body(provider: str, status: int, message: str) -> bytes:
    """An error body in ``provider``'s shape, so a CLI shows ``message`` as it shows the
    provider's own errors."""
    if provider == "anthropic":
        kind = _ANTHROPIC_ERRORS.get(status, "api_error")
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    kind, code = _OPENAI_ERRORS.get(
        status, ("invalid_request_error" if status < 500 else "server_error", None)
    )
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return json.dumps(body).encode()


def stream_error_event(provider: str, message: str) -> bytes:
    """An error event for a stream that broke off, in the form the SDKs raise on."""
    if provider == "anthropic":
        data = {"type": "error", "error": {"type": "api_error", "message": message}}
        return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"
    data = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


class Refusal(Exception):
    """Answer ``status`` with ``message`` in the provider's error shape; ``reason``
    counts it against the run (``RunUsage.refused``)."""

    def __init__(
        self,
        status: int,
        message: str,
        reason: str = "",
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.reason, self.headers = status, message, reason, headers


class GatewayServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # every sandbox's proxy connections land here

    def __init__(self, address: tuple[str, int], gateway: "ModelGateway") -> None:
        self.gateway = gateway
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, GatewayHandler)


class GatewayHandler(BaseHTTPRequestHandler):
    server: GatewayServer
    protocol_version = "HTTP/1.1"
    server_version = "ArenaModelGateway/1.0"
    sys_version = ""
    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("model gateway: " + format, *args)

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = do_GET

    # --- one request ----------------------------------------------------------------

    def _serve(self) -> None:
        self.close_connection = True
        self._body_read = False
        gateway = self.server.gateway
        path, _, query = self.path.partition("?")
        route = match_route(path)
        anthropic = (route is not None and route.api == MESSAGES) or "/anthropic/" in path
        shape = "anthropic" if anthropic else "openai"
        state = None
        try:
            if route is None:
                raise Refusal(404, f"the model gateway has no API at {path[:100]}")
            stamps = self.headers.get_all(STAMP_HEADER) or []
            run_id = verify_run_stamp(gateway.stamp_key, stamps[0]) if len(stamps) == 1 else None
            if run_id is None:
                raise Refusal(403, NO_STAMP)
            state = gateway.state_for(run_id)
            if state is None:
                raise Refusal(403, NO_GRANT)
            grant = state.grant
            shape = route.provider or grant.provider
            if shape != grant.provider:
                raise Refusal(
                    404,
                    f"this run's model is {grant.provider}'s {grant.model}: use the "
                    f"{grant.provider} API at http://models.arena.internal/{grant.provider}/v1",
                    "route",
                )
            if route.api in (MODELS, MODEL):
                if self.command != "GET":
                    raise Refusal(405, "use GET to list models", "route")
                self._send_models(grant.provider, grant.model, route.model_id)
                return
            if self.command != "POST":
                raise Refusal(405, f"use POST for {path[:100]}", "route")
            payload = self._read_json(gateway.max_body_bytes)
            self._pin_model(payload, grant.model)
            if route.api == CHAT and payload.get("stream") is True:
                # The usage of a streamed chat completion comes only when asked for.
                options = payload.get("stream_options")
                payload["stream_options"] = {
                    **(options if isinstance(options, dict) else {}),
                    "include_usage": True,
                }
            refused = gateway.admit(state)
            if refused is not None:
                message, retry = refused
                headers = [("x-should-retry", "true" if retry else "false")]
                if retry:
                    headers.append(("retry-after", "1"))
                raise Refusal(429, message, headers=headers)
        except Refusal as refusal:
            if state is not None and refusal.reason:
                gateway.refused(state, refusal.reason)
            self._send_error(shape, refusal)
            return
        self._call(run_id, state, route, payload, query)

    def _read_json(self, max_bytes: int) -> dict[str, Any]:
        lengths = self.headers.get_all("Content-Length") or []
        if self.headers.get("Transfer-Encoding") or len(lengths) != 1:
            raise Refusal(411, "send the request body with one Content-Length", "body")
        text = lengths[0].strip()
        if not (text.isascii() and text.isdigit()):
            raise Refusal(400, "Content-Length must be a number", "body")
        if int(text) > max_bytes:
            raise Refusal(
                413,
                f"the request body is {int(text)} bytes; the arena's model gateway takes at "
                f"most {max_bytes} (shorten the conversation or the attachments)",
                "body",
            )
        raw = self.rfile.read(int(text))
        self._body_read = True
        try:
            payload = json.loads(raw)
        except ValueError:
            raise Refusal(400, "the request body is not JSON", "body") from None
        if not isinstance(payload, dict):
            raise Refusal(400, "the request body must be a JSON object", "body")
        return payload

    @staticmethod
    def _pin_model(payload: dict[str, Any], model: str) -> None:
        # An entrant's CLI must not pick a pricier model than the one its agent is rated
        # as: the board rates the pair (CLI, model), and the budget is set for it.
        asked = payload.get("model")
        if asked != model:
            named = "names no model" if asked is None else f"asks for {str(asked)[:100]!r}"
            raise Refusal(
                400,
                f"this run may call only {model} (the model its agent is rated as); the "
                f"request {named}",
                "model",
            )

    # --- the call -------------------------------------------------------------------

    def _call(
        self, run_id: int, state: "RunState", route: Route, payload: dict[str, Any], query: str
    ) -> None:
        """Forward one admitted call and relay its reply. Precondition: ``admit`` took
        the call; whatever happens, ``finish`` gives it back and reports it."""
        gateway, grant = self.server.gateway, state.grant
        started_at, started = datetime.now(UTC), time.monotonic()
        deadline = started + gateway.call_deadline_s
        usage, error, status, stream = CallUsage(), "", 502, False
        try:
            request = state.client.build_request(
                "POST",
                grant.upstream_base_url.rstrip("/") + _UPSTREAM_PATHS[route.api],
                params=query or None,
                content=json.dumps(payload).encode(),
                headers=self._upstream_headers(grant),
                timeout=httpx2.Timeout(gateway.upstream_timeout_s, connect=CONNECT_TIMEOUT_S),
            )
            response = self._send_upstream(state.client, request)
            with contextlib.closing(response):
                status = response.status_code
                content_type = response.headers.get("content-type", "")
                stream = content_type.startswith("text/event-stream")
                relay = self._relay_stream if stream else self._relay_body
                usage, error = relay(response, route.api, grant.provider, grant.api_key, deadline)
        except Refusal as refusal:
            status, error = refusal.status, refusal.message
            self._send_error(grant.provider, refusal)
        except OSError:
            error = "the client closed the connection"
        finally:
            call = GatewayCall(
                name=f"{grant.provider} {route.api} {grant.model}",
                provider=grant.provider,
                api=route.api,
                model=grant.model,
                started_at=started_at,
                latency_ms=round((time.monotonic() - started) * 1000),
                status=status,
                stream=stream,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cost_usd=call_cost(grant.provider, usage, grant.price),
                error=error.replace(grant.api_key, "[redacted]"),
            )
            gateway.finish(run_id, state, call, usage)

    def _upstream_headers(self, grant: "Grant") -> dict[str, str]:
        """The allow-listed client headers, and the grant's key (nothing else of the
        client's: no credential, cookie or stamp travels on)."""
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        for name in _FORWARDED[grant.provider]:
            value = self.headers.get(name)
            if value and _HEADER_VALUE.fullmatch(value):
                headers[name] = value
        if grant.provider == "anthropic":
            headers.setdefault("anthropic-version", ANTHROPIC_VERSION)
            headers["x-api-key"] = grant.api_key
        else:
            headers["authorization"] = f"Bearer {grant.api_key}"
        return headers

    @staticmethod
    def _send_upstream(client: httpx2.Client, request: httpx2.Request) -> httpx2.Response:
        host = request.url.host
        try:
            return client.send(request, stream=True)
        except OutboundRefused as refused:
            raise Refusal(
                502, f"the model provider is not reachable from the arena: {refused}"
            ) from None
        except httpx2.TimeoutException:
            raise Refusal(
                504, f"the model provider at {host} did not answer in time; try again later"
            ) from None
        except httpx2.HTTPError as exc:
            raise Refusal(
                502,
                f"the model provider at {host} could not be reached ({type(exc).__name__}); "
                "the arena forwards nothing else, so try again later",
            ) from None

    def _relay_stream(
        self, response: httpx2.Response, api: str, provider: str, key: str, deadline: float
    ) -> tuple[CallUsage, str]:
        """Relay an event stream chunk by chunk, reading its usage on the way."""
        reader = StreamUsage(api)
        self._start(response, [("Content-Type", response.headers["content-type"])], chunked=True)
        error = ""
        try:
            for chunk in response.iter_raw():
                reader.feed(chunk)
                # Per chunk: holding bytes back to catch a key cut in two would delay
                # events, and a provider has no reason to echo its key mid-stream.
                self._chunk(chunk.replace(key.encode(), b"[redacted]"))
                if time.monotonic() > deadline:
                    error = "the call ran past the arena's time limit for one model call"
                    break
        except httpx2.HTTPError as exc:
            error = f"the model provider's stream broke off ({type(exc).__name__})"
        except OSError:
            # The client left mid-stream: what the provider reported so far is still
            # spent, and counts against the run (leaving early is no way to a free call).
            return reader.usage or CallUsage(), "the client closed the connection"
        try:
            if error:
                self._chunk(stream_error_event(provider, error))
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # an SDK closes once it has read the stream's last event; it had them all
        return reader.usage or CallUsage(), error or reader.error

    def _relay_body(
        self, response: httpx2.Response, api: str, provider: str, key: str, deadline: float
    ) -> tuple[CallUsage, str]:
        """Read a (bounded) reply, then send it with its usage read."""
        data = bytearray()
        try:
            for chunk in response.iter_raw():
                data += chunk
                if len(data) > MAX_RESPONSE_BYTES:
                    raise Refusal(
                        502, "the model provider's answer is larger than the arena relays"
                    )
                if time.monotonic() > deadline:
                    raise Refusal(504, "the model provider did not finish its answer in time")
        except httpx2.TimeoutException:
            raise Refusal(504, "the model provider did not finish its answer in time") from None
        except httpx2.HTTPError as exc:
            raise Refusal(
                502, f"the model provider's answer broke off ({type(exc).__name__})"
            ) from None
        body = bytes(data).replace(key.encode(), b"[redacted]")
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        ok = response.status_code < 400
        usage = body_usage(api, parsed) if ok else None
        error = "" if ok else error_text(parsed) or f"HTTP {response.status_code}"
        content_type = response.headers.get("content-type", "application/json")
        self._start(response, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        self.wfile.write(body)
        return usage or CallUsage(), error

    # --- writing --------------------------------------------------------------------

    def _start(
        self, response: httpx2.Response, headers: list[tuple[str, str]], *, chunked: bool = False
    ) -> None:
        self.send_response(response.status_code)
        for name, value in headers:
            self.send_header(name, value)
        for name in _RELAYED:
            if (value := response.headers.get(name)) is not None:
                self.send_header(name, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
            self.wfile.flush()

    def _send_models(self, provider: str, model: str, model_id: str) -> None:
        if provider == "anthropic":
            entry: dict[str, Any] = {
                "type": "model",
                "id": model,
                "display_name": model,
                "created_at": "1970-01-01T00:00:00Z",
            }
            listing: dict[str, Any] = {
                "data": [entry],
                "has_more": False,
                "first_id": model,
                "last_id": model,
            }
        else:
            entry = {"id": model, "object": "model", "created": 0, "owned_by": "arena"}
            listing = {"object": "list", "data": [entry]}
        if model_id and model_id != model:
            raise Refusal(404, f"this run may call only {model}", "model")
        self._send_json(200, json.dumps(entry if model_id else listing).encode())

    def _send_error(self, provider: str, refusal: Refusal) -> None:
        self._send_json(
            refusal.status, error_body(provider, refusal.status, refusal.message), refusal.headers
        )
        if not self._body_read:
            self._linger()

    def _send_json(self, status: int, body: bytes, headers: Iterable[tuple[str, str]] = ()) -> None:
        with contextlib.suppress(OSError):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()

    def _linger(self) -> None:
        """After answering a request whose body was not read: send FIN, then swallow what
        still comes for a moment, so that closing with unread input (an RST) cannot
        destroy the answer before the proxy has read it."""
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(_LINGER_S)
            deadline, swallowed = time.monotonic() + _LINGER_S, 0
            while swallowed < _LINGER_MAX_BYTES and time.monotonic() < deadline:
                chunk = self.connection.recv(65536)
                if not chunk:
                    break
                swallowed += len(chunk)
