"""The interpreter of an environment's in-sandbox checks (docs/environments.md,
"Graders"). Its text is embedded in ``environments.graders.grader_command`` and runs
inside the sandbox with the sandbox's ``python3`` (the host's /usr: Python 3.11, the
standard library only); the host imports it too, for the two normalisations it shares
with the graders (one definition, the same bytes hashed on both sides).

Usage inside: ``python3 -c <this text> <base64 of the JSON check list>``. Prints one
line, ``REPORT_MARK`` then the JSON report, and exits 0 iff every check passed. Its other
mode, ``python3 -c <this text> mutate <base64 of {"paths", "words"}>``, rewrites those
files with a wrong copy of each (``mutated``, for the validation's mutated reference,
``environments.mutation``); a grader's command never runs it.

Files are read (and the mutation's rewritten) under /work only, never through a
link: each path component is opened relative to its parent with ``O_NOFOLLOW`` (a
symlink anywhere, ``out.txt -> /etc/passwd`` included, is a failure, not a read), and
only regular files are read (a FIFO is opened non-blocking and refused). Commands run
in a session of their own, their output to a scratch file (its tail kept), killed at
their timeout; then every process of the sandbox but this one and its ancestors is
killed, so nothing a command left running can change a file checked later or write into
this report."""

import base64
import contextlib
import csv
import hashlib
import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import time

ROOT = "/work"
REPORT_MARK = "ARENA-GRADER-REPORT "
# What a parsing check (text, CSV, JSON) reads of a file at most; hashing streams.
PARSE_MAX_BYTES = 16 * 1024 * 1024
DETAIL_MAX_CHARS = 300
OUTPUT_TAIL_BYTES = 1000
LEFTOVER_WAIT_S = 5.0
SANDBOX_INITS = ("bwrap", "docker-init", "tini")
MAGIC = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "jpeg": (b"\xff\xd8\xff",),
    "pdf": (b"%PDF-",),
    "zip": (b"PK\x03\x04", b"PK\x05\x06"),
}


def normalised_text(data: bytes) -> bytes:
    """CRLF → LF, a leading UTF-8 BOM dropped, each line's trailing ASCII whitespace
    stripped, trailing blank lines dropped (no final newline either)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = [line.rstrip() for line in data.replace(b"\r\n", b"\n").split(b"\n")]
    while lines and not lines[-1]:
        lines.pop()
    return b"\n".join(lines)


def normalised_text_sha256(data: bytes) -> str:
    return hashlib.sha256(normalised_text(data)).hexdigest()


def contains_form(text: str) -> str:
    """What ``text_contains`` and ``message_contains`` compare: case folded, every run of
    whitespace one space, none at the ends."""
    return " ".join(text.casefold().split())


def canonical_json_sha256(data: bytes) -> str | None:
    """The SHA-256 of the JSON document's canonical form (keys sorted, no spaces, not
    ASCII-escaped), or None when ``data`` is not JSON."""
    try:
        value = json.loads(data)
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Refused(Exception):
    """The file cannot be checked (missing, a link, not a regular file, too large)."""


def _open(path: str, flags: int = os.O_RDONLY) -> int:
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in path:
        raise Refused("not a plain path under /work")
    fd = os.open(ROOT, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
        found = os.open(parts[-1], flags, dir_fd=fd)
    except FileNotFoundError:
        raise Refused("no such file") from None
    except OSError as exc:
        raise Refused(f"cannot be opened without following a link ({exc.strerror})") from None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(found).st_mode):
        os.close(found)
        raise Refused("not a regular file")
    return found


def _read(path: str) -> bytes:
    fd = _open(path)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(PARSE_MAX_BYTES + 1)
    if len(data) > PARSE_MAX_BYTES:
        raise Refused(f"larger than {PARSE_MAX_BYTES} bytes")
    return data


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with os.fdopen(_open(path), "rb") as handle:
        for chunk in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _utf8(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _kind(data: bytes, kind: str) -> tuple[bool, str]:
    if kind in MAGIC:
        ok = data.startswith(MAGIC[kind])
        return ok, f"{'starts' if ok else 'does not start'} with the {kind} signature"
    text = _utf8(data)
    if text is None:
        return False, "not UTF-8 text without NUL bytes"
    if kind == "json":
        ok = canonical_json_sha256(data) is not None
        return ok, "parses as JSON" if ok else "does not parse as JSON"
    return True, "UTF-8 text without NUL bytes"


def _csv_shape(data: bytes, header: list, rows: int) -> tuple[bool, str]:
    text = _utf8(data[3:] if data.startswith(b"\xef\xbb\xbf") else data)
    if text is None:
        return False, "not UTF-8 text without NUL bytes"
    try:
        table = [r for r in csv.reader(io.StringIO(text, newline="")) if any(c.strip() for c in r)]
    except csv.Error as exc:
        return False, f"not CSV ({exc})"
    found = [c.strip() for c in table[0]] if table else []
    if found != [h.strip() for h in header]:
        return False, f"header is {json.dumps(found[:50])[:200]}"
    ok = len(table) - 1 == rows
    return ok, f"{len(table) - 1} rows after the header (expected {rows})"


def _text_lines(data: bytes, lines: int) -> tuple[bool, str]:
    text = _utf8(data)
    if text is None:
        return False, "not UTF-8 text without NUL bytes"
    found = sum(1 for line in text.splitlines() if line.strip())
    return found == lines, f"{found} non-blank lines (expected {lines})"


def _json_keys(data: bytes, keys: list) -> tuple[bool, str]:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return False, "does not parse as JSON"
    if not isinstance(value, dict):
        return False, "not a JSON object"
    missing = [k for k in keys if k not in value]
    if missing:
        return False, f"lacks the keys {json.dumps(missing[:20])[:200]}"
    return True, "has every key"


def _ancestors() -> set:
    keep, pid = {1, os.getpid()}, os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                pid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        keep.add(pid)
    return keep


def _own_namespace() -> bool:
    """In a sandbox's own PID namespace, whose pid 1 is bwrap (``local``) or docker's
    init: never kill anything when run elsewhere (a person trying the command)."""
    try:
        with open("/proc/1/comm") as handle:
            return handle.read().strip() in SANDBOX_INITS
    except OSError:
        return False


def _others(keep: set) -> list:
    """The sandbox's processes outside ``keep``, but a zombie whose parent is kept: the
    parent (an ancestor of this one) reaps it, or nobody does, and it runs nothing."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep:
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] == "Z" and int(fields[1]) in keep - {1}:
            continue
        found.append(int(name))
    return found


