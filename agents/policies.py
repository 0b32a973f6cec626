"""What drives a lane: a policy sees an observation and answers with the next action.

Built-in offline policies live here so the arena runs with no provider keys. They are
baselines of deliberately different competence:

- ``rulebook`` solves simple file, arithmetic and listing tasks by rules;
- ``surveyor`` looks around the sandbox and reports what it sees, without solving;
- ``idle`` makes one token gesture and gives up.
"""

import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Action:
    """One call of the fixed tool set: ``tool`` is its name, ``args`` its arguments."""

    tool: str
    # An object for a well-formed call; a model's malformed arguments stay as they came
    # (a string), and the dispatcher answers them with an error the agent sees.
    args: dict[str, Any] | str = field(default_factory=dict)


@dataclass(frozen=True)
class GiveUp:
    """The agent stops without delivering; ``message`` becomes its final message."""

    message: str


@dataclass(frozen=True)
class Observation:
    step: int
    instruction: str
    start_url: str
    last_result: dict[str, Any] | None
    steps_left: int
    seconds_left: float
    screenshot_png: bytes | None = None
    # Where the task's attachments are inside the sandbox (/work/attachments/<name>).
    attachments: tuple[str, ...] = ()


class Policy(Protocol):
    def next_action(self, observation: Observation) -> Action | GiveUp: ...


def _shell(command: str) -> Action:
    return Action("shell", {"command": command, "timeout_s": 10})


def _output(result: dict[str, Any] | None) -> str:
    if not result:
        return ""
    return str(result.get("stdout", "")).strip()


_CREATE_FILE = re.compile(
    r"(?:create|write|make)\s+(?:a\s+)?file\s+(?:named|called)\s+[\"'`]?(?P<name>[\w.\-]+)[\"'`]?"
    r"\s+(?:containing|with(?:\s+the)?\s+(?:text|content|contents))\s+(?P<text>.+)",
    re.IGNORECASE | re.DOTALL,
)
_ARITHMETIC = re.compile(
    r"(?:what\s+is|compute|calculate|evaluate)\s+(?P<expr>[0-9+\-*/().\s]+[0-9)])", re.IGNORECASE
)
_LISTING = re.compile(r"\b(?:list|which|what)\b.*\bfiles?\b", re.IGNORECASE)


class RulebookPolicy:
    """Plans a short command sequence from the instruction, then delivers the result."""

    def next_action(self, observation: Observation) -> Action | GiveUp:
        text = observation.instruction.strip()
        step, last = observation.step, observation.last_result
        if match := _CREATE_FILE.search(text):
            name = match["name"]
            content = match["text"].strip().strip("\"'`").rstrip(".")
            if step == 0:
                return _shell(f"printf '%s\\n' {shlex.quote(content)} > {shlex.quote(name)}")
            if step == 1:
                return _shell(f"cat {shlex.quote(name)}")
            return Action(
                "deliver",
                {"message": f"Created {name} containing: {_output(last)}", "files": [name]},
            )
        if match := _ARITHMETIC.search(text):
            expr = " ".join(match["expr"].split())
            if step == 0:
                program = f'BEGIN {{ printf "%.10g\\n", {expr} }}'
                return _shell(f"awk {shlex.quote(program)}")
            return Action("deliver", {"message": f"{expr} = {_output(last)}", "files": []})
        if _LISTING.search(text):
            if step == 0:
                return _shell("ls -la")
            return Action("deliver", {"message": f"The files here:\n{_output(last)}", "files": []})
        if step == 0:
            return _shell("pwd && ls -la")
        return Action(
            "deliver",
            {
                "message": "I know no rule for this task. What I found in the workspace:\n"
                + _output(last),
                "files": [],
            },
        )


class SurveyorPolicy:
    """Reports on its surroundings (the workspace, then the start page) and never
    attempts the task itself."""

    def __init__(self) -> None:
        self.survey = ""

    def next_action(self, observation: Observation) -> Action | GiveUp:
        if observation.step == 0:
            return _shell("uname -sr; id -u; pwd; ls -la")
        if observation.step == 1:
            self.survey = _output(observation.last_result)
            if observation.start_url:
                return Action("navigate", {"url": observation.start_url})
        report = "I looked around instead of doing the task. I see:\n" + self.survey
        if observation.start_url and observation.last_result:
            page = observation.last_result
            if page.get("ok"):
                title = page.get("data", {}).get("title") or "an untitled page"
                report += f"\nThe start page shows {title}."
            else:
                report += f"\nThe start page did not open: {page.get('error', 'unknown error')}."
        return Action("deliver", {"message": report, "files": []})


class IdlePolicy:
    """The floor: one gesture, then it gives up."""

    def next_action(self, observation: Observation) -> Action | GiveUp:
        if observation.step == 0:
            return _shell("true")
        return GiveUp("I was unable to complete this task.")


BUILTIN_POLICIES: dict[str, type[Policy]] = {
    "rulebook": RulebookPolicy,
    "surveyor": SurveyorPolicy,
    "idle": IdlePolicy,
}

# The roster `seed_demo` installs: (slug, display name, policy, baseline?).
BUILTIN_ROSTER = [
    ("rulebook", "Rulebook", "rulebook", True),
    ("surveyor", "Surveyor", "surveyor", True),
    ("idle", "Idle baseline", "idle", True),
]
