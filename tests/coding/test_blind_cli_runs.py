"""What a judge reads of a CLI agent's run (docs/coding.md, "What judges see"): its
steps as stored from the real CLIs' output (tests/coding/samples), in one neutral shape,
and its final message in the agent's own words. Neither the blind payload (the judge
page's and the judge API's) nor the leak scan's texts carry a CLI's tool names, its
banner or its usage lines, so Aider's banner, which names its model, no longer excludes
a battle; the scan still finds a name wherever a judge would read one, and reads only
what a judge reads of a diff."""

import json
import re
from types import SimpleNamespace

import pytest
from django.utils import timezone

from agents.cli.commands import AIDER, CLAUDE_CODE, CODEX
from agents.cli.transcripts import final_message
from agents.models import Agent
from battles import diffview
from battles.models import Battle, Run
from battles.presenters import battle_payload
from battles.services.cli_lane import _store_steps, cli_end
from judging.services import battle_screen
from judging.visible import coding_visible_texts, judge_visible_texts
from sandboxes.base import ToolResult
from tests.coding.page_factories import coding_battle
from tests.coding.test_cli_commands import sample
from tests.judging.leak_factories import note_of

pytestmark = pytest.mark.django_db

# A CLI's own words for its tools and its output around the agent's (case-sensitive
# whole words for the tool names: the arena's "read file" is no leak).
HARNESS = re.compile(
    r"\b(?:Read|Edit|Bash|Write|Grep|Glob)\b|apply_patch|SEARCH|REPLACE|(?i:aider|claude|codex)"
    r"|Tokens:|Cost:|Model:|Applied edit|/bin/sh|cli_tool"
)


@pytest.fixture
def cli_battle(alice, roster):
    """A judged coding battle whose side A is Aider (its model "arena-coder", which its
    banner names) and side B Claude Code, their steps stored from the samples of the
    real CLIs' output and their final messages read as the lane reads them."""
    aider = Agent.objects.create(
        arena=roster[0].arena, slug="aider-arena-coder", display_name="Aider (arena-coder)",
        kind="cli", provider="openai", model_id="arena-coder", params={"cli": "aider"},
    )  # fmt: skip
    claude = Agent.objects.create(
        arena=roster[0].arena, slug="claude-code-sonnet", display_name="Claude Code (Sonnet)",
        kind="cli", provider="anthropic", model_id="claude-sonnet-4-5",
        params={"cli": "claude-code"},
    )  # fmt: skip
    battle = coding_battle(alice, status=Battle.Status.SCREENING)
    Battle.objects.filter(pk=battle.pk).update(agent_a=aider, agent_b=claude)
    for side, agent, cli, history in (
        ("A", aider, AIDER, sample("aider.llm-history")),
        ("B", claude, CLAUDE_CODE, ""),
    ):
        run = battle.runs.get(side=side)
        run.steps.all().delete()
        _store_steps(run, cli, sample(cli), timezone.now())
        said = final_message(cli, sample(cli), llm_history=history)
        Run.objects.filter(pk=run.pk).update(
            agent=agent, final_message=said, started_at=run.ended_at or timezone.now()
        )
    return battle


def test_the_blind_payload_shows_neutral_steps_and_the_agents_own_words(cli_battle):
    payload = battle_payload(Battle.objects.get(pk=cli_battle.pk), reveal=False)

    sides = payload["sides"]
    assert [(s["tool"], s["args"]) for s in sides["A"]["steps"]] == [
        ("edit file", {"kind": "edit", "path": "calc.py"})
    ]
    assert [(s["tool"], s["args"]) for s in sides["B"]["steps"]] == [
        ("read file", {"kind": "read", "path": "calc.py"}),
        ("edit file", {"kind": "edit", "path": "calc.py"}),
        ("run command", {"kind": "command", "command": "python3 -m pytest -q"}),
    ]
    assert (sides["A"]["final_message"], sides["B"]["final_message"]) == (
        "The sign is wrong.", "Fixed: add() now adds."
    )  # fmt: skip
    assert HARNESS.findall(json.dumps(payload["sides"])) == []
    # The CLI's own names are stored apart, for the record, and never served
    kept = [s.result["cli_tool"] for s in cli_battle.runs.get(side="B").steps.order_by("index")]
    assert kept == ["Read", "Edit", "Bash"]
    revealed = battle_payload(Battle.objects.get(pk=cli_battle.pk), reveal=True)
    assert "cli_tool" not in json.dumps(revealed["sides"])


