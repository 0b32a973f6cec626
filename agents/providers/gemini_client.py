"""The Gemini API (``generativelanguage.googleapis.com``, ``v1beta``) behind
:class:`~agents.providers.base.ModelClient`, on the official ``google-genai`` SDK.

The SDK builds the request (``models.generate_content``) and sends it on an
``httpx2.Client`` of ours (``HttpOptions.httpx_client``), made by
:func:`~agents.providers.transport.checked_http_client`: every connection passes the
address policy, and redirects are not followed (the SDK's own client follows them).
The SDK makes no retries (``HttpRetryOptions(attempts=1)``: one attempt, no tenacity
loop), no follow-up requests of its own (automatic function calling and automatic
continuation are off), and hands back the raw body (``should_return_http_response``),
which is read and checked here: a reply we cannot use is "malformed" and retried by
:mod:`agents.providers.retry`, the only retry layer.

Mapping of the neutral conversation:

- ``user`` → role ``user``, ``assistant`` → role ``model``; ``Text`` → a text part
  (empty ones dropped: the API refuses them), ``Image`` → ``inlineData`` (PNG);
- ``ToolUse`` → ``functionCall {name, args}`` (non-object arguments replayed as
  ``{}``), with the reply's ``id`` when Gemini gave one and its ``thoughtSignature``
  (Gemini 3 refuses a replayed call without it; kept per client, by call id);
- ``ToolResult`` → ``functionResponse {name, response}`` in the user turn, first in it;
  ``name`` is the one of the ``ToolUse`` it answers, ``response`` is ``{"output": …}``
  or ``{"error": …}``. A result's images follow the responses as ``inlineData`` parts,
  introduced by a line naming the call.

Gemini mostly sends calls without ids; those get ``call_<n>``, numbered per client.
"""

import base64
import binascii
import itertools
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import httpx2
import pydantic
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from agents.gateway_usage import CallUsage
from agents.providers.adapter import ModelCall, ProviderAdapter
from agents.providers.base import Image, ProviderError, Text, ToolResult, ToolSpec, ToolUse, Turn
from agents.providers.common import (
    CloseOnCollect,
    ParsedReply,
    json_objects,
    optional_str,
    read_json_object,
    refusal_error,
    result_text,
    shared_tls_context,
    token_count,
)
from agents.providers.redaction import redact
from agents.providers.retry import RetryableFailure, is_retryable_status, retry_after_seconds
from agents.providers.transport import OutboundRefused, checked_http_client

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/"
API_VERSION = "v1beta"

# The neutral param name → the SDK's GenerateContentConfig field (the wire's
# temperature/topP/topK/stopSequences); other agent params are configuration.
SAMPLING_PARAMS = frozenset({"temperature", "top_p", "top_k", "stop_sequences"})

