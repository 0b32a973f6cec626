"""The arena's own scaffold: a model driven through its provider's native tool calling.

Each step: the model sees the conversation so far (instruction, budgets, the results
of its earlier actions with their screenshots, only the newest few images kept) and
answers with tool calls; the first becomes the step's action. A reply without tool
calls ends the run as "gave up" with the reply's text. The submitter's follow-ups
arrive as user text in the turn of the step that received them, and ``ask_user`` is one
more tool (docs/conversations.md). Malformed arguments are passed
on as they are, so the tool dispatcher records an error step the model then sees."""

import json
import time
from dataclasses import dataclass, field
from typing import Any

from agents.pageview import PAGE_TEXT_HEADER, page_as_text
from agents.policies import Action, GiveUp, Observation
from agents.providers.base import (
    Image,
    ModelClient,
    ModelReply,
    Text,
    ToolResult,
    ToolSpec,
    ToolUse,
    Turn,
)
from sandboxes.base import TOOL_NAMES
from sandboxes.tools import TOOL_SCHEMAS

DEFAULT_SYSTEM_PROMPT = (
    "You operate a Linux desktop with a browser and a shell through the tools given. "
    "Work step by step: one tool call per turn, then look at the result and the "
    "screenshot. When the task is done, call deliver with a concise final message (and "
    "any files you made). If you cannot finish, say why in plain text without a tool call."
)
OMITTED = Text("[an older screenshot was omitted]")
OMITTED_PAGE = Text("[an older page text was omitted]")


FOLLOW_UP_HEADER = "Follow-up from the person who gave you the task"


def follow_ups(observation: Observation) -> list[Text]:
    """The follow-ups the observation carries, one user text each (docs/conversations.md)."""
    return [Text(f"{FOLLOW_UP_HEADER} (message {m.seq}):\n{m.text}") for m in observation.messages]


@dataclass
class SpanRecord:
    """A model call, as the lane stores it (battles.Span)."""

    kind: str
    name: str
    input: dict[str, Any]
    output: dict[str, Any]
    started: float  # time.time()
    latency_ms: int
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    error: str = ""


