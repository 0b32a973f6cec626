"""A run's stored steps as the directness metric reads them (``coding.metrics.ToolUse``):
which steps edited a file, which only read one, and which file. Pure.

Steps come in two shapes. A CLI agent's steps (``agents.cli.transcripts``) say it
themselves: ``args = {"kind": "edit"|"read"|"other", "path": ...}``, except a command
(``"kind": "command"``), which is classified by its text like a scaffold agent's shell
step: by its first words, a heuristic, documented in docs/coding.md, that errs towards
"other" (neither an edit nor a read) when a command does both or neither."""

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from coding.metrics import ToolUse

READERS = frozenset({"cat", "head", "tail", "less", "more", "grep", "rg", "ls", "find", "nl", "wc"})
EDITORS = frozenset({"tee", "patch", "cp", "mv", "touch", "truncate", "rm", "mkdir"})
# A redirection into a file (not /dev/null), sed or perl editing in place.
_WRITES = re.compile(
    r"(^|[^0-9&])>{1,2}\s*(?!/dev/null)[^&\s]|\bsed\s+(-[a-zA-Z]*i|--in-place)|\bperl\s+-[a-z]*i"
)
_SED_PRINT = re.compile(r"^sed\s+-n\b")


def _path(words: list[str]) -> str | None:
    """The last argument that looks like a file (no option, no pattern)."""
    for word in reversed(words[1:]):
        if word in ("/dev/null", ">/dev/null") or word.endswith(">/dev/null"):
            continue  # output thrown away names no file
        if not word.startswith("-") and ("/" in word or "." in word):
            return word[:300]
    return None


def _shell_use(command: str) -> ToolUse:
    command = command.strip()[:4000]
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    # "cd repo && cat x": the last command of a chain is the one that acts.
    for separator in ("&&", ";", "||"):
        if separator in words:
            words = words[len(words) - words[::-1].index(separator) :]
    head = words[0].rsplit("/", 1)[-1] if words else ""
    path = _path(words)
    if _WRITES.search(command) or head in EDITORS:
        return ToolUse(tool="shell", path=path, is_edit=True, is_read=False)
    if head in READERS or _SED_PRINT.match(" ".join(words)):
        return ToolUse(tool="shell", path=path, is_edit=False, is_read=True)
    return ToolUse(tool="shell", path=None, is_edit=False, is_read=False)


def tool_uses(steps: Iterable[Mapping[str, Any]]) -> list[ToolUse]:
    """``steps``: stored steps as ``{"tool", "args"}`` in order."""
    uses = []
    for step in steps:
        args = step.get("args") if isinstance(step.get("args"), dict) else {}
        tool = str(step.get("tool", ""))[:40]
        kind = args.get("kind")
        if kind == "command" and isinstance(args.get("command"), str):
            uses.append(replace(_shell_use(args["command"]), tool=tool))
        elif kind in ("edit", "read", "other"):
            path = args.get("path") if isinstance(args.get("path"), str) else None
            uses.append(
                ToolUse(tool=tool, path=path, is_edit=kind == "edit", is_read=kind == "read")
            )
        elif tool == "edit" and isinstance(args.get("path"), str):
            # The edit tool (sandboxes.edit): a view reads, every other command edits.
            view = args.get("command") == "view"
            uses.append(ToolUse(tool=tool, path=args["path"][:300], is_edit=not view, is_read=view))
        elif tool == "shell" and isinstance(args.get("command"), str):
            uses.append(_shell_use(args["command"]))
        else:
            uses.append(ToolUse(tool=tool, path=None, is_edit=False, is_read=False))
    return uses
