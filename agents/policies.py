"""What drives a lane: a policy sees an observation and answers with the next action.

The built-in offline policies (``agents.builtins``) are registered here by name, so the
arena runs with no provider keys. They are baselines of deliberately different
competence, and drive the desktop through the same fixed tool set as any entrant:

- ``rulebook`` reads the page as text and clicks, types and searches its way through
  browsing tasks; solves simple file, arithmetic and listing tasks by rules;
- ``surveyor`` reads pages and follows links, but never types into a page or fetches a
  file: it answers what reading alone can, and reports the rest unfinished;
- ``idle`` opens the page, scrolls once and gives up (or guesses from the title).
"""

from collections.abc import Mapping
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
class FollowUp:
    """A message from the person who submitted the task, sent while the run goes on
    (docs/conversations.md): ``seq`` numbers the battle's follow-ups from 1, and both
    sides receive the same ones in the same order."""

    seq: int
    text: str


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
    # The page as text (``sandboxes.pagetext``: url, title, text, elements with screen
    # coordinates), after the previous step; only for agents that read it
    # (``observes_page``), None otherwise or without a browser.
    page: dict[str, Any] | None = None
    # Follow-ups received since the previous observation (none in most steps).
    messages: tuple[FollowUp, ...] = ()


class Policy(Protocol):
    def next_action(self, observation: Observation) -> Action | GiveUp: ...


PAGE_TEXT = "page_text"


def observes_page(*, kind: str, builtin_policy: str, params: Mapping[str, Any] | None) -> bool:
    """Whether an agent's observations carry the page as text: a built-in that reads
    pages, or any agent whose ``params["observe"]`` is ``"page_text"`` (it costs a
    supervisor call per step, ~35 ms, so only agents that ask pay it)."""
    if kind == "builtin":
        return bool(getattr(BUILTIN_POLICIES.get(builtin_policy), "observes_page", False))
    return isinstance(params, Mapping) and params.get("observe") == PAGE_TEXT


# The built-ins build on the types above (agents.builtins imports this module first).
from agents.builtins.idle import IdlePolicy  # noqa: E402
from agents.builtins.rulebook import RulebookPolicy  # noqa: E402
from agents.builtins.surveyor import SurveyorPolicy  # noqa: E402

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
