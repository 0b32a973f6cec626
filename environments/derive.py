"""Graders derived from a failure (docs/environments.md, "Graders"): pure functions of
the redacted instruction and the reference run's redacted final state. A grader is
data, ``{"version": 1, "checks": [...]}``, run by the fixed interpreter of
``environments.graders``; nothing here writes code.

- budget exhausted, gave up: checks on the artifact: every file the instruction names
  (or, when it names none, every file the reference delivered) exists, has the
  reference's type and what the instruction asks of its content (``content_checks``),
  and the final message gives the reference's answer (``answer_checks``);
- a wrong result (machine judge, crowd): the reference's final state: each delivered
  file exists with the reference's type and content (text compared after normalising
  line ends and trailing spaces, JSON canonically, anything else byte for byte), and
  the reference's answer in the final message (``answer_checks``);
- a repo task's failing tests: the task's success command in the repository.

None when nothing can be derived: the candidate then needs an operator's grader."""

import csv
import hashlib
import io
import json
import re
from dataclasses import dataclass

from environments.graders import canonical_json_sha256, contains_form, normalised_text_sha256

GRADER_VERSION = 1
_NAMED_FILE = re.compile(
    r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:csv|tsv|txt|md|json|html|xml|yaml|yml|py|png|jpe?g|pdf|zip))\b",
    re.IGNORECASE,
)
# An answer's atoms: numbers, dates, phone numbers, codes ("REF-074CAA", "v2") ...
_NUMBER = re.compile(r"(?<![\w.])(?:[A-Za-z]+-)?\d+(?:[.,:/-]\d+)*(?:[A-Za-z]\w*)?(?![\w])")
# ... and names: runs of capitalised words, small words allowed inside ("Market Hall",
# "Spring Market Returns to Market Hall").
_NAME = re.compile(
    r"(?<![\w<])[A-Z][\w'’-]*(?:\s+(?:(?:of|the|to|on|in|at|for|de|a)\s+)*[A-Z][\w'’-]*)*"
)
_OPENERS = frozenset(
    ("a", "an", "and", "but", "done", "here", "i", "i'm", "i've", "in", "it", "it's", "my",
     "no", "ok", "on", "sure", "that", "the", "there", "these", "this", "to", "yes", "you")
)  # fmt: skip
ANSWER_CHECKS_MAX = 8
# What the instruction asks a file to contain: quoted text, "containing X", "with the
# text X", "with the header(s) X", up to the end of the clause.
_QUOTED = re.compile(
    r"[\"“]([^\"”\n]{1,200})[\"”]|(?<!\w)'([^'\n]{1,200})'(?!\w)|`([^`\n]{1,200})`"
)
_CONTAINING = re.compile(
    r"\b(?:containing|that\s+(?:contains|says)|with\s+the\s+(?:text|contents?|words?|phrase|"
    r"line|headers?|columns?)|with\s+(?:text|contents?))\s+(?:the\s+(?:words?|text|phrase)\s+)?"
    r"(?P<text>[^;!?\n]{1,200}?)(?=\s*(?:[;!?\n]|\.(?:\s|$)|$|,?\s+(?:and|then)\s+"
    r"(?:tell|say|report|reply|answer|give|deliver|send|save|then)\b))",
    re.IGNORECASE,
)
_COUNT = re.compile(
    r"\b(\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\s+"
    r"(?:\w+\s+)?(rows|lines|entries|items)\b",
    re.IGNORECASE,
)
_COUNT_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve")  # fmt: skip
# What redaction puts in place of a value (exports.redaction): "<PERSON_1>".
_PLACEHOLDER = re.compile(r"<[A-Z][A-Z_]*_\d+>")
# A file the instruction has fetched or copied: its content is the source's, fixed.
_COPIED = re.compile(r"\b(?:save|download|copy|store|fetch)\b[^.]*?(?:https?://|/\w)", re.I)
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"%PDF-", "pdf"),
    (b"PK\x03\x04", "zip"),
)


@dataclass(frozen=True)
class Delivered:
    """A file the reference delivered: its path under /work and its (redacted) bytes.
    ``exact``: False when redaction changed the bytes. A replay that fetches the file
    again (from the simulated web) gets the original, so such a file is checked by its
    shape (``shape_checks``), never by its hash."""

    path: str
    data: bytes
    exact: bool = True


