"""Execution parity: every mutable input is resolved once per battle and handed to both
lanes; the digest of what a lane received is stored so equality can be checked."""

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from sandboxes.base import TOOL_NAMES


@dataclass(frozen=True)
class LaneAttachment:
    """One task attachment as a lane receives it: ``name`` under /work/attachments,
    the bytes' ``sha256`` and ``size``, and where the stored copy lives (``path``, its
    name in the private storage; content-addressed, so the same for both lanes)."""

    name: str
    sha256: str
    size: int
    path: str


@dataclass(frozen=True)
class LaneRepo:
    """What a lane of a repo task receives: the canonical bundle (stored, by hash), the
    commit and tree it holds, and the time the agent has (docs/coding.md)."""

    bundle_path: str
    bundle_sha256: str
    bundle_size: int
    commit: str
    tree: str
    time_limit_s: int
    # The commit the copy checks out: ``commit`` for agents, the judge's own commit
    # (hidden tests on top) for a judge sandbox.
    head: str = ""


@dataclass(frozen=True)
class LaneInputs:
    instruction: str
    start_url: str
    step_budget: int
    wall_budget_s: int
    tools: tuple[str, ...] = TOOL_NAMES
    attachments: tuple[LaneAttachment, ...] = ()
    # A repo task's source: the digest then covers the bundle's hash, commit and tree.
    repo: LaneRepo | None = None

    def digest(self) -> str:
        inputs = asdict(self)
        if inputs["repo"] is None:  # a desktop task's digest is what it always was
            del inputs["repo"]
        canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def shared_tools(agents: Iterable) -> tuple[str, ...]:
    """The tools both sides are offered: the fixed set narrowed by every agent's tool
    set (empty means all), in the fixed order, so both lanes see identical schemas."""
    offered = set(TOOL_NAMES)
    for agent in agents:
        if agent.tool_set:
            offered &= set(agent.tool_set)
    return tuple(name for name in TOOL_NAMES if name in offered)


def lane_attachments(attachments: Iterable) -> tuple[LaneAttachment, ...]:
    """The task's attachments (``Attachment`` rows, in stored order) as lane inputs."""
    return tuple(LaneAttachment(a.name, a.sha256, a.size, a.path) for a in attachments)


def conversation_digest(previous: str, seq: int, text: str) -> str:
    """The conversation digest after a lane received follow-up ``seq`` with ``text``,
    chained on the digest before it (``""`` for none): two lanes that received the
    same texts under the same numbers in the same order hold the same digest, and any
    difference (a missing, extra, reordered or altered message) changes it."""
    text_digest = hashlib.sha256(text.encode()).hexdigest()
    return hashlib.sha256(f"{previous}\x1f{seq}\x1f{text_digest}".encode()).hexdigest()