@dataclass
class ScaffoldPolicy:
    client: ModelClient
    system_prompt: str = ""
    # The desktop's fixed set unless the lane offers others (a repo task: shell, edit).
    tool_names: tuple[str, ...] = TOOL_NAMES
    max_tokens: int = 1024
    keep_screenshots: int = 3
    params: dict[str, Any] = field(default_factory=dict)
    turns: list[Turn] = field(default_factory=list)
    spans: list[SpanRecord] = field(default_factory=list)
    _pending: list[ToolUse] = field(default_factory=list)

    def tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(name, TOOL_SCHEMAS[name]["description"], TOOL_SCHEMAS[name]["parameters"])
            for name in self.tool_names
        ]

    def _observe(self, observation: Observation) -> None:
        """Appends what the agent saw since its last action as a user turn."""
        screen: list[Text | Image] = (
            [Image(observation.screenshot_png)] if observation.screenshot_png else []
        )
        if observation.page is not None:  # the agent asked for the page as text
            screen.append(Text(page_as_text(observation.page)))
        budgets = (
            f"Steps left: {observation.steps_left}. Seconds left: {int(observation.seconds_left)}."
        )
        if not self._pending:
            intro = f"Task: {observation.instruction}"
            if observation.attachments:
                intro += "\nAttached files: " + ", ".join(observation.attachments)
            if observation.start_url:
                intro += f"\nThe browser starts at {observation.start_url}."
            self.turns.append(
                Turn("user", [Text(f"{intro}\n{budgets}"), *follow_ups(observation), *screen])
            )
            return
        first, *others = self._pending
        # The result without its empty fields: fewer tokens, same information.
        result = {
            key: value
            for key, value in (observation.last_result or {}).items()
            if key == "ok" or value not in ("", None, {}, [], False)
        }
        content: list[Text | Image] = [Text(json.dumps(result, sort_keys=True)), *screen]
        blocks: list[Any] = [ToolResult(first.id, content, is_error=not result.get("ok", False))]
        # Every tool call needs an answer; only the first of a turn is ever run.
        blocks += [
            ToolResult(o.id, [Text("Not run: one action per step; call it again.")], True)
            for o in others
        ]
        blocks += follow_ups(observation)  # the submitter's words, after the results
        blocks.append(Text(budgets))
        self.turns.append(Turn("user", blocks))
        self._pending = []

    def _trimmed(self) -> list[Turn]:
        """The conversation with only the newest ``keep_screenshots`` images and the
        newest page text (each up to 8 KB: older ones would only cost tokens)."""
        seen = pages = 0
        trimmed: list[Turn] = []
        for turn in reversed(self.turns):
            blocks = []
            for block in reversed(turn.blocks):
                if isinstance(block, ToolResult):
                    content = []
                    for item in reversed(block.content):
                        if isinstance(item, Image):
                            seen += 1
                            item = item if seen <= self.keep_screenshots else OMITTED
                        elif isinstance(item, Text) and item.text.startswith(PAGE_TEXT_HEADER):
                            pages += 1
                            item = item if pages <= 1 else OMITTED_PAGE
                        content.append(item)
                    block = ToolResult(block.tool_use_id, content[::-1], block.is_error)
                elif isinstance(block, Image):
                    seen += 1
                    block = block if seen <= self.keep_screenshots else OMITTED
                elif isinstance(block, Text) and block.text.startswith(PAGE_TEXT_HEADER):
                    pages += 1
                    block = block if pages <= 1 else OMITTED_PAGE
                blocks.append(block)
            trimmed.append(Turn(turn.role, blocks[::-1]))
        return trimmed[::-1]

    def next_action(self, observation: Observation) -> Action | GiveUp:
        self._observe(observation)
        started, t0 = time.time(), time.monotonic()
        try:
            reply: ModelReply = self.client.complete(
                system=self.system_prompt or DEFAULT_SYSTEM_PROMPT,
                turns=self._trimmed(),
                tools=self.tools(),
                max_tokens=self.max_tokens,
                params=self.params,
            )
        except Exception as exc:
            self.spans.append(
                SpanRecord(
                    kind="model",
                    name=self.client.model,
                    input={"turns": len(self.turns)},
                    output={},
                    started=started,
                    latency_ms=int((time.monotonic() - t0) * 1000),
                    error=f"{type(exc).__name__}: {exc}",
                )
            )
            raise
        self.spans.append(
            SpanRecord(
                kind="model",
                name=reply.model or self.client.model,
                input={"turns": len(self.turns), "attempts": reply.attempts},
                output={
                    "text": reply.text[:2000],
                    "tool_uses": [
                        {"name": u.name, "arguments": u.arguments, "raw": u.raw[:2000]}
                        for u in reply.tool_uses
                    ],
                    "stop_reason": reply.stop_reason,
                    "cache_read_tokens": reply.cache_read_tokens,
                    "cache_write_tokens": reply.cache_write_tokens,
                },
                started=started,
                latency_ms=int((time.monotonic() - t0) * 1000),
                input_tokens=reply.usage.input_tokens,
                output_tokens=reply.usage.output_tokens,
                cost_usd=reply.cost_usd,
            )
        )
        assistant: list[Any] = [Text(reply.text)] if reply.text else []
        assistant += reply.tool_uses
        self.turns.append(Turn("assistant", assistant or [Text("")]))
        if not reply.tool_uses:
            return GiveUp(reply.text.strip() or "The model stopped without an answer.")
        self._pending = list(reply.tool_uses)
        use = reply.tool_uses[0]
        # Malformed arguments go through as they are: the dispatcher answers with an
        # error the model sees on its next turn.
        return Action(use.name, use.arguments if use.arguments is not None else use.raw)
