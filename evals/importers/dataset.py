"""Inspect-style datasets (JSON Lines or CSV) → chat tasks scored by one scorer
(docs/evaluations.md, "Importing task sets").

A record has ``input`` (the prompt), ``target``, and optionally ``id``, ``choices`` (a
list; in CSV a JSON list in the cell) and ``metadata`` (an object; in CSV a JSON object
in the cell); any other field goes into the task's ``meta`` as it is. The column names
can be remapped. Each task gets ``scorers: [one scorer]`` built from its target (and
``choices`` when the record has them), in the schema ``evals.suites`` reads."""

import csv
import io
import math
import re
import string as strings
from functools import partial
from pathlib import Path

from evals.importers import Imported, ImportFailed, json_value, read_text
from evals.suites import MAX_TASKS

SCORERS = ("exact", "includes", "regex", "f1", "choice", "numeric", "model_graded_fact")
FIELDS = ("input", "target", "id", "choices", "metadata")
_INT = re.compile(r"^[+-]?\d+$")


def _raise(file, record, problem, field=None):
    raise ImportFailed(file, problem, record, field)


def _jsonl(path: Path, text: str):
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        raw = json_value(line, path, f"line {n}")
        if not isinstance(raw, dict):
            _raise(path, f"line {n}", f"must be a JSON object, got {type(raw).__name__}")
        yield f"line {n}", raw, False


def _csv(path: Path, text: str):
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader)
        seen = set()
        for name in header:
            if not name.strip() or name in seen:
                _raise(path, "line 1", f"the header has a blank or repeated column {name!r}")
            seen.add(name)
        for row in reader:
            where = f"line {reader.line_num}"
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                _raise(path, where, f"has {len(row)} cells, the header {len(header)}")
            yield where, dict(zip(header, row, strict=True)), True
    except csv.Error as exc:
        _raise(path, f"line {reader.line_num}", f"not valid CSV: {exc}")


def _text(value, fail, field: str, *, numbers: bool = False) -> str:
    if numbers and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if value is None:
        fail("missing", field)
    if not isinstance(value, str):
        fail(f"must be a string, got {type(value).__name__}", field)
    if not value.strip():
        fail("must not be blank", field)
    return value


def _decoded(value, from_csv: bool, fail, field: str):
    """A CSV cell holding JSON, decoded; a JSON value as it is."""
    if not from_csv or value is None:
        return value
    return json_value(value, fail.args[0], fail.args[1], field) if value.strip() else None


def _choice_letter(target: str, choices: list[str], fail, field: str) -> str:
    letters = strings.ascii_uppercase[: len(choices)]
    answer = target.strip()
    if len(answer) == 1 and answer.upper() in letters:
        return answer.upper()
    if answer in choices:
        return letters[choices.index(answer)]
    fail(f"must be a letter from A to {letters[-1]} or one of the choices, got {target!r}", field)


def _number(target: str, fail, field: str) -> int | float:
    text = target.strip()
    if _INT.fullmatch(text):
        return int(text)
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        fail(f"must be a number for the numeric scorer, got {target!r}", field)
    return number


def _scorer(kind: str, target: str, choices, options: dict, fail, field: str) -> dict:
    if kind == "exact":
        return {"type": "exact", "expected": target}
    if kind == "includes":
        return {"type": "includes", "text": target, "ignore_case": options["ignore_case"]}
    if kind == "regex":
        try:
            re.compile(target)
        except re.error as exc:
            fail(f"not a valid regular expression: {exc}", field)
        return {"type": "regex", "pattern": target}
    if kind == "choice":
        if not choices:
            fail("the choice scorer needs choices", options["fields"]["choices"])
        return {"type": "choice", "answer": _choice_letter(target, choices, fail, field)}
    if kind == "numeric":
        return {"type": "numeric", "target": _number(target, fail, field),
                "tolerance": options["tolerance"], "relative": options["relative"]}  # fmt: skip
    return {"type": kind, "target": target}  # f1, model_graded_fact


def _task(raw: dict, from_csv: bool, n: int, fail, scorer: str, options: dict, ids: dict):
    fields = options["fields"]
    prompt = _text(raw.get(fields["input"]), fail, fields["input"])
    target = _text(raw.get(fields["target"]), fail, fields["target"], numbers=True)
    ident = raw.get(fields["id"])
    if ident is None or ident == "":
        ident = f"sample-{n}"
    ident = _text(ident, fail, fields["id"], numbers=True).strip()
    if ident in ids:
        fail(f"duplicate id {ident!r} (first at {ids[ident]})", fields["id"])
    ids[ident] = fail.args[1]
    choices = _decoded(raw.get(fields["choices"]), from_csv, fail, fields["choices"])
    if choices is not None:
        if not isinstance(choices, list) or len(choices) < 2 or len(choices) > 26:
            fail("must be a list of 2 to 26 choices", fields["choices"])
        for i, choice in enumerate(choices):
            _text(choice, fail, f"{fields['choices']}[{i}]", numbers=True)
        choices = [str(choice) for choice in choices]
    metadata = _decoded(raw.get(fields["metadata"]), from_csv, fail, fields["metadata"])
    if metadata is not None and not isinstance(metadata, dict):
        fail("must be an object", fields["metadata"])
    extra = {key: value for key, value in raw.items() if key not in fields.values()}
    task = {"id": ident, "prompt": prompt}
    if choices:
        task["choices"] = choices
    task["scorers"] = [_scorer(scorer, target, choices, options, fail, fields["target"])]
    meta = {**extra, **(metadata or {})}
    if meta:
        task["meta"] = meta
    return task


def import_dataset(
    path: Path,
    *,
    scorer: str,
    fields: dict | None = None,
    file_format: str | None = None,
    tolerance: float = 0.0,
    relative: bool = False,
    ignore_case: bool = True,
) -> Imported:
    """The chat tasks of a JSONL or CSV dataset (``file_format`` or the extension:
    ``.csv`` is CSV, anything else JSON Lines); ``fields`` renames the columns."""
    if scorer not in SCORERS:
        raise ImportFailed(path, f"unknown scorer {scorer!r} (one of {', '.join(SCORERS)})")
    if not math.isfinite(tolerance) or tolerance < 0:
        raise ImportFailed(path, f"the tolerance must be a finite number ≥ 0, got {tolerance}")
    fields = {**{name: name for name in FIELDS}, **(fields or {})}
    if len(set(fields.values())) != len(FIELDS):
        raise ImportFailed(path, "two fields are mapped to the same column")
    file_format = file_format or ("csv" if path.suffix.lower() == ".csv" else "jsonl")
    text = read_text(path)
    options = {"fields": fields, "tolerance": tolerance, "relative": relative,
               "ignore_case": ignore_case}  # fmt: skip
    imported, ids = Imported(), {}
    reader = _csv if file_format == "csv" else _jsonl
    for n, (where, raw, from_csv) in enumerate(reader(path, text), 1):
        if n > MAX_TASKS:
            raise ImportFailed(path, f"has more than the limit of {MAX_TASKS} records")
        fail = partial(_raise, path, where)
        imported.tasks.append(_task(raw, from_csv, n, fail, scorer, options, ids))
    if not imported.tasks:
        raise ImportFailed(path, "has no records")
    return imported
