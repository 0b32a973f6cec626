"""OpenAI Chat Completions behind :class:`~agents.providers.base.ModelClient`, for
OpenAI itself and for any server that speaks the same API (vLLM, Ollama, llama.cpp's
server, …).

Chat Completions rather than the Responses API because it is the one the compatible
servers implement. Transport, auth and error classes come from the official ``openai``
SDK; retries are ours (:mod:`agents.providers.retry`), so the SDK client is built with
``max_retries=0``; the reply is read as JSON and checked here (compatible servers
differ in details the SDK's lenient models would hide).

Mapping of the neutral conversation:

- ``ToolUse`` → the assistant message's ``tool_calls`` (arguments re-serialised; a
  ``ToolUse`` whose arguments were not an object is replayed with its ``raw`` text, so
  the model sees what it actually sent);
- ``ToolResult`` → a ``role: "tool"`` message with its ``tool_call_id``. Tool messages
  carry text only (the API and most compatible servers accept no images there), so a
  result's images go into one ``user`` message right after the tool messages, each
  introduced by a line naming its tool call. The tool message says so;
- ``Image`` → an ``image_url`` part holding a ``data:image/png;base64,…`` URL.

Malformed tool arguments (not JSON, or JSON but not an object) are not a retry: they
come back as ``ToolUse(arguments=None, raw=...)`` for the scaffold to report to the
model. A malformed *reply* (not JSON, no choices, a tool call without a name) is
retried.
"""

import json
from typing import Any

import openai

from agents.gateway_usage import CHAT
from agents.providers.adapter import ModelCall, Sdk, SdkAdapter
from agents.providers.base import Image, ProviderError, Text, ToolResult, ToolSpec, ToolUse, Turn
from agents.providers.common import (
    CloseOnCollect,
    ParsedReply,
    SdkErrors,
    data_url,
    optional_str,
    reported_usage,
    result_text,
)
from agents.providers.retry import RetryableFailure


class _HttpClient(CloseOnCollect, openai.DefaultHttpxClient):
    """The SDK's default HTTP client, on the process's shared TLS context."""


# Per-call params passed through; the rest of an agent's params is configuration.
# ``extra_body`` carries server-specific fields (vLLM's ``top_k``, Ollama's options).
SAMPLING_PARAMS = frozenset(
    {
        "temperature",
        "top_p",
        "seed",
        "stop",
        "frequency_penalty",
        "presence_penalty",
        "reasoning_effort",
        "extra_body",
    }
)

# Chat Completions' finish_reason in the stop_reason words the Anthropic API uses, so
# the scaffold reads one vocabulary. The server's own word stays in
# ``extra["provider_stop_reason"]``.
STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}

NO_KEY = "not-needed"


def _image_part(png: bytes) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(png)}}


def _user_message(parts: list[dict[str, Any]]) -> dict[str, Any]:
    # Text-only user content as a plain string: older compatible servers accept
    # nothing else, and every server accepts it.
    if all(p["type"] == "text" for p in parts):
        return {"role": "user", "content": "\n\n".join(p["text"] for p in parts)}
    return {"role": "user", "content": parts}


_IMAGES_FOLLOW = (
    "1 image from this call follows in the next user message",
    "{n} images from this call follow in the next user message",
)


def _tool_message(result: ToolResult) -> dict[str, Any]:
    text = result_text(result, follow=_IMAGES_FOLLOW, mark_error=True)
    return {"role": "tool", "tool_call_id": result.tool_use_id, "content": text or "(no output)"}


