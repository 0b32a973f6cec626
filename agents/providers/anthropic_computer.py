"""Anthropic's computer-use tool behind :class:`~agents.providers.base.ModelClient`
(provider ``anthropic-computer-use``).

The model is offered the native ``computer`` tool (``computer_20250124`` by default,
with its beta flag) in place of the fixed set's pointer and keyboard tools, and the
fixed set's other tools (navigate, shell, deliver) as ordinary tools beside it. Each
native action the model sends becomes one call of the fixed tool set:

=====================================  ===============================================
native action                          arena call
=====================================  ===============================================
screenshot, wait, cursor_position      screenshot (cursor_position answers the pointer
                                       the adapter last moved to, in model coordinates)
left_click / right_click /             click (button, count 1/2/3) at ``coordinate``,
middle_click / double_click /          or where the pointer is when it has none
triple_click
mouse_move                             mouse_move
left_click_drag                        drag from ``start_coordinate`` to ``coordinate``
scroll                                 scroll by ``scroll_amount`` notches in
                                       ``scroll_direction``
type                                   type
key, hold_key                          key (xdotool names; hold_key presses once)
left_mouse_down / up, zoom, modifier   refused with a message the model sees (the
``text`` on clicks and scrolls         arena has no held button or zoom)
=====================================  ===============================================

Coordinates are scaled from the screen the model is told about to the real one
(:mod:`agents.providers.computer_actions`); screenshots go back scaled the other way,
as the tool result's image. An action that cannot be mapped comes back to the scaffold
as a call whose arguments are the error text, so the lane records an error step and
the model reads what to send instead.

The assistant's native content (thinking blocks with their signatures, the computer
``tool_use`` as sent) is kept per reply and replayed verbatim: the API requires it.

Agent params read here (besides the registry's): ``tool_version``
(``computer_20250124`` | ``computer_20251124`` | ``computer_20241022``), ``betas``
(extra beta flags), ``display_width_px``/``display_height_px``, ``thinking`` (the
API's object, e.g. ``{"type": "enabled", "budget_tokens": 2048}``), ``temperature``,
``top_p``, ``top_k``, ``final_text`` (``deliver``, the default: a reply in text only
delivers it as the final message; ``give_up``: it ends the run as given up).
"""

import json
from dataclasses import dataclass
from typing import Any

from agents.providers.adapter import ModelCall
from agents.providers.anthropic_client import (
    SAMPLING_PARAMS,
    AnthropicClient,
    _content_blocks,
    parse_message,
    tools_for,
)
from agents.providers.base import Image, ProviderError, Text, ToolResult, ToolSpec, ToolUse, Turn
from agents.providers.common import ParsedReply, result_error
from agents.providers.computer_actions import (
    DEFAULT_SCREEN,
    POINTER_TOOLS,
    ActionError,
    ComputerParams,
    Geometry,
    anthropic_display,
    notches,
    png_size,
    point,
    scaled_png,
    text_arg,
    xdotool_combo,
)

TOOL_NAME = "computer"
TOOL_BETAS = {
    "computer_20241022": "computer-use-2024-10-22",
    "computer_20250124": "computer-use-2025-01-24",
    "computer_20251124": "computer-use-2025-11-24",
}
DEFAULT_TOOL_VERSION = "computer_20250124"

_CLICKS = {
    "left_click": ("left", 1),
    "right_click": ("right", 1),
    "middle_click": ("middle", 1),
    "double_click": ("left", 2),
    "triple_click": ("left", 3),
}
_SCROLL = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}
_UNSUPPORTED = {
    "left_mouse_down": "the arena has no held mouse button: use left_click_drag",
    "left_mouse_up": "the arena has no held mouse button: use left_click_drag",
    "zoom": "zoom is not offered: take a screenshot instead",
}


@dataclass
class _Call:
    """One native computer action and what the arena runs for it."""

    action: str
    tool: str
    arguments: dict[str, Any] | None
    error: str = ""
    note: str = ""  # extra text for the model with the result (the pointer position)


