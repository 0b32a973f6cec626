"""Fake computer-use APIs on 127.0.0.1, speaking the wire formats the official SDKs
send and read, for the native computer-use adapters.

``FakeAnthropicComputer`` is :class:`~tests.agents.fake_providers.FakeAnthropic` (the
Messages API, where the SDK's beta client posts) that also
checks what the real API checks for the computer tool: the ``anthropic-beta`` header
names the tool version's flag, and the ``computer`` tool carries ``type``, ``name`` and
the display size. A model reply with a computer action is the ordinary tool_use
shorthand: ``tool_call("computer", {"action": "left_click", "coordinate": [x, y]})``.
A reply as the docs show it::

    {"id": "msg_01…", "type": "message", "role": "assistant", "model": "claude-…",
     "content": [{"type": "text", "text": "I'll take a screenshot first."},
                 {"type": "tool_use", "id": "toolu_01…", "name": "computer",
                  "input": {"action": "screenshot"}}],
     "stop_reason": "tool_use", "usage": {"input_tokens": …, "output_tokens": …}}

and the next request answers it with ``{"type": "tool_result", "tool_use_id":
"toolu_01…", "content": [{"type": "image", "source": {"type": "base64", "media_type":
"image/png", "data": "…"}}]}``.

``FakeOpenAIResponses`` answers ``POST /v1/responses`` (base URL
``http://127.0.0.1:<port>/v1``). Script entries are :class:`Output` (the response's
``output`` items, built with :func:`computer_call`, :func:`function_call`,
:func:`message`, :func:`reasoning`) or the shared ``HttpError`` / ``Malformed`` /
``RawJSON`` / policies of ``fake_providers``. A response as the docs show it::

    {"id": "resp_…", "object": "response", "status": "completed",
     "model": "computer-use-preview-2025-03-11",
     "output": [{"type": "reasoning", "id": "rs_…", "summary": [{"type":
                 "summary_text", "text": "Clicking on the search bar."}]},
                {"type": "computer_call", "id": "cu_…", "call_id": "call_…",
                 "action": {"type": "click", "button": "left", "x": 156, "y": 50},
                 "pending_safety_checks": [], "status": "completed"}],
     "truncation": "auto", "usage": {"input_tokens": …, "output_tokens": …}}

and the next request carries ``previous_response_id`` and ``{"type":
"computer_call_output", "call_id": "call_…", "output": {"type": "input_image",
"image_url": "data:image/png;base64,…"}, "acknowledged_safety_checks": […]}``.

Checked like the real API (400 with its message otherwise): ``truncation: "auto"``
with the computer tool; the tool's display size and environment; every call of the
previous response answered (a ``computer_call`` by a ``computer_call_output`` holding
an image, a ``function_call`` by a ``function_call_output``); every pending safety
check acknowledged by id; ``previous_response_id`` one the fake issued.
"""

import base64
import json
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.agents.fake_providers import (
    _OPENAI_ERRORS,
    Entry,
    FakeAnthropic,
    _FakeServer,
    _hex,
)

ANTHROPIC_TOOL_BETAS = {
    "computer_20241022": "computer-use-2024-10-22",
    "computer_20250124": "computer-use-2025-01-24",
    "computer_20251124": "computer-use-2025-11-24",
}


class FakeAnthropicComputer(FakeAnthropic):
    """The Messages API with the computer-use beta (see the module docstring)."""

    def validate(self, request: dict[str, Any], headers: dict[str, str]) -> str | None:
        tools = request.get("tools") or []
        computer = [t for t in tools if isinstance(t, dict) and "type" in t]
        betas = [b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()]
        for tool in computer:
            version = tool.get("type")
            if version not in ANTHROPIC_TOOL_BETAS:
                return f"tools: unknown tool type {version!r}"
            if ANTHROPIC_TOOL_BETAS[version] not in betas:
                return f"tools: {version} requires the {ANTHROPIC_TOOL_BETAS[version]} beta"
            if tool.get("name") != "computer":
                return "tools: the computer tool must be named computer"
            for key in ("display_width_px", "display_height_px"):
                if not isinstance(tool.get(key), int) or tool[key] < 1:
                    return f"tools.computer.{key}: Field required"
        # Thinking blocks go back as they came, signature and all (the API checks it).
        messages = []
        for i, message in enumerate(request.get("messages") or []):
            content = message.get("content")
            if isinstance(content, list):
                for block in content:
                    if block.get("type") == "thinking" and not (
                        message.get("role") == "assistant" and block.get("signature")
                    ):
                        return f"messages.{i}: thinking blocks need their signature"
                content = [b for b in content if b.get("type") != "thinking"]
            messages.append({**message, "content": content})
        rest = {**request, "messages": messages, "tools": [t for t in tools if t not in computer]}
        return super().validate(rest, headers)


