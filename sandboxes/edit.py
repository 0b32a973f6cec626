"""The ``edit`` tool of repo tasks: view, create, replace a unique string in, or insert
into a file of the workspace, for agents that edit files rather than write shell
commands (docs/coding.md). It runs inside the sandbox as the sandbox's user, as one
bounded ``python3 -I`` command of fixed code; the agent's arguments travel base64-encoded
JSON, never as shell text."""

import base64
import json
import shlex
from typing import Any

from sandboxes.base import Sandbox, ToolResult

EDIT_TIMEOUT_S = 20
# The code that runs inside: relative paths are the repository's (/work/repo when there
# is one), every path must stay in /work; a view shows numbered lines.
_INSIDE = r"""
import base64, json, os, sys
a = json.loads(base64.b64decode(sys.argv[1]))
base = "/work/repo" if os.path.isdir("/work/repo") else "/work"
path = os.path.realpath(os.path.join(base, a["path"]))
if not (path + "/").startswith("/work/"):
    sys.exit("edit: %s is outside the workspace (/work)" % a["path"])
cmd = a["command"]
MAX = 1 << 20
def read():
    with open(path, "rb") as f:
        data = f.read(MAX + 1)
    if len(data) > MAX:
        sys.exit("edit: %s is larger than 1 MiB; use the shell" % a["path"])
    return data.decode("utf-8", "surrogateescape")
def write(text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)
if cmd == "view":
    if os.path.isdir(path):
        print("\n".join(sorted(os.listdir(path))[:1000]))
        sys.exit(0)
    lines = read().splitlines()
    start, end = a.get("view_start", 1), a.get("view_end", 0) or len(lines)
    for n in range(max(1, start), min(len(lines), end) + 1):
        print("%6d\t%s" % (n, lines[n - 1]))
elif cmd == "create":
    write(a.get("file_text", ""))
    print("created %s" % a["path"])
elif cmd == "str_replace":
    text, old = read(), a.get("old_str", "")
    count = text.count(old) if old else 0
    if count != 1:
        sys.exit("edit: old_str %s in %s; it must appear exactly once" % (
            "is not found" if count == 0 else "appears %d times" % count, a["path"]))
    write(text.replace(old, a.get("new_str", ""), 1))
    print("replaced 1 occurrence in %s" % a["path"])
elif cmd == "insert":
    lines = read().splitlines(keepends=True)
    at = a.get("insert_line", 0)
    if not 0 <= at <= len(lines):
        sys.exit("edit: insert_line must be 0..%d" % len(lines))
    new = a.get("new_str", "")
    lines[at:at] = [new if new.endswith("\n") else new + "\n"]
    write("".join(lines))
    print("inserted after line %d of %s" % (at, a["path"]))
"""

EDIT_SCHEMA: dict[str, Any] = {
    "description": "Edit a file of the repository: view it (numbered lines, or a "
    "directory's entries), create it, replace one exact and unique old_str with new_str, "
    "or insert new_str after line insert_line (0: at the top). Paths are relative to the "
    "repository; view_start and view_end (0: the end) narrow a view.",
    "parameters": {
        "type": "object",
        "properties": {
            "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"]},
            "path": {"type": "string", "maxLength": 1000},
            # One command line carries the arguments (the kernel bounds one argument at
            # 128 KiB): bigger files are written with the shell.
            "file_text": {"type": "string", "maxLength": 60_000},
            "old_str": {"type": "string", "maxLength": 30_000},
            "new_str": {"type": "string", "maxLength": 30_000},
            "insert_line": {"type": "integer", "minimum": 0},
            "view_start": {"type": "integer", "minimum": 1},
            "view_end": {"type": "integer", "minimum": 0},
        },
        "required": ["command", "path"],
        "additionalProperties": False,
    },
}


def sandbox_edit(sandbox: Sandbox, args: dict[str, Any]) -> ToolResult:
    """Runs one edit in the sandbox; what the code inside refused is an ``ok=False``
    result with its message (the agent's to fix), never an exception."""
    payload = base64.b64encode(json.dumps(args).encode()).decode()
    command = f"python3 -I -c {shlex.quote(_INSIDE)} {payload}"
    result = sandbox.shell(command, timeout_s=EDIT_TIMEOUT_S)
    if result.exit_code == 0 and not result.timed_out:
        return ToolResult(ok=True, tool="edit", stdout=result.stdout, truncated=result.truncated)
    error = (result.stderr.strip() or result.error or "the edit failed").splitlines()[-1][:2000]
    return ToolResult(ok=False, tool="edit", stdout=result.stdout, error=error)
