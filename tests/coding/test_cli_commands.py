"""The CLI adapters as pure functions: each CLI's command line and environment, and its
output read back as steps, from the samples tests/coding/test_cli_agents.py saved of the
real CLIs' output in a sandbox (ARENA_SAVE_CLI_SAMPLES=1 writes them again)."""

import json
import shlex
from pathlib import Path

import pytest

from agents.cli.commands import (
    AIDER,
    CLAUDE_CODE,
    CLIS,
    CODEX,
    GATEWAY_KEY,
    cli_command,
    transcript_steps,
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


# -- steps from each CLI's own output --------------------------------------------------


def test_claude_code_steps_are_its_tool_uses():
    steps = transcript_steps(CLAUDE_CODE, sample(CLAUDE_CODE), repo_dir="/work/repo")

    assert [(s["tool"], s["path"], s["is_edit"], s["is_read"]) for s in steps] == [
        ("Read", "calc.py", False, True),
        ("Edit", "calc.py", True, False),
        ("Bash", None, False, False),
    ]
    assert steps[2]["summary"] == "python3 -m pytest -q"


def test_codex_steps_are_its_commands_and_patched_files():
    steps = transcript_steps(CODEX, sample(CODEX))

    assert [(s["tool"], s["path"], s["is_edit"], s["is_read"]) for s in steps] == [
        ("shell", None, False, True),
        ("apply_patch", "/work/repo/calc.py", True, False),
        ("shell", None, False, False),
    ]
    assert steps[0]["summary"] == "/bin/sh -lc 'cat calc.py'"


def test_aider_steps_are_its_applied_edits():
    steps = transcript_steps(AIDER, sample(AIDER))

    assert steps == [
        {
            "tool": "edit",
            "path": "calc.py",
            "is_edit": True,
            "is_read": False,
            "summary": "Applied edit to calc.py",
        }
    ]


@pytest.mark.parametrize("cli", CLIS)
def test_garbage_output_gives_no_steps_and_no_error(cli):
    garbage = '\x00{not json\n{"type": "assistant", "message": 5}\n{"type": "item.completed"}\n[]\n'
    assert transcript_steps(cli, garbage + "Applied edit to \n") == []


def test_a_bash_command_that_only_reads_is_a_read():
    line = json.dumps(
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "tool_use", "name": "Bash", "input": {"command": "sed -n 1,5p a.py"}},
                    {
                        "type": "tool_use",
                        "name": "Bash",
                        "input": {"command": "sed -i s/a/b/ a.py"},
                    },
                    {"type": "tool_use", "name": "Bash", "input": {"command": "cat a > b"}},
                ]
            },
        }
    )
    steps = transcript_steps(CLAUDE_CODE, line)
    assert [s["is_read"] for s in steps] == [True, False, False]