# -- OpenAI Responses ----------------------------------------------------------------


@dataclass(frozen=True)
class Output:
    """One response: its ``output`` items (ids filled in when missing)."""

    items: tuple[dict[str, Any], ...]
    usage: tuple[int, int] = (900, 40)
    status: str = "completed"
    cached: int = 0  # of the input tokens, those read from the prompt cache


def computer_call(
    action: dict[str, Any],
    *,
    checks: tuple[dict[str, Any], ...] = (),
    call_id: str | None = None,
) -> dict[str, Any]:
    return {
        "type": "computer_call",
        "id": f"cu_{_hex(12)}",
        "call_id": call_id or f"call_{_hex(12)}",
        "action": action,
        "pending_safety_checks": list(checks),
        "status": "completed",
    }


def function_call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{_hex(12)}",
        "call_id": f"call_{_hex(12)}",
        "name": name,
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        "status": "completed",
    }


def message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{_hex(12)}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def reasoning(summary: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": f"rs_{_hex(12)}",
        "summary": [{"type": "summary_text", "text": summary}],
    }


def _data_url_png(url: object) -> bytes | None:
    prefix = "data:image/png;base64,"
    if not isinstance(url, str) or not url.startswith(prefix):
        return None
    try:
        return base64.b64decode(url[len(prefix) :], validate=True)
    except ValueError:
        return None


@dataclass
class _Issued:
    calls: dict[str, str] = field(default_factory=dict)  # call_id → kind
    checks: dict[str, set[str]] = field(default_factory=dict)  # call_id → check ids


