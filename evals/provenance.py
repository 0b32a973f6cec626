"""The application version a run record cites: the project's version and, in a git
checkout, the commit it runs (read from .git, no subprocess)."""

import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commit(git: Path) -> str:
    head = (git / "HEAD").read_text().strip()
    if not head.startswith("ref: "):
        return head  # a detached HEAD is the commit itself
    ref = head[5:]
    loose = git / ref
    if loose.exists():
        return loose.read_text().strip()
    packed = git / "packed-refs"
    if packed.exists():
        for line in packed.read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split(" ", 1)[0]
    return ""


@cache
def app_version() -> str:
    """``0.1.0+g<12 hex>`` in a checkout, ``0.1.0`` elsewhere."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    git = ROOT / ".git"
    try:
        commit = _commit(git) if git.is_dir() else ""
    except OSError:
        commit = ""
    return f"{version}+g{commit[:12]}" if commit else version
