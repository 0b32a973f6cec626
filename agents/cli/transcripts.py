"""What a CLI coding agent did and said, read from its own output: its steps in one
neutral shape and its final message. Pure: no Django, no I/O. Everything read here is
untrusted (the agent's commands can write to the same files): anything malformed is
skipped, never raised on, and every kept text is bounded.

Steps (:func:`transcript_steps`) are named by what they did: "read file", "edit file",
"run command", "search" or "other", with the path (relative to the repository), the
command or the pattern; never with the CLI's own tool name or wording, which would tell
a judge which CLI ran (docs/coding.md, "What judges see"). The CLI's own name for the
step is kept apart (``CliStep.cli_tool``).

- Claude Code (``--output-format stream-json``, one JSON event a line): each ``tool_use``
  block of an ``assistant`` event is a step (Read; Edit, MultiEdit, Write; Bash; Grep,
  Glob, LS; anything else is "other"). Its final message is the ``result`` event's text.
- Codex (``exec --json``, one JSON event a line): each ``item.completed`` of a command
  (``command_execution``, its ``/bin/sh -lc`` wrapper taken off; an ``apply_patch``
  command edits the files it names), a patch (``file_change``: one step per file), an
  MCP tool call or a web search. Its final message is the last ``agent_message`` item.
- Aider (plain text): each ``Applied edit to <file>`` line is an edit (Aider edits from
  the reply's SEARCH/REPLACE blocks, not through tool calls). Its final message is its
  last reply as logged in its LLM history, without the edit blocks: what it printed
  around the replies (its banner, "Tokens: … Cost: …", notices) is never read for it.
"""

import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from agents.cli.commands import AIDER, CLAUDE_CODE, CLIS, CODEX

# What a step did, in the words every CLI's steps are stored and shown with (Step.tool),
# never the CLI's own tool name or wording: no step tells a judge which CLI ran.
READ_FILE = "read file"
EDIT_FILE = "edit file"
RUN_COMMAND = "run command"
SEARCH = "search"
OTHER = "other"
# How directness counts each (coding.trajectory reads the stored ``kind``): a command is
# classified by its text, as a scaffold agent's shell command is.
KINDS = {READ_FILE: "read", EDIT_FILE: "edit", RUN_COMMAND: "command", SEARCH: "read",
         OTHER: "other"}  # fmt: skip
_CLAUDE_ACTIONS = {
    "Read": READ_FILE, "NotebookRead": READ_FILE,
    "Edit": EDIT_FILE, "MultiEdit": EDIT_FILE, "Write": EDIT_FILE, "NotebookEdit": EDIT_FILE,
    "Bash": RUN_COMMAND,
    "Grep": SEARCH, "Glob": SEARCH, "LS": SEARCH, "WebSearch": SEARCH,
}  # fmt: skip
_SHELLS = frozenset({"sh", "bash", "dash", "zsh"})
# Codex may run its patch tool as a command: the files it names are edits.
_APPLY_PATCH = re.compile(r"^\s*(?:cd\s+\S+\s*&&\s*)?apply_patch\b")
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$", re.MULTILINE)
# Aider's edit blocks (the "diff" edit format): a file name, a fence, SEARCH … REPLACE.
_SEARCH = re.compile(r"^\s*<{5,9} SEARCH\b")
_REPLACE = re.compile(r"^\s*>{5,9} REPLACE\b")
_FENCE = re.compile(r"^\s*(?:`{3,}|~{3,})\S*\s*$")
_BARE_FENCE = re.compile(r"^\s*(?:`{3,}|~{3,})\s*$")
_AIDER_HEADER = re.compile(r"^(TO LLM|LLM RESPONSE) \d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")
_AIDER_REPLY_LINE = "ASSISTANT"
PATH_MAX = 500
COMMAND_MAX = 2000
PATTERN_MAX = 300
CLI_TOOL_MAX = 40
MESSAGE_MAX = 4000
MAX_LINES = 20_000
PATCH_FILES_MAX = 50
HISTORY_MAX_CHARS = 4 * 1024 * 1024


@dataclass(frozen=True)
class CliStep:
    """One step of a CLI's run in the neutral shape: ``action`` is one of the words above,
    and ``path`` (relative to the repository when inside it), ``command`` or ``pattern``
    say what it acted on. ``cli_tool`` is the CLI's own name for the step, kept for the
    record apart from the arguments and never shown blind."""

    action: str
    path: str | None = None
    command: str | None = None
    pattern: str | None = None
    cli_tool: str = ""

    @property
    def kind(self) -> str:
        return KINDS[self.action]

    def args(self) -> dict[str, str]:
        """The stored arguments: the kind, and whichever of path, command, pattern it has."""
        known = {"path": self.path, "command": self.command, "pattern": self.pattern}
        return {"kind": self.kind, **{key: value for key, value in known.items() if value}}


