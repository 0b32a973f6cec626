"""The sandbox backend interface. The battle orchestrator provisions sandboxes and calls
tools only through this; nothing reaches around it."""

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# The fixed tool set every agent sees (DESIGN "Agent interface"). The skeleton's local
# backend implements the shell and deliver tools; the desktop tools arrive with it.
TOOL_NAMES = (
    "screenshot",
    "mouse_move",
    "click",
    "drag",
    "scroll",
    "type",
    "key",
    "navigate",
    "shell",
    "deliver",
)


@dataclass(frozen=True)
class SandboxSpec:
    """What a lane's sandbox is built from; identical for both lanes of a battle."""

    run_id: int
    shell_timeout_s: int
    output_max_bytes: int
    deliver_max_files: int
    deliver_max_bytes: int


@dataclass
class ToolResult:
    """A tool's structured outcome. ``ok=False`` is a recorded error, not a crash."""

    ok: bool
    tool: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    truncated: bool = False
    timed_out: bool = False
    error: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DeliveredFile:
    name: str
    path: Path
    size: int
    sha256: str


class Sandbox(ABC):
    """One provisioned sandbox. ``destroy`` is idempotent and leaves no process behind."""

    spec: SandboxSpec

    @abstractmethod
    def shell(self, command: str, timeout_s: float | None = None) -> ToolResult: ...

    @abstractmethod
    def collect_files(self, names: list[str], dest: Path) -> list[DeliveredFile]:
        """Copies the named workspace files to ``dest``; raises ``ToolError`` on a bad name."""

    @abstractmethod
    def destroy(self) -> None: ...

    def healthy(self) -> bool:
        return True


class ToolError(Exception):
    """A tool call the sandbox refused (bad path, over a limit)."""


class SandboxBackend(ABC):
    name: str

    @abstractmethod
    def provision(self, spec: SandboxSpec) -> Sandbox: ...

    def health(self) -> dict[str, Any]:
        return {"backend": self.name, "ok": True}
