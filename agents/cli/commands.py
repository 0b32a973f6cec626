"""How the arena runs each CLI coding agent inside a sandbox, and how it reads what the
CLI printed. Pure: no Django, no I/O.

:func:`cli_command` gives the argv and environment of one non-interactive run: the
instruction, the model the run's grant names, and the arena's model gateway as the CLI's
only API (``gateway_url``, e.g. ``http://models.arena.internal``, reached through the
sandbox's egress proxy: ``http_proxy`` is already set inside). The key a CLI is given is
a placeholder (:data:`GATEWAY_KEY`): the gateway drops it and adds the real one, so no
provider key ever enters a sandbox. Every request a CLI would make besides the model's
(telemetry, error reports, update and version checks, feature flags, plugin and model
catalogues, price tables) is switched off; the tests (tests/coding/test_cli_agents.py)
run each CLI for real in a sandbox and see no other request leave.

The CLIs are the toolchain's (scripts/toolchain.sh), on the sandbox's PATH as
``claude``, ``codex`` and ``aider``. The caller runs the command in the repository's
directory with stdin closed, and keeps stdout and stderr.

:func:`transcript_steps` turns a CLI's own output into neutral steps, one per tool use:
``{"tool", "path", "is_edit", "is_read", "summary"}``.

- Claude Code: ``--output-format stream-json``, one JSON event a line; each ``tool_use``
  block of an ``assistant`` event is a step. The last line is the ``result`` event
  (``usage`` with cache tokens, ``total_cost_usd``).
- Codex: ``exec --json``, one JSON event a line; each ``item.completed`` of a command
  (``command_execution``), a patch (``file_change``: one step per file), an MCP tool call
  or a web search is a step. ``turn.completed`` carries the usage.
- Aider: plain text; each ``Applied edit to <file>`` line is an edit step (Aider edits
  from the reply's SEARCH/REPLACE blocks, not through tool calls). ``Tokens: … sent, …
  received.`` lines (with ``Cost: …`` when it knows the model's prices) carry the usage.
"""

import json
import shlex
from collections.abc import Iterator
from typing import Any

CLAUDE_CODE = "claude-code"
CODEX = "codex"
AIDER = "aider"
CLIS = (CLAUDE_CODE, CODEX, AIDER)
# The API each CLI speaks, so the provider whose key the model gateway adds for it.
CLI_PROVIDERS = {CLAUDE_CODE: "anthropic", CODEX: "openai", AIDER: "openai"}

# What a CLI sends as its provider key: the gateway replaces it. Not a real key's shape.
GATEWAY_KEY = "sk-arena-gateway"

# Claude Code: no request but the model's. The model is pinned for every call it makes
# (background and sub-agent calls included): the gateway answers 400 for any other.
_CLAUDE_ENV = {
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "1",
}
# Codex: the gateway as a provider of its own (Responses API), and everything else off:
# plugin and app catalogues (they sync from github.com and chatgpt.com at start),
# analytics (ab.chatgpt.com), update checks, feedback, model discovery, compressed
# request bodies (the egress proxy relays only bodies with a Content-Length).
_CODEX_CONFIG = (
    "features.plugins=false",
    "features.remote_plugin=false",
    "features.apps=false",
    "features.api_key_model_discovery=false",
    "features.enable_request_compression=false",
    "analytics.enabled=false",
    "feedback.enabled=false",
    "check_for_update_on_startup=false",
)
# Aider: the gateway as an OpenAI-compatible API (litellm's "openai/" models), no update
# or release-notes check, no analytics, no commits (the arena diffs the work tree
# against its checkpoint), no repo map, its history files out of the repository.
_AIDER_FLAGS = (
    "--no-check-update",
    "--no-show-release-notes",
    "--no-analytics",
    "--no-gitignore",
    "--no-auto-commits",
    "--no-dirty-commits",
    "--no-pretty",
    # Streamed, Aider counts tokens itself (an estimate); whole, it reports the usage
    # the API answered, which is what the arena's gateway recorded.
    "--no-stream",
    "--no-fancy-input",
    "--no-detect-urls",
    "--no-suggest-shell-commands",
    "--no-show-model-warnings",
    "--map-tokens",
    "0",
    "--edit-format",
    "diff",
    "--yes-always",
)
# Aider asks raw.githubusercontent.com for litellm's price table unless the model is
# described locally: the launcher writes this description first (prices when known).
_AIDER_LAUNCHER = (
    'meta="$HOME/.aider.model.metadata.json"; '
    'printf %s "$ARENA_AIDER_MODEL_METADATA" > "$meta" && '
    'exec aider --model-metadata-file "$meta" '
    '--chat-history-file "$HOME/.aider.chat.history.md" '
    '--input-history-file "$HOME/.aider.input.history" "$@"'
)
CONTEXT_WINDOW = 200_000
MAX_OUTPUT_TOKENS = 32_000


