"""Stored steps as the directness metric reads them (coding.trajectory): a CLI's own
word, the edit tool's command, and a shell command classified by what it does (a CLI's
command as a scaffold agent's shell command is)."""

import pytest

from coding.metrics import ToolUse
from coding.trajectory import tool_uses


@pytest.mark.parametrize(
    ("command", "edit", "read", "path"),
    [
        ("cat calc.py", False, True, "calc.py"),
        ("cd /work/repo && grep -n add calc.py", False, True, "calc.py"),
        ("sed -n 1,20p calc.py", False, True, "calc.py"),
        ("sed -i 's/a - b/a + b/' calc.py", True, False, "calc.py"),
        ("printf 'x' > notes.txt", True, False, "notes.txt"),
        ("grep add calc.py > /dev/null", False, True, "calc.py"),
        ("python3 -m pytest -q 2>&1", False, False, None),
        ("cp a.py b.py", True, False, "b.py"),
        ("echo 'unbalanced", False, False, None),
    ],
)
def test_a_shell_command_is_an_edit_a_read_or_neither(command, edit, read, path):
    (use,) = tool_uses([{"tool": "shell", "args": {"command": command}}])
    assert (use.is_edit, use.is_read) == (edit, read)
    assert use.path == path


def test_the_edit_tool_and_a_clis_steps_say_it_themselves():
    steps = [
        {"tool": "edit", "args": {"command": "view", "path": "calc.py"}},
        {"tool": "edit", "args": {"command": "str_replace", "path": "calc.py"}},
        {"tool": "Read", "args": {"kind": "read", "path": "/work/repo/x.py"}},
        {"tool": "Bash", "args": {"kind": "other", "summary": "pytest"}},
        {"tool": "deliver", "args": {"message": "done"}},
        {"tool": "shell", "args": "not an object"},
    ]
    assert tool_uses(steps) == [
        ToolUse("edit", "calc.py", is_edit=False, is_read=True),
        ToolUse("edit", "calc.py", is_edit=True, is_read=False),
        ToolUse("Read", "/work/repo/x.py", is_edit=False, is_read=True),
        ToolUse("Bash", None, is_edit=False, is_read=False),
        ToolUse("deliver", None, is_edit=False, is_read=False),
        ToolUse("shell", None, is_edit=False, is_read=False),
    ]


@pytest.mark.parametrize(
    ("command", "edit", "read"),
    [("cat calc.py", False, True), ("sed -i 's/-/+/' calc.py", True, False),
     ("python3 -m pytest -q", False, False)],
)  # fmt: skip
def test_a_clis_neutral_steps_are_read_as_a_scaffolds_would_be(command, edit, read):
    cli = [
        {"tool": "read file", "args": {"kind": "read", "path": "calc.py"}},
        {"tool": "edit file", "args": {"kind": "edit", "path": "calc.py"}},
        {"tool": "search", "args": {"kind": "read", "pattern": "def add"}},
        {"tool": "run command", "args": {"kind": "command", "command": command}},
    ]
    (shell,) = tool_uses([{"tool": "shell", "args": {"command": command}}])

    uses = tool_uses(cli)

    assert uses[:3] == [
        ToolUse("read file", "calc.py", is_edit=False, is_read=True),
        ToolUse("edit file", "calc.py", is_edit=True, is_read=False),
        ToolUse("search", None, is_edit=False, is_read=True),
    ]
    # the command's kind comes from its text, exactly as for a scaffold's shell step
    assert (uses[3].is_edit, uses[3].is_read, uses[3].path) == (edit, read, shell.path)
    assert (uses[3].is_edit, uses[3].is_read) == (shell.is_edit, shell.is_read)
    assert uses[3].tool == "run command"
