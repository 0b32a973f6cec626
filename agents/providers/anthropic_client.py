"""The Anthropic Messages API behind :class:`~agents.providers.base.ModelClient`.

Transport, auth headers and error classes come from the official ``anthropic`` SDK;
retries are ours (:mod:`agents.providers.retry`), so the SDK client is built with
``max_retries=0``. The reply is read as JSON and checked here rather than through the
SDK's models, which (outside their private strict mode) accept any shape without
complaint: a reply we cannot use is "malformed" and retried.
"""

from typing import Any

import anthropic

from agents.gateway_usage import MESSAGES
from agents.providers.adapter import ModelCall, Sdk, SdkAdapter
from agents.providers.base import Image, Text, ToolResult, ToolSpec, ToolUse, Turn
from agents.providers.common import (
    CloseOnCollect,
    ParsedReply,
    SdkErrors,
    json_objects,
    optional_str,
    png_base64,
    reported_usage,
)
from agents.providers.retry import RetryableFailure


class _HttpClient(CloseOnCollect, anthropic.DefaultHttpxClient):
    """The SDK's default HTTP client, on the process's shared TLS context."""


# Per-call params passed through to the API; anything else in an agent's params
# (base_url, api_key_env, …) is configuration, not a sampling knob.
SAMPLING_PARAMS = frozenset({"temperature", "top_p", "top_k", "stop_sequences"})


def _content_blocks(blocks: list[Text | Image]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, Text):
            # The API rejects empty text blocks.
            if block.text:
                wire.append({"type": "text", "text": block.text})
        else:
            wire.append(
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": "image/png",
                        "data": png_base64(block.png),
                    },
                }
            )
    return wire


def messages_for(turns: list[Turn]) -> list[dict[str, Any]]:
    """The Messages API ``messages`` for ``turns``.

    In a user turn, ``tool_result`` blocks go first: the API requires them to open the
    message that answers the assistant's ``tool_use``. A ``ToolUse`` whose arguments
    were not an object is replayed with ``{}`` (the API accepts only objects there; the
    scaffold's error step already told the model what went wrong)."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        results: list[dict[str, Any]] = []
        content: list[dict[str, Any]] = []
        for block in turn.blocks:
            if isinstance(block, ToolResult):
                result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id}
                result_content = _content_blocks(block.content)
                if result_content:
                    result["content"] = result_content
                if block.is_error:
                    result["is_error"] = True
                results.append(result)
            elif isinstance(block, ToolUse):
                content.append(
                    {
                        "type": "tool_use",
                        "id": block.id,
                        "name": block.name,
                        "input": block.arguments if block.arguments is not None else {},
                    }
                )
            else:
                content.extend(_content_blocks([block]))
        blocks = results + content
        if not blocks:
            # Every message needs content; an empty turn (a model that said nothing)
            # still has to keep its place in the alternation.
            blocks = [{"type": "text", "text": "(empty)"}]
        messages.append({"role": turn.role, "content": blocks})
    return messages


def tools_for(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
    ]


def parse_message(body: dict[str, Any]) -> ParsedReply:
    """A Messages API reply body in the neutral shapes.

    Raises :class:`RetryableFailure` for a reply we cannot use: no ``content`` list, a
    block that is not an object, a ``tool_use`` without id/name or whose ``input`` is
    not an object. Block types other than ``text``/``tool_use`` (thinking, …) are
    skipped."""
    content = body.get("content")
    if not isinstance(content, list):
        raise RetryableFailure("malformed reply: no content list")
    texts: list[str] = []
    tool_uses: list[ToolUse] = []
    for block in json_objects(content, what="a content block"):
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise RetryableFailure("malformed reply: a text block without text")
            texts.append(text)
        elif kind == "tool_use":
            use_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
            if not (isinstance(use_id, str) and use_id and isinstance(name, str) and name):
                raise RetryableFailure("malformed reply: a tool_use without id or name")
            if not isinstance(arguments, dict):
                raise RetryableFailure(
                    f"malformed reply: tool_use input is a {type(arguments).__name__}, "
                    "not an object"
                )
            tool_uses.append(ToolUse(id=use_id, name=name, arguments=arguments))
    return ParsedReply(
        text="\n".join(t for t in texts if t),
        tool_uses=tool_uses,
        usage=reported_usage(MESSAGES, body),
        stop_reason=optional_str(body.get("stop_reason")),
        model=optional_str(body.get("model")),
        response_id=optional_str(body.get("id")),
    )


class AnthropicClient(SdkAdapter):
    """A :class:`~agents.providers.base.ModelClient` on the Messages API.

    ``price`` is (USD per million input tokens, USD per million output tokens); None
    means unknown: costs are 0 and ``extra["price_known"]`` is False. ``sleep`` and
    ``rng`` exist for tests (record the backoff instead of waiting). The key lives only
    inside the SDK client; it is registered for log redaction on construction.
    ``outbound`` is the address policy every connection of the SDK is checked against
    (:mod:`agents.providers.transport`; default: public addresses only, the host's DNS);
    a refused base URL is a ``ProviderError`` at once, never retried. Cache reads and
    writes are priced as Anthropic prices them (``CACHE_PRICE_FACTORS``)."""

    provider = "anthropic"
    cache_pricing = "anthropic"
    sdk = Sdk(anthropic.Anthropic, _HttpClient, SdkErrors.of(anthropic), "request-id")

    def _request(self, call: ModelCall) -> dict[str, Any]:
        """The Messages API request. Preconditions: ``turns`` is non-empty, starts with
        a user turn, and each ``ToolResult`` answers a ``ToolUse`` of the turn before
        (the API checks; a violation is a 400, raised at once as ``ProviderError``).
        Keys of ``params`` outside :data:`SAMPLING_PARAMS` are ignored."""
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": call.max_tokens,
            "messages": messages_for(call.turns),
        }
        if call.system:
            request["system"] = call.system
        if call.tools:
            request["tools"] = tools_for(call.tools)
        sampling = call.sampling(SAMPLING_PARAMS)
        if sampling:
            # Through extra_body, not keywords: SDK releases drop keywords the API still
            # takes for some models (2.x has no ``temperature``), and this is the JSON
            # the API reads either way.
            request["extra_body"] = sampling
        return request

    def _send(self, request: dict[str, Any], call: ModelCall) -> tuple[ParsedReply, str]:
        body, request_id = self._read(self._sdk.messages.with_raw_response.create(**request))
        return parse_message(body), request_id
