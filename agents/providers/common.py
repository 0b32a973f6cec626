"""What the provider clients share besides their adapter base
(:mod:`agents.providers.adapter`): turning SDK exceptions into retry decisions, reading
reply bodies and their usage, the message mapping the wires have in common, and one TLS
context for all their HTTP clients.

Both SDKs (Stainless-generated) raise the same family of exceptions: ``APIStatusError``
with ``status_code``/``response``/``body``, ``APITimeoutError`` and its parent
``APIConnectionError``. The clients pass their SDK's classes in, so this module imports
neither SDK.
"""

import base64
import contextlib
import functools
import json
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2

from agents.gateway_usage import body_usage
from agents.providers.base import Image, ProviderError, Text, ToolResult, ToolUse, Usage
from agents.providers.redaction import redact
from agents.providers.retry import (
    RetryableFailure,
    is_retryable_status,
    retry_after_seconds,
)
from agents.providers.transport import OutboundRefused

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

    @classmethod
    def of(cls, sdk: Any) -> "SdkErrors":
        """The classes of a Stainless-generated SDK module (``anthropic``, ``openai``)."""
        return cls(sdk.APIStatusError, sdk.APITimeoutError, sdk.APIConnectionError)


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


def reported_usage(api: str, body: dict[str, Any]) -> Usage:
    """The usage an Anthropic Messages (``api`` ``MESSAGES``) or OpenAI Chat Completions
    / Responses body reports, read as the gateway reads it
    (:func:`agents.gateway_usage.body_usage`, cache tokens included); zeros when the
    body has none."""
    return body_usage(api, body) or Usage()


def png_base64(png: bytes) -> str:
    return base64.b64encode(png).decode("ascii")


def data_url(png: bytes) -> str:
    """A PNG as the ``data:`` URL OpenAI's APIs take for an image."""
    return f"data:image/png;base64,{png_base64(png)}"


def result_text(result: ToolResult, *, follow: tuple[str, str], mark_error: bool = False) -> str:
    """A tool result's texts for a wire that carries text only in its tool messages,
    with a note saying that its images follow: ``follow`` is how to say so for one
    image and for several (``{n}`` the count), e.g. ``("1 image follows in this
    message", "{n} images follow in this message")``. ``mark_error``: a failed
    result's text starts ``Error:`` (is ``Error.`` without text)."""
    text = "\n".join(b.text for b in result.content if isinstance(b, Text) and b.text)
    if mark_error and result.is_error:
        text = f"Error: {text}" if text else "Error."
    images = sum(1 for b in result.content if isinstance(b, Image))
    if not images:
        return text
    one, several = follow
    note = f"[{one if images == 1 else several.format(n=images)}]"
    return f"{text}\n{note}" if text else note


def result_error(texts: list[str]) -> tuple[str, bool] | None:
    """What a failed tool's result says: the ``error`` of the scaffold's JSON result
    (``True``) or its first text as it is (``False``); None without any text."""
    if not texts:
        return None
    try:
        result = json.loads(texts[0])
    except ValueError:
        return texts[0], False
    if isinstance(result, dict) and result.get("error"):
        return str(result["error"]), True
    return texts[0], False


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
    raw response, which a server may have filled with anything. An
    :class:`OutboundRefused` the SDK did not wrap is the address policy's refusal."""
    if isinstance(error, OutboundRefused):
        return refusal_error(error, secrets=secrets)
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


def read_json_object(content: str | bytes | None, *, secrets: Sequence[str]) -> dict[str, Any]:
    """The reply body as a JSON object, or :class:`RetryableFailure` ("malformed
    reply") when it is not one."""
    content = content or ""
    try:
        body = json.loads(content)
    except ValueError as error:  # UnicodeDecodeError included
        text = content if isinstance(content, str) else content[:400].decode(errors="replace")
        snippet = redact(text[:80], secrets)
        raise RetryableFailure(f"malformed reply: not JSON ({error}): {snippet!r}") from None
    if not isinstance(body, dict):
        raise RetryableFailure(f"malformed reply: a JSON {type(body).__name__}, not an object")
    return body


def json_objects(items: list[Any], *, what: str) -> list[dict[str, Any]]:
    """``items`` of a reply body, each a JSON object, else :class:`RetryableFailure`
    ("malformed reply: ``what`` is not an object")."""
    if not all(isinstance(item, dict) for item in items):
        raise RetryableFailure(f"malformed reply: {what} is not an object")
    return items


def optional_str(value: object) -> str:
    return value if isinstance(value, str) else ""


def token_count(value: object) -> int:
    """A usage count as the servers send it; anything but a non-negative int is 0
    (OpenAI-compatible servers omit or null fields)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value
