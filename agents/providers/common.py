"""What the provider clients share: their construction (``ProviderClient``), turning
SDK exceptions into retry decisions, reading reply bodies, pricing, and one TLS context
for all their HTTP clients.

Both SDKs (Stainless-generated) raise the same family of exceptions: ``APIStatusError``
with ``status_code``/``response``/``body``, ``APITimeoutError`` and its parent
``APIConnectionError``. The clients pass their SDK's classes in, so this module imports
neither SDK.
"""

import base64
import contextlib
import functools
import json
import random
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2

from agents.providers.base import ModelReply, ProviderError, ToolUse, Usage
from agents.providers.redaction import redact, register_secret
from agents.providers.retry import (
    Backoff,
    RetryableFailure,
    is_retryable_status,
    retry_after_seconds,
)
from agents.providers.transport import OutboundRefused
from sandboxes.netpolicy import OutboundPolicy

# (USD per million input tokens, USD per million output tokens)
Price = tuple[float, float]

# Provider error texts go into exceptions and logs; a page of HTML from a proxy would
# drown the useful part.
_DETAIL_MAX_CHARS = 300


@functools.cache
def shared_tls_context() -> ssl.SSLContext:
    """One verifying TLS context for every provider client in the process.

    httpx builds a context per client, and loading the CA bundle costs ~45 ms each
    time; a context is configuration only (no connections), safe to share across
    clients and threads, and across a fork."""
    return httpx2.create_ssl_context()


class ProviderClient:
    """The construction every provider client shares: its key registered for redaction
    (and kept only for that: never put into messages, logs or repr), its timeouts and
    retry schedule, its price, and the address policy every connection of its SDK is
    checked against (the strict one, with the host's DNS, unless the caller brings the
    arena's). A subclass builds its SDK client after this, from ``self.outbound``."""

    provider = ""

    def __init__(
        self,
        model: str,
        api_key: str,
        base_url: str | None = None,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff: Backoff | None = None,
        price: Price | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        outbound: OutboundPolicy | None = None,
    ) -> None:
        if not api_key:
            raise ProviderError(f"{self.provider}: no API key given")
        self._secrets = self._secrets_of(api_key)
        for secret in self._secrets:
            register_secret(secret)
        self.model = model
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff = backoff or Backoff()
        self.price = price
        self._sleep = sleep
        self._rng = rng
        self.outbound = OutboundPolicy() if outbound is None else outbound

    def _secrets_of(self, api_key: str) -> tuple[str, ...]:
        """What to redact from error texts: the key (a subclass may know a placeholder
        that is none)."""
        return (api_key,)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"


class CloseOnCollect:
    """Mixin for an SDK's default HTTP client class: close the connection pool when the
    client is collected, as the SDKs do for the clients they build themselves (ours
    are built here, to pass the shared TLS context)."""

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()  # type: ignore[attr-defined]


@dataclass(frozen=True)
class SdkErrors:
    """One SDK's exception classes, in the order they must be tested (timeout before
    connection: the timeout class is a subclass)."""

    status: type[Exception]
    timeout: type[Exception]
    connection: type[Exception]


@dataclass(frozen=True)
class ParsedReply:
    """A reply body read into the neutral shapes, before pricing and bookkeeping."""

    text: str
    tool_uses: list[ToolUse]
    usage: Usage
    stop_reason: str
    model: str
    response_id: str
    extra: dict[str, Any] = field(default_factory=dict)


def model_reply(
    parsed: ParsedReply,
    *,
    default_model: str,
    price: Price | None,
    attempts: int,
    request_id: str,
    started: float,
) -> ModelReply:
    """The :class:`ModelReply` for ``parsed``; ``started`` is the ``time.monotonic()``
    before the first attempt (latency counts the retries and their waits)."""
    return ModelReply(
        text=parsed.text,
        tool_uses=parsed.tool_uses,
        usage=parsed.usage,
        cost_usd=cost_usd(parsed.usage, price),
        stop_reason=parsed.stop_reason,
        model=parsed.model or default_model,
        attempts=attempts,
        request_id=request_id,
        extra={
            "price_known": price is not None,
            "response_id": parsed.response_id,
            "latency_ms": round((time.monotonic() - started) * 1000),
            **parsed.extra,
        },
    )


