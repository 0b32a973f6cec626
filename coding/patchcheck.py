"""Reading an agent's stored patch before the judge applies it (docs/coding.md, "What the
judge accepts"). Pure: bytes in, a review out; nothing here runs git.

An agent's change always leaves its sandbox as ``git diff --cached --binary --full-index
--no-renames`` output, made by the arena's own script with the repository's
configuration, hooks and attributes out of the way (``coding.scripts.collect_diff``).
So the judge accepts exactly that shape and nothing else: every section starts with a
``diff --git a/P b/P`` line naming one path twice, only the extended headers that
command writes, hunks whose line counts match their headers, and binary sections made
of ``literal``/``delta`` blocks. A context diff, an ed script, a diff with garbage
between sections, a rename or a copy cannot come from the arena's script, so they are
refused rather than guessed at: ``patch`` and ``git apply`` each read such input
their own way, and the paths they touch would then not be the paths this review saw.

Also refused, whatever the format: a path that is absolute, climbs out (``..``), runs
through a ``.git`` directory or holds a control character; a symbolic link or a
submodule (modes 120000 and 160000: a link can make a protected file read as another);
a binary file of a kind Python or the loader runs (extension modules, bytecode, zip
imports)."""

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

MAX_FILES = 500
FILE_MODES = ("100644", "100755")
# Binary files a Python process can run as code when they lie on its path.
EXECUTABLE_SUFFIXES = (".so", ".pyd", ".dll", ".dylib", ".pyc", ".pyo", ".zip", ".egg", ".whl")

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(?: .*)?$")
_INDEX = re.compile(rb"^index [0-9a-f]{40}\.\.[0-9a-f]{40}(?: (\d{6}))?$")
_MODE_LINE = re.compile(rb"^(old mode|new mode|deleted file mode|new file mode) (\d{6})$")
_BINARY_BLOCK = re.compile(rb"^(literal|delta) \d{1,10}$")
_BASE85_LINE = re.compile(rb"^[A-Za-z][0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]{1,70}$")
_ESCAPES = {b"n": b"\n", b"t": b"\t", b'"': b'"', b"\\": b"\\", b"a": b"\a", b"b": b"\b",
            b"f": b"\f", b"r": b"\r", b"v": b"\v"}  # fmt: skip


TWO_PATHS = "a diff header does not name one path twice (the arena's diffs never rename)"


class PatchRefused(ValueError):
    """The patch is not one the arena's own diff could have made; the message says why."""


@dataclass
class FileChange:
    path: str
    status: str = "modified"  # "added", "deleted", "modified"
    old_mode: str = ""
    new_mode: str = ""
    binary: bool = False
    added: int = 0
    removed: int = 0


@dataclass
class PatchReview:
    files: list[FileChange] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [change.path for change in self.files]


def _unquote(text: bytes) -> bytes:
    """A path as git C-quotes it (``"a/caf\\303\\251.py"``), without the quotes."""
    out, i = bytearray(), 1
    while i < len(text) - 1:
        char = text[i : i + 1]
        if char != b"\\":
            out += char
            i += 1
            continue
        nxt = text[i + 1 : i + 2]
        if nxt in _ESCAPES:
            out += _ESCAPES[nxt]
            i += 2
        elif re.fullmatch(rb"[0-3][0-7][0-7]", text[i + 1 : i + 4]):
            out.append(int(text[i + 1 : i + 4], 8))
            i += 4
        else:
            raise PatchRefused("a quoted path holds an escape git does not write")
    return bytes(out)


def _header_path(rest: bytes) -> bytes:
    """The one path of ``diff --git a/P b/P`` (``rest`` is what follows ``diff --git ``)."""
    if rest.startswith(b'"'):
        match = re.fullmatch(rb'("(?:[^"\\]|\\.)*") ("(?:[^"\\]|\\.)*")', rest)
        if match is None:
            raise PatchRefused("a diff header's quoted paths do not parse")
        old, new = _unquote(match.group(1)), _unquote(match.group(2))
    else:
        if not rest.startswith(b"a/") or len(rest) < 7 or (len(rest) - 5) % 2:
            raise PatchRefused(TWO_PATHS)
        half = (len(rest) - 5) // 2 + 2
        old, new = rest[:half], rest[half + 1 :]
    if not (old.startswith(b"a/") and new.startswith(b"b/")) or old[2:] != new[2:]:
        raise PatchRefused(TWO_PATHS)
    return old[2:]


def check_path(raw: bytes) -> str:
    """The path as text, or ``PatchRefused`` for one no diff of a checkout can hold."""
    try:
        path = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PatchRefused("a path is not UTF-8") from None
    parts = PurePosixPath(path).parts
    if not path or path.startswith("/") or not parts:
        raise PatchRefused(f"the path {path!r} is not relative")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise PatchRefused("a path holds a control character")
    if ".." in parts or any(part.casefold().rstrip(". ") == ".git" for part in parts):
        raise PatchRefused(f"the path {path!r} leaves the repository or enters .git")
    return path


