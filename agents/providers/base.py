"""The provider-neutral conversation the scaffold keeps, and the one interface every
model client implements. Clients translate to and from their wire format.

A conversation is a list of ``Turn``s. Blocks:
- ``Text(text)``
- ``Image(png)`` (PNG bytes; clients encode base64 as their API wants)
- ``ToolUse(id, name, arguments)`` in assistant turns
- ``ToolResult(tool_use_id, content: list[Text | Image], is_error)`` in user turns
"""

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agents.gateway_usage import CallUsage


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Image:
    png: bytes


@dataclass(frozen=True)
class ToolUse:
    id: str
    name: str
    # None when the model sent arguments that are not a JSON object; ``raw`` keeps them.
    arguments: dict[str, Any] | None
    raw: str = ""


@dataclass(frozen=True)
class ToolResult:
    tool_use_id: str
    content: list[Text | Image]
    is_error: bool = False


Block = Text | Image | ToolUse | ToolResult


@dataclass
class Turn:
    role: Literal["user", "assistant"]
    blocks: list[Block]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema of the arguments object


# One call's token counts, the same type the model gateway records:
# ``input_tokens`` counts every prompt token, cached or not; ``cache_read_tokens`` of
# them were served from the provider's prompt cache, ``cache_write_tokens`` written to
# it (0 where the wire does not report them).
Usage = CallUsage


@dataclass
class ModelReply:
    """One model call's answer. ``tool_uses`` empty means the model answered in text
    only (the scaffold treats that as giving up with ``text`` as the message)."""

    text: str
    tool_uses: list[ToolUse]
    usage: Usage
    cost_usd: float
    stop_reason: str
    model: str
    attempts: int = 1  # how many HTTP attempts the call took (retries included)
    request_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cache_read_tokens(self) -> int:
        """Prompt tokens the provider served from its cache (0 when not reported)."""
        return self.usage.cache_read_tokens

    @property
    def cache_write_tokens(self) -> int:
        """Prompt tokens the provider wrote to its cache (0 when not reported)."""
        return self.usage.cache_write_tokens


class ProviderError(Exception):
    """The provider could not answer after the retries (or refused for good: 4xx)."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts


class ModelClient(Protocol):
    provider: str
    model: str

    def complete(
        self,
        *,
        system: str,
        turns: list[Turn],
        tools: list[ToolSpec],
        max_tokens: int,
        params: dict[str, Any] | None = None,
    ) -> ModelReply:
        """One model call. Raises ``ProviderError`` when it cannot get an answer."""
        ...
