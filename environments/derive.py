"""Graders derived from a failure (docs/environments.md, "Graders"): pure functions of
the redacted instruction and the reference run's redacted final state. A grader is
data, ``{"version": 1, "checks": [...]}``, run by the fixed interpreter of
``environments.graders``; nothing here writes code.

- budget exhausted, gave up: checks on the artifact: every file the instruction names
  (or, when it names none, every file the reference delivered) exists and has the
  reference's type;
- a wrong result (machine judge, crowd): the reference's final state: each delivered
  file exists with the reference's type and content (text compared after normalising
  line ends and trailing spaces, JSON canonically, anything else byte for byte), and
  the numbers its message gives that the instruction does not;
- a repo task's failing tests: the task's success command in the repository.

None when nothing can be derived: the candidate then needs an operator's grader."""

import hashlib
import json
import re
from dataclasses import dataclass

from environments.graders import canonical_json_sha256, normalised_text_sha256

GRADER_VERSION = 1
_NAMED_FILE = re.compile(
    r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:csv|tsv|txt|md|json|html|xml|yaml|yml|py|png|jpe?g|pdf|zip))\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:[.,]\d+)*(?![\w])")
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"%PDF-", "pdf"),
    (b"PK\x03\x04", "zip"),
)


@dataclass(frozen=True)
class Delivered:
    """A file the reference delivered: its path under /work and its (redacted) bytes."""

    path: str
    data: bytes


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


def artifact_grader(instruction: str, delivered: list[Delivered]) -> dict | None:
    """Budget exhausted or gave up: the artifact's presence and type."""
    by_name = {item.path.rsplit("/", 1)[-1]: item for item in delivered}
    by_path = {item.path: item for item in delivered}
    wanted = files_named(instruction) or [item.path for item in delivered]
    checks: list[dict] = []
    for path in wanted:
        item = by_path.get(path) or by_name.get(path.rsplit("/", 1)[-1])
        target = item.path if item is not None else path
        kind = kind_of(target, item.data) if item is not None else None
        checks += _kind_checks(target, kind)
    return _grader(checks)


def result_grader(instruction: str, delivered: list[Delivered], message: str) -> dict | None:
    """A wrong result: the reference's delivered files and its message's numbers."""
    checks: list[dict] = []
    for item in delivered:
        kind = kind_of(item.path, item.data)
        checks += _kind_checks(item.path, kind)
        checks.append(_content_check(item, kind))
    given = set(_NUMBER.findall(instruction))
    for number in dict.fromkeys(_NUMBER.findall(message)):
        if number not in given:
            checks.append({"type": "message_contains", "text": number})
    return _grader(checks)


def tests_grader(success_cmd: str, timeout_s: int) -> dict:
    """A repo task: its success command, in the repository, must exit 0."""
    check = {"type": "command", "run": success_cmd, "cwd": "repo", "timeout_s": timeout_s}
    return {"version": GRADER_VERSION, "checks": [{**check, "expect_exit": 0}]}