# finishReason in the stop_reason words the Anthropic API uses; others lower-cased.
# The API's own word stays in ``extra["provider_stop_reason"]``.
STOP_REASONS = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens"}
# Reasons for a candidate the filters emptied.
BLOCKED_REASONS = frozenset(
    {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"}
)

GENERATED_ID = re.compile(r"call_\d+")
_DETAIL_MAX_CHARS = 300
_MAX_SIGNATURES = 1000  # thought signatures kept per client (oldest dropped)
_MAX_MODEL_PAGES = 20


class _HttpClient(CloseOnCollect, httpx2.Client):
    """The client every request goes out on: built by ``checked_http_client``."""


class _SyncOnlyTransport(httpx2.AsyncBaseTransport):
    """For the SDK's async client, which this class never uses: given one, the SDK
    builds no unchecked client of its own."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        raise RuntimeError("GeminiClient is synchronous; its SDK's async client is disabled")


def _image(png: bytes) -> types.Part:
    return types.Part(inline_data=types.Blob(mime_type="image/png", data=png))


_IMAGES_FOLLOW = ("1 image follows in this message", "{n} images follow in this message")


def _function_response(result: ToolResult, name: str) -> types.Part:
    text = result_text(result, follow=_IMAGES_FOLLOW)
    key = "error" if result.is_error else "output"
    response = types.FunctionResponse(
        name=name,
        response={key: text or ("Error." if result.is_error else "(no output)")},
        id=None if GENERATED_ID.fullmatch(result.tool_use_id) else result.tool_use_id,
    )
    return types.Part(function_response=response)


def contents_for(
    turns: list[Turn], *, signatures: dict[str, bytes] | None = None
) -> list[types.Content]:
    """The request's ``contents`` for ``turns`` (see the module docstring).

    ``signatures`` maps call ids to the thought signatures Gemini sent with them.
    Raises :class:`ProviderError` for a ``ToolResult`` that answers no earlier
    ``ToolUse`` (its function name is unknown, and the API needs it)."""
    signatures = signatures or {}
    names: dict[str, str] = {}  # call id → function name, as far as the turns go
    contents: list[types.Content] = []
    for turn in turns:
        answers: list[types.Part] = []
        images: list[types.Part] = []
        parts: list[types.Part] = []
        for block in turn.blocks:
            if isinstance(block, ToolResult):
                name = names.get(block.tool_use_id)
                if name is None:
                    raise ProviderError(
                        f"gemini: tool result {block.tool_use_id!r} answers no earlier tool use"
                    )
                answers.append(_function_response(block, name))
                pngs = [b.png for b in block.content if isinstance(b, Image)]
                if pngs:
                    images.append(types.Part(text=f"Image(s) returned by the {name} call:"))
                    images.extend(_image(png) for png in pngs)
            elif isinstance(block, ToolUse):
                names[block.id] = block.name
                call = types.FunctionCall(
                    name=block.name,
                    args=block.arguments if block.arguments is not None else {},
                    id=None if GENERATED_ID.fullmatch(block.id) else block.id,
                )
                parts.append(
                    types.Part(function_call=call, thought_signature=signatures.get(block.id))
                )
            elif isinstance(block, Text):
                if block.text:
                    parts.append(types.Part(text=block.text))
            else:
                parts.append(_image(block.png))
        every = answers + images + parts
        # Every content needs a part; an empty turn still keeps its place.
        role = "model" if turn.role == "assistant" else "user"
        contents.append(types.Content(role=role, parts=every or [types.Part(text="(empty)")]))
    return contents


def tools_for(tools: list[ToolSpec]) -> list[types.Tool]:
    """One tool of function declarations; parameters as JSON Schema, unconverted."""
    if not tools:
        return []
    declarations = [
        types.FunctionDeclaration(
            name=t.name, description=t.description, parameters_json_schema=t.parameters
        )
        for t in tools
    ]
    return [types.Tool(function_declarations=declarations)]


def _signature(value: object) -> bytes | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return base64.b64decode(value.replace("-", "+").replace("_", "/"), validate=True)
    except (ValueError, binascii.Error):
        return None


def parse_response(
    body: dict[str, Any], *, new_id: Callable[[], str]
) -> tuple[ParsedReply, dict[str, bytes]]:
    """A ``generateContent`` reply body in the neutral shapes, and the thought
    signatures of its calls (by call id).

    Raises :class:`RetryableFailure` for a reply we cannot use: no candidates (a
    blocked prompt says so), a candidate without content parts (blocked by the safety
    filters says so), a part that is not an object, a text that is not a string, a
    ``functionCall`` without a name or whose ``args`` is not an object. ``thought``
    parts and part kinds other than text/functionCall are skipped. ``new_id`` names a
    call Gemini sent without an id; it is called only once the reply is known good."""
    candidates = body.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        feedback = body.get("promptFeedback")
        blocked = feedback.get("blockReason") if isinstance(feedback, dict) else None
        if blocked:
            raise RetryableFailure(f"reply blocked: the prompt was blocked ({blocked})")
        raise RetryableFailure("malformed reply: no candidates")
    candidate = candidates[0]
    if not isinstance(candidate, dict):
        raise RetryableFailure("malformed reply: the candidate is not an object")
    finish = optional_str(candidate.get("finishReason"))
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list) or not parts:
        if finish in BLOCKED_REASONS:
            raise RetryableFailure(
                f"reply blocked by the safety filters: the candidate has no content ({finish})"
            )
        raise RetryableFailure(
            f"malformed reply: the candidate has no content (finishReason {finish or 'missing'})"
        )
    texts: list[str] = []
    calls: list[tuple[str | None, str, dict[str, Any], bytes | None]] = []
    for part in json_objects(parts, what="a part"):
        if part.get("thought") is True:
            continue
        if "text" in part:
            if not isinstance(part["text"], str):
                raise RetryableFailure("malformed reply: a text part without text")
            texts.append(part["text"])
        elif "functionCall" in part:
            call = part["functionCall"]
            name = call.get("name") if isinstance(call, dict) else None
            if not (isinstance(name, str) and name):
                raise RetryableFailure("malformed reply: a functionCall without a name")
            args = call.get("args")
            args = {} if args is None else args
            if not isinstance(args, dict):
                raise RetryableFailure(
                    f"malformed reply: functionCall args is a {type(args).__name__}, not an object"
                )
            call_id = call.get("id") if isinstance(call.get("id"), str) and call["id"] else None
            calls.append((call_id, name, args, _signature(part.get("thoughtSignature"))))
    tool_uses: list[ToolUse] = []
    signatures: dict[str, bytes] = {}
    for call_id, name, args, signature in calls:
        use = ToolUse(id=call_id or new_id(), name=name, arguments=args)
        tool_uses.append(use)
        if signature is not None:
            signatures[use.id] = signature
    usage = body.get("usageMetadata")
    usage = usage if isinstance(usage, dict) else {}
    thoughts = token_count(usage.get("thoughtsTokenCount"))
    if tool_uses and finish in ("STOP", ""):
        stop = "tool_use"
    else:
        stop = STOP_REASONS.get(finish, finish.lower())
    response_id = optional_str(body.get("responseId"))
    parsed = ParsedReply(
        text="".join(texts),
        tool_uses=tool_uses,
        # Thinking tokens are billed as output: they count in the cost. The prompt
        # count includes the cached content's tokens, as the other providers' do.
        usage=CallUsage(
            input_tokens=token_count(usage.get("promptTokenCount")),
            output_tokens=token_count(usage.get("candidatesTokenCount")) + thoughts,
            cache_read_tokens=token_count(usage.get("cachedContentTokenCount")),
        ),
        stop_reason=stop,
        model=optional_str(body.get("modelVersion")),
        response_id=response_id,
        extra={"provider_stop_reason": finish, "thoughts_tokens": thoughts},
    )
    return parsed, signatures


def _error_detail(details: object) -> str:
    """``STATUS: message`` from a Gemini error body, else its text, cut."""
    if isinstance(details, dict):
        inner = details.get("error", details)
        if isinstance(inner, dict):
            parts = [str(p) for p in (inner.get("status"), inner.get("message")) if p]
            if parts:
                return ": ".join(parts)[:_DETAIL_MAX_CHARS]
        return json.dumps(details)[:_DETAIL_MAX_CHARS]
    return "" if details is None else str(details)[:_DETAIL_MAX_CHARS]


def _retry_info_seconds(details: object) -> float | None:
    """The wait Google's ``RetryInfo`` error detail asks for (``"retryDelay": "37s"``)."""
    inner = details.get("error") if isinstance(details, dict) else None
    entries = inner.get("details") if isinstance(inner, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        delay = entry.get("retryDelay") if isinstance(entry, dict) else None
        if isinstance(delay, str) and re.fullmatch(r"\d+(\.\d+)?s", delay):
            return float(delay[:-1])
    return None


def failure_from_error(error: Exception, *, secrets: Sequence[str]) -> Exception:
    """The retry decision for an exception the SDK call raised: RetryableFailure or
    ProviderError with a redacted message, or ``error`` itself when it is none of the
    SDK's or the transport's (a bug, not the provider's answer)."""
    if isinstance(error, OutboundRefused):
        return refusal_error(error, secrets=secrets)
    if isinstance(error, httpx2.TimeoutException):
        return RetryableFailure("request timed out")
    if isinstance(error, genai_errors.APIError):
        status = error.code
        detail = _error_detail(error.details)
        message = redact(f"HTTP {status}" + (f" ({detail})" if detail else ""), secrets)
        if isinstance(status, int) and is_retryable_status(status):
            headers = getattr(error.response, "headers", None) or {}
            wait = retry_after_seconds(headers)
            if wait is None:
                wait = _retry_info_seconds(error.details)
            return RetryableFailure(message, status=status, retry_after_s=wait)
        return ProviderError(message, status=status if isinstance(status, int) else None)
    if isinstance(error, httpx2.TransportError):
        cause = error.__cause__ or error.__context__
        if isinstance(cause, OutboundRefused):
            return refusal_error(cause, secrets=secrets)
        return RetryableFailure(redact(f"connection failed ({type(error).__name__})", secrets))
    return error


class GeminiClient(ProviderAdapter):
    """A :class:`~agents.providers.base.ModelClient` on the Gemini API.

    ``price`` is (USD per million input tokens, USD per million output tokens; output
    includes thinking tokens); None means unknown: costs are 0 and
    ``extra["price_known"]`` is False. Cached prompt tokens are priced as OpenAI's
    (half the input price at most: Gemini's discount is larger; its explicit caches'
    storage is billed apart from any call). ``sleep`` and ``rng`` exist for tests.
    ``timeout_s`` bounds each attempt. The key lives only inside the SDK client and
    is registered for log redaction on construction. ``outbound`` is the address
    policy every connection is checked against (default: public addresses only, the
    host's DNS); a refused base URL is a ``ProviderError`` at once, never retried."""

    provider = "gemini"
    answer_errors = (genai_errors.APIError, httpx2.TransportError, OutboundRefused)

    def __init__(self, model: str, api_key: str, base_url: str | None = None, **options) -> None:
        super().__init__(model, api_key, base_url, **options)
        self._ids = itertools.count(1)
        self._signatures: dict[str, bytes] = {}
        self._http = checked_http_client(_HttpClient, self.outbound, verify=shared_tls_context())
        self._sdk = genai.Client(
            # Explicit, so GOOGLE_GENAI_USE_VERTEXAI and friends cannot switch backends.
            vertexai=False,
            api_key=api_key,
            http_options=types.HttpOptions(
                # Explicit too: GOOGLE_GEMINI_BASE_URL must not bypass the registry.
                base_url=base_url or DEFAULT_BASE_URL,
                api_version=API_VERSION,
                timeout=max(1, round(self.timeout_s * 1000)),  # milliseconds
                retry_options=types.HttpRetryOptions(attempts=1),
                httpx_client=self._http,
                httpx_async_client=httpx2.AsyncClient(transport=_SyncOnlyTransport()),
                # Read only for the (unused) Live API's websockets; given, the SDK loads
                # no CA bundle of its own (~20 ms a client).
                async_client_args={"ssl": shared_tls_context()},
            ),
        )

    def _release(self) -> None:
        # The SDK leaves a client it was given open.
        self._sdk.close()
        self._http.close()

    def _failure(self, error: Exception) -> Exception:
        return failure_from_error(error, secrets=self._secrets)

    def _new_id(self) -> str:
        return f"call_{next(self._ids)}"

    def _request(self, call: ModelCall) -> tuple[list[types.Content], types.GenerateContentConfig]:
        """The ``generateContent`` contents and config. Preconditions: each
        ``ToolResult`` answers a ``ToolUse`` of an earlier turn (else ``ProviderError``
        before any request). Keys of ``params`` outside :data:`SAMPLING_PARAMS` are
        ignored; a sampling value the SDK refuses is a ``ProviderError`` at once."""
        contents = contents_for(call.turns, signatures=self._signatures)
        try:
            config = types.GenerateContentConfig(
                system_instruction=call.system or None,
                max_output_tokens=call.max_tokens,
                tools=tools_for(call.tools) or None,
                should_return_http_response=True,
                automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
                automatic_continuation=False,
                **call.sampling(SAMPLING_PARAMS),
            )
        except pydantic.ValidationError as error:
            fields = ", ".join(str(e["loc"][0]) for e in error.errors() if e["loc"])
            raise ProviderError(f"gemini: invalid sampling params ({fields})") from None
        return contents, config

    def _send(
        self, request: tuple[list[types.Content], types.GenerateContentConfig], call: ModelCall
    ) -> tuple[ParsedReply, str]:
        contents, config = request
        response = self._sdk.models.generate_content(
            model=self.model, contents=contents, config=config
        )
        raw = response.sdk_http_response.body if response.sdk_http_response else None
        body = read_json_object(raw, secrets=self._secrets)
        parsed, signatures = parse_response(body, new_id=self._new_id)
        self._signatures.update(signatures)
        while len(self._signatures) > _MAX_SIGNATURES:
            del self._signatures[next(iter(self._signatures))]
        return parsed, parsed.response_id

    def list_models(self) -> list[str]:
        """The ids of the models the key can use (``models/`` dropped), in the API's
        order. Each page is one call, retried like :meth:`complete`."""
        ids: list[str] = []
        token: str | None = None
        for _ in range(_MAX_MODEL_PAGES):

            def attempt(token: str | None = token) -> tuple[list[str], str | None]:
                try:
                    pager = self._sdk.models.list(
                        config=types.ListModelsConfig(page_size=1000, page_token=token)
                    )
                # The SDK reads the body into its models, and fails in any of these on a
                # body of the wrong shape (a JSON list: AttributeError).
                except (ValueError, TypeError, AttributeError, KeyError) as error:
                    raise RetryableFailure(
                        f"malformed reply: model list unreadable ({type(error).__name__})"
                    ) from None
                names = [m.name for m in pager.page if m.name]
                return names, pager.config.get("page_token") or None

            (names, token), _ = self._retried(attempt, what=f"gemini {self.model} list models")
            ids.extend(name.removeprefix("models/") for name in names)
            if not token:
                return ids
        raise ProviderError(f"gemini: the model list did not end after {_MAX_MODEL_PAGES} pages")
