"""An environment's grader (docs/environments.md, "Graders"): data, never code. A
grader is ``{"version": 1, "checks": [...]}``; every check but ``message_contains``
runs inside the sandbox through one fixed interpreter (``environments.grader_script``),
whose text and the check list are all the shell command holds; ``message_contains``
compares strings on the host. What the sandbox prints back is untrusted: the report is
read from the last line only, bounded, and anything else is a failure with its reason.

Check types (paths relative to /work):

- ``{"type": "file_exists", "path": P}``: a regular file (not a link) at P;
- ``{"type": "file_kind", "path": P, "kind": K}``: K one of ``FILE_KINDS``, sniffed
  from the bytes (magic numbers; json parses; text and csv are UTF-8 without NUL);
- ``{"type": "file_sha256", "path": P, "sha256": H}``: the bytes' hash;
- ``{"type": "text_equals", "path": P, "sha256": H}``: H from ``normalised_text_sha256``;
- ``{"type": "csv_shape", "path": P, "header": [...], "rows": N}``: N rows after the
  header (blank rows not counted, cells compared stripped);
- ``{"type": "json_equals", "path": P, "sha256": H}``: H from ``canonical_json_sha256``;
- ``{"type": "text_contains", "path": P, "text": T}``: the file's text contains T (case
  and runs of whitespace ignored, as ``message_contains``);
- ``{"type": "text_lines", "path": P, "lines": N}``: the text has N non-blank lines;
- ``{"type": "json_keys", "path": P, "keys": [...]}``: a JSON object with those keys;
- ``{"type": "message_contains", "text": T}``: the final message contains T (case and
  runs of whitespace ignored);
- ``{"type": "command", "run": CMD, "cwd": "repo" | "", "timeout_s": N,
  "expect_exit": 0}``: CMD with bash in /work/repo or /work, its exit status compared.
"""

import base64
import json
import re
import shlex
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from environments.grader_script import (
    REPORT_MARK,
    canonical_json_sha256,
    contains_form,
    normalised_text_sha256,
)
from sandboxes.base import Sandbox, ToolError
from sandboxes.untrusted import storable_text

# A command check's bound: a repo task's success command has the same (2000).
COMMAND_MAX_CHARS = 2000

__all__ = [
    "GraderInvalid",
    "GraderResult",
    "canonical_json_sha256",
    "grader_command",
    "grader_run",
    "grader_timeout_s",
    "grader_validate",
    "normalised_text_sha256",
]

GRADER_VERSION = 1
CHECKS_MAX = 50
STRING_MAX_CHARS = 4000
PATH_MAX_CHARS = 1000
HEADER_MAX_COLUMNS = 200
ROWS_MAX = 10_000_000
COMMAND_TIMEOUT_S = (1, 900)
COMMAND_TIMEOUT_DEFAULT_S = 120
# The interpreter's own time (file checks, hashing) on top of its commands'.
FILE_CHECKS_S = 60
FILE_KINDS = ("text", "csv", "json", "png", "jpeg", "pdf", "zip")
REPORT_MAX_CHARS = 64 * 1024
DETAIL_MAX_CHARS = 300
_HEX64 = re.compile(r"[0-9a-f]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FIELDS = {
    "file_exists": {"path"},
    "file_kind": {"path", "kind"},
    "file_sha256": {"path", "sha256"},
    "text_equals": {"path", "sha256"},
    "csv_shape": {"path", "header", "rows"},
    "json_equals": {"path", "sha256"},
    "text_contains": {"path", "text"},
    "text_lines": {"path", "lines"},
    "json_keys": {"path", "keys"},
    "message_contains": {"text"},
    "command": {"run", "cwd", "timeout_s", "expect_exit"},
}
CHECK_TYPES = tuple(_FIELDS)
HOST_CHECKS = ("message_contains",)


class GraderInvalid(ValueError):
    """A grader that cannot be used; the message says which check and what to change."""


def _where(index: int, kind: str = "") -> str:
    return f"check {index + 1}" + (f" ({kind})" if kind else "")


