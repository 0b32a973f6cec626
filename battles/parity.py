"""Execution parity: every mutable input is resolved once per battle and handed to both
lanes; the digest of what a lane received is stored so equality can be checked."""

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from sandboxes.base import TOOL_NAMES


@dataclass(frozen=True)
class LaneInputs:
    instruction: str
    start_url: str
    step_budget: int
    wall_budget_s: int
    tools: tuple[str, ...] = TOOL_NAMES

    def digest(self) -> str:
        canonical = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def shared_tools(agents: Iterable) -> tuple[str, ...]:
    """The tools both sides are offered: the fixed set narrowed by every agent's tool
    set (empty means all), in the fixed order, so both lanes see identical schemas."""
    offered = set(TOOL_NAMES)
    for agent in agents:
        if agent.tool_set:
            offered &= set(agent.tool_set)
    return tuple(name for name in TOOL_NAMES if name in offered)