def _side_path(line: bytes, prefix: bytes, path: bytes) -> None:
    """A ``---``/``+++`` line must name the header's path (or /dev/null)."""
    rest = line[4:]
    if rest.endswith(b"\t"):
        rest = rest[:-1]  # git ends a path holding a space with a tab there
    if rest == b"/dev/null":
        return
    named = _unquote(rest)[2:] if rest.startswith(b'"') else rest[2:]
    if not rest.lstrip(b'"').startswith(prefix) or named != path:
        raise PatchRefused("a ---/+++ line names another file than its diff header")


def _hunk(lines: list[bytes], at: int, change: FileChange) -> int:
    """Checks one hunk from its header at ``lines[at]``; returns the index after it."""
    match = _HUNK.match(lines[at])
    if match is None:
        raise PatchRefused("a hunk header does not parse")
    old = int(match.group(2)) if match.group(2) is not None else 1
    new = int(match.group(4)) if match.group(4) is not None else 1
    i = at + 1
    while old > 0 or new > 0:
        if i >= len(lines):
            raise PatchRefused("a hunk ends before its header's line counts")
        kind = lines[i][:1]
        if kind == b" ":
            old, new = old - 1, new - 1
        elif kind == b"-":
            old, change.removed = old - 1, change.removed + 1
        elif kind == b"+":
            new, change.added = new - 1, change.added + 1
        elif kind != b"\\":
            raise PatchRefused("a hunk holds a line that is neither context, removed nor added")
        i += 1
    if old < 0 or new < 0:
        raise PatchRefused("a hunk holds more lines than its header counts")
    while i < len(lines) and lines[i].startswith(b"\\ "):
        i += 1  # "\ No newline at end of file" after the last line
    return i


def _binary(lines: list[bytes], at: int) -> int:
    """Checks a ``GIT binary patch`` body from the line after it; returns the index
    after it (two blocks, each ``literal|delta N``, base85 lines, a blank line)."""
    i, blocks = at, 0
    while i < len(lines) and not lines[i].startswith(b"diff --git "):
        if _BINARY_BLOCK.match(lines[i]):
            blocks += 1
        elif lines[i] and not _BASE85_LINE.match(lines[i]):
            raise PatchRefused("a binary patch holds a line that is not base85")
        i += 1
    if blocks not in (1, 2):
        raise PatchRefused("a binary patch does not hold its literal/delta blocks")
    return i


def _section(lines: list[bytes], at: int) -> tuple[FileChange, int]:
    raw = _header_path(lines[at][len(b"diff --git ") :])
    change = FileChange(path=check_path(raw))
    i = at + 1
    while i < len(lines) and not lines[i].startswith((b"diff --git ", b"--- ", b"@@ ", b"GIT ")):
        line = lines[i]
        if (mode := _MODE_LINE.match(line)) is not None:
            kind, value = mode.group(1), mode.group(2).decode()
            if value not in FILE_MODES:
                what = {"120000": "a symbolic link", "160000": "a submodule"}.get(value, value)
                raise PatchRefused(f"{change.path!r} becomes {what}: only plain files are accepted")
            if kind in (b"old mode", b"deleted file mode"):
                change.old_mode = value
            else:
                change.new_mode = value
            if kind == b"new file mode":
                change.status = "added"
            elif kind == b"deleted file mode":
                change.status = "deleted"
        elif (index := _INDEX.match(line)) is not None:
            if index.group(1) is not None and index.group(1).decode() not in FILE_MODES:
                raise PatchRefused(f"{change.path!r} is not a plain file")
        else:
            text = line[:60].decode("utf-8", "replace")
            raise PatchRefused(f"an extended header the arena's diff never writes: {text!r}")
        i += 1
    if i < len(lines) and lines[i] == b"GIT binary patch":
        change.binary = True
        return change, _binary(lines, i + 1)
    if i < len(lines) and lines[i].startswith(b"--- "):
        if i + 1 >= len(lines) or not lines[i + 1].startswith(b"+++ "):
            raise PatchRefused("a --- line is not followed by its +++ line")
        _side_path(lines[i], b"a/", raw)
        _side_path(lines[i + 1], b"b/", raw)
        i += 2
        if i >= len(lines) or not lines[i].startswith(b"@@ "):
            raise PatchRefused("a file's diff has no hunk")
        while i < len(lines) and lines[i].startswith(b"@@ "):
            i = _hunk(lines, i, change)
    if i < len(lines) and not lines[i].startswith(b"diff --git "):
        raise PatchRefused("text between two files' diffs that no diff writes")
    return change, i


def review(data: bytes) -> PatchReview:
    """The files the patch changes, or ``PatchRefused``. An empty patch changes nothing."""
    if not data:
        return PatchReview()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines or not lines[0].startswith(b"diff --git "):
        raise PatchRefused(
            "the patch is not a git diff (a context diff, an ed script or other text): the "
            "arena's diffs always start with 'diff --git'"
        )
    found = PatchReview()
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        change, i = _section(lines, i)
        if change.path in seen:
            raise PatchRefused(f"{change.path!r} is changed twice")
        seen.add(change.path)
        if change.binary and (
            change.path.lower().endswith(EXECUTABLE_SUFFIXES) or ".so." in change.path.lower()
        ):
            raise PatchRefused(f"{change.path!r} is a binary a Python process can run as code")
        found.files.append(change)
        if len(found.files) > MAX_FILES:
            raise PatchRefused(f"the patch changes more than {MAX_FILES} files")
    return found
