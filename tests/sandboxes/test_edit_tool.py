"""The edit tool of repo tasks (sandboxes.edit), in a real shell-only sandbox: view,
create, a unique replacement, insert; and what an agent may get wrong or try: a string
that is missing or not unique, a path out of the workspace (by ``..``, absolutely, or
through a link it made), shell text in its arguments. Every refusal is an ``ok=False``
result that says what to fix."""

from pathlib import Path

import pytest
from django.conf import settings

from sandboxes.base import SandboxSpec
from sandboxes.local_backend import LocalBackend
from sandboxes.tools import tool_call

SPEC = SandboxSpec(run_id=0, desktop=False, egress=False)


@pytest.fixture
def box(sandbox_root):
    sandbox = LocalBackend(sandbox_root, uid_base=settings.ARENA.sandbox_uid_base).provision(
        SPEC, slot=12
    )
    sandbox.shell("mkdir -p repo && printf 'a = 1\\nb = 2\\nb = 2\\n' > repo/m.py")
    yield sandbox
    sandbox.destroy()


def edit(box, tmp_path: Path, **args):
    return tool_call(box, "edit", args, deliver_dir=tmp_path / "out")


def test_view_create_replace_and_insert(box, tmp_path):
    view = edit(box, tmp_path, command="view", path="m.py", view_start=2, view_end=3)
    assert view.ok and view.stdout == "     2\tb = 2\n     3\tb = 2\n"
    assert edit(box, tmp_path, command="view", path=".").stdout == "m.py\n"
    made = edit(box, tmp_path, command="create", path="pkg/new.py", file_text="x = 1\n")
    assert made.ok and box.shell("cat repo/pkg/new.py").stdout == "x = 1\n"
    assert edit(
        box, tmp_path, command="str_replace", path="m.py", old_str="a = 1", new_str="a = 3"
    ).ok
    assert edit(box, tmp_path, command="insert", path="m.py", insert_line=0, new_str="# top").ok
    assert box.shell("cat repo/m.py").stdout == "# top\na = 3\nb = 2\nb = 2\n"
    # Its files belong to the sandbox's user, like the shell's.
    assert box.shell("stat -c %u repo/pkg/new.py").stdout.strip() == str(box.uid)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"command": "str_replace", "path": "m.py", "old_str": "b = 2", "new_str": "c"},
         "appears 2 times in m.py; it must appear exactly once"),
        ({"command": "str_replace", "path": "m.py", "old_str": "zzz", "new_str": "c"},
         "is not found"),
        ({"command": "view", "path": "../../etc/passwd"}, "outside the workspace"),
        ({"command": "create", "path": "/tmp/x", "file_text": "x"}, "outside the workspace"),
        ({"command": "view", "path": "escape/passwd"}, "outside the workspace"),
        ({"command": "insert", "path": "m.py", "insert_line": 99, "new_str": "x"},
         "insert_line must be 0..3"),
        ({"command": "delete", "path": "m.py"}, "command must be one of"),
        ({"command": "view"}, "edit needs path"),
        ({"command": "create", "path": "f", "file_text": "x" * 60_001}, "longer than 60000"),
    ],
)  # fmt: skip
def test_mistakes_and_escapes_are_refused_with_what_to_fix(box, tmp_path, args, says):
    box.shell("ln -s /etc repo/escape")
    result = edit(box, tmp_path, **args)
    assert not result.ok and says in result.error, result
    assert box.shell("cat repo/m.py").stdout == "a = 1\nb = 2\nb = 2\n"


def test_shell_text_in_the_arguments_is_only_text(box, tmp_path):
    name = "$(touch pwned); `touch pwned2`.py"
    assert edit(box, tmp_path, command="create", path=name, file_text="'; rm -rf /work #").ok
    listing = box.shell("ls -A repo").stdout.split("\n")
    assert name in listing and "pwned" not in listing and "pwned2" not in listing