def _string(value, what: str, *, limit: int = STRING_MAX_CHARS, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise GraderInvalid(f"{what} must be a string")
    if not value and not empty:
        raise GraderInvalid(f"{what} must not be empty")
    if len(value) > limit:
        raise GraderInvalid(f"{what} is {len(value)} characters; at most {limit}")
    return value


def _int(value, what: str, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise GraderInvalid(f"{what} must be a whole number from {lo} to {hi}")
    return value


def _path(value, what: str) -> str:
    path = _string(value, what, limit=PATH_MAX_CHARS)
    if _CONTROL.search(path):
        raise GraderInvalid(f"{what} holds a control character (NUL, newline, ...)")
    if path.startswith("/"):
        raise GraderInvalid(
            f"{what} {path!r} is absolute; paths are relative to /work (write 'out.txt', "
            "not '/work/out.txt')"
        )
    parts = path.split("/")
    if ".." in parts:
        raise GraderInvalid(f"{what} {path!r} climbs out with '..'; name a file under /work")
    if any(p in ("", ".") for p in parts):
        raise GraderInvalid(f"{what} {path!r} has an empty or '.' component; write it plainly")
    return path


def _sha256(value, what: str) -> str:
    found = _string(value, what).lower()
    if not _HEX64.fullmatch(found):
        raise GraderInvalid(f"{what} must be a SHA-256: 64 hexadecimal digits")
    return found


def _check(raw, index: int) -> dict:
    if not isinstance(raw, dict):
        raise GraderInvalid(f"{_where(index)} must be an object with a 'type'")
    kind = raw.get("type")
    if kind not in _FIELDS:
        known = ", ".join(CHECK_TYPES)
        raise GraderInvalid(f"{_where(index)} has unknown type {str(kind)[:60]!r}; one of {known}")
    where = _where(index, kind)
    unknown = sorted(set(raw) - _FIELDS[kind] - {"type"})
    if unknown:
        raise GraderInvalid(f"{where} has no field {', '.join(repr(u[:60]) for u in unknown)}")
    check: dict = {"type": kind}
    if "path" in _FIELDS[kind]:
        check["path"] = _path(raw.get("path"), f"{where}: path")
    if kind == "file_kind":
        if raw.get("kind") not in FILE_KINDS:
            raise GraderInvalid(f"{where}: kind must be one of {', '.join(FILE_KINDS)}")
        check["kind"] = raw["kind"]
    elif kind in ("file_sha256", "text_equals", "json_equals"):
        check["sha256"] = _sha256(raw.get("sha256"), f"{where}: sha256")
    elif kind == "csv_shape":
        header = raw.get("header")
        if not isinstance(header, list) or not 0 < len(header) <= HEADER_MAX_COLUMNS:
            raise GraderInvalid(
                f"{where}: header must be a list of 1 to {HEADER_MAX_COLUMNS} names"
            )
        check["header"] = [_string(h, f"{where}: a header name", empty=True) for h in header]
        check["rows"] = _int(raw.get("rows"), f"{where}: rows", 0, ROWS_MAX)
    elif kind in ("message_contains", "text_contains"):
        text = _string(raw.get("text"), f"{where}: text")
        if not contains_form(text):
            raise GraderInvalid(f"{where}: text is only whitespace")
        check["text"] = text
    elif kind == "text_lines":
        check["lines"] = _int(raw.get("lines"), f"{where}: lines", 0, ROWS_MAX)
    elif kind == "json_keys":
        keys = raw.get("keys")
        if not isinstance(keys, list) or not 0 < len(keys) <= HEADER_MAX_COLUMNS:
            raise GraderInvalid(f"{where}: keys must be a list of 1 to {HEADER_MAX_COLUMNS} names")
        check["keys"] = [_string(k, f"{where}: a key", empty=True) for k in keys]
    elif kind == "command":
        run = _string(raw.get("run"), f"{where}: run", limit=COMMAND_MAX_CHARS)
        if "\0" in run:
            raise GraderInvalid(f"{where}: run holds a NUL byte")
        check["run"] = run
        cwd = raw.get("cwd", "")
        if cwd not in ("", "repo"):
            raise GraderInvalid(f"{where}: cwd must be 'repo' (/work/repo) or '' (/work)")
        check["cwd"] = cwd
        check["timeout_s"] = _int(
            raw.get("timeout_s", COMMAND_TIMEOUT_DEFAULT_S),
            f"{where}: timeout_s",
            *COMMAND_TIMEOUT_S,
        )
        check["expect_exit"] = _int(raw.get("expect_exit", 0), f"{where}: expect_exit", 0, 255)
    return check


def grader_validate(grader) -> dict:
    """The grader checked and normalised (known fields only, defaults filled, hashes in
    lower case); raises ``GraderInvalid`` saying what to fix."""
    if not isinstance(grader, dict):
        raise GraderInvalid('a grader is an object: {"version": 1, "checks": [...]}')
    unknown = sorted(set(grader) - {"version", "checks"})
    if unknown:
        raise GraderInvalid(f"a grader has no field {', '.join(repr(u[:60]) for u in unknown)}")
    if grader.get("version") != GRADER_VERSION:
        raise GraderInvalid(f"the grader's version must be {GRADER_VERSION}")
    checks = grader.get("checks")
    if not isinstance(checks, list) or not checks:
        raise GraderInvalid("a grader needs a non-empty list of checks")
    if len(checks) > CHECKS_MAX:
        raise GraderInvalid(f"a grader has at most {CHECKS_MAX} checks; this one {len(checks)}")
    return {"version": GRADER_VERSION, "checks": [_check(c, i) for i, c in enumerate(checks)]}


def _sandbox_checks(grader: dict) -> list[dict]:
    return [c for c in grader["checks"] if c["type"] not in HOST_CHECKS]


def _script_b64() -> str:
    source = (Path(__file__).with_name("grader_script.py")).read_bytes()
    return base64.b64encode(zlib.compress(source, 9)).decode()


_SCRIPT_B64 = _script_b64()


def _interpreter_command(*args) -> str:
    """The fixed interpreter with ``args``, each packed as base64 of compact JSON
    (a plain word stays as it is)."""
    packed = [
        a if isinstance(a, str) else
        base64.b64encode(json.dumps(a, separators=(",", ":"), ensure_ascii=True).encode()).decode()
        for a in args
    ]  # fmt: skip
    loader = f'import base64,zlib;exec(zlib.decompress(base64.b64decode("{_SCRIPT_B64}")))'
    return f"python3 -I -S -c {shlex.quote(loader)} {' '.join(packed)}"


def grader_command(grader: dict) -> str:
    """One shell command that runs the grader's in-sandbox checks with the fixed
    interpreter and prints its report line; exits 0 iff they all pass (also with no
    such check). Validates the grader first (``GraderInvalid``)."""
    return _interpreter_command(_sandbox_checks(grader_validate(grader)))


def mutation_command(paths: list[str], words: list[str]) -> str:
    """The fixed interpreter's other mode: rewrites each file at ``paths`` (checked as a
    grader's paths are) with a wrong copy (``grader_script.mutated``), dropping
    ``words``; prints one report line ``{"mutated": [{"path", "mutated", "detail"}]}``."""
    for index, path in enumerate(paths):
        _path(path, f"mutated file {index + 1}")
    return _interpreter_command("mutate", {"paths": paths, "words": words})


def grader_timeout_s(grader: dict) -> int:
    """How long ``grader_command`` may take: its commands' timeouts and the file checks'."""
    checks = grader_validate(grader)["checks"]
    return FILE_CHECKS_S + sum(c["timeout_s"] + 5 for c in checks if c["type"] == "command")


@dataclass(frozen=True)
class GraderResult:
    """``checks``: one ``{"type", "path"?, "passed", "detail"}`` per check of the
    grader, in its order; ``error`` says why the sandbox's report could not be used."""

    passed: bool
    checks: list[dict] = field(default_factory=list)
    error: str = ""


def message_contains(message: str, text: str) -> bool:
    return contains_form(text) in contains_form(message)


def _detail(value) -> str:
    return storable_text(str(value)[:DETAIL_MAX_CHARS])[0]


def _entry(check: dict, passed: bool, detail: str) -> dict:
    path = {"path": check["path"]} if "path" in check else {}
    return {"type": check["type"], **path, "passed": passed, "detail": detail}


def report_parse(stdout: str, expected: list[dict]) -> list[dict]:
    """The in-sandbox checks' results from the interpreter's output: its last line only,
    which must be the report and name the expected checks in order; raises ValueError
    with the reason otherwise."""
    lines = stdout[-REPORT_MAX_CHARS:].rstrip("\n").rsplit("\n", 1)
    last = lines[-1]
    if not last.startswith(REPORT_MARK):
        raise ValueError("the grader printed no report")
    try:
        report = json.loads(last[len(REPORT_MARK) :])
    except (ValueError, RecursionError):
        raise ValueError("the grader's report is not JSON") from None
    found = report.get("checks") if isinstance(report, dict) else None
    if not isinstance(found, list) or len(found) != len(expected):
        raise ValueError("the grader's report does not list the grader's checks")
    results = []
    for want, got in zip(expected, found, strict=True):
        if (
            not isinstance(got, dict)
            or got.get("type") != want["type"]
            or got.get("path") != want.get("path")
            or not isinstance(got.get("passed"), bool)
        ):
            raise ValueError("the grader's report does not match the grader's checks")
        results.append(_entry(want, got["passed"], _detail(got.get("detail"))))
    return results


def grader_run(sandbox: Sandbox, grader: dict, *, final_message: str) -> GraderResult:
    """Runs the grader against the sandbox's current state (bounded by
    ``grader_timeout_s``, and by the sandbox's own shell limit) and the final message.
    Validates the grader first (``GraderInvalid``); a sandbox that fails or prints
    garbage fails the grader with the reason."""
    grader = grader_validate(grader)
    inside = _sandbox_checks(grader)
    results: list[dict] = []
    error = ""
    if inside:
        try:
            out = sandbox.shell(grader_command(grader), timeout_s=grader_timeout_s(grader))
        except (ToolError, OSError) as exc:
            error = f"the sandbox did not run the grader: {_detail(exc)}"
        else:
            try:
                if out.timed_out:
                    raise ValueError(_detail(out.error or "the grader timed out"))
                if out.truncated:
                    raise ValueError("the grader's output was truncated")
                results = report_parse(out.stdout, inside)
                if out.exit_code != (0 if all(r["passed"] for r in results) else 1):
                    raise ValueError(f"the grader exited {out.exit_code}, against its report")
            except ValueError as exc:
                error = str(exc)
                results = []
        if error:
            results = [_entry(c, False, error) for c in inside]
    by_check = iter(results)
    checks = []
    for check in grader["checks"]:
        if check["type"] == "message_contains":
            ok = message_contains(final_message, check["text"])
            detail = "the final message says it" if ok else "the final message does not say it"
            checks.append(_entry(check, ok, detail))
        else:
            checks.append(next(by_check))
    passed = not error and all(c["passed"] for c in checks)
    return GraderResult(passed=passed, checks=checks, error=error)