def files_named(instruction: str) -> list[str]:
    """File names with a known extension the instruction mentions, in order, once."""
    seen: list[str] = []
    for match in _NAMED_FILE.finditer(instruction):
        if match.group(1) not in seen:
            seen.append(match.group(1))
    return seen


def kind_of(path: str, data: bytes) -> str | None:
    """The kind the grader's ``file_kind`` check sniffs: by magic number, else JSON,
    CSV or text by content (CSV by its extension), else None."""
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind
    if b"\0" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if path.lower().endswith(".json"):
        try:
            json.loads(text)
            return "json"
        except ValueError:
            return "text"
    if path.lower().endswith((".csv", ".tsv")):
        return "csv"
    return "text"


def _content_check(item: Delivered, kind: str | None) -> dict:
    if kind == "json":
        digest = canonical_json_sha256(item.data)
        if digest is not None:
            return {"type": "json_equals", "path": item.path, "sha256": digest}
    if kind in ("text", "csv"):
        return {
            "type": "text_equals",
            "path": item.path,
            "sha256": normalised_text_sha256(item.data),
        }
    return {
        "type": "file_sha256",
        "path": item.path,
        "sha256": hashlib.sha256(item.data).hexdigest(),
    }


def _kind_checks(path: str, kind: str | None) -> list[dict]:
    checks = [{"type": "file_exists", "path": path}]
    if kind is not None:
        checks.append({"type": "file_kind", "path": path, "kind": kind})
    return checks


def _grader(checks: list[dict]) -> dict | None:
    return {"version": GRADER_VERSION, "checks": checks} if checks else None


def asked_files(instruction: str, delivered: list[str], message: str) -> list[str]:
    """The files the instruction asks for: those it names; when it names none, the
    delivered ones if it asks to save, download, copy or fetch something, or if the
    message gives no answer (the files are then the result); otherwise none (a file
    delivered beside an answer to a question is a by-product)."""
    named = files_named(instruction)
    if named:
        return named
    if _COPIED.search(instruction) or not answer_atoms(instruction, message):
        return delivered
    return []


def answer_atoms(instruction: str, message: str) -> list[str]:
    """The answer a final message gives beyond its instruction: its numbers (dates,
    phone numbers, codes with digits) and capitalised names that the instruction does
    not already contain, in order, once, at most ``ANSWER_CHECKS_MAX``. A single
    capitalised word that opens a sentence is taken for the sentence's opening, not a
    name, unless it is the whole message ("Thursday."); so are ``_OPENERS`` ("The",
    "I", ...)."""
    asked = contains_form(instruction)
    one_sentence = len(re.split(r"[.!?]\s+", message.strip())) == 1
    atoms: list[tuple[int, str]] = [(m.start(), m.group(0)) for m in _NUMBER.finditer(message)]
    for match in _NAME.finditer(message):
        words = match.group(0).split()
        while words and words[0].casefold() in _OPENERS:
            words.pop(0)
        before = message[: match.start()].rstrip()
        opening = words == match.group(0).split() and (not before or before[-1] in ".!?:\n")
        lone = len(words) < 2 or not words[1][:1].isupper()
        alone = len(words) == 1 and one_sentence and not re.search(r"\w", message[match.end() :])
        if words and opening and lone and not alone:
            words.pop(0)  # a sentence's first word, not a name
        while words and words[0].islower():
            words.pop(0)
        name = re.sub(r"['’]s$", "", " ".join(words)).strip("'’-")
        if name:
            atoms.append((match.start(), name))
    found: list[str] = []
    for _, atom in sorted(atoms):
        if contains_form(atom) not in asked and atom not in found:
            found.append(atom)
    return found[:ANSWER_CHECKS_MAX]


def answer_checks(instruction: str, message: str) -> list[dict]:
    """``message_contains`` checks for ``answer_atoms``."""
    atoms = answer_atoms(instruction, message)
    return [{"type": "message_contains", "text": atom} for atom in atoms]


def asked_phrases(instruction: str) -> list[str]:
    """What the instruction asks a file to contain: quoted texts and the objects of
    "containing ...", "with the text ...", "with the header ...", in order, once."""
    found: list[str] = []
    for match in _QUOTED.finditer(instruction):
        found.append(next(g for g in match.groups() if g is not None))
    for match in _CONTAINING.finditer(instruction):
        found.append(match.group("text").strip(" ,:'\"“”`"))
    return [p for p in dict.fromkeys(found) if contains_form(p) and not _NAMED_FILE.fullmatch(p)]


