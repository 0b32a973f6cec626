"""How the arena runs each CLI coding agent inside a sandbox. Pure: no Django, no I/O.

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
directory with stdin closed, and keeps stdout and stderr (and, for Aider, the file at
:data:`AIDER_LLM_HISTORY`); ``agents.cli.transcripts`` reads them.
"""

import json
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
# Where Aider logs its exchanges with the model (``--llm-history-file``): every line of a
# reply as "ASSISTANT <line>" under an "LLM RESPONSE <time>" header. Its final message
# is read from there (:func:`final_message`), never from what it printed. A shell word.
AIDER_LLM_HISTORY = "$HOME/.aider.llm.history"
# Aider asks raw.githubusercontent.com for litellm's price table unless the model is
# described locally: the launcher writes this description first (prices when known).
_AIDER_LAUNCHER = (
    'meta="$HOME/.aider.model.metadata.json"; '
    'printf %s "$ARENA_AIDER_MODEL_METADATA" > "$meta" && '
    'exec aider --model-metadata-file "$meta" '
    '--chat-history-file "$HOME/.aider.chat.history.md" '
    '--input-history-file "$HOME/.aider.input.history" '
    f'--llm-history-file "{AIDER_LLM_HISTORY}" "$@"'
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
