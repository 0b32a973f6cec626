"""What the model gateway (:mod:`agents.gateway`) deals in: a run's grant, its usage,
the record of one call, and what a call used, read from the bytes that passed through,
and what it cost. Pure: no Django, no I/O.

The provider reports usage in the reply: a JSON body's ``usage``, or, for a stream,
inside one or two of its events. :class:`StreamUsage` reads a stream as it is relayed,
one event at a time, and keeps only the counts: an event larger than
``MAX_EVENT_BYTES`` is skipped unread, so the memory it holds is bounded whatever the
upstream sends.

Token counts are normalised so that every provider's mean the same thing:

- ``input_tokens``: every prompt token, cached or not. Anthropic reports the uncached
  ones (``input_tokens``) beside ``cache_creation_input_tokens`` and
  ``cache_read_input_tokens``, so the three are added; OpenAI's ``prompt_tokens`` /
  ``input_tokens`` already include the cached ones.
- ``cache_read_tokens``: prompt tokens served from the provider's cache (Anthropic
  ``cache_read_input_tokens``, OpenAI ``cached_tokens``); ``cache_write_tokens``:
  Anthropic's ``cache_creation_input_tokens`` (OpenAI writes its cache for free).
- ``output_tokens``: as reported (Anthropic's ``message_delta`` carries the running
  total, so the last one wins).
"""

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# (USD per million input tokens, USD per million output tokens)
Price = tuple[float, float]

# The input price's factor for cache writes and for cache reads. Anthropic's are the
# same for every model (a 5-minute cache write costs 1.25 x input, a read 0.1 x).
# OpenAI's cached-input discount depends on the model (0.5 down to 0.1 of the input
# price); 0.5 is the smallest discount, so a call is never counted cheaper than it was
# and a budget is never overrun by a pricing guess.
CACHE_PRICE_FACTORS = {"anthropic": (1.25, 0.1), "openai": (0.0, 0.5)}

MAX_EVENT_BYTES = 1024 * 1024  # one SSE event read for usage; larger ones are skipped
_ERROR_MAX_CHARS = 300
_NULL_USAGE = re.compile(rb'"usage"\s*:\s*null')

PROVIDERS = ("anthropic", "openai")
# The APIs the gateway relays, as its routes name them.
MESSAGES = "messages"  # Anthropic Messages
CHAT = "chat.completions"  # OpenAI Chat Completions
RESPONSES = "responses"  # OpenAI Responses


@dataclass(frozen=True)
class Grant:
    """What one run may call: ``model`` of ``provider`` at ``upstream_base_url``
    (Anthropic: ``https://api.anthropic.com``; OpenAI: ``.../v1``) with ``api_key``,
    for at most ``max_calls`` calls, ``max_tokens`` tokens (prompt, cached or not, plus
    output) and ``max_cost_usd`` (binds only when ``price`` is known: (in, out) USD per
    million tokens). The key is never in its repr."""

    provider: str
    model: str
    upstream_base_url: str
    api_key: str = field(repr=False)
    max_calls: int
    max_tokens: int
    max_cost_usd: float
    price: Price | None = None

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"provider must be one of {PROVIDERS}, not {self.provider!r}")
        if not self.model or not self.api_key:
            raise ValueError("a grant needs a model and a key")
        if not re.match(r"https?://[^/?#]", self.upstream_base_url):
            raise ValueError("upstream_base_url must be an http(s) URL")
        if self.max_calls < 0 or self.max_tokens < 0 or self.max_cost_usd < 0:
            raise ValueError("budgets must not be negative")


@dataclass(frozen=True)
class CallUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class GatewayCall:
    """One call forwarded for a run, as ``on_span`` receives it. Tokens are normalised
    as the module says: ``input_tokens`` counts every prompt token, cached or not.
    ``cost_usd`` is None when the grant has no price; ``error`` is "" for a success."""

    name: str  # e.g. "anthropic messages claude-sonnet-4-5"
    provider: str
    api: str
    model: str
    started_at: datetime  # aware, UTC
    latency_ms: int
    status: int  # what the client got (a stream that broke off keeps its 200)
    stream: bool
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    error: str = ""


@dataclass
class RunUsage:
    """What a run has spent through the gateway so far. ``calls`` counts the calls
    admitted (forwarded), ``refused`` the requests refused once its grant was found,
    by reason (``budget``, ``in_flight``, ``model``, ``body``, ``route``)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    in_flight: int = 0
    refused: Counter[str] = field(default_factory=Counter)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, usage: CallUsage, cost: float | None) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.cost_usd += cost or 0.0

    def copy(self) -> "RunUsage":
        return RunUsage(**{**self.__dict__, "refused": Counter(self.refused)})

    def over_budget(self, grant: Grant) -> str | None:
        """Why ``grant`` allows no further call after this usage, None if it does."""
        if self.calls >= grant.max_calls:
            return (
                f"this run has made its {grant.max_calls} model calls, the arena's budget "
                "for one lane; no more calls are forwarded"
            )
        if self.tokens >= grant.max_tokens:
            return (
                f"this run has used {self.tokens} tokens of its budget of {grant.max_tokens}; "
                "no more calls are forwarded"
            )
        if grant.price is not None and self.cost_usd >= grant.max_cost_usd:
            return (
                f"this run has spent ${self.cost_usd:.4f} of its ${grant.max_cost_usd:.4f} "
                "model budget; no more calls are forwarded"
            )
        return None


def _count(value: object) -> int:
    """A token count from the upstream: a non-negative int, else 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def _anthropic_usage(raw: dict[str, Any]) -> CallUsage:
    write = _count(raw.get("cache_creation_input_tokens"))
    read = _count(raw.get("cache_read_input_tokens"))
    return CallUsage(
        input_tokens=_count(raw.get("input_tokens")) + write + read,
        output_tokens=_count(raw.get("output_tokens")),
        cache_read_tokens=read,
        cache_write_tokens=write,
    )


