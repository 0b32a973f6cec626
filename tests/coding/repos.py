"""Small Python projects for coding battles, made with the host's git in a test's tmp dir
and handed to admission as uploaded git bundles (or tarballs), as a submitter would.

- ``FIX``: ``calc.add`` subtracts; ``test_add`` fails, ``test_sub`` passes.
- ``BREAKS``: ``greet`` must say "Hello, Ada!" (``test_new`` fails); ``test_legacy``
  pins the old "Hello Ada" and breaks with the fix; ``test_other`` passes throughout.
- ``THREE_WAY``: ``FIX`` whose judge ref (hidden tests) also edits a context line of
  the fix: the agents' patch does not apply as it is, only through ``git apply --3way``.
- ``CRASH``: the tests import a module that does not exist: every run crashes.
"""

import io
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from django.core.files.uploadedfile import SimpleUploadedFile

CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
CALC_TESTS = (
    "from calc import add, sub\n\n\n"
    "def test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_sub():\n    assert sub(5, 3) == 2\n"
)
GREET = 'def greet(name):\n    return "Hello " + name\n'
GREET_TESTS = (
    "from greet import greet\n\n\n"
    'def test_new():\n    assert greet("Ada") == "Hello, Ada!"\n\n\n'
    'def test_legacy():\n    assert greet("Ada") == "Hello Ada"\n\n\n'
    "def test_other():\n    assert callable(greet)\n"
)
# The judge's calc.py: a comment on a context line of the agents' fix (two lines from it,
# so a 3-way merge is clean while the patch's context no longer matches).
CALC_JUDGE = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):  # subtracts\n    return a - b\n"
HIDDEN_TESTS = "from calc import add\n\n\ndef test_hidden():\n    assert add(-1, 1) == 0\n"


@dataclass(frozen=True)
class Project:
    name: str
    files: dict[str, str]
    success_cmd: str
    test_cmd: str
    # The judge ref's changes on top (hidden tests), or none.
    judge_files: dict[str, str] = field(default_factory=dict)


FIX = Project(
    "fix",
    {"calc.py": CALC, "test_calc.py": CALC_TESTS},
    "python3 -m pytest -q -p no:cacheprovider test_calc.py::test_add",
    "python3 -m pytest -q -p no:cacheprovider",
)
BREAKS = Project(
    "breaks",
    {"greet.py": GREET, "test_greet.py": GREET_TESTS},
    "python3 -m pytest -q -p no:cacheprovider test_greet.py::test_new",
    "python3 -m pytest -q -p no:cacheprovider",
)
THREE_WAY = Project(
    "three-way",
    FIX.files,
    FIX.success_cmd,
    FIX.test_cmd,
    judge_files={"calc.py": CALC_JUDGE, "test_hidden.py": HIDDEN_TESTS},
)
CRASH = Project(
    "crash",
    {"calc.py": CALC, "test_calc.py": "import not_a_module  # noqa\n\n" + CALC_TESTS},
    "python3 -m pytest -q -p no:cacheprovider test_calc.py",
    "python3 -m pytest -q -p no:cacheprovider",
)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def bundle(project: Project, tmp: Path) -> SimpleUploadedFile:
    """The project as a git bundle: branch ``main``; with judge files, branch ``judge``
    one commit further."""
    root = tmp / f"src-{project.name}"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    _write(root, project.files)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "start")
    if project.judge_files:
        _git(root, "checkout", "-q", "-b", "judge")
        _write(root, project.judge_files)
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", "hidden tests")
        _git(root, "checkout", "-q", "main")
    out = tmp / f"{project.name}.bundle"
    _git(root, "bundle", "create", "-q", str(out), "--all")
    return SimpleUploadedFile(f"{project.name}.bundle", out.read_bytes())


def tarball(project: Project) -> SimpleUploadedFile:
    """The project as a gzipped tarball with one top-level directory (GitHub's shape)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in project.files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{project.name}-main/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return SimpleUploadedFile(f"{project.name}.tar.gz", buffer.getvalue())


def patch(project: Project, tmp: Path, edits: dict[str, str]) -> bytes:
    """What an agent's diff of ``edits`` (file → new text) against the project's start
    looks like, made as the agent's sandbox makes it (``--binary --full-index``)."""
    root = tmp / f"edit-{project.name}"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    _write(root, project.files)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "start")
    _write(root, edits)
    _git(root, "add", "-A")
    out = subprocess.run(
        ["git", "diff", "--cached", "--binary", "--full-index", "--no-renames", "HEAD"],
        cwd=root,
        check=True,
        capture_output=True,
    )
    return out.stdout
