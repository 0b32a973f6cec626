"""Files an agent's patch may not change for the judge (docs/coding.md): the tests, what
configures or extends the test runner, what Python runs on its own at start-up or
import, git's own metadata, and whatever the task's commands name. After the patch is
applied, and before any of it runs, the judge sandbox puts each protected file the
change set holds back as the judge's copy has it (or removes it when the judge's copy
has no such file), so an agent cannot pass by editing the tests that grade it or by
slipping code in beside them. Pure: patterns over the paths of the judge's own change
set (``scripts.change_set``), not over what the patch says of itself."""

import shlex
from fnmatch import fnmatchcase
from pathlib import PurePosixPath

PROTECTED = (
    # the tests
    "test_*.py",
    "*_test.py",
    "tests/*",
    "test/*",
    "testing/*",
    # pytest's configuration and plugins
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "noxfile.py",
    # what Python imports or reads by itself
    "sitecustomize.py",
    "usercustomize.py",
    "*.pth",
    "pytest.py",
    "_pytest/*",
    "pluggy/*",
    # build files a test command may run
    "Makefile",
    "makefile",
    "GNUmakefile",
    # git's metadata: attributes name filters and drivers
    ".gitattributes",
    ".gitmodules",
)


def is_protected(
    path: str, patterns: tuple[str, ...] = PROTECTED, named: frozenset[str] = frozenset()
) -> bool:
    """Whether ``path`` (relative, as git names it) is protected: a pattern with a slash
    matches the path from any directory down (case-insensitively: the patterns name
    conventions, not exact files), one without matches the file name; ``named`` holds
    paths protected exactly, with everything under them (the commands' own files and
    the pristine tree's test files)."""
    parts = PurePosixPath(path).parts
    if not parts or ".." in parts:
        return True  # nothing an agent should write: treat as protected
    if any(path == name or path.startswith(name.rstrip("/") + "/") for name in named):
        return True
    name = parts[-1].lower()
    for pattern in patterns:
        if "/" not in pattern:
            if fnmatchcase(name, pattern.lower()):
                return True
            continue
        head = pattern.split("/", 1)[0].lower()
        if any(fnmatchcase(part.lower(), head) for part in parts[:-1]):
            return True
    return False


def command_paths(*commands: str) -> frozenset[str]:
    """The relative paths a task's commands name (``python3 check.py``, ``pytest
    tests/unit``, ``test_x.py::test_y``, ``--rootdir=src``): protected, since the
    commands run them or read them."""
    found: set[str] = set()
    for command in commands:
        try:
            words = shlex.split(command or "")
        except ValueError:
            words = (command or "").split()
        for word in words:
            value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
            value = value.split("::", 1)[0].strip()
            if not value or value.startswith(("-", "/", "$")) or "=" in value:
                continue
            normalised = str(PurePosixPath(value))
            if normalised not in (".", "") and ".." not in PurePosixPath(normalised).parts:
                found.add(normalised)
    return frozenset(found)


def collected_files(test_ids: frozenset[str]) -> frozenset[str]:
    """The files of the pristine tree's tests (``path::name`` ids): whatever pattern
    the repository's configuration collects tests by, its test files are protected."""
    return frozenset(
        str(PurePosixPath(node.split("::", 1)[0])) for node in test_ids if "::" in node
    )
