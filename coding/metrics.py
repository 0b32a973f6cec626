"""A run's trajectory and usage metrics: directness, pass@k, tokens and cost. Pure.

Directness (seed 002's five sub-metrics, each in [0, 1]) over a list of ``ToolUse``
steps, in order. A step with ``is_edit`` is an edit (even when also flagged as a read);
a step with ``is_read`` and not ``is_edit`` is a read; any other step (a shell command,
a test run) is neither.

- trajectory_efficiency = edits / (edits + reads); 0 without edits.
- early_edit = 1 − (index of the first edit) / n; 0 without edits (1 when step 0 edits).
- repeat_penalty = share of reads that read a path already read since that path's last
  edit (re-reading a file after changing it is not a repeat); reads without a path never
  repeat.
- loop_penalty = share of steps inside a cycle of tool names: a block of 2, 3 or 4
  names, not all equal, repeated at least 3 times back to back (a run of one name is a
  stall, not a loop).
- stall_rate = share of steps in runs of more than ``STALL_RUN`` consecutive reads.
- score = clamp01(0.35·efficiency + 0.25·early − 0.20·repeat − 0.10·loop − 0.10·stall),
  seed 002's weights. An empty trajectory scores 0 throughout.

Usage: each CLI's own report (Claude Code's JSON, aider's "Tokens:" lines, Codex's JSONL
events) becomes a ``Usage``; ``usage_resolved`` prices what the CLI did not, from the
dated ``PRICES`` table. ``input_tokens`` means uncached input throughout (Anthropic's
meaning); cache writes and reads are counted apart.
"""

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

STALL_RUN = 5
LOOP_PERIODS = (2, 3, 4)
LOOP_MIN_REPEATS = 3
REPORT_MAX_CHARS = 16 * 1024 * 1024
JSON_LINE_MAX_CHARS = 1024 * 1024
TOKENS_MAX = 10**12  # more than any run can use: larger figures are garbage


@dataclass(frozen=True)
class ToolUse:
    tool: str
    path: str | None
    is_edit: bool
    is_read: bool


@dataclass(frozen=True)
class Directness:
    trajectory_efficiency: float
    early_edit: float
    repeat_penalty: float
    loop_penalty: float
    stall_rate: float
    score: float


def _loop_steps(names: Sequence[str]) -> int:
    """How many steps lie in a cycle (module docstring); O(n) per period."""
    n = len(names)
    marked = [False] * n
    for p in LOOP_PERIODS:
        start = 0
        for j in range(p, n + 1):
            if j < n and names[j] == names[j - p]:
                continue
            # names[start:j] repeats its first p names; the next run can start at j−p+1
            if j - start >= LOOP_MIN_REPEATS * p and len(set(names[start : start + p])) > 1:
                marked[start:j] = [True] * (j - start)
            start = j - p + 1
    return sum(marked)