class AnthropicComputerUseClient(AnthropicClient):
    """Messages API with the native computer tool (see the module docstring).

    Stateful per lane: it remembers each reply's native content and the pointer, so one
    client serves one conversation. ``params`` are the agent's params."""

    provider = "anthropic-computer-use"

    def __init__(self, model: str, api_key: str, base_url: str | None = None, **kwargs: Any):
        params = dict(kwargs.pop("params", None) or {})
        super().__init__(model, api_key, base_url, **kwargs)
        version = params.get("tool_version", DEFAULT_TOOL_VERSION)
        if version not in TOOL_BETAS:
            raise ProviderError(
                f"{self.provider}: tool_version must be one of {sorted(TOOL_BETAS)}"
            )
        self.tool_version = version
        extra_betas = params.get("betas", [])
        if not isinstance(extra_betas, list) or not all(isinstance(b, str) for b in extra_betas):
            raise ProviderError(f"{self.provider}: betas must be a list of beta flag names")
        self.betas = [TOOL_BETAS[version], *[b for b in extra_betas if b != TOOL_BETAS[version]]]
        try:
            self.computer = ComputerParams.read(
                params,
                display_keys=("display_width_px", "display_height_px"),
                sampling=SAMPLING_PARAMS,
            )
        except ActionError as error:
            raise ProviderError(f"{self.provider}: {error}") from None
        thinking = params.get("thinking")
        if thinking is not None and not isinstance(thinking, dict):
            raise ProviderError(f"{self.provider}: thinking must be the API's thinking object")
        self.thinking = thinking
        self.geometry = Geometry(DEFAULT_SCREEN, self.computer.display or DEFAULT_SCREEN)
        self.pointer: tuple[int, int] | None = None  # real coordinates
        self._calls: dict[str, _Call] = {}
        self._native: dict[str, list[dict[str, Any]]] = {}  # first tool_use id → content
        self._scaled: dict[int, bytes] = {}

    # -- the screen

    def _update_geometry(self, turns: list[Turn]) -> None:
        """The real screen from the newest screenshot in ``turns``."""
        for turn in reversed(turns):
            for block in reversed(turn.blocks):
                images = block.content if isinstance(block, ToolResult) else [block]
                for item in reversed(images):
                    if isinstance(item, Image) and (size := png_size(item.png)):
                        model = self.computer.display or anthropic_display(size)
                        self.geometry = Geometry(size, model)
                        return

    def _model_png(self, png: bytes) -> bytes:
        key = hash(png)
        if key not in self._scaled:
            if len(self._scaled) > 16:
                self._scaled.clear()
            self._scaled[key] = scaled_png(png, self.geometry.model)
        return self._scaled[key]

    # -- the request

    def _tools(self, tools: list[ToolSpec]) -> list[dict[str, Any]]:
        wire: list[dict[str, Any]] = []
        if any(t.name in POINTER_TOOLS for t in tools):
            width, height = self.geometry.model
            wire.append(
                {
                    "type": self.tool_version,
                    "name": TOOL_NAME,
                    "display_width_px": width,
                    "display_height_px": height,
                }
            )
        return wire + tools_for([t for t in tools if t.name not in POINTER_TOOLS])

    def _result_blocks(self, result: ToolResult) -> dict[str, Any]:
        wire: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.tool_use_id}
        call = self._calls.get(result.tool_use_id)
        if call is None:  # an ordinary tool: its result as the scaffold made it
            content = _content_blocks(result.content)
        else:
            texts = [b.text for b in result.content if isinstance(b, Text) and b.text]
            content = []
            if call.error:
                content.append({"type": "text", "text": f"Error: {call.error}"})
            elif result.is_error:
                content.append({"type": "text", "text": _error_text(texts)})
            elif call.note:
                content.append({"type": "text", "text": call.note})
            for block in result.content:
                if isinstance(block, Image):
                    content += _content_blocks([Image(self._model_png(block.png))])
                elif block.text and not _is_json(block.text):
                    # The scaffold's own notes ("an older screenshot was omitted").
                    content += _content_blocks([block])
        if content:
            wire["content"] = content
        if result.is_error:
            wire["is_error"] = True
        return wire

    def _messages(self, turns: list[Turn]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        for turn in turns:
            uses = [b for b in turn.blocks if isinstance(b, ToolUse)]
            if turn.role == "assistant" and uses and uses[0].id in self._native:
                messages.append({"role": "assistant", "content": self._native[uses[0].id]})
                continue
            results = [self._result_blocks(b) for b in turn.blocks if isinstance(b, ToolResult)]
            content: list[dict[str, Any]] = []
            for block in turn.blocks:
                if isinstance(block, ToolUse):
                    arguments = block.arguments if block.arguments is not None else {}
                    content.append(
                        {"type": "tool_use", "id": block.id, "name": block.name, "input": arguments}
                    )
                elif isinstance(block, Image):
                    content += _content_blocks([Image(self._model_png(block.png))])
                elif isinstance(block, Text):
                    content += _content_blocks([block])
            blocks = results + content or [{"type": "text", "text": "(empty)"}]
            messages.append({"role": turn.role, "content": blocks})
        return messages

    def _system(self, system: str) -> str:
        width, height = self.geometry.model
        screen = (
            f"The screen is {width}×{height} pixels; screenshots show it at that size and "
            "coordinates refer to it."
        )
        return f"{system}\n\n{screen}" if system else screen

    # -- the reply

    def _translate(self, use: ToolUse) -> ToolUse:
        """The fixed-set call for one native ``computer`` tool_use."""
        native = use.arguments or {}
        action = native.get("action")
        raw = json.dumps(native)[:2000]
        try:
            call = self._map(native)
        except ActionError as error:
            name = action if isinstance(action, str) else "?"
            tool = _FALLBACK_TOOL.get(name, f"computer.{name}"[:40])
            call = _Call(name, tool, None, error=f"{name}: {error}")
        self._calls[use.id] = call
        if call.error:
            return ToolUse(id=use.id, name=call.tool, arguments=None, raw=call.error)
        return ToolUse(id=use.id, name=call.tool, arguments=call.arguments, raw=raw)

    def _map(self, native: dict[str, Any]) -> _Call:
        action = native.get("action")
        if not isinstance(action, str) or not action:
            raise ActionError("action is required (screenshot, left_click, type, key, …)")
        if action in _UNSUPPORTED:
            raise ActionError(_UNSUPPORTED[action])
        geometry = self.geometry
        if action in ("screenshot", "wait"):
            return _Call(action, "screenshot", {})
        if action == "cursor_position":
            if self.pointer is None:
                note = "The pointer has not been moved yet."
            else:
                mx, my = geometry.to_model(*self.pointer)
                note = f"X={mx},Y={my}"
            return _Call(action, "screenshot", {}, note=note)
        if action in _CLICKS:
            if native.get("text"):
                raise ActionError("holding keys while clicking is not offered: press keys apart")
            button, count = _CLICKS[action]
            x, y = self._target(native.get("coordinate"))
            self.pointer = (x, y)
            arguments: dict[str, Any] = {"x": x, "y": y}
            if button != "left":
                arguments["button"] = button
            if count != 1:
                arguments["count"] = count
            return _Call(action, "click", arguments)
        if action == "mouse_move":
            x, y = geometry.to_real(*point(native.get("coordinate")))
            self.pointer = (x, y)
            return _Call(action, "mouse_move", {"x": x, "y": y})
        if action == "left_click_drag":
            x1, y1 = geometry.to_real(
                *point(native.get("start_coordinate"), what="start_coordinate"),
                what="start_coordinate",
            )
            x2, y2 = geometry.to_real(*point(native.get("coordinate")))
            self.pointer = (x2, y2)
            return _Call(action, "drag", {"x1": x1, "y1": y1, "x2": x2, "y2": y2})
        if action == "scroll":
            if native.get("text"):
                raise ActionError("holding keys while scrolling is not offered")
            direction = native.get("scroll_direction")
            if direction not in _SCROLL:
                raise ActionError("scroll_direction must be up, down, left or right")
            amount = notches(native.get("scroll_amount"), what="scroll_amount")
            x, y = self._target(native.get("coordinate"))
            dx, dy = _SCROLL[direction]
            return _Call(action, "scroll", {"x": x, "y": y, "dx": dx * amount, "dy": dy * amount})
        if action == "type":
            return _Call(action, "type", {"text": text_arg(native.get("text"), what="text")})
        if action in ("key", "hold_key"):
            combo = xdotool_combo(native.get("text"))
            note = (
                "The keys were pressed once (the arena holds no keys)."
                if action == "hold_key"
                else ""
            )
            return _Call(action, "key", {"combo": combo}, note=note)
        raise ActionError(f"unknown action {action[:40]!r}")

    def _target(self, coordinate: object) -> tuple[int, int]:
        """Where a click or scroll lands: its coordinate, else the pointer."""
        if coordinate is None:
            if self.pointer is None:
                raise ActionError("coordinate [x, y] is required: the pointer has not moved yet")
            return self.pointer
        return self.geometry.to_real(*point(coordinate))

    def _reply(self, parsed: ParsedReply, content: list[Any], tools: list[ToolSpec]) -> ParsedReply:
        uses = [self._translate(u) if u.name == TOOL_NAME else u for u in parsed.tool_uses]
        if uses:
            self._native[uses[0].id] = content
        elif self.computer.delivers(parsed.text, (t.name for t in tools)):
            # A text-only answer is the model's final message (the Claude loop ends so).
            final_id = f"toolu_arena_final_{len(self._native)}"
            uses = [ToolUse(id=final_id, name="deliver", arguments={"message": parsed.text})]
        return ParsedReply(
            text=parsed.text,
            tool_uses=uses,
            usage=parsed.usage,
            stop_reason=parsed.stop_reason,
            model=parsed.model,
            response_id=parsed.response_id,
            extra={**parsed.extra, "betas": self.betas, "display": list(self.geometry.model)},
        )

    # -- the call

    def _request(self, call: ModelCall) -> dict[str, Any]:
        """A Messages API request with the computer tool. ``params`` (the scaffold's
        per-call sampling keys) are merged over the agent's."""
        self._update_geometry(call.turns)
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": call.max_tokens,
            "messages": self._messages(call.turns),
            "system": self._system(call.system),
            "betas": self.betas,
        }
        wire_tools = self._tools(call.tools)
        if wire_tools:
            request["tools"] = wire_tools
        body_extra = {**self.computer.sampling, **call.sampling(SAMPLING_PARAMS)}
        if self.thinking is not None:
            body_extra["thinking"] = self.thinking
        if body_extra:
            request["extra_body"] = body_extra
        return request

    def _send(self, request: dict[str, Any], call: ModelCall) -> tuple[ParsedReply, str]:
        body, request_id = self._read(self._sdk.beta.messages.with_raw_response.create(**request))
        # A computer action the arena cannot map is not retried: the model said it, and
        # reads the error on its next turn. parse_message has checked the content list.
        return self._reply(parse_message(body), body["content"], call.tools), request_id


# Where an unmappable action is recorded: the tool it would have been, so the step says
# "click takes a JSON object …" with the reason, rather than an unknown tool.
_FALLBACK_TOOL = {
    **{name: "click" for name in _CLICKS},
    "mouse_move": "mouse_move",
    "left_click_drag": "drag",
    "scroll": "scroll",
    "type": "type",
    "key": "key",
    "hold_key": "key",
}


def _error_text(texts: list[str]) -> str:
    """The dispatcher's error from the scaffold's JSON result text."""
    said = result_error(texts)
    if said is None:
        return "Error."
    text, is_error = said
    return f"Error: {text}" if is_error else text


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
