"""OSWorld-style task JSON → desktop tasks (docs/evaluations.md, "Importing task sets").

A task is ``{"id", "instruction", "config": [{"type", "parameters"}...], "evaluator":
{"func", "result", "expected", "options", "postconfig"}, "related_apps", "snapshot"}``.
The instruction is the prompt. Of the config, ``chrome_open_tabs`` gives the first URL
as ``start_url``; ``download`` gives attachments, read from ``files`` (never fetched);
``launch``, ``open``, ``sleep`` and ``activate_window`` are left out (the arena's desktop
starts its own browser, and the attachments are in /work/attachments); any other step
cannot be reproduced, so the task is skipped. The evaluator becomes the task's
``success_cmd`` where a mapping exists (``EVALUATORS``); otherwise the task is skipped
with the reason. Paths under ``/home/user`` (the OSWorld VM's home) map to ``/work``, in
a ``vm_file`` path and, as text, in a ``vm_command_line`` command; the instruction is
kept word for word."""

import hashlib
import re
import shlex
from functools import partial
from pathlib import Path, PurePosixPath

from evals.importers import Imported, ImportFailed, json_value, read_text, string
from evals.suites import DESKTOP_SUCCESS_CMD_MAX_CHARS

ATTACHMENTS_DIR = "osworld"
IGNORED_CONFIG = ("launch", "open", "sleep", "activate_window")
FIELDS = (
    "id", "instruction", "config", "evaluator", "related_apps", "snapshot", "source",
    "trajectory", "proxy", "fixed_ip", "possibility_of_env_change", "_comments",
)  # fmt: skip
# func → (the result types, the expected types) it is mapped for.
EVALUATORS = {
    "exact_match": ("vm_command_line", "rule"),
    "check_include_exclude": ("vm_command_line", "rule"),
    "compare_text_file": ("vm_file", "cloud_file|local_file"),
}
_HOME = ("/home/user/", "~/")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()-]{0,199}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class _Unmapped(Exception):
    """A well-formed task the arena cannot run as it was meant: skipped."""


def _raise(file, record, problem, field=None):
    raise ImportFailed(file, problem, record, field)


def _task_files(path: Path) -> list[Path]:
    if path.is_dir():
        found = sorted(p for p in path.rglob("*.json") if p.is_file())
        if not found:
            raise ImportFailed(path, "the directory holds no .json task file")
        return found
    return [path]


def _work_path(value, fail, field: str) -> str:
    """An OSWorld VM path as the sandbox's path under /work."""
    if not isinstance(value, str) or not value.strip():
        fail("must be a non-blank string", field)
    if _CONTROL.search(value):
        fail("must not contain control characters", field)
    prefix = next((p for p in _HOME if value.startswith(p)), None)
    relative = PurePosixPath(value[len(prefix) :]) if prefix else None
    if relative is None or ".." in relative.parts or not relative.parts:
        raise _Unmapped(f"{field} {value!r} is not under /home/user (the arena's is /work)")
    return f"/work/{relative}"


def _rules(expected: dict, fail) -> dict:
    rules = expected.get("rules")
    if not isinstance(rules, dict):
        fail("must be an object", "evaluator.expected.rules")
    return rules