def _openai_usage(raw: dict[str, Any]) -> CallUsage:
    if "prompt_tokens" in raw:  # Chat Completions
        details = raw.get("prompt_tokens_details")
        input_tokens, output_tokens = raw.get("prompt_tokens"), raw.get("completion_tokens")
    else:  # Responses
        details = raw.get("input_tokens_details")
        input_tokens, output_tokens = raw.get("input_tokens"), raw.get("output_tokens")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    return CallUsage(
        input_tokens=_count(input_tokens),
        output_tokens=_count(output_tokens),
        cache_read_tokens=_count(cached),
    )


def body_usage(api: str, body: object) -> CallUsage | None:
    """The usage of a non-streamed reply body (parsed JSON), None when it has none."""
    if not isinstance(body, dict) or not isinstance(body.get("usage"), dict):
        return None
    raw = body["usage"]
    return _anthropic_usage(raw) if api == MESSAGES else _openai_usage(raw)


def error_text(body: object) -> str:
    """``type: message`` of an error body of either provider (bounded), else ""."""
    if not isinstance(body, dict):
        return ""
    inner = body.get("error")
    if isinstance(body.get("response"), dict):  # a Responses API response.failed event
        inner = body["response"].get("error") or inner
    if not isinstance(inner, dict):
        return ""
    parts = [str(inner[k]) for k in ("type", "code", "message") if inner.get(k)]
    return ": ".join(dict.fromkeys(parts))[:_ERROR_MAX_CHARS]


class StreamUsage:
    """Reads usage out of a server-sent event stream fed to it chunk by chunk.

    Anthropic Messages: ``message_start`` (``message.usage``), then ``message_delta``
    (``usage``; its fields replace the start's). Chat Completions: the chunk whose
    ``usage`` is set (the last one, when the request asked for
    ``stream_options.include_usage``). Responses: the ``response.completed`` (or
    ``.incomplete`` / ``.failed``) event's ``response.usage``. An ``error`` event's
    text is kept in :attr:`error`. Only events that mention ``"usage"`` or
    ``"error"`` are parsed at all."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.error = ""
        self._raw: dict[str, Any] = {}
        self._seen = False
        self._line = bytearray()
        self._data: list[bytes] = []
        self._size = 0
        self._skipping_line = False  # a line past MAX_EVENT_BYTES, dropped to its end
        self._skipping_event = False  # an event past MAX_EVENT_BYTES, dropped to its end

    @property
    def usage(self) -> CallUsage | None:
        if not self._seen:
            return None
        return _anthropic_usage(self._raw) if self.api == MESSAGES else _openai_usage(self._raw)

    def feed(self, chunk: bytes) -> None:
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not self._skipping_line:
                self._line += piece
                if len(self._line) > MAX_EVENT_BYTES:
                    self._line.clear()
                    self._skipping_line = self._skipping_event = True
            if end < 0:
                return
            start = end + 1
            if self._skipping_line:
                self._skipping_line = False
            else:
                self._take_line(bytes(self._line).removesuffix(b"\r"))
            self._line.clear()

    def _take_line(self, line: bytes) -> None:
        if not line:  # the blank line that ends an event
            if self._data and not self._skipping_event:
                self._event(b"\n".join(self._data))
            self._data, self._size, self._skipping_event = [], 0, False
            return
        if self._skipping_event or not line.startswith(b"data:"):
            return  # event names, ids and comments: the data says what it is
        value = line[5:].removeprefix(b" ")
        self._size += len(value)
        if self._size > MAX_EVENT_BYTES:
            self._data, self._skipping_event = [], True
            return
        self._data.append(value)

    def _event(self, data: bytes) -> None:
        if b'"usage"' not in data and b'"error"' not in data:
            return  # the deltas: most events, not worth parsing
        if self.api == CHAT and _NULL_USAGE.search(data) and b'"error"' not in data:
            return  # with include_usage every chunk says "usage": null but the last
        try:
            event = json.loads(data)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "error" or ("error" in event and kind is None):
            self.error = error_text(event) or self.error
        if self.api == MESSAGES:
            message = event.get("message")
            if kind == "message_start" and isinstance(message, dict):
                self._merge(message.get("usage"), replace=True)
            elif kind == "message_delta":
                self._merge(event.get("usage"), replace=False)
        elif self.api == CHAT:
            self._merge(event.get("usage"), replace=True)
        elif isinstance(kind, str) and kind in (
            "response.completed",
            "response.incomplete",
            "response.failed",
        ):
            response = event.get("response")
            if isinstance(response, dict):
                self._merge(response.get("usage"), replace=True)
                if kind == "response.failed":
                    self.error = error_text(event) or "response.failed"

    def _merge(self, usage: object, *, replace: bool) -> None:
        if not isinstance(usage, dict):
            return
        if replace:
            self._raw = {}
        self._raw.update((k, v) for k, v in usage.items() if v is not None)
        self._seen = True


def call_cost(provider: str, usage: CallUsage, price: Price | None) -> float | None:
    """The call's cost in USD from its usage and the grant's ``price``; None when the
    price is unknown. Cached prompt tokens are priced by ``CACHE_PRICE_FACTORS``."""
    if price is None:
        return None
    per_in, per_out = price
    write_factor, read_factor = CACHE_PRICE_FACTORS[provider]
    uncached = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
    micro_usd = (
        uncached * per_in
        + usage.cache_write_tokens * per_in * write_factor
        + usage.cache_read_tokens * per_in * read_factor
        + usage.output_tokens * per_out
    )
    return micro_usd / 1_000_000