class FakeOpenAIResponses(_FakeServer):
    """``POST /v1/responses`` with the computer-use tool (see the module docstring)."""

    path = "/v1/responses"
    provider = "openai-responses"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.issued: dict[str, _Issued] = {}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def key_matches(self, headers: dict[str, str]) -> bool:
        return headers.get("authorization") == f"Bearer {self.api_key}"

    def bad_key_message(self, headers: dict[str, str]) -> str:
        return "Incorrect API key provided."

    def response_headers(self) -> dict[str, str]:
        return {"x-request-id": f"req_{_hex(16)}"}

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind, code = _OPENAI_ERRORS.get(status, ("server_error", None))
        return {"error": {"message": message or kind, "type": kind, "param": None, "code": code}}

    def _answer(
        self, handler: BaseHTTPRequestHandler, entry: Entry | None, payload: dict[str, Any]
    ) -> None:
        if not isinstance(entry, Output):
            super()._answer(handler, entry, payload)
            return
        response_id = f"resp_{_hex(24)}"
        issued = _Issued()
        for item in entry.items:
            if item.get("type") in ("computer_call", "function_call"):
                issued.calls[item["call_id"]] = item["type"]
                issued.checks[item["call_id"]] = {
                    c["id"] for c in item.get("pending_safety_checks") or []
                }
        with self._lock:
            self.issued[response_id] = issued
        body = {
            "id": response_id,
            "object": "response",
            "created_at": 1741476542,
            "status": entry.status,
            "model": payload.get("model"),
            "output": list(entry.items),
            "previous_response_id": payload.get("previous_response_id"),
            "reasoning": payload.get("reasoning") or {"effort": None, "summary": None},
            "truncation": payload.get("truncation", "disabled"),
            "tools": payload.get("tools", []),
            "usage": {
                "input_tokens": entry.usage[0],
                "input_tokens_details": {"cached_tokens": entry.cached},
                "output_tokens": entry.usage[1],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": sum(entry.usage),
            },
        }
        self._send_json(handler, 200, body)

    def validate(self, request: dict[str, Any], headers: dict[str, str]) -> str | None:
        if not isinstance(request.get("model"), str):
            return "Missing required parameter: 'model'."
        items = request.get("input")
        if not isinstance(items, list) or not items:
            return "Missing required parameter: 'input'."
        tools = request.get("tools") or []
        for tool in tools:
            if tool.get("type") == "computer_use_preview":
                for key in ("display_width", "display_height"):
                    if not isinstance(tool.get(key), int) or tool[key] < 1:
                        return f"Missing required parameter: 'tools[0].{key}'."
                if tool.get("environment") not in ("windows", "mac", "linux", "ubuntu", "browser"):
                    return "Invalid value for 'tools[0].environment'."
                if request.get("truncation") != "auto":
                    return "truncation must be set to 'auto' when using the computer tool."
            elif tool.get("type") == "function":
                if not isinstance(tool.get("name"), str) or not isinstance(
                    tool.get("parameters"), dict
                ):
                    return "function tools need name and parameters"
            else:
                return f"Invalid value: {tool.get('type')!r}."
        previous = request.get("previous_response_id")
        with self._lock:
            issued = self.issued.get(previous) if previous else _Issued()
        if issued is None:
            return f"Previous response with id '{previous}' not found."
        answered: set[str] = set()
        for n, item in enumerate(items):
            kind = item.get("type") if "type" in item else "message"
            if kind == "message":
                if item.get("role") not in ("user", "system", "developer"):
                    return f"input[{n}].role: invalid"
                for part in item.get("content") or []:
                    if part.get("type") == "input_image":
                        if _data_url_png(part.get("image_url")) is None:
                            return f"input[{n}]: Invalid image URL."
                    elif part.get("type") != "input_text" or not isinstance(part.get("text"), str):
                        return f"input[{n}].content: input_text or input_image only"
                continue
            call_id = item.get("call_id")
            if issued.calls.get(call_id) is None:
                return f"No tool call found for {kind} with call_id {call_id}."
            if kind == "computer_call_output":
                if issued.calls[call_id] != "computer_call":
                    return f"input[{n}]: {call_id} is not a computer_call"
                output = item.get("output") or {}
                if (
                    output.get("type") != "input_image"
                    or _data_url_png(output.get("image_url")) is None
                ):
                    return f"input[{n}].output: a computer_call_output needs an input_image"
                acknowledged = {c.get("id") for c in item.get("acknowledged_safety_checks") or []}
                if issued.checks.get(call_id, set()) - acknowledged:
                    return f"input[{n}]: pending safety checks were not acknowledged."
            elif kind == "function_call_output":
                if issued.calls[call_id] != "function_call":
                    return f"input[{n}]: {call_id} is not a function_call"
                if not isinstance(item.get("output"), str):
                    return f"input[{n}].output: must be a string"
            else:
                return f"input[{n}]: unknown item type {kind!r}"
            answered.add(call_id)
        missing = set(issued.calls) - answered
        if missing:
            return f"No tool output found for call {sorted(missing)[0]}."
        return None

    @staticmethod
    def images(request: dict[str, Any]) -> list[bytes]:
        """Every PNG the request carries, in order (outputs and user messages)."""
        found: list[bytes] = []
        for item in request.get("input") or []:
            if item.get("type") == "computer_call_output":
                png = _data_url_png(item["output"].get("image_url"))
                if png:
                    found.append(png)
            for part in item.get("content") or [] if isinstance(item.get("content"), list) else []:
                if part.get("type") == "input_image":
                    png = _data_url_png(part.get("image_url"))
                    if png:
                        found.append(png)
        return found

    @staticmethod
    def texts(request: dict[str, Any]) -> list[str]:
        """Every input_text and function output, in order."""
        found: list[str] = []
        for item in request.get("input") or []:
            if item.get("type") == "function_call_output":
                found.append(item["output"])
            content = item.get("content")
            for part in content if isinstance(content, list) else []:
                if part.get("type") == "input_text":
                    found.append(part["text"])
        return found