def transcript_steps(cli: str, output_text: str, *, repo_dir: str | None = None) -> list[CliStep]:
    """The CLI's tool uses, in order, as neutral steps. ``output_text`` is what the CLI
    printed (stdout and stderr, in any order: lines that are not the CLI's events are
    skipped). Paths under ``repo_dir`` are given relative to it. Untrusted input:
    anything malformed is skipped, never raised."""
    readers = {CLAUDE_CODE: _claude_steps, CODEX: _codex_steps, AIDER: _aider_steps}
    if cli not in readers:
        raise ValueError(f"unknown CLI {cli!r}; one of {', '.join(CLIS)}")
    steps = list(readers[cli](output_text))
    if repo_dir:
        steps = [replace(step, path=_relative(step.path, repo_dir)) for step in steps]
    return steps


def final_message(cli: str, output_text: str, *, llm_history: str = "") -> str:
    """What the agent last said to the user, in its own words: Claude Code's result (else
    its last text), Codex's last agent message, Aider's last reply (read from
    ``llm_history``, the file at :data:`AIDER_LLM_HISTORY`) with its edit blocks taken
    out. Never the CLI's own output around them (banners, usage and cost lines, notices
    of applied edits, error reports): when the agent said nothing, "". Untrusted input,
    never raised on."""
    if cli == CLAUDE_CODE:
        said = _claude_said(output_text)
    elif cli == CODEX:
        said = _codex_said(output_text)
    elif cli == AIDER:
        said = _aider_said(llm_history)
    else:
        raise ValueError(f"unknown CLI {cli!r}; one of {', '.join(CLIS)}")
    return said.strip()[:MESSAGE_MAX]


def _bounded(value: Any, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) and value.strip() else None


def _relative(path: str | None, repo_dir: str) -> str | None:
    root = repo_dir.rstrip("/")
    if path is None or not (path == root or path.startswith(root + "/")):
        return path
    return path[len(root) + 1 :] or "."


def _events(text: str) -> Iterator[dict[str, Any]]:
    for line in text.splitlines()[:MAX_LINES]:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(event, dict):
            yield event


def _unwrapped(raw: Any) -> str | None:
    """A command as the agent wrote it: without the ``/bin/sh -lc '…'`` wrapper a CLI
    may run it in (Codex does), which would tell the CLI apart."""
    if isinstance(raw, list) and raw and all(isinstance(word, str) for word in raw):
        words, text = raw, shlex.join(raw)
    elif isinstance(raw, str):
        text = raw
        try:
            words = shlex.split(raw)
        except ValueError:
            words = []
    else:
        return None
    if len(words) == 3 and words[0].rsplit("/", 1)[-1] in _SHELLS and words[1] in ("-c", "-lc"):
        text = words[2]
    return text.strip() or None


def _command_steps(raw: Any, cli_tool: str) -> Iterator[CliStep]:
    command = _unwrapped(raw)
    if command is None:
        return
    if _APPLY_PATCH.match(command):
        paths: list[str | None] = [*_PATCH_FILE.findall(command)[:PATCH_FILES_MAX]] or [None]
        for path in paths:
            yield CliStep(EDIT_FILE, path=_bounded(path, PATH_MAX), cli_tool="apply_patch")
        return
    yield CliStep(RUN_COMMAND, command=command[:COMMAND_MAX], cli_tool=cli_tool)


def _claude_blocks(event: dict[str, Any], kind: str) -> Iterator[dict[str, Any]]:
    """The content blocks of type ``kind`` of an ``assistant`` event."""
    message = event.get("message")
    if event.get("type") != "assistant" or not isinstance(message, dict):
        return
    content = message.get("content")
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and block.get("type") == kind:
            yield block


def _claude_steps(text: str) -> Iterator[CliStep]:
    for event in _events(text):
        for block in _claude_blocks(event, "tool_use"):
            name = str(block.get("name", ""))[:CLI_TOOL_MAX]
            args = block.get("input") if isinstance(block.get("input"), dict) else {}
            action = _CLAUDE_ACTIONS.get(name, OTHER)
            if action == RUN_COMMAND:
                yield from _command_steps(args.get("command"), name)
            elif action == OTHER:  # its own tools (tasks, to-do lists, sub-agents)
                yield CliStep(OTHER, cli_tool=name)
            else:
                path = args.get("file_path") or args.get("notebook_path") or args.get("path")
                pattern = args.get("pattern") or args.get("query") if action == SEARCH else None
                yield CliStep(
                    action,
                    path=_bounded(path, PATH_MAX),
                    pattern=_bounded(pattern, PATTERN_MAX),
                    cli_tool=name,
                )


