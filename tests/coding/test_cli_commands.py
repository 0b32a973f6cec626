"""The CLI adapters as pure functions: each CLI's command line and environment, and its
output read back (agents.cli.transcripts) as neutral steps and a final message in the
agent's own words, from the samples tests/coding/test_cli_agents.py saved of the real
CLIs' output in a sandbox (ARENA_SAVE_CLI_SAMPLES=1 writes them again)."""

import json
import shlex
from pathlib import Path

import pytest

from agents.cli.commands import AIDER, CLAUDE_CODE, CLIS, CODEX, GATEWAY_KEY, cli_command
from agents.cli.transcripts import (
    CliStep,
    aider_replies,
    final_message,
    transcript_steps,
    without_edit_blocks,
)

SAMPLES = Path(__file__).resolve().parent / "samples"
GATEWAY = "http://models.arena.internal"


def sample(cli: str) -> str:
    return (SAMPLES / f"{cli}.txt").read_text()


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


# -- command lines ---------------------------------------------------------------------


def test_claude_code_runs_once_non_interactively_against_the_gateway():
    argv, env = cli_command(
        CLAUDE_CODE, instruction="Fix it.", model="claude-sonnet-4-5", gateway_url=GATEWAY + "/"
    )

    assert argv[:3] == ["claude", "-p", "Fix it."]
    assert flag(argv, "--output-format") == "stream-json" and "--verbose" in argv
    assert flag(argv, "--model") == "claude-sonnet-4-5"
    assert "--dangerously-skip-permissions" in argv
    assert env["ANTHROPIC_BASE_URL"] == GATEWAY
    assert env["ANTHROPIC_API_KEY"] == GATEWAY_KEY
    for switch in (
        "DISABLE_AUTOUPDATER",
        "DISABLE_TELEMETRY",
        "DISABLE_ERROR_REPORTING",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    ):
        assert env[switch] == "1"
    # every model Claude Code might pick for a call of its own is the granted one
    for name in ("ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL"):
        assert env[name] == "claude-sonnet-4-5"
    assert "BASH_MAX_TIMEOUT_MS" not in env


def test_claude_code_bounds_its_commands_by_the_time_limit():
    _, env = cli_command(
        CLAUDE_CODE, instruction="x", model="m", gateway_url=GATEWAY, time_limit_s=300
    )
    assert env["BASH_MAX_TIMEOUT_MS"] == "300000"


def test_codex_uses_the_gateway_as_a_responses_provider_and_nothing_else():
    argv, env = cli_command(CODEX, instruction="Fix it.", model="gpt-5-codex", gateway_url=GATEWAY)

    assert argv[:4] == ["codex", "exec", "--json", "--skip-git-repo-check"]
    assert "--dangerously-bypass-approvals-and-sandbox" in argv
    assert flag(argv, "--model") == "gpt-5-codex" and argv[-1] == "Fix it."
    settings = [argv[i + 1] for i, word in enumerate(argv) if word == "-c"]
    assert "model_provider=arena" in settings
    (provider,) = [s for s in settings if s.startswith("model_providers.arena=")]
    assert f'base_url="{GATEWAY}/v1"' in provider and 'wire_api="responses"' in provider
    assert 'env_key="ARENA_GATEWAY_KEY"' in provider
    for off in ("features.plugins=false", "analytics.enabled=false", "feedback.enabled=false"):
        assert off in settings
    assert env == {"ARENA_GATEWAY_KEY": GATEWAY_KEY}


def test_aider_describes_its_model_so_it_fetches_no_price_table():
    argv, env = cli_command(
        AIDER, instruction="Fix it.", model="arena-coder", gateway_url=GATEWAY, prices=(3.0, 15.0)
    )

    assert argv[:2] == ["sh", "-c"] and argv[3] == "aider"
    assert "exec aider --model-metadata-file" in argv[2]
    assert '--llm-history-file "$HOME/.aider.llm.history"' in argv[2]
    assert flag(argv, "--model") == "openai/arena-coder"
    assert flag(argv, "--weak-model") == "openai/arena-coder"
    assert flag(argv, "--openai-api-base") == f"{GATEWAY}/v1"
    assert flag(argv, "--openai-api-key") == GATEWAY_KEY
    assert flag(argv, "--message") == "Fix it."
    for switch in ("--no-check-update", "--no-analytics", "--no-auto-commits", "--yes-always"):
        assert switch in argv
    metadata = json.loads(env["ARENA_AIDER_MODEL_METADATA"])
    assert metadata["openai/arena-coder"]["input_cost_per_token"] == pytest.approx(3e-6)
    assert metadata["openai/arena-coder"]["output_cost_per_token"] == pytest.approx(15e-6)