def kill_leftovers() -> None:
    """Kills every process of the sandbox but this one and its ancestors (in the
    sandbox's own PID namespace /proc lists only its processes), again and again until
    none is left: what a dying process spawned meanwhile is caught, and a killed
    process stays listed (a zombie, its name still readable) until the sandbox's init
    reaps it, so the next check starts only once it is gone (at most LEFTOVER_WAIT_S)."""
    if not _own_namespace():
        return
    keep = _ancestors()
    deadline = time.monotonic() + LEFTOVER_WAIT_S
    while True:
        left = _others(keep)
        if not left or time.monotonic() > deadline:
            return
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _command(check: dict) -> tuple[bool, str]:
    cwd = ROOT + "/repo" if check.get("cwd") == "repo" else ROOT
    with tempfile.TemporaryFile() as log:
        try:
            proc = subprocess.Popen(
                ["bash", "-c", check["run"]],
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            return False, f"could not start: {exc.strerror}"
        try:
            code = proc.wait(timeout=check["timeout_s"])
        except subprocess.TimeoutExpired:
            code = None
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kill_leftovers()
        log.seek(max(0, log.seek(0, 2) - OUTPUT_TAIL_BYTES))
        tail = log.read().decode("utf-8", "replace")
    if code is None:
        return False, f"timed out after {check['timeout_s']} s; output ends: {tail}"
    ok = code == check["expect_exit"]
    return ok, f"exit {code} (expected {check['expect_exit']}); output ends: {tail}"


def run_check(check: dict) -> tuple[bool, str]:
    kind = check["type"]
    if kind == "command":
        return _command(check)
    path = check["path"]
    try:
        if kind == "file_exists":
            os.close(_open(path))
            return True, "a regular file"
        if kind == "file_sha256":
            found = _sha256(path)
            return found == check["sha256"], f"sha256 {found}"
        data = _read(path)
    except Refused as exc:
        return False, str(exc)
    if kind == "file_kind":
        return _kind(data, check["kind"])
    if kind == "text_equals":
        found = normalised_text_sha256(data)
        return found == check["sha256"], f"normalised text sha256 {found}"
    if kind == "json_equals":
        found = canonical_json_sha256(data)
        if found is None:
            return False, "does not parse as JSON"
        return found == check["sha256"], f"canonical JSON sha256 {found}"
    if kind == "csv_shape":
        return _csv_shape(data, check["header"], check["rows"])
    if kind == "text_contains":
        text = _utf8(data)
        if text is None:
            return False, "not UTF-8 text without NUL bytes"
        ok = contains_form(check["text"]) in contains_form(text)
        return ok, "the text says it" if ok else "the text does not say it"
    if kind == "text_lines":
        return _text_lines(data, check["lines"])
    if kind == "json_keys":
        return _json_keys(data, check["keys"])
    return False, f"unknown check type {kind!r}"


# --- mutation: a wrong copy of the reference's artifact (environments.validation) --------

_WORD = re.compile(r"[^\W\d_]+")
_DIGIT_SHIFT = str.maketrans("0123456789", "1234567890")


def mutated_text(text: str, words: set) -> str:
    """``text`` made wrong: every digit shifted (0→1 … 9→0), every word in ``words``
    (case folded) taken out, and its last non-blank line dropped when it has two."""
    out = _WORD.sub(lambda m: "" if m.group(0).casefold() in words else m.group(0), text)
    lines = out.translate(_DIGIT_SHIFT).split("\n")
    filled = [i for i, line in enumerate(lines) if line.strip()]
    if len(filled) >= 2:
        del lines[filled[-1]]
    return "\n".join(lines)


def _mutated_json(value, words: set):
    if isinstance(value, dict):
        return {key: _mutated_json(item, words) for key, item in value.items()}
    if isinstance(value, list):
        return [_mutated_json(item, words) for item in value[:-1]]
    if isinstance(value, str):
        return mutated_text(value, words)
    if isinstance(value, bool) or value is None:
        return not value
    return value + 1


def mutated(path: str, data: bytes, words: set) -> bytes:
    """A deterministic wrong copy of a file: text and JSON by ``mutated_text`` (JSON
    stays JSON: strings mutated, numbers plus one, each list's last item dropped), and
    emptied when that changes nothing; anything else has its last byte inverted."""
    text = _utf8(data)
    if text is None or any(data.startswith(m) for magics in MAGIC.values() for m in magics):
        return data[:-1] + bytes([data[-1] ^ 0xFF]) if data else b"\0"
    out = None
    if path.lower().endswith(".json"):
        with contextlib.suppress(ValueError, RecursionError):
            out = json.dumps(_mutated_json(json.loads(text), words), ensure_ascii=False)
    if out is None:
        out = mutated_text(text, words)
    if contains_form(out) == contains_form(text):
        out = ""
    return out.encode("utf-8", "surrogatepass")


def mutate_files(paths: list, words: set) -> list:
    """Rewrites each regular file at ``paths`` (under /work, never through a link) with
    its ``mutated`` copy; one ``{"path", "mutated", "detail"}`` per path."""
    done = []
    for path in paths:
        try:
            data = _read(path)
            fd = _open(path, os.O_WRONLY | os.O_TRUNC)
        except Refused as exc:
            done.append({"path": path, "mutated": False, "detail": str(exc)})
            continue
        with os.fdopen(fd, "wb") as handle:
            handle.write(mutated(path, data, words))
        done.append({"path": path, "mutated": True, "detail": f"{len(data)} bytes rewritten"})
    return done


def main(argv: list) -> int:
    kill_leftovers()  # nothing the trajectory left running touches what is checked
    if argv[1] == "mutate":
        order = json.loads(base64.b64decode(argv[2]))
        done = mutate_files(order["paths"], {w.casefold() for w in order["words"]})
        sys.stdout.write("\n" + REPORT_MARK + json.dumps({"mutated": done}) + "\n")
        return 0
    checks = json.loads(base64.b64decode(argv[1]))
    results = []
    for check in checks:
        try:
            ok, detail = run_check(check)
        except Exception as exc:  # one broken check fails alone, with its reason
            ok, detail = False, f"the check failed to run: {type(exc).__name__}"
        entry = {"type": check.get("type"), "passed": bool(ok), "detail": detail[:DETAIL_MAX_CHARS]}
        if "path" in check:
            entry["path"] = check["path"]
        results.append(entry)
    passed = all(r["passed"] for r in results)
    report = json.dumps({"passed": passed, "checks": results}, ensure_ascii=True)
    sys.stdout.write("\n" + REPORT_MARK + report + "\n")
    sys.stdout.flush()
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
