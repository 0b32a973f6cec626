"""OpenAI's computer-use model through the Responses API behind
:class:`~agents.providers.base.ModelClient` (provider ``openai-computer-use``).

The model is offered the ``computer_use_preview`` tool (display size, environment) in
place of the fixed set's pointer and keyboard tools, and the fixed set's other tools
(navigate, shell, deliver) as function tools beside it. The conversation lives on
OpenAI's side: every request after the first sends only the new items (the results of
the previous reply's calls) with ``previous_response_id``, and ``truncation: "auto"``
as the computer tool requires.

Each ``computer_call``'s action becomes one call of the fixed tool set:

===================  ==============================================================
action               arena call
===================  ==============================================================
click                click (left / right / wheel = middle); back and forward are the
                     browser's alt+Left / alt+Right
double_click         click, count 2
drag                 drag from the path's first point to its last
move                 mouse_move
scroll               scroll at (x, y); scroll_x / scroll_y pixels become wheel notches
                     (``scroll_pixels_per_notch``, default 100)
keypress             key: the keys pressed together, in xdotool names
type                 type
screenshot, wait     screenshot
===================  ==============================================================

Coordinates are scaled from the display the tool declares to the real screen; the
result goes back as a ``computer_call_output`` holding the screenshot (scaled to the
declared display) and, when the action failed, a user message saying why. Safety
checks: a ``computer_call``'s ``pending_safety_checks`` are acknowledged in the next
output (``safety_checks: "acknowledge"``, the default; they are recorded with the
model call's span) or end the run with an error (``"refuse"``).

Agent params read here (besides the registry's): ``display_width``/``display_height``
(default: the real screen), ``environment`` (default ``linux``), ``reasoning_effort``,
``reasoning_summary``, ``temperature``, ``top_p``, ``safety_checks``,
``scroll_pixels_per_notch``, ``final_text`` (``deliver``, the default: a reply in text
only delivers it as the final message; ``give_up``: it ends the run as given up).
"""

import json
from typing import Any

from agents.gateway_usage import RESPONSES
from agents.providers.adapter import ModelCall
from agents.providers.base import Image, ProviderError, Text, ToolResult, ToolSpec, ToolUse, Turn
from agents.providers.common import (
    ParsedReply,
    data_url,
    json_objects,
    optional_str,
    reported_usage,
    result_error,
)
from agents.providers.computer_actions import (
    DEFAULT_SCREEN,
    POINTER_TOOLS,
    SCROLL_NOTCHES_MAX,
    ActionError,
    ComputerParams,
    Geometry,
    key_combo,
    png_size,
    scaled_png,
    text_arg,
)
from agents.providers.openai_client import OpenAIClient
from agents.providers.retry import RetryableFailure

TOOL_TYPE = "computer_use_preview"
ENVIRONMENTS = ("linux", "ubuntu", "browser", "windows", "mac")
SAMPLING_PARAMS = frozenset({"temperature", "top_p"})
_BUTTONS = {"left": "left", "right": "right", "wheel": "middle", "middle": "middle"}
_HISTORY_KEYS = {"back": "alt+Left", "forward": "alt+Right"}


