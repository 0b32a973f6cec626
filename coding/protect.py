"""Files an agent's patch may not change for the judge (docs/coding.md): the tests and
the test runner's configuration. After the patch is applied, the judge sandbox puts
each protected file the patch touched back as the judge's copy has it (or removes it
when the judge's copy has no such file), so an agent cannot pass by editing the tests
that grade it. Pure: glob patterns over the paths ``git apply --numstat`` listed."""

from fnmatch import fnmatchcase
from pathlib import PurePosixPath

PROTECTED = (
    "test_*.py",
    "*_test.py",
    "tests/*",
    "test/*",
    "conftest.py",
    "pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
)


def is_protected(path: str, patterns: tuple[str, ...] = PROTECTED) -> bool:
    """Whether ``path`` (relative, as git names it) is a test or test configuration:
    a pattern with a slash matches the path from any directory down, one without a
    slash matches the file name."""
    parts = PurePosixPath(path).parts
    if not parts or ".." in parts:
        return True  # nothing an agent should write: treat as protected
    name = parts[-1]
    for pattern in patterns:
        if "/" not in pattern:
            if fnmatchcase(name, pattern):
                return True
            continue
        head = pattern.split("/", 1)[0]
        if any(fnmatchcase(part, head) for part in parts[:-1]):
            return True
    return False
