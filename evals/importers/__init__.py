"""Importers of the task sets labs already have (docs/evaluations.md, "Importing task
sets"): SWE-bench instances (``swebench``), OSWorld-style task JSON (``osworld``) and
Inspect-style datasets (``dataset``), each turned into a suite ``evals.suites`` reads.

Reading is strict: a record that cannot be used stops the import with one
``ImportFailed`` naming the file, the record (its line or id) and the field. A record
that is well formed but has no mapping here (an OSWorld evaluator the arena cannot
check, a SWE-bench test list too long for a command) is *skipped* with its reason, or
refused under ``strict``."""

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

MAX_FILE_BYTES = 64 * 1024 * 1024


class ImportFailed(ValueError):
    """An input that cannot be imported: the file, the record (``line 3``, ``instance
    'x'``) and the field, each when known."""

    def __init__(self, file, problem, record=None, field=None):
        super().__init__(file, problem, record, field)
        self.file, self.problem, self.record, self.field = file, problem, record, field

    def __str__(self):
        parts = [str(self.file)]
        if self.record is not None:
            parts.append(self.record)
        if self.field is not None:
            parts.append(f"field '{self.field}'")
        return ": ".join([*parts, self.problem])


@dataclass
class Imported:
    """What an importer made: the suite's tasks (mappings as the suite file has them),
    the records skipped with their reasons, and the files to write beside the suite
    (a path relative to the suite file → its bytes)."""

    tasks: list[dict] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)

    def skip(self, record: str, reason: str, *, strict: bool, file) -> None:
        if strict:
            raise ImportFailed(file, f"cannot be imported: {reason}", record)
        self.skipped.append((record, reason))


def read_bytes(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ImportFailed(path, f"file is larger than the limit of {MAX_FILE_BYTES} bytes")
        return path.read_bytes()
    except OSError as exc:
        raise ImportFailed(path, f"cannot read the file: {exc.strerror or exc}") from None


def read_text(path: Path) -> str:
    data = read_bytes(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        problem = f"not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}"
        raise ImportFailed(path, problem) from None
    if not text.strip():
        raise ImportFailed(path, "the file is empty")
    return text


def _no_duplicates(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def json_value(text: str, path: Path, record: str | None = None, field: str | None = None):
    """``text`` parsed as JSON; a key given twice is an error, not the last one kept."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}: " if record is None else ""
        raise ImportFailed(path, f"not valid JSON: {where}{exc.msg}", record, field) from None
    except (ValueError, RecursionError) as exc:
        raise ImportFailed(path, f"not valid JSON: {exc}", record, field) from None


def json_records(path: Path) -> list[tuple[str, object]]:
    """A JSON list or JSON Lines, decided by the first character: each record with
    where it is (``line N`` in JSONL, ``record #N`` from 1 in a list). Blank lines in
    JSONL are skipped."""
    text = read_text(path)
    if text.lstrip().startswith("["):
        items = json_value(text, path)
        if not isinstance(items, list):
            raise ImportFailed(path, "must be a JSON list of records or JSON Lines")
        records = [(f"record #{i}", item) for i, item in enumerate(items, 1)]
    else:
        records = [
            (f"line {n}", json_value(line, path, f"line {n}"))
            for n, line in enumerate(text.splitlines(), 1)
            if line.strip()
        ]
    if not records:
        raise ImportFailed(path, "has no records")
    return records


def string(raw: dict, key: str, fail, *, required=True, blank_ok=False) -> str | None:
    """``raw[key]`` as a string; ``fail(problem, field)`` raises."""
    value = raw.get(key)
    if value is None:
        if required:
            fail("missing", key)
        return None
    if not isinstance(value, str):
        fail(f"must be a string, got {type(value).__name__}", key)
    if not blank_ok and not value.strip():
        fail("must not be blank", key)
    return value


class _Dumper(yaml.SafeDumper):
    pass


def _text(dumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def suite_yaml(tasks: list[dict], *, header: str) -> str:
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    body = yaml.dump(
        {"tasks": tasks}, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100
    )
    return comment + body


def write_suite(imported: Imported, output: Path, *, header: str) -> None:
    """The suite at ``output`` and its files beside it (created or replaced)."""
    root = output.parent
    for relative, data in imported.files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    root.mkdir(parents=True, exist_ok=True)
    temporary = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    temporary.write_text(suite_yaml(imported.tasks, header=header), encoding="utf-8")
    temporary.replace(output)
