"""Trajectory, pass@k and usage metrics (coding.metrics), as tables."""

import json
import math

import pytest

from coding.metrics import (
    PRICES,
    REPORT_MAX_CHARS,
    Directness,
    ToolUse,
    Usage,
    cost_from_tokens,
    directness,
    pass_at_k,
    usage_from_aider,
    usage_from_claude_json,
    usage_from_codex_jsonl,
    usage_resolved,
)


def read(path="a.py", tool="Read") -> ToolUse:
    return ToolUse(tool=tool, path=path, is_edit=False, is_read=True)


def edit(path="a.py", tool="Edit") -> ToolUse:
    return ToolUse(tool=tool, path=path, is_edit=True, is_read=False)


def run(tool="Bash") -> ToolUse:
    return ToolUse(tool=tool, path=None, is_edit=False, is_read=False)


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([], Directness(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
        ([edit()], Directness(1.0, 1.0, 0.0, 0.0, 0.0, 0.6)),
        # eff 2/5, first edit at 2 of 5; re-reading a.py after editing it is no repeat
        (
            [read("a"), read("b"), edit("a"), read("a"), edit("b")],
            Directness(0.4, 0.6, 0.0, 0.0, 0.0, 0.29),
        ),
        # two of four reads re-read a; the read after the edit does not count
        (
            [read("a"), read("a"), read("a"), edit("a"), read("a")],
            Directness(0.2, 0.4, 0.5, 0.0, 0.0, 0.07),
        ),
        # Grep/Read three times back to back is a loop: 6 of 8 steps
        (
            [
                edit("x"),
                run("Grep"),
                read("p1"),
                run("Grep"),
                read("p2"),
                run("Grep"),
                read("p3"),
                edit("y"),
            ],
            Directness(0.4, 1.0, 0.0, 0.75, 0.0, 0.315),
        ),
        # a cycle of three tools, three times, then another tool: 9 of 10
        (
            [run("A"), run("B"), run("C")] * 3 + [edit("z")],
            Directness(1.0, 0.1, 0.0, 0.9, 0.0, 0.285),
        ),
        # only twice: no loop
        ([run("A"), run("B")] * 2 + [edit("z")], Directness(1.0, 0.2, 0.0, 0.0, 0.0, 0.4)),
        # a run of one tool is not a loop
        ([run("Bash")] * 9 + [edit("z")], Directness(1.0, 0.1, 0.0, 0.0, 0.0, 0.375)),
        # five reads in a row are not a stall, six are
        (
            [read(f"f{i}") for i in range(5)] + [edit("f0")],
            Directness(0.1667, 0.1667, 0.0, 0.0, 0.0, 0.1),
        ),
        (
            [read(f"f{i}") for i in range(6)] + [edit("f0")],
            Directness(0.1429, 0.1429, 0.0, 0.0, 0.8571, 0.0),
        ),
        # a shell step breaks a read run
        (
            [read(f"f{i}") for i in range(3)] + [run()] + [read(f"g{i}") for i in range(3)],
            Directness(0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        ),
        # never edits: alternating Bash/Read is a loop, reading x again and again repeats
        ([run(), read("x")] * 3, Directness(0.0, 0.0, 0.6667, 1.0, 0.0, 0.0)),
        # a step flagged both edit and read is an edit
        (
            [ToolUse("Write", "a", is_edit=True, is_read=True), read("a")],
            Directness(0.5, 1.0, 0.0, 0.0, 0.0, 0.425),
        ),
    ],
)
def test_directness(steps, expected):
    assert directness(steps) == expected


def test_directness_of_a_long_trajectory_is_linear():
    steps = ([read(f"f{i % 50}") for i in range(8)] + [edit("f1"), run()]) * 10_000
    result = directness(steps)
    assert 0.0 <= result.score <= 1.0
    assert result.trajectory_efficiency == 0.1111  # 1 edit per 9 edits and reads


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (10, 0, 1, 0.0),
        (10, 10, 1, 1.0),
        (10, 3, 1, 0.3),
        (10, 3, 2, 1 - 21 / 45),
        (5, 2, 5, 1.0),  # fewer failures than draws: a draw always holds a success
        (5, 2, 4, 1.0),
        (5, 2, 3, 0.9),  # 1 − C(3, 3) / C(5, 3)
        (5, 2, 2, 1 - 3 / 10),
        (200, 10, 10, 1 - math.comb(190, 10) / math.comb(200, 10)),
        (1_000_000, 1, 1, 1e-6),
    ],
)
def test_pass_at_k(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize(("n", "c", "k"), [(2, 1, 3), (5, 6, 1), (5, 1, 0), (5, -1, 1)])
def test_pass_at_k_is_undefined_over_too_few_runs(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_price_table_is_dated_and_complete():
    assert PRICES["as_of"] == "2026-12-01"
    assert set(PRICES["models"]) == {
        "claude-sonnet-4-5",
        "claude-opus-4-1",
        "claude-haiku-4-5",
        "gpt-5",
        "gpt-5-mini",
        "gpt-4.1",
        "o4-mini",
    }


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("claude-sonnet-4-5", 1_000_000, 100_000, 200_000, 2_000_000), (5.85, True)),
        (("claude-sonnet-4-5-20250929", 1000, 0), (0.003, True)),
        (("anthropic/Claude-Opus-4-1", 0, 1_000_000), (75.0, True)),
        (("gpt-5-2025-08-07", 0, 1_000_000, 0, 1_000_000), (10.125, True)),
        (("o4-mini", 1_000_000, 0), (1.1, True)),
        (("mystery-model", 10, 10), (0.0, False)),
        ((None, 10, 10), (0.0, False)),
        (("gpt-4.1", -5, math.nan, math.inf, 1_000_000), (0.5, True)),  # garbage counts as 0
    ],
)
def test_cost_from_tokens(args, expected):
    cost, known = cost_from_tokens(*args)
    assert (round(cost, 10), known) == expected


