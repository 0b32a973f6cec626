"""A unified diff (``git diff``) split file by file and highlighted, for judges to read
side by side. Pure: no Django. The diff came out of an agent's sandbox, so it is
untrusted: what is kept is bounded (files, lines per file, characters per line) and
every character that reaches the HTML is escaped here (``html.escape``); the caller
marks only this module's output safe.

Highlighting is Pygments' lexer guessed from the file name (plain text when none fits),
run over the old side (context and removed lines) and the new side (context and added
lines) apart, so that each line is coloured as it reads in its own version of the file.
Tokens become ``<span class="tk-…">`` of a few families (keyword, string, comment,
number, name of a function or class, builtin, operator) styled by the site's own
stylesheet: no inline style, as the Content-Security-Policy requires."""

import html
import re
from dataclasses import dataclass, field

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.token import Comment, Keyword, Name, Number, Operator, String, _TokenType
from pygments.util import ClassNotFound

MAX_FILES = 50
MAX_LINES = 400  # per file
MAX_TOTAL_LINES = 3000  # over all files: what a page renders of one side's diff
MAX_LINE_CHARS = 500
MAX_PATH_CHARS = 300

_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
# Token families and their classes, most specific first.
_FAMILIES: tuple[tuple[_TokenType, str], ...] = (
    (Name.Function, "tk-f"),
    (Name.Class, "tk-f"),
    (Name.Builtin, "tk-b"),
    (Name.Decorator, "tk-b"),
    (Keyword, "tk-k"),
    (String, "tk-s"),
    (Comment, "tk-c"),
    (Number, "tk-n"),
    (Operator.Word, "tk-k"),
    (Operator, "tk-o"),
)


@dataclass
class Line:
    """One line of a file's diff: ``kind`` is "+", "-", " " (context), "@" (a hunk
    header) or "\\" (git's "no newline at end of file"); ``html`` is escaped."""

    kind: str
    text: str
    html: str = ""


@dataclass
class FileDiff:
    path: str
    notes: list[str] = field(default_factory=list)  # new file, deleted, renamed, binary
    lines: list[Line] = field(default_factory=list)
    more_lines: int = 0  # lines of this file's diff left out
    added: int = 0
    removed: int = 0


@dataclass
class SplitDiff:
    files: list[FileDiff]
    more_files: int = 0  # files left out


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _path_of(header: str) -> str:
    """``diff --git a/x b/x`` → ``x`` (the new name; the middle " b/" when it is
    ambiguous); the ``+++``/``---`` lines, when present, say it better."""
    rest = header[len("diff --git ") :]
    if rest.startswith("a/") and " b/" in rest:
        return rest[rest.index(" b/") + 3 :]
    return rest


_NOTES = ("new file mode", "deleted file mode", "rename from", "rename to", "Binary files")


def split(
    diff: str,
    *,
    max_files: int = MAX_FILES,
    max_lines: int = MAX_LINES,
    max_total_lines: int = MAX_TOTAL_LINES,
) -> SplitDiff:
    """The diff file by file (each starts at ``diff --git``), at most ``max_files``
    files, ``max_lines`` lines of each and ``max_total_lines`` in all (the rest is
    counted, not kept); hunk lines are told from headers by the hunk's own counts, so a
    removed line reading "-- x" is not taken for a header."""
    budget = [max_total_lines]
    files: list[FileDiff] = []
    more_files = 0
    current: FileDiff | None = None
    old_left = new_left = 0
    for raw in diff.split("\n"):
        if (old_left > 0 or new_left > 0) and raw[:1] not in ("", "+", "-", " ", "\\"):
            old_left = new_left = 0  # the hunk's counts lied: no hunk line starts so
        if old_left > 0 or new_left > 0:
            kind = raw[:1] or " "  # an empty line: context whose space was trimmed
            old_left -= kind in (" ", "-")
            new_left -= kind in (" ", "+")
            _keep(current, Line(kind, raw[1:]), max_lines, budget)
            continue
        if raw.startswith("diff --git "):
            if len(files) >= max_files:
                more_files += 1
                current = None
                continue
            current = FileDiff(path=_clip(_path_of(raw), MAX_PATH_CHARS))
            files.append(current)
        elif current is None:
            continue  # before the first file, or a file left out
        elif match := _HUNK.match(raw):
            old_left = int(match.group(1) if match.group(1) is not None else 1)
            new_left = int(match.group(2) if match.group(2) is not None else 1)
            _keep(current, Line("@", raw), max_lines, budget)
        elif raw.startswith("+++ ") and raw[4:] != "/dev/null":
            current.path = _clip(raw[4:].removeprefix("b/"), MAX_PATH_CHARS)
        elif raw.startswith("\\"):
            _keep(current, Line("\\", raw[1:]), max_lines, budget)
        elif raw.startswith(_NOTES) and len(current.notes) < 4:
            current.notes.append(_clip(raw, MAX_PATH_CHARS))
    return SplitDiff(files=files, more_files=more_files)


def _keep(current: FileDiff | None, line: Line, max_lines: int, budget: list[int]) -> None:
    if current is None:
        return
    if line.kind == "+":
        current.added += 1
    elif line.kind == "-":
        current.removed += 1
    if len(current.lines) >= max_lines or budget[0] <= 0:
        current.more_lines += 1
        return
    budget[0] -= 1
    line.text = _clip(line.text, MAX_LINE_CHARS)
    current.lines.append(line)


def lexer_for(path: str) -> Lexer:
    """Pygments' lexer for the file name, plain text when none fits. Never strips or
    adds newlines: the lexed lines must stay the diff's lines."""
    options = {"stripnl": False, "ensurenl": False}
    try:
        return get_lexer_for_filename(path.rsplit("/", 1)[-1], **options)
    except ClassNotFound:
        return TextLexer(**options)


def _css_class(ttype: _TokenType) -> str:
    for family, css in _FAMILIES:
        if ttype in family:
            return css
    return ""


def highlighted_lines(lexer: Lexer, lines: list[str]) -> list[str]:
    """Each line as escaped HTML with its tokens in spans; plain escaped lines when the
    lexer does not give back as many lines as it was given."""
    out: list[str] = [""]
    for ttype, value in lexer.get_tokens("\n".join(lines)):
        css = _css_class(ttype)
        for position, part in enumerate(value.split("\n")):
            if position:
                out.append("")
            if part:
                escaped = html.escape(part)
                out[-1] += f'<span class="{css}">{escaped}</span>' if css else escaped
    if len(out) != len(lines):
        return [html.escape(line) for line in lines]
    return out


def highlight(file: FileDiff) -> FileDiff:
    """Fills each line's ``html``: code lines highlighted within their own side of the
    file, hunk headers and notes escaped as they are."""
    lexer = lexer_for(file.path)
    sides: dict[str, list[Line]] = {"old": [], "new": []}
    for line in file.lines:
        if line.kind in (" ", "-"):
            sides["old"].append(line)
        if line.kind in (" ", "+"):
            sides["new"].append(line)
    rendered: dict[int, str] = {}
    for name in ("old", "new"):
        side = sides[name]
        for line, markup in zip(
            side, highlighted_lines(lexer, [x.text for x in side]), strict=True
        ):
            # A context line reads the same on both sides; the new side's colouring wins.
            rendered[id(line)] = markup
    for line in file.lines:
        line.html = rendered.get(id(line), html.escape(line.text))
    return file


def render(diff: str, **bounds: int) -> SplitDiff:
    """``split`` then ``highlight`` every file kept."""
    result = split(diff, **bounds)
    for file in result.files:
        highlight(file)
    return result