def messages_for(system: str, turns: list[Turn]) -> list[dict[str, Any]]:
    """The Chat Completions ``messages`` for ``system`` and ``turns`` (see the module
    docstring for the mapping). In a user turn the tool messages come first: the API
    requires them right after the assistant message whose calls they answer."""
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    for turn in turns:
        if turn.role == "assistant":
            texts = [b.text for b in turn.blocks if isinstance(b, Text) and b.text]
            calls = [
                {
                    "id": b.id,
                    "type": "function",
                    "function": {
                        "name": b.name,
                        "arguments": json.dumps(b.arguments) if b.arguments is not None else b.raw,
                    },
                }
                for b in turn.blocks
                if isinstance(b, ToolUse)
            ]
            message: dict[str, Any] = {
                "role": "assistant",
                # null content is how the API spells "only tool calls"; an assistant
                # turn with neither still needs some content.
                "content": "\n".join(texts) if texts else (None if calls else "(empty)"),
            }
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
            continue
        parts: list[dict[str, Any]] = []
        for block in turn.blocks:
            if isinstance(block, ToolResult):
                messages.append(_tool_message(block))
                images = [b for b in block.content if isinstance(b, Image)]
                if images:
                    intro = f"Image(s) returned by tool call {block.tool_use_id}:"
                    parts.append({"type": "text", "text": intro})
                    parts.extend(_image_part(b.png) for b in images)
            elif isinstance(block, Text):
                if block.text:
                    parts.append({"type": "text", "text": block.text})
            elif isinstance(block, Image):
                parts.append(_image_part(block.png))
        if parts:
            messages.append(_user_message(parts))
        elif not any(isinstance(b, ToolResult) for b in turn.blocks):
            messages.append({"role": "user", "content": "(empty)"})
    return messages