def _strings(value, fail, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        fail("must be a list of strings", field)
    return value


def _command_of(result: dict, fail) -> str:
    command = result.get("command")
    if isinstance(command, list) and command and all(isinstance(c, str) for c in command):
        command = shlex.join(command)
    if isinstance(command, str) and command.strip():
        return command.replace("/home/user/", "/work/")
    fail("must be a command (a string or a list of strings)", "evaluator.result.command")


def _check(evaluator: dict, files: Path | None, fail) -> str:
    """The success command for the evaluator, or ``_Unmapped``."""
    func = evaluator.get("func")
    if isinstance(func, list):
        raise _Unmapped(f"several evaluator functions ({', '.join(map(str, func))}) are not mapped")
    if not isinstance(func, str) or not func:
        fail("must be a function name (a string) or a list of them", "evaluator.func")
    if func not in EVALUATORS:
        raise _Unmapped(f"evaluator {func!r} has no mapping (mapped: {', '.join(EVALUATORS)})")
    if evaluator.get("postconfig"):
        raise _Unmapped("the evaluator's postconfig steps are not reproduced")
    result, expected = evaluator.get("result"), evaluator.get("expected")
    for name, value in (("result", result), ("expected", expected)):
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            fail("must be an object with a 'type'", f"evaluator.{name}")
    results, expecteds = EVALUATORS[func]
    if result["type"] != results or expected["type"] not in expecteds.split("|"):
        raise _Unmapped(f"evaluator {func!r} on {result['type']!r} against "
                        f"{expected['type']!r} has no mapping")  # fmt: skip
    if func == "compare_text_file":
        return _same_file(result, expected, files, fail)
    command = _command_of(result, fail)
    rules = _rules(expected, fail)
    if func == "exact_match":
        match = rules.get("match")
        if not isinstance(match, str):
            fail("must be a string", "evaluator.expected.rules.match")
        return f'test "$({command})" = {shlex.quote(match)}'
    include = _strings(rules.get("include", []), fail, "evaluator.expected.rules.include")
    exclude = _strings(rules.get("exclude", []), fail, "evaluator.expected.rules.exclude")
    tests = [f"printf '%s' \"$out\" | grep -qF -- {shlex.quote(t)}" for t in include]
    tests += [f"! printf '%s' \"$out\" | grep -qF -- {shlex.quote(t)}" for t in exclude]
    return " && ".join([f"out=$({command})", *tests]) if tests else "true"


def _same_file(result: dict, expected: dict, files: Path | None, fail) -> str:
    target = _work_path(result.get("path"), fail, "evaluator.result.path")
    reference = expected.get("dest") or expected.get("path")
    if not isinstance(reference, str) or not reference.strip():
        fail("must name the expected file", "evaluator.expected.path")
    name = PurePosixPath(reference.rsplit("/", 1)[-1]).name
    local = files / name if files and _SAFE_NAME.fullmatch(name) else None
    if local is None or not local.is_file():
        raise _Unmapped(f"the expected file {name!r} is not given (--files DIR with it)")
    digest = hashlib.sha256(local.read_bytes()).hexdigest()
    return f"printf '%s  %s\\n' {digest} {shlex.quote(target)} | sha256sum -c --status"


def _config(task: dict, files: Path | None, imported: Imported, fail) -> dict:
    config = task.get("config") or []
    if not isinstance(config, list):
        fail("must be a list of steps", "config")
    start_url, attachments, left_out = "", [], []
    for i, step in enumerate(config):
        where = f"config[{i}]"
        if not isinstance(step, dict) or not isinstance(step.get("type"), str):
            fail("must be an object with a 'type'", where)
        kind, parameters = step["type"], step.get("parameters") or {}
        if not isinstance(parameters, dict):
            fail("must be an object", f"{where}.parameters")
        if kind == "chrome_open_tabs":
            urls = _strings(
                parameters.get("urls_to_open"), fail, f"{where}.parameters.urls_to_open"
            )
            if urls and not start_url and re.match(r"https?://[^/\s]", urls[0]):
                start_url = urls[0]
            left_out += [f"tab {url}" for url in urls if url != start_url]
        elif kind == "download":
            for j, item in enumerate(parameters.get("files") or []):
                field = f"{where}.parameters.files[{j}].path"
                if not isinstance(item, dict):
                    fail("must be an object with 'url' and 'path'", field.rsplit(".", 1)[0])
                name = PurePosixPath(string(item, "path", partial(_at, fail, field))).name
                local = files / name if files and _SAFE_NAME.fullmatch(name) else None
                if local is None or not local.is_file():
                    raise _Unmapped(f"it downloads {name!r}: give the file with --files DIR "
                                    "(nothing is fetched)")  # fmt: skip
                relative = f"{ATTACHMENTS_DIR}/{_folder(task['id'])}/{name}"
                if relative not in imported.files:
                    imported.files[relative] = local.read_bytes()
                    attachments.append(relative)
        elif kind in IGNORED_CONFIG:
            left_out.append(kind)
        else:
            raise _Unmapped(f"config step {i} ({kind!r}) cannot be reproduced in the sandbox")
    return {"start_url": start_url, "attachments": attachments, "left_out": left_out}


def _folder(name: str) -> str:
    """A task's attachments folder: its id, made a safe path part when it is not one."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).replace("..", "_")
    return safe if safe == name else f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _at(fail, field, problem, _key=None):
    fail(problem, field)


def import_osworld(path: Path, *, files: Path | None = None, strict: bool = False) -> Imported:
    """The desktop tasks of the OSWorld task JSON at ``path`` (a file, or a directory
    searched for ``*.json``); downloads are read from ``files``."""
    if files is not None and not files.is_dir():
        raise ImportFailed(path, f"the files directory {files} does not exist")
    imported, seen = Imported(), {}
    for file in _task_files(path):
        task = json_value(read_text(file), file)
        fail = partial(_raise, file, None)
        if not isinstance(task, dict):
            fail(f"must be one task object, got {type(task).__name__}")
        name = string(task, "id", fail)
        if _CONTROL.search(name) or name != name.strip() or len(name) > 200:
            fail("must be one line of at most 200 characters, without outer spaces", "id")
        record = f"task '{name}'"
        fail = partial(_raise, file, record)
        if name in seen:
            fail(f"duplicate id (first in {seen[name]})", "id")
        seen[name] = file
        for key in task:
            if key not in FIELDS:
                fail(f"unknown field (allowed: {', '.join(FIELDS)})", key)
        instruction = string(task, "instruction", fail)
        if not isinstance(task.get("evaluator"), dict):
            fail("must be an object", "evaluator")
        before = dict(imported.files)
        try:
            success_cmd = _check(task["evaluator"], files, fail)
            setup = _config(task, files, imported, fail)
        except _Unmapped as why:
            imported.files = before  # none of a skipped task's attachments
            imported.skip(f"{record} ({file})", str(why), strict=strict, file=file)
            continue
        if len(success_cmd) > DESKTOP_SUCCESS_CMD_MAX_CHARS:
            fail(f"makes a success command over {DESKTOP_SUCCESS_CMD_MAX_CHARS} characters",
                 "evaluator")  # fmt: skip
        meta = {"source": "osworld", "evaluator": task["evaluator"]["func"]}
        for key in ("snapshot", "related_apps"):
            if task.get(key):
                meta[key] = task[key]
        if setup["left_out"]:
            meta["left_out"] = setup["left_out"]
        entry = {"id": name, "kind": "desktop", "prompt": instruction}
        if setup["start_url"]:
            entry["start_url"] = setup["start_url"]
        if setup["attachments"]:
            entry["attachments"] = setup["attachments"]
        imported.tasks.append({**entry, "success_cmd": success_cmd, "meta": meta})
    return imported