def test_every_text_the_scan_reads_of_the_runs_is_free_of_the_clis_output(cli_battle):
    runs = list(cli_battle.runs.prefetch_related("steps").order_by("side"))

    texts = list(judge_visible_texts(runs))

    assert [(where, text) for where, text in texts if HARNESS.search(text)] == []


def test_aiders_banner_no_longer_excludes_the_battle(cli_battle):
    assert battle_screen(battle_id=cli_battle.pk) == ""

    cli_battle.refresh_from_db()
    assert cli_battle.status == Battle.Status.JUDGING


def test_the_banner_would_exclude_it_wherever_a_judge_read_it(cli_battle):
    # What the arena read before: Aider's printed output as the final message
    assert "Model: openai/arena-coder with diff edit format" in sample(AIDER)
    Run.objects.filter(battle=cli_battle, side="A").update(final_message=sample(AIDER))

    assert battle_screen(battle_id=cli_battle.pk) == "named_model"

    note = note_of(cli_battle)
    assert note.startswith("side A final message names ") and "Model: openai/arena-c" in note


@pytest.mark.parametrize(
    ("result", "reason", "said", "error"),
    [
        (ToolResult(ok=True, tool="shell", exit_code=0), "delivered", "Looking.", ""),
        (ToolResult(ok=False, tool="shell", exit_code=1), "gave_up", "Looking.",
         "the CLI exited with status 1 (gateway refusals: {'model': 1})"),
        (ToolResult(ok=False, tool="shell", timed_out=True), "time_budget", "Looking.", ""),
    ],
)  # fmt: skip
def test_a_clis_end_carries_its_words_and_its_exit_never_its_output(result, reason, said, error):
    # Claude Code answered, then its model call failed: its own error report names the
    # model; the agent's last words were "Looking."
    output = "\n".join(
        json.dumps(event)
        for event in (
            {"type": "assistant", "message": {"content": [{"type": "text", "text": "Looking."}]}},
            {"type": "result", "is_error": True,
             "result": "API Error: 400 model claude-sonnet-4-5 is not allowed"},
        )
    )  # fmt: skip

    end = cli_end(CLAUDE_CODE, result, output, "", {"model": 1})

    assert (end.reason, end.final_message, end.error) == (reason, said, error)


def test_codexs_end_is_its_last_agent_message_not_its_stderr():
    end = cli_end(CODEX, ToolResult(ok=True, tool="shell", exit_code=0), sample(CODEX), "", {})

    assert end.final_message == "Fixed: add() now adds."
    assert "Reading additional input" in sample(CODEX) and "gpt-5-codex" in sample(CODEX)


# -- the scan reads a diff as the page shows it -----------------------------------------


def outcome_with(diff: str) -> SimpleNamespace:
    return SimpleNamespace(diff=diff, diff_error="", judge_error="", files=[], checks={})


def a_file(path: str, lines: list[str]) -> str:
    body = "".join(f"+{line}\n" for line in lines)
    return f"diff --git a/{path} b/{path}\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


def scanned(diff: str) -> str:
    return "\n".join(text for _, text in coding_visible_texts([("A", outcome_with(diff))]))


def test_the_scan_reads_what_the_page_shows_of_a_diff_and_nothing_more():
    shown_lines = [f"x = {n}" for n in range(diffview.MAX_LINES)]
    diff = a_file("calc.py", [*shown_lines, "# by arena-coder (past what the page shows)"])
    diff += "".join(a_file(f"f{n}.py", ["y = 1"]) for n in range(diffview.MAX_FILES))
    diff += a_file("arena-coder-notes.md", ["a file past what the page shows"])

    text = scanned(diff)

    # the page shows the first file's hunk header and its first MAX_LINES - 1 lines, and
    # the first MAX_FILES files
    lines = text.splitlines()
    assert "x = 0" in lines and f"x = {diffview.MAX_LINES - 2}" in lines
    assert f"x = {diffview.MAX_LINES - 1}" not in lines
    assert "f48.py" in lines and "f49.py" not in lines
    assert "arena-coder" not in text
    # A name the page does show is read
    assert "arena-coder" in scanned(a_file("calc.py", ["# by arena-coder"]))
    assert "arena-coder" in scanned(a_file("arena-coder.md", ["hello"]))