def _phrase_parts(phrase: str) -> list[str]:
    """A list phrase's items ("milk, eggs and bread" → milk, eggs, bread)."""
    parts = re.split(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+", phrase)
    return [p.strip() for p in parts if contains_form(p)]


def _asked_count(instruction: str) -> int | None:
    match = _COUNT.search(instruction)
    if match is None:
        return None
    word = match.group(1).lower()
    return int(word) if word.isdigit() else _COUNT_WORDS.index(word) + 1


def shape_checks(item: Delivered, kind: str | None, *, lines_asked: int | None) -> list[dict]:
    """A file's shape: a CSV's header (unless redaction put a placeholder in it) and its
    rows; a JSON object's keys; the number of non-blank lines of a text or CSV file that
    is not ``exact`` (its hash cannot be checked), or of a text whose count is asked."""
    text = item.data.decode("utf-8", "replace")
    checks: list[dict] = []
    if kind == "csv":
        table = list(csv.reader(io.StringIO(text.lstrip("\ufeff"), newline="")))
        table = [row for row in table if any(cell.strip() for cell in row)]
        header = [cell.strip() for cell in table[0]] if table else []
        if header and not any(_PLACEHOLDER.search(cell) for cell in header):
            checks.append({"type": "csv_shape", "path": item.path, "header": header,
                           "rows": len(table) - 1})  # fmt: skip
    if kind == "json":
        value = json.loads(item.data)
        if isinstance(value, dict) and value:
            checks.append({"type": "json_keys", "path": item.path, "keys": sorted(value)})
    lines = sum(1 for line in text.splitlines() if line.strip())
    if kind in ("text", "csv") and (not item.exact or (kind == "text" and lines_asked == lines)):
        checks.append({"type": "text_lines", "path": item.path, "lines": lines})
    return checks


def content_checks(instruction: str, item: Delivered, kind: str | None) -> list[dict]:
    """What the instruction asks of the file's content, as far as the reference's own
    file shows it (a requirement the reference does not meet is taken for a misreading
    and left out): a copied file's whole normalised content when it is ``exact``; each
    asked phrase (or, when the reference has only its items, each item); its shape
    (``shape_checks``)."""
    if kind not in ("text", "csv", "json"):
        return []
    if _COPIED.search(instruction) and item.exact:
        return [_content_check(item, kind)]
    has = contains_form(item.data.decode("utf-8", "replace"))
    checks: list[dict] = []
    for phrase in asked_phrases(instruction):
        parts = [phrase] if contains_form(phrase) in has else _phrase_parts(phrase)
        for part in parts:
            if contains_form(part) in has and (item.exact or not _PLACEHOLDER.search(part)):
                checks.append({"type": "text_contains", "path": item.path, "text": part})
    return checks + shape_checks(item, kind, lines_asked=_asked_count(instruction))


def artifact_grader(instruction: str, delivered: list[Delivered], message: str = "") -> dict | None:
    """Budget exhausted or gave up: the artifact's presence, type and asked content,
    and the answer the reference's message gives."""
    by_name = {item.path.rsplit("/", 1)[-1]: item for item in delivered}
    by_path = {item.path: item for item in delivered}
    wanted = files_named(instruction) or [item.path for item in delivered]
    checks: list[dict] = []
    for path in wanted:
        item = by_path.get(path) or by_name.get(path.rsplit("/", 1)[-1])
        target = item.path if item is not None else path
        kind = kind_of(target, item.data) if item is not None else None
        checks += _kind_checks(target, kind)
        if item is not None:
            checks += content_checks(instruction, item, kind)
    return _grader(checks + answer_checks(instruction, message))


def result_grader(instruction: str, delivered: list[Delivered], message: str) -> dict | None:
    """A wrong result: the reference's delivered files and its message's answer."""
    checks: list[dict] = []
    for item in delivered:
        kind = kind_of(item.path, item.data)
        checks += _kind_checks(item.path, kind)
        if item.exact or kind not in ("text", "csv", "json"):
            checks.append(_content_check(item, kind))
        else:
            checks += shape_checks(item, kind, lines_asked=None)
    return _grader(checks + answer_checks(instruction, message))


def tests_grader(success_cmd: str, timeout_s: int) -> dict:
    """A repo task: its success command, in the repository, must exit 0."""
    check = {"type": "command", "run": success_cmd, "cwd": "repo", "timeout_s": timeout_s}
    return {"version": GRADER_VERSION, "checks": [{**check, "expect_exit": 0}]}