def tools_for(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def _arguments(value: object) -> tuple[dict[str, Any] | None, str]:
    """``(arguments, raw)`` from a tool call's ``arguments``: a JSON string holding an
    object, or (some compatible servers) the object itself. An empty string is ``{}``:
    servers send it for calls of a tool without parameters."""
    if isinstance(value, dict):
        return value, json.dumps(value)
    raw = value if isinstance(value, str) else json.dumps(value)
    if raw.strip() == "":
        return {}, raw
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None, raw
    return (parsed, raw) if isinstance(parsed, dict) else (None, raw)


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers answer in content parts
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def parse_completion(body: dict[str, Any]) -> ParsedReply:
    """A Chat Completions reply body in the neutral shapes (first choice only).

    Raises :class:`RetryableFailure` when there is no usable choice or a tool call has
    no function name. Tool calls without an id get ``call_<index>`` (some compatible
    servers omit ids; the next request needs one to answer)."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise RetryableFailure("malformed reply: no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise RetryableFailure("malformed reply: the choice has no message")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise RetryableFailure("malformed reply: tool_calls is not a list")
    tool_uses: list[ToolUse] = []
    for index, call in enumerate(raw_calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not function.get("name"):
            raise RetryableFailure("malformed reply: a tool call without a function name")
        name = function["name"]
        if not isinstance(name, str):
            raise RetryableFailure("malformed reply: a tool call's function name is not text")
        arguments, raw = _arguments(function.get("arguments", ""))
        call_id = call.get("id")
        tool_uses.append(
            ToolUse(
                id=call_id if isinstance(call_id, str) and call_id else f"call_{index}",
                name=name,
                arguments=arguments,
                raw=raw,
            )
        )
    finish_reason = optional_str(choice.get("finish_reason"))
    return ParsedReply(
        text=_text_of(message.get("content")),
        tool_uses=tool_uses,
        usage=reported_usage(CHAT, body),
        stop_reason=STOP_REASONS.get(finish_reason, finish_reason),
        model=optional_str(body.get("model")),
        response_id=optional_str(body.get("id")),
        extra={
            "provider_stop_reason": finish_reason,
            "usage_reported": isinstance(body.get("usage"), dict),
        },
    )


class OpenAIClient(SdkAdapter):
    """A :class:`~agents.providers.base.ModelClient` on OpenAI Chat Completions.

    ``base_url`` includes the version path (``https://api.openai.com/v1``); None lets
    the SDK decide (``OPENAI_BASE_URL``, else OpenAI). ``price``, ``sleep``, ``rng``
    and ``outbound`` (the address policy of every connection) as for
    :class:`~agents.providers.anthropic_client.AnthropicClient`."""

    provider = "openai"
    # OpenAI's current models refuse ``max_tokens``; compatible servers know only it.
    max_tokens_field = "max_completion_tokens"
    sdk = Sdk(openai.OpenAI, _HttpClient, SdkErrors.of(openai), "x-request-id")

    def _secrets_of(self, api_key: str) -> tuple[str, ...]:
        # The placeholder is no secret (and redacting it would only blank the word).
        return () if api_key == NO_KEY else (api_key,)

    def _request(self, call: ModelCall) -> dict[str, Any]:
        """The Chat Completions request. Preconditions: each ``ToolResult`` answers a
        ``ToolUse`` of the assistant turn before it (the API checks; a violation is a
        400, raised at once as ``ProviderError``). Keys of ``params`` outside
        :data:`SAMPLING_PARAMS` are ignored."""
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages_for(call.system, call.turns),
            self.max_tokens_field: call.max_tokens,
        }
        if call.tools:
            request["tools"] = tools_for(call.tools)
        sampling = call.sampling(SAMPLING_PARAMS)
        extra_body = sampling.pop("extra_body", None) or {}
        if sampling or extra_body:
            # Through extra_body, not keywords: SDK releases add and drop keywords, and
            # compatible servers take fields OpenAI's SDK has no keyword for.
            request["extra_body"] = {**sampling, **extra_body}
        return request

    def _send(self, request: dict[str, Any], call: ModelCall) -> tuple[ParsedReply, str]:
        raw = self._sdk.chat.completions.with_raw_response.create(**request)
        body, request_id = self._read(raw)
        return parse_completion(body), request_id

    def list_models(self) -> list[str]:
        """The model ids the server offers (``GET /models``), retried like ``complete``:
        what an evaluation's random selection draws from (003's ``--random``)."""

        def attempt() -> list[str]:
            body, _ = self._read(self._sdk.models.with_raw_response.list())
            data = body.get("data")
            if not isinstance(data, list) or not all(
                isinstance(m, dict) and isinstance(m.get("id"), str) for m in data
            ):
                raise RetryableFailure("the model list is not a list of {id} objects")
            return sorted({m["id"] for m in data})

        models, _ = self._retried(attempt, what=f"{self.provider} model list")
        return models


class OpenAICompatibleClient(OpenAIClient):
    """Chat Completions on any compatible server: ``base_url`` is required (with its
    version path, e.g. ``http://127.0.0.1:8000/v1`` for vLLM, ``…:11434/v1`` for
    Ollama, ``…:8080/v1`` for llama.cpp); the key is optional (the SDK needs one, so
    ``"not-needed"`` is sent when there is none)."""

    provider = "openai_compatible"
    max_tokens_field = "max_tokens"

    def __init__(
        self, model: str, api_key: str | None = None, base_url: str | None = None, **options
    ) -> None:
        if not base_url:
            raise ProviderError("openai_compatible: a base_url is required")
        super().__init__(model, api_key or NO_KEY, base_url, **options)


OPENROUTER_URL = "https://openrouter.ai/api/v1"


class OpenRouterClient(OpenAIClient):
    """OpenRouter's Chat Completions (OpenAI's wire format, ``max_tokens``), with its
    own key variable (``OPENROUTER_API_KEY``) and URL (``OPENROUTER_URL`` unless the
    operator's ``OPENROUTER_BASE_URL`` or the agent's ``base_url`` says otherwise).
    Models are named ``vendor/model``; ``list_models`` lists them."""

    provider = "openrouter"
    max_tokens_field = "max_tokens"

    def __init__(self, model: str, api_key: str, base_url: str | None = None, **options) -> None:
        super().__init__(model, api_key, base_url or OPENROUTER_URL, **options)