def png_base64(png: bytes) -> str:
    return base64.b64encode(png).decode("ascii")


def cost_usd(usage: Usage, price: Price | None) -> float:
    """The call's cost from its token counts; 0.0 when the price is unknown."""
    if price is None:
        return 0.0
    per_mtok_in, per_mtok_out = price
    return (usage.input_tokens * per_mtok_in + usage.output_tokens * per_mtok_out) / 1_000_000


def _error_detail(body: object) -> str:
    """``type: message`` from an Anthropic (``{"type": "error", "error": {...}}``) or
    OpenAI (``{"error": {...}}``, which the SDK unwraps) error body, else its text."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            kind, message = inner.get("type"), inner.get("message")
            parts = [str(p) for p in (kind, message) if p]
            if parts:
                return ": ".join(parts)
        return json.dumps(body)[:_DETAIL_MAX_CHARS]
    if body is None:
        return ""
    return str(body)[:_DETAIL_MAX_CHARS]


def failure_from_sdk_error(
    error: Exception, *, errors: SdkErrors, secrets: Sequence[str]
) -> RetryableFailure | ProviderError:
    """The retry decision for an exception an SDK call raised.

    Precondition: ``error`` is an instance of one of ``errors``' classes. The returned
    exception's message is redacted of ``secrets``; the SDK exception is not chained to
    it by the callers (``raise … from None``), because its text and attributes hold the
    raw response, which a server may have filled with anything."""
    if isinstance(error, errors.timeout):
        return RetryableFailure("request timed out")
    if isinstance(error, errors.status):
        status: int = error.status_code  # type: ignore[attr-defined]
        detail = _error_detail(error.body)  # type: ignore[attr-defined]
        message = redact(f"HTTP {status}" + (f" ({detail})" if detail else ""), secrets)
        if is_retryable_status(status):
            headers = error.response.headers  # type: ignore[attr-defined]
            return RetryableFailure(
                message, status=status, retry_after_s=retry_after_seconds(headers)
            )
        return ProviderError(message, status=status)
    if isinstance(error, errors.connection):
        # The SDK's text is generic ("Connection error."); the cause says which.
        cause = error.__cause__ or error.__context__
        if isinstance(cause, OutboundRefused):
            return refusal_error(cause, secrets=secrets)
        reason = type(cause).__name__ if cause else "connection error"
        return RetryableFailure(redact(f"connection failed ({reason})", secrets))
    raise TypeError(f"not an SDK error: {type(error).__name__}")


def refusal_error(refused: OutboundRefused, *, secrets: Sequence[str]) -> ProviderError:
    """The address policy refused the base URL's host: final (asking again gets the
    same answer), with the operator's message. The SDKs differ in whether they wrap the
    transport's exception (Anthropic's does, in ``APIConnectionError``; OpenAI's passes
    it through), so both paths end here."""
    return ProviderError(redact(f"base URL refused: {refused}", secrets))


def read_json_object(http_response: Any, *, secrets: Sequence[str]) -> dict[str, Any]:
    """The reply body as a JSON object, or :class:`RetryableFailure` ("malformed
    reply") when it is not one. ``http_response`` is the SDK's ``httpx2.Response``."""
    try:
        body = http_response.json()
    except (ValueError, UnicodeDecodeError) as error:
        snippet = redact(http_response.text[:80], secrets)
        raise RetryableFailure(f"malformed reply: not JSON ({error}): {snippet!r}") from None
    if not isinstance(body, dict):
        raise RetryableFailure(f"malformed reply: a JSON {type(body).__name__}, not an object")
    return body


def optional_str(value: object) -> str:
    return value if isinstance(value, str) else ""


def token_count(value: object) -> int:
    """A usage count as the servers send it; anything but a non-negative int is 0
    (OpenAI-compatible servers omit or null fields)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value
