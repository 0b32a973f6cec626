"""The sandbox backend interface. The battle orchestrator provisions sandboxes and calls
tools only through this (via ``sandboxes.tools.tool_call``); nothing reaches around it."""

import os
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sandboxes.inside import seal

# The fixed tool set every agent sees (DESIGN "Agent interface").
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
    shell_timeout_s: int = 20
    output_max_bytes: int = 64 * 1024
    deliver_max_files: int = 10
    deliver_max_bytes: int = 5 * 1024 * 1024
    desktop: bool = True
    width: int = 1280
    height: int = 800
    start_url: str = ""
    memory_mb: int = 2048
    pids: int = 512
    cpu_fraction: float = 1.0
    lifetime_s: int = 900
    # The kernel's hard quota on the sandbox's writable space (sandboxes.disk): the
    # agent's /work, /tmp and home together, and the display's framebuffer dir, /tmp
    # and home (Chromium's profile and cache), each in bytes and files.
    disk_bytes: int = 512 * 1024**2
    disk_inodes: int = 65_536
    display_disk_bytes: int = 256 * 1024**2
    # A screenshot PNG is at most this large (re-encoded smaller when the screen does
    # not fit, sandboxes.screens).
    screenshot_max_bytes: int = 2 * 1024**2
    # Reach the web through the host's filtering egress proxy (when the backend has
    # one); without it the sandbox reaches nothing at all.
    egress: bool = True
    # Bind the CLI coding agents and the judge's tools (var/toolchain, scripts/toolchain.sh)
    # read-only at /opt/arena/toolchain in the agent's sandbox, its bin first on PATH.
    toolchain: bool = False
    # The worker seals trees in it (the coding judge's, ``Sandbox.seal_tree``): a remote
    # engine's sandbox then has its /work on a volume of the run, which a short root
    # container of the seal's own reaches (``sandboxes.docker_seal``).
    seals: bool = False


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
    # Some text of the result held NUL or bytes that are not UTF-8 and is stored
    # escaped (sandboxes.untrusted): judges read the escaped text.
    escaped: bool = False
    # PNG bytes for screenshot results; kept out of ``as_dict`` (stored as a file).
    image: bytes | None = None

    def as_dict(self) -> dict[str, Any]:
        result = asdict(self)
        result.pop("image")
        return result


@dataclass(frozen=True)
class DeliveredFile:
    name: str
    path: Path
    size: int
    sha256: str


class ToolError(Exception):
    """A tool call the sandbox refused (bad argument, bad path, over a limit)."""


class Sandbox(ABC):
    """One provisioned sandbox. ``destroy`` is idempotent and leaves no process behind.
    Tool methods never raise for agent mistakes: they return ``ok=False`` results (or
    raise ``ToolError``, which ``tool_call`` turns into one)."""

    spec: SandboxSpec

    @abstractmethod
    def screenshot(self) -> ToolResult: ...

    @abstractmethod
    def mouse_move(self, x: int, y: int) -> ToolResult: ...

    @abstractmethod
    def click(self, x: int, y: int, button: str = "left", count: int = 1) -> ToolResult: ...

    @abstractmethod
    def drag(self, x1: int, y1: int, x2: int, y2: int) -> ToolResult: ...

    @abstractmethod
    def scroll(self, x: int, y: int, dx: int, dy: int) -> ToolResult: ...

    @abstractmethod
    def type(self, text: str) -> ToolResult: ...

    @abstractmethod
    def key(self, combo: str) -> ToolResult: ...

    @abstractmethod
    def navigate(self, url: str) -> ToolResult: ...

    @abstractmethod
    def shell(self, command: str, timeout_s: float | None = None) -> ToolResult: ...

    @abstractmethod
    def collect_files(self, names: list[str], dest: Path) -> list[DeliveredFile]:
        """Copies the named workspace files to ``dest``; raises ``ToolError`` on a bad name."""

    @abstractmethod
    def destroy(self) -> None: ...

    def page_state(self) -> dict[str, str] | None:
        """The browser's page as it is now: ``{"url", "title"}``, bounded (the sandbox
        is untrusted); None when there is no browser or it does not answer."""
        return None

    def page_text(self) -> dict[str, Any] | None:
        """The browser's page as text for agents that read it (``sandboxes.pagetext``:
        URL, title, visible text, interactive elements with screen coordinates),
        bounded; None when there is no browser or it does not answer."""
        return None

    def health(self) -> dict[str, Any]:
        return {"ok": True}

    def push_work_dir(self) -> list[str]:
        """Makes what the worker placed in the sandbox's ``work_dir`` (a lane's
        attachments) visible at the same paths in its /work; returns the paths put.
        Nothing to do where ``work_dir`` is that /work, bound from the worker's host
        (bubblewrap's sandboxes, a local engine's containers); a remote engine's
        sandbox puts the files over its channel."""
        return []

    def seal_tree(self, path: str) -> bool:
        """Makes the tree at ``path`` (under /work) read-only for the sandbox
        (``sandboxes.inside.seal``: owned by root, writable by none but root); whether
        it did. Here the worker seals the tree through ``work_dir`` where that is the
        sandbox's /work and the worker is root; a remote engine's sandbox has it sealed
        on the engine (``sandboxes.docker_seal``). Nothing of the sandbox may run
        meanwhile."""
        work_dir = getattr(self, "work_dir", None)
        relative = work_relative(path)
        if work_dir is None or relative is None or not getattr(self, "uid", None):
            return False
        if os.geteuid() != 0:
            return False
        return seal.seal(str(Path(work_dir) / relative)) is not None


def work_relative(path: str) -> str | None:
    """``path`` below /work, relative to it; None for any other path (or one with ``..``)."""
    relative = path.removeprefix("/work/")
    if relative == path or not relative or ".." in relative.split("/"):
        return None
    return relative


class SandboxLost(RuntimeError):
    """The sandbox's engine (or host) no longer answers: the sandbox is out of reach
    through no doing of its agent. Not a ToolError, so never an agent's failed step:
    the lane ends in an error that is the arena's, and the battle is run again on
    fresh sandboxes (``battles.services.orchestration``), by a worker whose engine
    answers."""


class SandboxBackend(ABC):
    name: str

    @abstractmethod
    def provision(self, spec: SandboxSpec, *, slot: int = 0) -> Sandbox:
        """Builds a ready sandbox (its first screenshot can be taken at once)."""

    def health(self) -> dict[str, Any]:
        return {"backend": self.name, "ok": True}

    def engine_problem(self) -> str:
        """Why this backend cannot start a sandbox now ("" when it can): a worker asks
        before it takes a battle. Cheap and bounded in time; what runs sandboxes on
        this host itself has nothing to ask."""
        return ""
