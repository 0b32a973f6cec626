"""A wrong copy of the reference (docs/environments.md, "Replays and validation"): once
the reference's replay passed its grader, the same sandbox is made wrong in what the
instruction asks and graded again, which must fail. A grader that accepts a wrong
result does not check what the instruction asks.

- The final message, when it gives an answer (``derive.answer_atoms``): only the words
  and numbers the instruction itself holds are kept, so the answer is gone; the
  reference's files stay as they are.
- The artifacts: every file the instruction asks for (``derive.asked_files``), rewritten
  in the sandbox by the fixed interpreter (``grader_script.mutated``: the instruction's
  words taken out, digits shifted, the last line dropped; JSON stays JSON); the
  reference's message stays as it is.

Both mutations are deterministic functions of the instruction, the reference's files
and its message, never of the grader being tested."""

import json
import re
from dataclasses import asdict

from environments import derive
from environments.grader_script import REPORT_MARK
from environments.graders import GraderInvalid, grader_run, mutation_command
from sandboxes.base import Sandbox, ToolError

_TOKEN = re.compile(r"\w+")
MUTATION_TIMEOUT_S = 60


def instruction_words(instruction: str) -> list[str]:
    """The instruction's words and numbers, case folded, sorted, once."""
    return sorted({t.casefold() for t in _TOKEN.findall(instruction)})


def message_mutated(message: str, instruction: str) -> str:
    """The message with every word or number the instruction does not hold taken out."""
    kept = set(instruction_words(instruction))
    return _TOKEN.sub(lambda m: m.group(0) if m.group(0).casefold() in kept else "", message)


def artifact_paths(instruction: str, actions: list[dict], message: str) -> list[str]:
    """The files a mutation rewrites: those the instruction asks for
    (``derive.asked_files``) among the named ones and those the trajectory delivered
    (its ``deliver`` calls' ``files``)."""
    delivered: list[str] = []
    for action in actions:
        if isinstance(action, dict) and action.get("tool") == "deliver":
            files = (action.get("args") or {}).get("files") or []
            delivered += [f.removeprefix("/work/") for f in files if isinstance(f, str)]
    return derive.asked_files(instruction, list(dict.fromkeys(delivered)), message)


def _record(kind: str, checked, detail, error: str = "") -> dict:
    return {
        "mutation": kind,
        "passed": bool(checked and checked.passed and not error),
        "grader": asdict(checked) if checked is not None else None,
        "detail": detail,
        "error": error,
    }


def _mutate_files(sandbox: Sandbox, paths: list[str], words: list[str]) -> list[dict]:
    """Runs the interpreter's mutation; its per-file report. Raises ValueError with the
    reason when the sandbox's answer cannot be read."""
    try:
        out = sandbox.shell(mutation_command(paths, words), timeout_s=MUTATION_TIMEOUT_S)
    except (ToolError, OSError) as exc:
        raise ValueError(f"the sandbox did not run the mutation: {str(exc)[:200]}") from exc
    last = out.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    if out.timed_out or out.exit_code != 0 or not last.startswith(REPORT_MARK):
        raise ValueError("the mutation printed no report")
    try:
        done = json.loads(last[len(REPORT_MARK) :])["mutated"]
    except (ValueError, KeyError, TypeError):
        raise ValueError("the mutation's report is not readable") from None
    if not isinstance(done, list) or [d.get("path") for d in done] != paths:
        raise ValueError("the mutation's report does not list the files")
    return done


def mutations_run(
    sandbox: Sandbox, grader: dict, *, instruction: str, actions: list[dict], message: str
) -> list[dict]:
    """Grades the message mutation, then mutates the artifacts in ``sandbox`` (after
    this the sandbox no longer holds the reference's state) and grades them; one
    record per mutation that applies: ``{"mutation", "passed", "grader", "detail",
    "error"}``. None applies when the message gives no answer and no file exists."""
    done: list[dict] = []
    if derive.answer_atoms(instruction, message):
        wrong = message_mutated(message, instruction)
        done.append(_record("message", grader_run(sandbox, grader, final_message=wrong), wrong))
    try:
        paths = artifact_paths(instruction, actions, message)
        files = _mutate_files(sandbox, paths, instruction_words(instruction)) if paths else []
    except (GraderInvalid, ValueError) as exc:
        return [*done, _record("artifact", None, [], str(exc))]
    if any(f.get("mutated") for f in files):
        checked = grader_run(sandbox, grader, final_message=message)
        done.append(_record("artifact", checked, files, checked.error))
    return done