class OpenAIComputerUseClient(OpenAIClient):
    """The Responses API with the computer tool (see the module docstring).

    Stateful per lane: it holds the previous response's id and the safety checks to
    acknowledge, so one client serves one conversation."""

    provider = "openai-computer-use"

    def __init__(self, model: str, api_key: str, base_url: str | None = None, **kwargs: Any):
        params = dict(kwargs.pop("params", None) or {})
        super().__init__(model, api_key, base_url, **kwargs)
        try:
            self.computer = ComputerParams.read(
                params, display_keys=("display_width", "display_height"), sampling=SAMPLING_PARAMS
            )
        except ActionError as error:
            raise ProviderError(f"{self.provider}: {error}") from None
        self.environment = params.get("environment", "linux")
        if self.environment not in ENVIRONMENTS:
            raise ProviderError(f"{self.provider}: environment must be one of {ENVIRONMENTS}")
        self.safety_checks = params.get("safety_checks", "acknowledge")
        if self.safety_checks not in ("acknowledge", "refuse"):
            raise ProviderError(f"{self.provider}: safety_checks must be acknowledge or refuse")
        per_notch = params.get("scroll_pixels_per_notch", 100)
        if isinstance(per_notch, bool) or not isinstance(per_notch, int) or per_notch < 1:
            raise ProviderError(f"{self.provider}: scroll_pixels_per_notch must be ≥ 1")
        self.pixels_per_notch = per_notch
        reasoning: dict[str, Any] = {}
        if "reasoning_effort" in params:
            reasoning["effort"] = params["reasoning_effort"]
        if "reasoning_summary" in params:
            reasoning["summary"] = params["reasoning_summary"]
        self.reasoning = reasoning
        self.geometry = Geometry(DEFAULT_SCREEN, self.computer.display or DEFAULT_SCREEN)
        self.previous_response_id: str | None = None
        self._last_png: bytes | None = None
        self._calls: dict[str, dict[str, Any]] = {}  # call_id → {kind, error, checks}
        self._finals = 0

    # -- the request

    def _update_geometry(self, turns: list[Turn]) -> None:
        for block in reversed(turns[-1].blocks if turns else []):
            images = block.content if isinstance(block, ToolResult) else [block]
            for item in reversed(images):
                if isinstance(item, Image) and (size := png_size(item.png)):
                    self.geometry = Geometry(size, self.computer.display or size)
                    self._last_png = item.png
                    return

    def _tools(self, tools: list[ToolSpec]) -> list[dict[str, Any]]:
        wire: list[dict[str, Any]] = []
        if any(t.name in POINTER_TOOLS for t in tools):
            width, height = self.geometry.model
            wire.append(
                {
                    "type": TOOL_TYPE,
                    "display_width": width,
                    "display_height": height,
                    "environment": self.environment,
                }
            )
        wire += [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            }
            for t in tools
            if t.name not in POINTER_TOOLS
        ]
        return wire

    def _image(self, png: bytes) -> dict[str, Any]:
        return {"type": "input_image", "image_url": data_url(scaled_png(png, self.geometry.model))}

    def _input(self, turn: Turn) -> list[dict[str, Any]]:
        """The input items for one user turn (see the module docstring)."""
        items: list[dict[str, Any]] = []
        parts: list[dict[str, Any]] = []
        for block in turn.blocks:
            if isinstance(block, ToolResult):
                items += self._result_items(block, parts)
            elif isinstance(block, Text) and block.text:
                parts.append({"type": "input_text", "text": block.text})
            elif isinstance(block, Image):
                parts.append(self._image(block.png))
        if parts:
            items.append({"role": "user", "content": parts})
        return items

    def _result_items(
        self, result: ToolResult, parts: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        call = self._calls.get(result.tool_use_id, {"kind": "function"})
        texts = [b.text for b in result.content if isinstance(b, Text) and b.text]
        images = [b.png for b in result.content if isinstance(b, Image)]
        if call["kind"] == "final":  # the arena's deliver of a text answer: no API call
            said = _error(texts) if result.is_error else "delivered"
            parts.append({"type": "input_text", "text": f"Your final message: {said}"})
            return []
        if call["kind"] == "function":
            for png in images:
                parts.append({"type": "input_text", "text": f"Screen after {result.tool_use_id}:"})
                parts.append(self._image(png))
            output = "\n".join(texts) or "(no output)"
            if result.is_error:
                output = f"Error: {output}"
            return [
                {"type": "function_call_output", "call_id": result.tool_use_id, "output": output}
            ]
        if call.get("error"):
            parts.append({"type": "input_text", "text": f"That action failed: {call['error']}"})
        elif result.is_error:
            parts.append({"type": "input_text", "text": f"That action failed: {_error(texts)}"})
        if not images and self._last_png is not None:
            images = [self._last_png]  # trimmed by the scaffold: the output needs one
        if not images:  # a lane without a desktop: the output still needs an image
            parts.append({"type": "input_text", "text": "(no screenshot: this lane has no screen)"})
            return []
        item: dict[str, Any] = {
            "type": "computer_call_output",
            "call_id": result.tool_use_id,
            "output": self._image(images[-1]),
        }
        if call.get("checks"):
            item["acknowledged_safety_checks"] = call["checks"]
        return [item]

    # -- the reply

    def _map(self, action: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        kind = action.get("type")
        geometry = self.geometry
        if action.get("keys") and kind != "keypress":
            raise ActionError("holding keys during a pointer action is not offered")
        if kind in ("screenshot", "wait"):
            return "screenshot", {}
        if kind in ("click", "double_click"):
            button = action.get("button", "left") if kind == "click" else "left"
            if button in _HISTORY_KEYS:
                return "key", {"combo": _HISTORY_KEYS[button]}
            if button not in _BUTTONS:
                raise ActionError(
                    f"button must be left, right, wheel, back or forward; got {button!r}"
                )
            x, y = geometry.to_real(action.get("x"), action.get("y"))
            arguments: dict[str, Any] = {"x": x, "y": y}
            if _BUTTONS[button] != "left":
                arguments["button"] = _BUTTONS[button]
            if kind == "double_click":
                arguments["count"] = 2
            return "click", arguments
        if kind == "move":
            x, y = geometry.to_real(action.get("x"), action.get("y"))
            return "mouse_move", {"x": x, "y": y}
        if kind == "drag":
            path = action.get("path")
            if (
                not isinstance(path, list)
                or len(path) < 2
                or not all(isinstance(p, dict) for p in path)
            ):
                raise ActionError("drag needs a path of at least two {x, y} points")
            x1, y1 = geometry.to_real(path[0].get("x"), path[0].get("y"), what="path[0]")
            x2, y2 = geometry.to_real(path[-1].get("x"), path[-1].get("y"), what="path[-1]")
            return "drag", {"x1": x1, "y1": y1, "x2": x2, "y2": y2}
        if kind == "scroll":
            x, y = geometry.to_real(action.get("x"), action.get("y"))
            return "scroll", {
                "x": x,
                "y": y,
                "dx": self._notches(action.get("scroll_x", 0), "scroll_x"),
                "dy": self._notches(action.get("scroll_y", 0), "scroll_y"),
            }
        if kind == "keypress":
            keys = action.get("keys")
            if not isinstance(keys, list):
                raise ActionError("keypress needs keys: a list like ['CTRL', 'L']")
            return "key", {"combo": key_combo(keys)}
        if kind == "type":
            return "type", {"text": text_arg(action.get("text"), what="text")}
        raise ActionError(f"unknown action type {str(kind)[:40]!r}")

    def _notches(self, pixels: object, what: str) -> int:
        if isinstance(pixels, bool) or not isinstance(pixels, int | float):
            raise ActionError(f"{what} must be a number of pixels")
        if pixels == 0:
            return 0
        count = max(1, round(abs(pixels) / self.pixels_per_notch))
        return int(min(count, SCROLL_NOTCHES_MAX) * (1 if pixels > 0 else -1))

    def _computer_call(self, item: dict[str, Any]) -> ToolUse:
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise RetryableFailure("malformed reply: a computer_call without call_id")
        checks = item.get("pending_safety_checks") or []
        if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
            raise RetryableFailure("malformed reply: pending_safety_checks is not a list")
        if checks and self.safety_checks == "refuse":
            said = "; ".join(f"{c.get('code', '?')}: {c.get('message', '')}" for c in checks)
            raise ProviderError(
                f"{self.provider}: the model raised safety checks ({said[:500]}) and this "
                "agent's params say safety_checks: refuse"
            )
        action = item.get("action")
        actions = item.get("actions")
        if action is None and isinstance(actions, list) and len(actions) == 1:
            action = actions[0]
        raw = json.dumps({"action": action, "pending_safety_checks": checks})[:2000]
        acknowledged = [{k: c[k] for k in ("id", "code", "message") if k in c} for c in checks]
        try:
            if not isinstance(action, dict):
                raise ActionError("a computer_call needs one action object")
            tool, arguments = self._map(action)
        except ActionError as error:
            kind = action.get("type") if isinstance(action, dict) else None
            name = str(kind) if isinstance(kind, str) else "?"
            message = f"{name}: {error}"
            self._calls[call_id] = {"kind": "computer", "error": message, "checks": acknowledged}
            tool = _FALLBACK_TOOL.get(name, f"computer.{name}"[:40])
            return ToolUse(id=call_id, name=tool, arguments=None, raw=message)
        self._calls[call_id] = {"kind": "computer", "checks": acknowledged}
        return ToolUse(id=call_id, name=tool, arguments=arguments, raw=raw)

    def _parse(self, body: dict[str, Any], tools: list[ToolSpec]) -> ParsedReply:
        output = body.get("output")
        if not isinstance(output, list):
            raise RetryableFailure("malformed reply: no output list")
        texts: list[str] = []
        thoughts: list[str] = []
        uses: list[ToolUse] = []
        for item in json_objects(output, what="an output item"):
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or []:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        texts.append(part["text"])
            elif kind == "reasoning":
                for part in item.get("summary") or []:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        thoughts.append(part["text"])
            elif kind == "computer_call":
                uses.append(self._computer_call(item))
            elif kind == "function_call":
                uses.append(_function_call(item))
        text = "\n".join(t for t in texts if t)
        if not uses and self.computer.delivers(text, (t.name for t in tools)):
            # A text-only answer is the model's final message (the CUA loop ends so).
            self._finals += 1
            final_id = f"arena_final_{self._finals}"
            self._calls[final_id] = {"kind": "final"}
            uses = [ToolUse(id=final_id, name="deliver", arguments={"message": text})]
        status = optional_str(body.get("status"))
        return ParsedReply(
            text=text,
            tool_uses=uses,
            usage=reported_usage(RESPONSES, body),
            stop_reason="tool_use"
            if uses
            else ("max_tokens" if status == "incomplete" else "end_turn"),
            model=optional_str(body.get("model")),
            response_id=optional_str(body.get("id")),
            extra={"provider_status": status, "reasoning_summary": "\n".join(thoughts)[:2000]},
        )

    # -- the call

    def _request(self, call: ModelCall) -> dict[str, Any]:
        """A Responses API request. Precondition: ``turns`` ends with a user turn (the
        first, or the one answering the previous reply's calls)."""
        turns = call.turns
        if not turns or turns[-1].role != "user":
            raise ProviderError(f"{self.provider}: the conversation must end with a user turn")
        self._update_geometry(turns)
        request: dict[str, Any] = {
            "model": self.model,
            "input": self._input(turns[-1]),
            "truncation": "auto",
            "max_output_tokens": call.max_tokens,
        }
        if self.previous_response_id:
            request["previous_response_id"] = self.previous_response_id
        if call.system:
            width, height = self.geometry.model
            request["instructions"] = (
                f"{call.system}\n\nThe screen is {width}×{height} pixels; coordinates refer to it."
            )
        wire_tools = self._tools(call.tools)
        if wire_tools:
            request["tools"] = wire_tools
        if self.reasoning:
            request["reasoning"] = self.reasoning
        sampling = {**self.computer.sampling, **call.sampling(SAMPLING_PARAMS)}
        if sampling:
            request["extra_body"] = sampling
        return request

    def _send(self, request: dict[str, Any], call: ModelCall) -> tuple[ParsedReply, str]:
        body, request_id = self._read(self._sdk.responses.with_raw_response.create(**request))
        parsed = self._parse(body, call.tools)
        if parsed.response_id:
            self.previous_response_id = parsed.response_id
        return parsed, request_id


_FALLBACK_TOOL = {
    "click": "click",
    "double_click": "click",
    "move": "mouse_move",
    "drag": "drag",
    "scroll": "scroll",
    "keypress": "key",
    "type": "type",
}


def _function_call(item: dict[str, Any]) -> ToolUse:
    call_id, name = item.get("call_id"), item.get("name")
    if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
        raise RetryableFailure("malformed reply: a function_call without call_id or name")
    raw = item.get("arguments", "")
    raw = raw if isinstance(raw, str) else json.dumps(raw)
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except ValueError:
        arguments = None
    return ToolUse(
        id=call_id,
        name=name,
        arguments=arguments if isinstance(arguments, dict) else None,
        raw=raw,
    )


def _error(texts: list[str]) -> str:
    said = result_error(texts)
    return "the action failed" if said is None else said[0]
