"""Task suites and rubrics for offline evaluations: read, validate, fingerprint.

Two reference shapes come out as the same records: "000" (YAML or JSON; tasks with ``id``,
``input``, optional ``reference`` and ``meta``; rubrics of weighted criteria on integer scales)
and "003" (a JSON list of tasks with ``id``, ``prompt``, optional exact-match ``evaluation``).
The files are uploads, so reading is strict: unknown fields, duplicate keys and duplicate ids
are errors (a typo such as ``promt`` must not silently drop a prompt), and every error names
the file, the task and the field. The format is decided by content (JSON if it parses as JSON,
else YAML), never by the extension. Pure: the standard library and PyYAML only.
"""

import hashlib
import json
import math
import os
import re
from collections.abc import Hashable
from dataclasses import dataclass
from functools import partial
from urllib.parse import urlsplit

import yaml

from evals import scorers as scorer_specs

MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_TASKS = 100_000
# YAML aliases let a small file expand into a huge or cyclic document ("billion laughs"); these
# bound the expanded document. No alias-free file within MAX_FILE_BYTES comes near them.
_MAX_DEPTH = 100
_MAX_VALUES = 5_000_000

_DESKTOP_FIELDS = ("start_url", "attachments", "success_cmd")
_REPO_FIELDS = ("repo", "ref", "judge_ref", "test_cmd", "time_limit_s")
TASK_FIELDS = (
    "id", "input", "prompt", "reference", "meta", "evaluation", "kind", "choices", "scorers",
    *_DESKTOP_FIELDS, *_REPO_FIELDS,
)  # fmt: skip
_CRITERION_FIELDS = ("name", "description", "scale", "weight")
KINDS = ("chat", "desktop", "repo")
# A repo task's limits, as a battle's repo task has them (battles.services.repo_admission).
REPO_TIME_LIMIT = (10, 3600)
REPO_TIME_LIMIT_DEFAULT = 600
REPO_COMMAND_MAX_CHARS = 2000
# A desktop task's success command runs in the lane's sandbox after the agent: it may
# carry a packed checker (an exported environment's grader, environments.graders).
DESKTOP_SUCCESS_CMD_MAX_CHARS = 16_000
# A branch, tag or HEAD: what the sandbox's git may be asked to check out.
_REF = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,200}$")
_MERGE_TAG = "tag:yaml.org,2002:merge"
_DRIVE = re.compile(r"[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class SuiteError(ValueError):
    """A suite or rubric file that cannot be used, and where in it the problem is.

    ``task`` is the entry's id (a task's id, a criterion's name), or ``"#<index>"`` (0-based)
    while the entry has no usable id; ``field`` is a dotted path such as ``evaluation.type``.
    """

    def __init__(self, file, problem, field=None, task=None, entry="task"):
        # Everything in args, so that the error survives pickling (a worker to its caller).
        super().__init__(file, problem, field, task, entry)
        self.file, self.problem, self.field, self.entry = file, problem, field, entry
        self.task = f"#{task}" if isinstance(task, int) else task

    def __str__(self):
        file, problem, field, task, entry = self.args
        parts = [file]
        if task is not None:
            parts.append(f"{entry} #{task}" if isinstance(task, int) else f"{entry} '{task}'")
        if field is not None:
            parts.append(f"field '{field}'")
        return ": ".join([*parts, problem])


@dataclass(frozen=True)
class SuiteTask:
    """One task, whichever reference shape it came in (``input`` and ``prompt`` both land in
    ``prompt``); the desktop-only fields are empty on a chat task, the repo-only ones
    (``repo`` … ``time_limit_s``) empty on a chat or desktop task. A repo task's ``repo``
    is an http(s) git URL or a path relative to the suite file (a git bundle or a
    tarball); its ``success_cmd`` is required."""

    id: str
    kind: str
    prompt: str
    reference: str | None
    expected: str | None
    meta: dict
    start_url: str
    attachments: tuple[str, ...]
    success_cmd: str | None
    repo: str = ""
    ref: str = ""
    judge_ref: str = ""
    test_cmd: str | None = None
    time_limit_s: int | None = None
    choices: tuple[str, ...] = ()  # a chat task's multiple choices, shown lettered A, B, …
    scorers: tuple[dict, ...] = ()  # normalised (evals.scorers.parse_scorers); () : exact only


@dataclass(frozen=True)
class Suite:
    name: str  # the file name given, so that results point back at the file
    sha256: str  # of the exact bytes: a result is tied to the suite it ran
    tasks: tuple[SuiteTask, ...]


@dataclass(frozen=True)
class Criterion:
    name: str
    description: str
    scale: int  # scores run 0..scale
    weight: float


@dataclass(frozen=True)
class Rubric:
    name: str
    sha256: str
    criteria: tuple[Criterion, ...]


class _DuplicateKey(Exception):
    """Raised from inside the parsers; not a ValueError, so that JSON's failure is not taken
    for "not JSON" (and the file retried as YAML, which would keep the last value silently)."""

    def __init__(self, key, where=""):
        super().__init__(key)
        self.key, self.where = str(key), where


def _json_object(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The safe loader (libyaml's when present), but a key given twice in one mapping is an
    error: PyYAML would keep the last one silently. A key merged in (``<<: *defaults``) may
    still be overridden, as YAML intends."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # the base class reports it
            if key in seen:
                mark = key_node.start_mark
                raise _DuplicateKey(key, f" (line {mark.line + 1}, column {mark.column + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _load(data: bytes, name: str):
    """The file's one document, refused for anything that is not about its shape."""
    if len(data) > MAX_FILE_BYTES:
        raise SuiteError(name, f"file is larger than the limit of {MAX_FILE_BYTES} bytes")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"not valid UTF-8: byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"
        raise SuiteError(name, problem) from None
    if not text.strip():
        raise SuiteError(name, "the file is empty")
    try:
        doc = json.loads(text, object_pairs_hook=_json_object)
    except _DuplicateKey as dup:
        raise SuiteError(name, "duplicate key", dup.key) from None
    except RecursionError:
        raise SuiteError(name, f"nested more than {_MAX_DEPTH} levels deep") from None
    except ValueError as json_error:
        doc = _load_yaml(text, name, json_error)
    if doc is None:
        raise SuiteError(name, "the file is empty (its document is null)")
    _measure(doc, name)
    return doc


def _load_yaml(text: str, name: str, json_error: ValueError):
    loader = _StrictLoader(text)
    try:
        return loader.get_single_data()
    except _DuplicateKey as dup:
        raise SuiteError(name, f"duplicate key{dup.where}", dup.key) from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        # A file that looks like JSON was meant as JSON: its JSON error is the useful one.
        if text.lstrip()[:1] in ("{", "[") and isinstance(json_error, json.JSONDecodeError):
            where = f"line {json_error.lineno} column {json_error.colno}: {json_error.msg}"
            raise SuiteError(name, f"not valid JSON: {where}") from None
        mark, context = getattr(exc, "problem_mark", None), getattr(exc, "context", None)
        problem = f"{exc.problem}{f' ({context})' if context else ''}" if mark else str(exc)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        raise SuiteError(name, f"not valid YAML: {where}{problem}") from None
    finally:
        loader.dispose()


def _measure(doc, name: str) -> None:
    """Refuse documents nested too deeply (or cyclic) or too big once aliases are expanded,
    so that walking them later is bounded. Sizes are memoised, so a bomb costs little here."""
    memo: dict[int, int] = {}

    def size(value, depth: int) -> int:
        if not isinstance(value, dict | list):
            return 1
        if depth >= _MAX_DEPTH:
            raise SuiteError(name, f"nested more than {_MAX_DEPTH} levels deep")
        if id(value) not in memo:
            children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            memo[id(value)] = 1 + sum(size(child, depth + 1) for child in children)
            if memo[id(value)] > _MAX_VALUES:
                raise SuiteError(name, f"expands to more than {_MAX_VALUES} values (aliases?)")
        return memo[id(value)]

    size(doc, 0)


def _show(value) -> str:
    """A value as the file's author would recognise it (YAML's spelling, cut short)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, list | dict):
        return "a list" if isinstance(value, list) else "a mapping"
    text = f"{type(value).__name__} {value}"  # a YAML date, binary, set...
    text = repr(value) if isinstance(value, str | int | float) else text
    return text if len(text) <= 40 else text[:40] + "…"


def _check_fields(mapping: dict, allowed: tuple, at, prefix: str = "") -> None:
    for key in mapping:
        if key not in allowed:
            raise at(f"unknown field (allowed: {', '.join(allowed)})", f"{prefix}{key}")


def _string(mapping, key, at, *, field=None, required=False, blank_ok=True, default=None):
    """``mapping[key]`` as a string; an optional field may be absent or null."""
    field, value = field or key, mapping.get(key)
    if key not in mapping or (value is None and not required):
        if required:
            raise at("missing", field)
        return default
    if not isinstance(value, str):
        raise at(f"must be a string, got {_show(value)}", field)
    if not blank_ok and not value.strip():
        raise at("must not be blank", field)
    return value


def _top(doc, key: str, what: str, at, *, bare_list: bool) -> list:
    """The entries of a file: its top-level list, or the list under ``key`` of its mapping."""
    if bare_list and isinstance(doc, list):
        items = doc
    elif isinstance(doc, dict):
        _check_fields(doc, (key, "name", "description"), at)
        _string(doc, "name", at)
        _string(doc, "description", at)
        if key not in doc:
            raise at("missing", key)
        items = doc[key]
        if not isinstance(items, list):
            raise at(f"must be a list of {key}, got {_show(items)}", key)
    else:
        shape = f"a list of {key} or a mapping" if bare_list else "a mapping"
        raise at(f"must be {shape} with '{key}', got {_show(doc)}")
    if not items:
        raise at(f"the {what} has no {key}")
    return items


def _entry(raw, index: int, file: str, entry: str, key: str, first_at: dict) -> partial:
    """Check one entry's id (``key``); from there on, its errors name it by that id."""
    at = partial(SuiteError, file, task=index, entry=entry)
    if not isinstance(raw, dict):
        raise at(f"must be a mapping, got {_show(raw)}")
    ident = _string(raw, key, at, required=True, blank_ok=False)
    if ident != ident.strip():
        raise at("must not start or end with whitespace", key)
    at = partial(SuiteError, file, task=ident, entry=entry)
    if ident in first_at:
        raise at(f"duplicate {key} (first at index {first_at[ident]})")
    first_at[ident] = index
    return at


def _json_copy(value, path: str, at):
    """A fresh copy of JSON-able data (tasks must not share a ``meta`` through an alias)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise at(f"must be a finite number, got {value}", path)
        return value
    if isinstance(value, list):
        return [_json_copy(item, f"{path}[{i}]", at) for i, item in enumerate(value)]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise at(f"keys must be strings, got {_show(key)} (quote it)", path)
        return {key: _json_copy(item, f"{path}.{key}", at) for key, item in value.items()}
    raise at(f"{_show(value)} is not JSON (quote it to make it a string)", path)


def _url(value: str, at) -> str:
    problem = f"must be an http(s) URL, got {_show(value)}"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises on a port that is not a number in range
    except ValueError:
        raise at(problem, "start_url") from None
    bad = _CONTROL.search(value) or " " in value or not parts.hostname
    if bad or parts.scheme.lower() not in ("http", "https"):
        raise at(problem, "start_url")
    return value


def _attachment(value, field: str, at) -> str:
    if not isinstance(value, str):
        raise at(f"must be a string, got {_show(value)}", field)
    parts = value.split("/")
    problem = (
        "must use '/' between parts, not backslashes" if "\\" in value
        else "must be a relative path" if value.startswith("/") or _DRIVE.match(value)
        else "must not contain control characters" if _CONTROL.search(value)
        else "must not contain '..' parts" if ".." in parts
        else "must name a file" if all(part in ("", ".") for part in parts)
        else None
    )  # fmt: skip
    if problem:
        raise at(f"{problem}, got {_show(value)}", field)
    return value


def _evaluation(raw: dict, at) -> str | None:
    evaluation = raw.get("evaluation")
    if evaluation is None:
        return None
    if not isinstance(evaluation, dict):
        raise at(f"must be a mapping, got {_show(evaluation)}", "evaluation")
    _check_fields(evaluation, ("type", "expected"), at, prefix="evaluation.")
    if "type" not in evaluation:
        raise at("missing", "evaluation.type")
    if evaluation["type"] != "exact":
        got = _show(evaluation["type"])
        raise at(f"unknown type {got} (the only type is 'exact')", "evaluation.type")
    return _string(evaluation, "expected", at, field="evaluation.expected", required=True)


def _scoring(raw: dict, kind: str, at) -> dict:
    """A task's ``choices`` and ``scorers`` (``evals.scorers``): choices on chat tasks
    only, scorers on chat and desktop tasks (a desktop task's final message), never
    beside ``evaluation`` (an exact scorer is one of the scorers)."""
    for key, allowed in (("choices", ("chat",)), ("scorers", ("chat", "desktop"))):
        if raw.get(key) is not None and kind not in allowed:
            raise at(f"only {' and '.join(allowed)} tasks take it", key)
    if raw.get("scorers") is not None and raw.get("evaluation") is not None:
        raise at("give 'scorers' or 'evaluation', not both (an exact scorer is "
                 "{type: exact, expected: …} among the scorers)", "scorers")  # fmt: skip
    try:
        choices = scorer_specs.parse_choices(raw.get("choices"))
        specs = raw.get("scorers")
        parsed = () if specs is None else scorer_specs.parse_scorers(specs, choices=choices)
    except scorer_specs.ScorerSpecError as error:
        raise at(error.problem, error.field) from None
    return {"choices": choices, "scorers": tuple(parsed)}


def _task(raw, index: int, file: str, first_at: dict[str, int]) -> SuiteTask:
    at = _entry(raw, index, file, "task", "id", first_at)
    _check_fields(raw, TASK_FIELDS, at)
    kind = _string(raw, "kind", at, default="chat")
    if kind not in KINDS:
        raise at(f"must be one of {', '.join(KINDS)}, got {_show(kind)}", "kind")
    given = [key for key in raw if key in ("input", "prompt")]
    if not given:
        raise at("missing: give the task's text as 'input' or 'prompt'", "input")
    if len(given) > 1:
        raise at("give either 'input' or 'prompt', not both", given[1])
    prompt = _string(raw, given[0], at, required=True, blank_ok=False)
    meta = raw.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise at(f"must be a mapping, got {_show(meta)}", "meta")
    for key in _DESKTOP_FIELDS if kind == "chat" else ():
        if raw.get(key) is not None:
            raise at(f"only {'desktop and repo' if key == 'success_cmd' else 'desktop'} "
                     "tasks take it", key)  # fmt: skip
    for key in ("start_url", "attachments") if kind == "repo" else ():
        if raw.get(key) is not None:
            raise at("only desktop tasks take it (a repo task works on its repository)", key)
    for key in _REPO_FIELDS if kind != "repo" else ():
        if raw.get(key) is not None:
            raise at("only repo tasks take it", key)
    start_url = _string(raw, "start_url", at, default="")
    if raw.get("start_url") is not None:
        _url(start_url, at)
    paths = [] if raw.get("attachments") is None else raw["attachments"]
    if not isinstance(paths, list):
        raise at(f"must be a list, got {_show(paths)}", "attachments")
    attachments = tuple(_attachment(p, f"attachments[{i}]", at) for i, p in enumerate(paths))
    for i, path in enumerate(attachments):
        if path in attachments[:i]:
            raise at(f"names {_show(path)} twice", f"attachments[{i}]")
    limit = DESKTOP_SUCCESS_CMD_MAX_CHARS if kind == "desktop" else REPO_COMMAND_MAX_CHARS
    success_cmd = _command(raw, "success_cmd", at, required=kind == "repo", limit=limit)
    repo = _repo(raw, at) if kind == "repo" else {}
    return SuiteTask(
        id=raw["id"],
        kind=kind,
        prompt=prompt,
        reference=_string(raw, "reference", at),
        expected=_evaluation(raw, at),
        meta={} if meta is None else _json_copy(meta, "meta", at),
        start_url=start_url,
        attachments=attachments,
        success_cmd=success_cmd,
        **repo,
        **_scoring(raw, kind, at),
    )


def _command(
    raw: dict, key: str, at, *, required: bool = False, limit: int = REPO_COMMAND_MAX_CHARS
) -> str | None:
    command = _string(raw, key, at, required=required, blank_ok=False)
    if command is not None and "\x00" in command:
        raise at("must not contain a NUL character", key)
    if command is not None and len(command) > limit:
        raise at(f"must be at most {limit} characters", key)
    return command


def _git_ref(raw: dict, key: str, at, default: str) -> str:
    ref = _string(raw, key, at, default=default)
    if ref and not _REF.fullmatch(ref):
        raise at(
            "must be a branch, tag or HEAD (letters, digits, '.', '_', '-', '/'), "
            f"got {_show(ref)}",
            key,
        )
    return ref


def _repo(raw: dict, at) -> dict:
    """A repo task's source, refs, test command and time limit. The source is an
    http(s) URL (without credentials) or a safe path relative to the suite file."""
    source = _string(raw, "repo", at, required=True, blank_ok=False)
    try:
        parts = urlsplit(source)
        parts.port  # noqa: B018 -- raises on a port that is not a number in range
    except ValueError:  # also an unclosed bracket, an IPv6 literal that is not one
        parts = None
    if parts is None or parts.scheme:
        if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise at(f"must be an http(s) git URL or a path to a bundle or tarball, "
                     f"got {_show(source)}", "repo")  # fmt: skip
        if parts.username or parts.password or _CONTROL.search(source) or " " in source:
            raise at("a git URL must not carry credentials, spaces or control characters",
                     "repo")  # fmt: skip
    else:
        _attachment(source, "repo", at)
    limit = raw.get("time_limit_s")
    low, high = REPO_TIME_LIMIT
    if limit is None:
        limit = REPO_TIME_LIMIT_DEFAULT
    elif isinstance(limit, bool) or not isinstance(limit, int) or not low <= limit <= high:
        raise at(f"must be a whole number of seconds from {low} to {high}, got {_show(limit)}",
                 "time_limit_s")  # fmt: skip
    return {
        "repo": source,
        "ref": _git_ref(raw, "ref", at, "HEAD"),
        "judge_ref": _git_ref(raw, "judge_ref", at, ""),
        "test_cmd": _command(raw, "test_cmd", at),
        "time_limit_s": limit,
    }


def parse_suite(data: bytes, *, name: str) -> Suite:
    """A task suite from a file's bytes; ``name`` (the file's name) starts every error."""
    items = _top(_load(data, name), "tasks", "suite", partial(SuiteError, name), bare_list=True)
    if len(items) > MAX_TASKS:
        raise SuiteError(name, f"has {len(items)} tasks, more than the limit of {MAX_TASKS}")
    first_at: dict[str, int] = {}
    tasks = tuple(_task(raw, i, name, first_at) for i, raw in enumerate(items))
    return Suite(name=name, sha256=hashlib.sha256(data).hexdigest(), tasks=tasks)


def _criterion(raw, index: int, file: str, first_at: dict[str, int]) -> Criterion:
    at = _entry(raw, index, file, "criterion", "name", first_at)
    _check_fields(raw, _CRITERION_FIELDS, at)
    description = _string(raw, "description", at, required=True)
    if "scale" not in raw:
        raise at("missing", "scale")
    scale = raw["scale"]
    if not isinstance(scale, int) or isinstance(scale, bool) or scale < 1:
        raise at(f"must be a whole number ≥ 1, got {_show(scale)}", "scale")
    weight = 1.0 if raw.get("weight") is None else raw["weight"]
    try:  # a huge int does not fit a float: refused like infinity
        number = isinstance(weight, int | float) and not isinstance(weight, bool)
        weight = float(weight) if number else math.nan
    except OverflowError:
        weight = math.nan
    if not 0 < weight < math.inf:
        raise at(f"must be a finite number > 0, got {_show(raw['weight'])}", "weight")
    return Criterion(name=raw["name"], description=description, scale=scale, weight=weight)


def parse_rubric(data: bytes, *, name: str) -> Rubric:
    """A rubric from a file's bytes; ``name`` (the file's name) starts every error."""
    at = partial(SuiteError, name)
    items = _top(_load(data, name), "criteria", "rubric", at, bare_list=False)
    first_at: dict[str, int] = {}
    criteria = tuple(_criterion(raw, i, name, first_at) for i, raw in enumerate(items))
    return Rubric(name=name, sha256=hashlib.sha256(data).hexdigest(), criteria=criteria)


def _read(path) -> tuple[str, bytes]:
    name = os.fspath(path)
    try:
        with open(path, "rb") as file:
            # One byte past the limit is enough to tell that the file is too big.
            return name, file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SuiteError(name, f"cannot read the file: {exc.strerror or exc}") from None


def load_suite(path: str | os.PathLike) -> Suite:
    """The suite in a file; errors name the path as given."""
    name, data = _read(path)
    return parse_suite(data, name=name)


def load_rubric(path: str | os.PathLike) -> Rubric:
    """The rubric in a file; errors name the path as given."""
    name, data = _read(path)
    return parse_rubric(data, name=name)