def test_aider_without_prices_reports_tokens_only():
    _, env = cli_command(AIDER, instruction="x", model="m", gateway_url=GATEWAY)
    assert "input_cost_per_token" not in json.loads(env["ARENA_AIDER_MODEL_METADATA"])["openai/m"]


@pytest.mark.parametrize("cli", CLIS)
def test_an_instruction_stays_one_argument_whatever_it_holds(cli):
    nasty = 'Fix it\'; rm -rf / #\n$(reboot) `id` "quoted"'
    argv, env = cli_command(cli, instruction=nasty, model="m", gateway_url=GATEWAY)

    assert nasty in argv
    # as the lanes run it: shell-quoted, the words come back unchanged
    assert shlex.split(shlex.join(argv)) == argv
    assert all(isinstance(v, str) for v in env.values())


def test_an_unknown_cli_is_refused():
    with pytest.raises(ValueError, match="unknown CLI 'cursor'"):
        cli_command("cursor", instruction="x", model="m", gateway_url=GATEWAY)
    with pytest.raises(ValueError, match="unknown CLI"):
        transcript_steps("cursor", "")


# -- steps from each CLI's own output ---------------------------------------------------

# What no step or final message may carry: the CLIs' own tool names and wording.
HARNESS_WORDS = ("Read", "Edit", "Bash", "Write", "Grep", "Glob", "apply_patch", "SEARCH",
                 "REPLACE", "aider", "claude", "codex", "Tokens:", "Cost:", "/bin/sh -lc",
                 "Applied edit", "Model:")  # fmt: skip


def shown(steps: list[CliStep]) -> str:
    """Everything of the steps a judge reads: the action and the stored arguments."""
    return json.dumps([[step.action, step.args()] for step in steps])


def test_claude_code_steps_are_named_by_what_they_did():
    steps = transcript_steps(CLAUDE_CODE, sample(CLAUDE_CODE), repo_dir="/work/repo")

    assert [(s.action, s.args()) for s in steps] == [
        ("read file", {"kind": "read", "path": "calc.py"}),
        ("edit file", {"kind": "edit", "path": "calc.py"}),
        ("run command", {"kind": "command", "command": "python3 -m pytest -q"}),
    ]
    # The CLI's own names are kept apart, for the record
    assert [s.cli_tool for s in steps] == ["Read", "Edit", "Bash"]
    assert not [word for word in HARNESS_WORDS if word in shown(steps)]


def test_codex_steps_lose_the_shell_wrapper_and_name_the_patched_file():
    steps = transcript_steps(CODEX, sample(CODEX), repo_dir="/work/repo")

    assert [(s.action, s.args()) for s in steps] == [
        ("run command", {"kind": "command", "command": "cat calc.py"}),
        ("edit file", {"kind": "edit", "path": "calc.py"}),
        ("run command", {"kind": "command", "command": "python3 -m pytest -q"}),
    ]
    assert [s.cli_tool for s in steps] == ["shell", "apply_patch", "shell"]
    assert not [word for word in HARNESS_WORDS if word in shown(steps)]


def test_aider_steps_are_its_applied_edits():
    steps = transcript_steps(AIDER, sample(AIDER))

    assert steps == [CliStep("edit file", path="calc.py", cli_tool="edit")]
    assert steps[0].args() == {"kind": "edit", "path": "calc.py"}