def cli_command(
    cli: str,
    *,
    instruction: str,
    model: str,
    gateway_url: str,
    time_limit_s: int | None = None,
    prices: tuple[float, float] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The argv and the environment (to add to the sandbox's own) of one run of ``cli``.

    ``gateway_url`` is the gateway's origin, without a path; ``time_limit_s`` bounds the
    CLI's own command and request timeouts (the caller still bounds the whole run);
    ``prices`` are USD per million input and output tokens, for CLIs that report a cost
    only when told the prices (Aider). Raises ``ValueError`` for an unknown CLI."""
    base = gateway_url.rstrip("/")
    if cli == CLAUDE_CODE:
        return _claude_code(instruction, model, base, time_limit_s)
    if cli == CODEX:
        return _codex(instruction, model, base)
    if cli == AIDER:
        return _aider(instruction, model, base, time_limit_s, prices)
    raise ValueError(f"unknown CLI {cli!r}; one of {', '.join(CLIS)}")


def _claude_code(
    instruction: str, model: str, base: str, time_limit_s: int | None
) -> tuple[list[str], dict[str, str]]:
    argv = [
        "claude",
        "-p",
        instruction,
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        model,
        # Non-interactive: no one answers a permission prompt. The sandbox is the
        # isolation (it works as the sandbox's non-root uid).
        "--dangerously-skip-permissions",
    ]
    env = {
        **_CLAUDE_ENV,
        "ANTHROPIC_BASE_URL": base,
        "ANTHROPIC_API_KEY": GATEWAY_KEY,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "CLAUDE_CODE_SUBAGENT_MODEL": model,
    }
    if time_limit_s is not None:
        bound = str(max(1, time_limit_s) * 1000)
        env |= {"BASH_MAX_TIMEOUT_MS": bound, "API_TIMEOUT_MS": bound}
    return argv, env


def _codex(instruction: str, model: str, base: str) -> tuple[list[str], dict[str, str]]:
    provider = (
        "model_providers.arena={"
        f'name="arena", base_url={json.dumps(base + "/v1")}, '
        'env_key="ARENA_GATEWAY_KEY", wire_api="responses"}'
    )
    argv = ["codex", "exec", "--json", "--skip-git-repo-check"]
    # Codex's own Linux sandbox is the bubblewrap it ships, which needs a new user
    # namespace; the arena's sandbox forbids those (bwrap --disable-userns, and the AGENT
    # seccomp filter denies CLONE_NEWUSER), so each of its commands would fail with
    # "bwrap: No permissions to create new namespace" (measured with --sandbox
    # workspace-write). The arena's sandbox is the isolation: Codex runs them directly.
    argv.append("--dangerously-bypass-approvals-and-sandbox")
    argv += ["--model", model, "-c", "model_provider=arena", "-c", provider]
    for setting in _CODEX_CONFIG:
        argv += ["-c", setting]
    argv.append(instruction)
    return argv, {"ARENA_GATEWAY_KEY": GATEWAY_KEY}


def _aider(
    instruction: str,
    model: str,
    base: str,
    time_limit_s: int | None,
    prices: tuple[float, float] | None,
) -> tuple[list[str], dict[str, str]]:
    name = f"openai/{model}"
    description: dict[str, Any] = {
        "max_input_tokens": CONTEXT_WINDOW,
        "max_output_tokens": MAX_OUTPUT_TOKENS,
        "max_tokens": MAX_OUTPUT_TOKENS,
        "litellm_provider": "openai",
        "mode": "chat",
    }
    if prices is not None:
        description["input_cost_per_token"] = prices[0] / 1e6
        description["output_cost_per_token"] = prices[1] / 1e6
    argv = ["sh", "-c", _AIDER_LAUNCHER, "aider", *_AIDER_FLAGS]
    argv += ["--model", name, "--weak-model", name, "--editor-model", name]
    argv += ["--openai-api-base", f"{base}/v1", "--openai-api-key", GATEWAY_KEY]
    if time_limit_s is not None:
        argv += ["--timeout", str(max(1, time_limit_s))]
    argv += ["--message", instruction]
    env = {
        "ARENA_AIDER_MODEL_METADATA": json.dumps({name: description}),
        # litellm's own copy of the price table, never the network's
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    return argv, env


# -- reading what a CLI printed --------------------------------------------------------

_EDIT_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
_READ_TOOLS = frozenset({"Read", "Grep", "Glob", "LS", "NotebookRead"})
_READERS = frozenset({"cat", "head", "tail", "less", "grep", "rg", "ls", "find", "nl", "wc", "sed"})
SUMMARY_MAX = 300
MAX_LINES = 20_000


def transcript_steps(
    cli: str, output_text: str, *, repo_dir: str | None = None
) -> list[dict[str, Any]]:
    """The CLI's tool uses, in order, as neutral steps. ``output_text`` is what the CLI
    printed (stdout and stderr, in any order: lines that are not the CLI's events are
    skipped). Paths under ``repo_dir`` are given relative to it. Untrusted input:
    anything malformed is skipped, never raised."""
    if cli == CLAUDE_CODE:
        steps = list(_claude_steps(output_text))
    elif cli == CODEX:
        steps = list(_codex_steps(output_text))
    elif cli == AIDER:
        steps = list(_aider_steps(output_text))
    else:
        raise ValueError(f"unknown CLI {cli!r}; one of {', '.join(CLIS)}")
    if repo_dir:
        prefix = repo_dir.rstrip("/") + "/"
        for step in steps:
            if isinstance(step["path"], str) and step["path"].startswith(prefix):
                step["path"] = step["path"][len(prefix) :]
    return steps


def _step(tool: str, path: Any, *, is_edit: bool, is_read: bool, summary: str) -> dict[str, Any]:
    return {
        "tool": tool[:40],
        "path": path[:500] if isinstance(path, str) and path else None,
        "is_edit": is_edit,
        "is_read": is_read and not is_edit,
        "summary": summary[:SUMMARY_MAX],
    }


def _events(text: str) -> Iterator[dict[str, Any]]:
    for line in text.splitlines()[:MAX_LINES]:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event


def _command_is_read(command: str) -> bool:
    """A shell command that only reads: its first word is a reader (``sed`` only with
    ``-n``), and it writes no file."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    # Codex wraps commands as ["/bin/sh", "-lc", "<command>"]
    if len(words) >= 3 and words[0].endswith("sh") and words[1] in ("-c", "-lc"):
        return _command_is_read(words[2])
    if not words or ">" in command:
        return False
    first = words[0].rsplit("/", 1)[-1]
    if first == "sed":
        return "-n" in words[1:2] and not any(w.startswith("-i") for w in words)
    return first in _READERS


def _claude_steps(text: str) -> Iterator[dict[str, Any]]:
    for event in _events(text):
        message = event.get("message")
        if event.get("type") != "assistant" or not isinstance(message, dict):
            continue
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            name = str(block.get("name", ""))
            args = block.get("input") if isinstance(block.get("input"), dict) else {}
            path = args.get("file_path") or args.get("notebook_path") or args.get("path")
            if name == "Bash":
                command = str(args.get("command", ""))
                yield _step(
                    name, None, is_edit=False, is_read=_command_is_read(command), summary=command
                )
                continue
            summary = str(args.get("pattern") or path or json.dumps(args)[:SUMMARY_MAX])
            yield _step(
                name,
                path,
                is_edit=name in _EDIT_TOOLS,
                is_read=name in _READ_TOOLS,
                summary=f"{name} {summary}",
            )


def _codex_steps(text: str) -> Iterator[dict[str, Any]]:
    for event in _events(text):
        item = event.get("item")
        if event.get("type") != "item.completed" or not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "command_execution":
            command = str(item.get("command", ""))
            yield _step(
                "shell", None, is_edit=False, is_read=_command_is_read(command), summary=command
            )
        elif kind == "file_change":
            changes = item.get("changes")
            for change in changes if isinstance(changes, list) else ():
                if isinstance(change, dict):
                    path = change.get("path")
                    action = str(change.get("kind", "update"))
                    yield _step(
                        "apply_patch", path, is_edit=True, is_read=False, summary=f"{action} {path}"
                    )
        elif kind == "mcp_tool_call":
            tool = f"{item.get('server', '')}.{item.get('tool', '')}"
            yield _step(tool, None, is_edit=False, is_read=False, summary=tool)
        elif kind == "web_search":
            query = str(item.get("query", ""))
            yield _step("web_search", None, is_edit=False, is_read=True, summary=query)


def _aider_steps(text: str) -> Iterator[dict[str, Any]]:
    for line in text.splitlines()[:MAX_LINES]:
        line = line.strip()
        if line.startswith("Applied edit to "):
            path = line.removeprefix("Applied edit to ").strip()
            if path:
                yield _step("edit", path, is_edit=True, is_read=False, summary=line)