def directness(steps: Sequence[ToolUse]) -> Directness:
    n = len(steps)
    if n == 0:
        return Directness(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    edits = reads = repeats = stalled = run = 0
    first_edit: int | None = None
    read_since_edit: set[str] = set()
    for index, step in enumerate(steps):
        if step.is_edit:
            edits += 1
            first_edit = index if first_edit is None else first_edit
            read_since_edit.discard(step.path)
            stalled += run if run > STALL_RUN else 0
            run = 0
            continue
        if step.is_read:
            reads += 1
            run += 1
            if step.path is not None:
                repeats += step.path in read_since_edit
                read_since_edit.add(step.path)
            continue
        stalled += run if run > STALL_RUN else 0
        run = 0
    stalled += run if run > STALL_RUN else 0
    efficiency = edits / (edits + reads) if edits else 0.0
    early = 1.0 - first_edit / n if first_edit is not None else 0.0
    repeat = repeats / reads if reads else 0.0
    loop = _loop_steps([step.tool for step in steps]) / n
    stall = stalled / n
    raw = 0.35 * efficiency + 0.25 * early - 0.20 * repeat - 0.10 * loop - 0.10 * stall
    return Directness(
        *(round(value, 4) for value in (efficiency, early, repeat, loop, stall)),
        score=round(min(max(raw, 0.0), 1.0), 4),
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator ``1 − C(n−c, k) / C(n, k)`` (Chen et al. 2021).

    n runs, c of them correct, k drawn. Undefined (ValueError) for k < 1, n < k, c < 0 or
    c > n: an estimate over fewer runs than k draws says nothing. Computed as the product
    ``1 − Π_{i=n−c+1}^{n} (1 − k/i)``, stable where the binomials would be huge.
    """
    if k < 1 or n < k or c < 0 or c > n:
        raise ValueError(f"pass@k needs 1 ≤ k ≤ n and 0 ≤ c ≤ n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    fail = 1.0
    for i in range(n - c + 1, n + 1):
        fail *= 1.0 - k / i
    return 1.0 - fail


# USD per million tokens: (input, output, cache write, cache read), the providers'
# published list prices. OpenAI bills no cache write: its entry is the input price.
PRICES = {
    "as_of": "2026-12-01",
    "models": {
        "claude-sonnet-4-5": (3.00, 15.00, 3.75, 0.30),
        "claude-opus-4-1": (15.00, 75.00, 18.75, 1.50),
        "claude-haiku-4-5": (1.00, 5.00, 1.25, 0.10),
        "gpt-5": (1.25, 10.00, 1.25, 0.125),
        "gpt-5-mini": (0.25, 2.00, 0.25, 0.025),
        "gpt-4.1": (2.00, 8.00, 2.00, 0.50),
        "o4-mini": (1.10, 4.40, 1.10, 0.275),
    },
}
_MODEL_SUFFIX = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


def _price(model: str) -> tuple[float, float, float, float] | None:
    """A table entry by id: case-insensitive, without a provider prefix ("anthropic/")
    or a dated snapshot suffix ("-20250929", "-2025-08-07")."""
    if not isinstance(model, str):
        return None
    key = _MODEL_SUFFIX.sub("", model.strip().lower().rsplit("/", 1)[-1])
    return PRICES["models"].get(key)


def cost_from_tokens(
    model: str, input: int, output: int, cache_write: int = 0, cache_read: int = 0
) -> tuple[float, bool]:
    """(cost in USD, whether the model's price is known); (0.0, False) for an unknown
    model. Negative or non-finite token counts count as 0."""
    price = _price(model)
    if price is None:
        return 0.0, False
    counts = (_tokens(input), _tokens(output), _tokens(cache_write), _tokens(cache_read))
    return sum(t * p for t, p in zip(counts, price, strict=True)) / 1_000_000, True


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int
    cost_usd: float | None
    source: str  # "claude", "aider", "codex", with "+price_table" when priced by us


def _tokens(value: object) -> int:
    """A token count from a report: a non-negative integer below TOKENS_MAX, else 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if not math.isfinite(value) or value < 0 or value >= TOKENS_MAX:
        return 0
    return int(value)


def _dollars(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and 0 <= value < 1e9 else None


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _claude_result(obj: object) -> Usage | None:
    if not isinstance(obj, dict) or obj.get("type") != "result":
        return None
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
    return Usage(
        input_tokens=_tokens(usage.get("input_tokens")),
        output_tokens=_tokens(usage.get("output_tokens")),
        cache_creation_tokens=_tokens(usage.get("cache_creation_input_tokens")),
        cache_read_tokens=_tokens(usage.get("cache_read_input_tokens")),
        cost_usd=_dollars(obj.get("total_cost_usd")),
        source="claude",
    )


def usage_from_claude_json(text: str) -> Usage | None:
    """The last ``{"type": "result", ...}`` object Claude Code printed, from
    ``--output-format json`` (one object, or with ``--verbose`` an array of messages) or
    ``stream-json`` (one object per line)."""
    if not isinstance(text, str) or len(text) > REPORT_MAX_CHARS:
        return None
    whole = _json(text)
    objects = whole if isinstance(whole, list) else [whole]
    for obj in reversed(objects):
        if (found := _claude_result(obj)) is not None:
            return found
    for line in reversed(text.splitlines()):
        if len(line) > JSON_LINE_MAX_CHARS or '"result"' not in line:
            continue
        if (found := _claude_result(_json(line.strip()))) is not None:
            return found
    return None


# aider (Aider-AI/aider, aider/coders/base_coder.py, calculate_and_show_tokens_and_cost):
#   Tokens: 4.5k sent, 2.3k cache write, 1.2k cache hit, 345 received.
#   Cost: $0.0021 message, $0.0150 session.
# "sent" includes the cache writes; the cost line follows on the same or the next line.
# Older releases print "1,234 sent" and "$0.01 request".
_AMOUNT = r"(\d{1,12}(?:,\d{3})*(?:\.\d{1,6})?[kKmM]?)"
_AIDER_TOKENS = re.compile(
    rf"Tokens:\s*{_AMOUNT} sent(?:, {_AMOUNT} cache write)?(?:, {_AMOUNT} cache hit)?"
    rf", {_AMOUNT} received"
)
_AIDER_COST = re.compile(
    r"Cost:\s*\$(\d{1,9}(?:\.\d{1,12})?) (?:message|request)"
    r"(?:,\s*\$(\d{1,9}(?:\.\d{1,12})?) session)?"
)


def _amount(text: str | None) -> int:
    if not text:
        return 0
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1].lower(), 1)
    number = float(text.rstrip("kKmM").replace(",", "")) * scale
    return _tokens(round(number))


def usage_from_aider(text: str) -> Usage | None:
    """aider's per-message reports summed; the cost is the last "session" figure, else
    the sum of the message figures. Token counts are as rounded as aider prints them."""
    if not isinstance(text, str):
        return None
    text = text[-REPORT_MAX_CHARS:]
    sent = write = hit = received = 0
    found = False
    for match in _AIDER_TOKENS.finditer(text):
        found = True
        sent += _amount(match[1])
        write += _amount(match[2])
        hit += _amount(match[3])
        received += _amount(match[4])
    costs = _AIDER_COST.findall(text)
    if not found and not costs:
        return None
    sessions = [float(session) for _, session in costs if session]
    cost = sessions[-1] if sessions else (sum(float(m) for m, _ in costs) if costs else None)
    return Usage(
        input_tokens=max(0, sent - write),
        output_tokens=received,
        cache_creation_tokens=write,
        cache_read_tokens=hit,
        cost_usd=_dollars(cost),
        source="aider",
    )


def usage_from_codex_jsonl(text: str) -> Usage | None:
    """``codex exec --json`` usage summed over its ``turn.completed`` events.

    Shape matched (openai/codex ``codex-rs/exec/src/exec_events.rs``, commit 08a1f30c):
    ``{"type": "turn.completed", "usage": {"input_tokens", "cached_input_tokens",
    "output_tokens"}}``. OpenAI counts cached input inside ``input_tokens``: the uncached
    rest is our ``input_tokens``, the cached part ``cache_read_tokens``. Codex reports no
    cost.
    """
    if not isinstance(text, str):
        return None
    fresh = cached = output = turns = 0
    for line in text[-REPORT_MAX_CHARS:].splitlines():
        if len(line) > JSON_LINE_MAX_CHARS or '"turn.completed"' not in line:
            continue
        event = _json(line.strip())
        if not isinstance(event, dict) or event.get("type") != "turn.completed":
            continue
        usage = event.get("usage")
        if not isinstance(usage, dict):
            continue
        turns += 1
        total_in = _tokens(usage.get("input_tokens"))
        hit = min(_tokens(usage.get("cached_input_tokens")), total_in)
        fresh, cached = fresh + total_in - hit, cached + hit
        output += _tokens(usage.get("output_tokens"))
    if not turns:
        return None
    return Usage(fresh, output, 0, cached, cost_usd=None, source="codex")


def usage_resolved(usage: Usage, model: str) -> Usage:
    """``usage`` with a cost: the CLI's own when it reported one, else the price table's
    (``source`` gains "+price_table"); unchanged when the model's price is unknown."""
    if usage.cost_usd is not None:
        return usage
    cost, known = cost_from_tokens(
        model,
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_creation_tokens,
        usage.cache_read_tokens,
    )
    if not known:
        return usage
    return replace(usage, cost_usd=cost, source=f"{usage.source}+price_table")