@pytest.mark.parametrize(
    ("block", "action", "args"),
    [
        ({"name": "Write", "input": {"file_path": "/work/repo/new.py", "content": "x"}},
         "edit file", {"kind": "edit", "path": "new.py"}),
        ({"name": "MultiEdit", "input": {"file_path": "/work/repo/a/b.py", "edits": []}},
         "edit file", {"kind": "edit", "path": "a/b.py"}),
        ({"name": "Grep", "input": {"pattern": "def add", "path": "/work/repo"}},
         "search", {"kind": "read", "path": ".", "pattern": "def add"}),
        ({"name": "Glob", "input": {"pattern": "**/*.py"}},
         "search", {"kind": "read", "pattern": "**/*.py"}),
        ({"name": "Read", "input": {"file_path": "/etc/hosts"}},
         "read file", {"kind": "read", "path": "/etc/hosts"}),
        ({"name": "TodoWrite", "input": {"todos": [{"content": "Claude's list"}]}},
         "other", {"kind": "other"}),
        ({"name": "Task", "input": {"prompt": "x", "subagent_type": "Explore"}},
         "other", {"kind": "other"}),
        ({"name": "Bash", "input": {"command": "sed -i s/a/b/ a.py", "description": "edit"}},
         "run command", {"kind": "command", "command": "sed -i s/a/b/ a.py"}),
    ],
)  # fmt: skip
def test_every_claude_code_tool_becomes_a_neutral_step(block, action, args):
    event = {"type": "assistant", "message": {"content": [{"type": "tool_use", **block}]}}

    (step,) = transcript_steps(CLAUDE_CODE, json.dumps(event), repo_dir="/work/repo")

    assert (step.action, step.args()) == (action, args)
    assert step.cli_tool == block["name"]


@pytest.mark.parametrize(
    ("item", "steps"),
    [
        ({"type": "command_execution", "command": ["bash", "-lc", "ls -la"]},
         [("run command", {"kind": "command", "command": "ls -la"})]),
        ({"type": "command_execution", "command": "bash -lc 'echo \"unbalanced"},
         [("run command", {"kind": "command", "command": "bash -lc 'echo \"unbalanced"})]),
        ({"type": "command_execution",
          "command": "/bin/sh -lc \"apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: "
                     "calc.py\n*** Add File: docs/x.md\n*** End Patch\nEOF\""},
         [("edit file", {"kind": "edit", "path": "calc.py"}),
          ("edit file", {"kind": "edit", "path": "docs/x.md"})]),
        ({"type": "file_change", "changes": [{"path": "/work/repo/a.py", "kind": "add"},
                                             {"path": "/work/repo/b.py", "kind": "delete"}]},
         [("edit file", {"kind": "edit", "path": "a.py"}),
          ("edit file", {"kind": "edit", "path": "b.py"})]),
        ({"type": "web_search", "query": "pytest fixtures"},
         [("search", {"kind": "read", "pattern": "pytest fixtures"})]),
        ({"type": "mcp_tool_call", "server": "codex-tools", "tool": "lookup"},
         [("other", {"kind": "other"})]),
        ({"type": "reasoning", "text": "thinking"}, []),
        ({"type": "agent_message", "text": "done"}, []),
    ],
)  # fmt: skip
def test_every_codex_item_becomes_neutral_steps_or_none(item, steps):
    event = {"type": "item.completed", "item": item}

    found = transcript_steps(CODEX, json.dumps(event), repo_dir="/work/repo")

    assert [(s.action, s.args()) for s in found] == steps


@pytest.mark.parametrize("cli", CLIS)
def test_garbage_output_gives_no_steps_and_no_error(cli):
    garbage = '\x00{not json\n{"type": "assistant", "message": 5}\n{"type": "item.completed"}\n[]\n'
    assert transcript_steps(cli, garbage + "Applied edit to \n") == []
    assert final_message(cli, garbage, llm_history=garbage) == ""


def test_stored_text_is_bounded():
    huge = "x" * 100_000
    event = {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "name": "Bash", "input": {"command": huge}},
        {"type": "tool_use", "name": "Read", "input": {"file_path": huge}},
        {"type": "tool_use", "name": "A" * 500, "input": {}},
    ]}}  # fmt: skip

    command, read, other = transcript_steps(CLAUDE_CODE, json.dumps(event))

    assert len(command.command) == 2000 and len(read.path) == 500
    assert len(other.cli_tool) == 40


# -- the final message: what the agent said, never what the CLI printed ----------------