def _codex_items(text: str) -> Iterator[dict[str, Any]]:
    for event in _events(text):
        item = event.get("item")
        if event.get("type") == "item.completed" and isinstance(item, dict):
            yield item


def _codex_steps(text: str) -> Iterator[CliStep]:
    for item in _codex_items(text):
        kind = item.get("type")
        if kind == "command_execution":
            yield from _command_steps(item.get("command"), "shell")
        elif kind == "file_change":
            changes = item.get("changes")
            for change in changes if isinstance(changes, list) else ():
                if isinstance(change, dict):
                    path = _bounded(change.get("path"), PATH_MAX)
                    yield CliStep(EDIT_FILE, path=path, cli_tool="apply_patch")
        elif kind == "web_search":
            query = _bounded(item.get("query"), PATTERN_MAX)
            yield CliStep(SEARCH, pattern=query, cli_tool="web_search")
        elif kind == "mcp_tool_call":
            tool = f"{item.get('server', '')}.{item.get('tool', '')}"[:CLI_TOOL_MAX]
            yield CliStep(OTHER, cli_tool=tool)


def _aider_steps(text: str) -> Iterator[CliStep]:
    for line in text.splitlines()[:MAX_LINES]:
        line = line.strip()
        if line.startswith("Applied edit to "):
            path = _bounded(line.removeprefix("Applied edit to ").strip(), PATH_MAX)
            if path:
                yield CliStep(EDIT_FILE, path=path, cli_tool="edit")


def _claude_said(text: str) -> str:
    """The ``result`` of Claude Code's last result event, unless it is the CLI's own
    error report (``is_error``); else the agent's last text block."""
    result = last_text = ""
    for event in _events(text):
        if event.get("type") == "result":
            found = event.get("result")
            result = found if isinstance(found, str) and not event.get("is_error") else ""
        for block in _claude_blocks(event, "text"):
            if isinstance(block.get("text"), str) and block["text"].strip():
                last_text = block["text"]
    return result.strip() or last_text


def _codex_said(text: str) -> str:
    said = ""
    for item in _codex_items(text):
        if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
            said = item["text"] if item["text"].strip() else said
    return said


def aider_replies(history: str) -> list[str]:
    """The model's replies, in order, from Aider's LLM history: the "ASSISTANT " lines
    under each "LLM RESPONSE" header (the replies repeated in a later "TO LLM" request
    are not read again). Aider prefixes every line of a reply, so a reply cannot
    forge a header."""
    replies: list[str] = []
    current: list[str] | None = None
    for line in history[-HISTORY_MAX_CHARS:].splitlines():
        header = _AIDER_HEADER.match(line)
        if header:
            if current is not None:
                replies.append("\n".join(current))
            current = [] if header[1] == "LLM RESPONSE" else None
        elif current is not None and line.split(" ", 1)[0] == _AIDER_REPLY_LINE:
            current.append(line[len(_AIDER_REPLY_LINE) + 1 :])
    if current is not None:
        replies.append("\n".join(current))
    return replies


def _is_file_name(line: str) -> bool:
    """A line Aider reads as the file an edit block is for: one word (maybe in ``**``,
    backticks or after ``#``)."""
    word = line.strip().strip("#*`:").strip()
    return bool(word) and len(word) <= PATH_MAX and not any(c.isspace() for c in word)


def without_edit_blocks(reply: str) -> str:
    """A reply's prose: every SEARCH/REPLACE block taken out with the file name and the
    fences around it (a block left unfinished goes to the end of the reply)."""
    lines = reply.splitlines()
    dropped: set[int] = set()
    index = 0
    while index < len(lines):
        if not _SEARCH.match(lines[index]):
            index += 1
            continue
        start = index
        if start > 0 and _FENCE.match(lines[start - 1]):
            start -= 1
        if start > 0 and start - 1 not in dropped and _is_file_name(lines[start - 1]):
            start -= 1
        end = index + 1
        while end < len(lines) and not _REPLACE.match(lines[end]):
            end += 1
        if end + 1 < len(lines) and _BARE_FENCE.match(lines[end + 1]):
            end += 1
        dropped.update(range(start, min(end, len(lines) - 1) + 1))
        index = end + 1
    kept = "\n".join(line for n, line in enumerate(lines) if n not in dropped)
    return re.sub(r"\n\s*\n(\s*\n)+", "\n\n", kept).strip()


def _aider_said(history: str) -> str:
    """The prose of Aider's last reply that has any left once its edit blocks are out."""
    for reply in reversed(aider_replies(history)):
        if prose := without_edit_blocks(reply):
            return prose
    return ""
