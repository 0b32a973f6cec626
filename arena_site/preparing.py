"""What `make run` is still preparing after its first page answers (docs/operations.md,
"The first start").

The web server answers first; then the launcher (scripts/run_arena.py) installs, one
after the other, what only some pages need: the sandboxes' Debian packages, the demo
battles (real battles in real sandboxes, judged by the demo judges) and the coding
agents' toolchain. It writes each step's state to ``<data dir>/preparing.json``, and
every page shows a short line while a step is not done (``preparing_context``, a template
context processor).

The file names the launcher's process: a launcher that died without removing it leaves
no banner behind. Nothing here imports Django at module level: the launcher writes the
file before Django is set up."""

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FILE_NAME = "preparing.json"
STATE_WORDS = {
    "waiting": "waiting",
    "running": "in progress",
    "failed": "failed: the terminal that runs make run says why",
}


@dataclass
class Step:
    """One background step: what it is and what waits for it, in a visitor's words
    (``shown`` false: nothing waits for it that a visitor would notice)."""

    key: str
    label: str
    waits: str
    state: str = "waiting"
    shown: bool = True


def status_path(data_dir: Path) -> Path:
    return Path(data_dir) / FILE_NAME


def status_write(data_dir: Path, steps: list[Step], pid: int) -> None:
    """Replaces the file at once (a reader never sees half of it)."""
    path = status_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{FILE_NAME}.{os.getpid()}")
    partial.write_text(json.dumps({"pid": pid, "steps": [asdict(s) for s in steps]}))
    os.replace(partial, path)


def status_clear(data_dir: Path) -> None:
    status_path(data_dir).unlink(missing_ok=True)


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    return True


_cache: dict[str, Any] = {"key": None, "steps": []}


def status_pending(data_dir: Path) -> list[dict[str, str]]:
    """The steps not done yet, each with its state in words; [] when there is no file,
    it cannot be read, or the launcher that wrote it is gone. One stat per call; the file
    is read again only when it changed."""
    path = status_path(data_dir)
    try:
        stat = path.stat()
    except OSError:
        return []
    key = (str(path), stat.st_ino, stat.st_mtime_ns, stat.st_size)
    if _cache["key"] != key:
        try:
            content = json.loads(path.read_text())
            steps = [s for s in content["steps"] if s["state"] != "done" and s.get("shown", True)]
            pid = content["pid"]
        except (OSError, ValueError, KeyError, TypeError):
            steps, pid = [], None
        _cache.update(key=key, steps=steps, pid=pid)
    if not _cache["steps"] or not _alive(_cache["pid"]):
        return []
    return [
        {
            "label": s["label"],
            "waits": s["waits"],
            "state": s["state"],
            "words": STATE_WORDS.get(s["state"], s["state"]),
        }
        for s in _cache["steps"]
    ]


def preparing_context(request) -> dict[str, Any]:
    """Template context: ``preparing``, the steps `make run` has not finished."""
    from django.conf import settings

    return {"preparing": status_pending(settings.DATA_DIR)}