CLAUDE_RESULT = {
    "type": "result",
    "subtype": "success",
    "is_error": False,
    "result": "Done.",
    "total_cost_usd": 0.0421,
    "usage": {
        "input_tokens": 12,
        "output_tokens": 345,
        "cache_creation_input_tokens": 1000,
        "cache_read_input_tokens": 20000,
    },
}
CLAUDE_USAGE = Usage(12, 345, 1000, 20000, 0.0421, "claude")


def stream(*objects) -> str:
    return "\n".join(json.dumps(obj) for obj in objects) + "\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (json.dumps(CLAUDE_RESULT), CLAUDE_USAGE),
        (json.dumps([{"type": "system"}, {"type": "assistant"}, CLAUDE_RESULT]), CLAUDE_USAGE),
        (
            stream(
                {"type": "system", "subtype": "init"},
                {**CLAUDE_RESULT, "total_cost_usd": 0.01},
                {"type": "assistant", "message": {"content": "the result"}},
                CLAUDE_RESULT,
            ),
            CLAUDE_USAGE,
        ),
        ("garbage before\n" + json.dumps(CLAUDE_RESULT) + "\n", CLAUDE_USAGE),
        (
            '{"type":"result","usage":"x","total_cost_usd":"free"}',
            Usage(0, 0, 0, 0, None, "claude"),
        ),
        (
            '{"type":"result","total_cost_usd":NaN,'
            '"usage":{"input_tokens":-5,"output_tokens":1e30,"cache_read_input_tokens":true}}',
            Usage(0, 0, 0, 0, None, "claude"),
        ),
        ('{"type":"assistant"}', None),
        ("[]", None),
        ("not json", None),
        ("", None),
        ("[" * 100_000 + "]" * 100_000, None),
        ('{"type":"result"' + " " * REPORT_MAX_CHARS + "}", None),
        (None, None),
    ],
)
def test_usage_from_claude_json(text, expected):
    assert usage_from_claude_json(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Tokens: 2.1k sent, 345 received. Cost: $0.0021 message, $0.0150 session.\n"
            "Applied edit to a.py\n"
            "Tokens: 12k sent, 1.2k received. Cost: $0.03 message, $0.045 session.\n",
            Usage(14_100, 1_545, 0, 0, 0.045, "aider"),
        ),
        (
            "Tokens: 4.5k sent, 2.3k cache write, 1.2k cache hit, 345 received.\n"
            "Cost: $0.02 message, $0.02 session.",
            Usage(2_200, 345, 2_300, 1_200, 0.02, "aider"),
        ),
        (
            "Tokens: 1,234 sent, 56 received. Cost: $0.01 request, $0.01 session.",
            Usage(1_234, 56, 0, 0, 0.01, "aider"),
        ),
        ("Tokens: 1.2M sent, 3 received.", Usage(1_200_000, 3, 0, 0, None, "aider")),
        ("Cost: $0.25 message\nCost: $0.5 message", Usage(0, 0, 0, 0, 0.75, "aider")),
        ("Tokens: 9999999999999M sent, 1 received.", None),
        ("Tokens: lots sent", None),
        ("", None),
        (None, None),
    ],
)
def test_usage_from_aider(text, expected):
    assert usage_from_aider(text) == expected


def test_usage_from_aider_in_ten_megabytes_of_noise():
    text = "Tokens: 1k sent, 1 received.\n" * 1000 + "z" * 10_000_000
    assert usage_from_aider(text) == Usage(1_000_000, 1_000, 0, 0, None, "aider")


CODEX = stream(
    {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": "hi"}},
    {
        "type": "turn.completed",
        "usage": {"input_tokens": 26549, "cached_input_tokens": 22272, "output_tokens": 1590},
    },
    {"type": "turn.started"},
    {
        "type": "turn.completed",
        "usage": {"input_tokens": 6245, "cached_input_tokens": 5376, "output_tokens": 407},
    },
)
CODEX_USAGE = Usage(5_146, 1_997, 0, 27_648, None, "codex")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (CODEX, CODEX_USAGE),
        (
            "noise\n{not json\n" + CODEX + '{"type":"turn.failed","error":{"message":"x"}}\n',
            CODEX_USAGE,
        ),
        (
            stream(
                {"type": "turn.completed", "usage": {"input_tokens": 10, "cached_input_tokens": 50}}
            ),
            Usage(0, 0, 0, 10, None, "codex"),  # cached beyond the input is capped
        ),
        (stream({"type": "turn.completed", "usage": "none"}), None),
        ('{"type":"item.completed","text":"turn.completed"}', None),
        ("", None),
        (None, None),
    ],
)
def test_usage_from_codex_jsonl(text, expected):
    assert usage_from_codex_jsonl(text) == expected


def test_usage_resolved_prices_what_the_cli_did_not():
    resolved = usage_resolved(CODEX_USAGE, "gpt-5")
    # (5146 × 1.25 + 1997 × 10 + 27648 × 0.125) / 1e6
    assert resolved.cost_usd == pytest.approx(0.0298585, abs=1e-12)
    assert resolved.source == "codex+price_table"
    assert (resolved.input_tokens, resolved.cache_read_tokens) == (5_146, 27_648)


@pytest.mark.parametrize(
    ("usage", "model"),
    [
        (CLAUDE_USAGE, "claude-opus-4-1"),  # the CLI's own cost stands
        (CODEX_USAGE, "an-unpriced-model"),  # unknown: the cost stays unmeasured
    ],
)
def test_usage_resolved_leaves_the_rest_unchanged(usage, model):
    assert usage_resolved(usage, model) == usage