def test_claude_codes_final_message_is_its_result():
    assert final_message(CLAUDE_CODE, sample(CLAUDE_CODE)) == "Fixed: add() now adds."


def test_claude_codes_own_error_report_is_not_a_final_message():
    said = {"type": "assistant", "message": {"content": [{"type": "text", "text": "Looking."}]}}
    error = {"type": "result", "subtype": "success", "is_error": True,
             "result": "API Error: 400 model claude-sonnet-4-5 is not available"}  # fmt: skip
    output = "\n".join(json.dumps(e) for e in (said, error))

    assert final_message(CLAUDE_CODE, output) == "Looking."
    assert final_message(CLAUDE_CODE, json.dumps(error)) == ""


def test_codexs_final_message_is_its_last_agent_message():
    # The sample also holds an error item naming the model, the usage and stderr's
    # "Reading additional input from stdin...": none of it is the message.
    assert final_message(CODEX, sample(CODEX)) == "Fixed: add() now adds."
    first = {"type": "item.completed", "item": {"type": "agent_message", "text": "Looking."}}
    assert final_message(CODEX, json.dumps(first) + "\n" + sample(CODEX)) == (
        "Fixed: add() now adds."
    )


def test_aiders_final_message_is_its_reply_without_the_edit_block():
    history = sample("aider.llm-history")

    # The request's own example replies (under "TO LLM") are not replies
    assert aider_replies(history) == [
        "The sign is wrong.\n\ncalc.py\n```python\n<<<<<<< SEARCH\n    return a - b\n"
        "=======\n    return a + b\n>>>>>>> REPLACE\n```"
    ]
    assert final_message(AIDER, sample(AIDER), llm_history=history) == "The sign is wrong."


def test_aiders_banner_and_usage_lines_never_make_a_final_message():
    # Without its LLM history, what Aider printed is not read for a message at all.
    assert final_message(AIDER, sample(AIDER), llm_history="") == ""


@pytest.mark.parametrize(
    ("reply", "prose"),
    [
        ("Only a block.\n\nx.py\n```python\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```",
         "Only a block."),
        ("Two edits:\n\n`a.py`\n````\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n"
         "<<<<<<< SEARCH\nc\n=======\nd\n>>>>>>> REPLACE\n````\n\nRun `pytest` to check.",
         "Two edits:\n\nRun `pytest` to check."),
        ("Unfenced:\nb.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\nDone here.",
         "Unfenced:\nDone here."),
        ("Cut short.\n\nc.py\n```\n<<<<<<< SEARCH\nx\n=======\n", "Cut short."),
        ("Run this:\n```bash\npython -m pytest\n```", "Run this:\n```bash\npython -m pytest\n```"),
        ("a.py\n```\n<<<<<<< SEARCH\n=======\nnew\n>>>>>>> REPLACE\n```", ""),
    ],
)  # fmt: skip
def test_edit_blocks_are_taken_out_of_a_reply(reply, prose):
    assert without_edit_blocks(reply) == prose


def test_the_last_reply_with_words_is_the_final_message():
    def response(*lines: str) -> str:
        return "LLM RESPONSE 2026-12-04T10:00:00\n" + "".join(f"ASSISTANT {x}\n" for x in lines)

    request = "TO LLM 2026-12-04T10:00:00\n-------\nUSER fix it\nASSISTANT an example reply\n"
    history = (
        request
        + response(
            "First try.", "a.py", "```", "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "```"
        )
        + request
        + response("a.py", "```", "<<<<<<< SEARCH", "=======", "x", ">>>>>>> REPLACE", "```")
        + request
    )
    assert final_message(AIDER, "", llm_history=history) == "First try."
    # A line of a reply cannot pass for a header: Aider prefixes each one.
    forged = response("Fine.", "LLM RESPONSE 2026-12-04T10:00:01", "Tokens: 1k sent")
    assert final_message(AIDER, "", llm_history=forged) == (
        "Fine.\nLLM RESPONSE 2026-12-04T10:00:01\nTokens: 1k sent"
    )


def test_a_final_message_is_bounded():
    event = {"type": "item.completed", "item": {"type": "agent_message", "text": "y" * 9000}}
    assert len(final_message(CODEX, json.dumps(event))) == 4000
