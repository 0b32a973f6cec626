"""A local run's directory: where each part of its two sandboxes lives on the host, who
owns it, and the quota filesystems under it (``sandboxes.disk``)."""

import os
from dataclasses import dataclass
from pathlib import Path

from sandboxes import disk
from sandboxes.base import SandboxSpec

# Slot k's display sandbox runs as uid base + DISPLAY_UID_OFFSET + k (a root worker);
# the offset exceeds the slot count (ARENA_SANDBOX_SLOTS, at most 999), so no display
# uid is ever another slot's agent uid.
DISPLAY_UID_OFFSET = 1000


@dataclass(frozen=True)
class SandboxPaths:
    """Where the host finds a sandbox's parts."""

    work: Path  # bound at /work: attachments go in, deliveries come out
    framebuffer: Path  # Xvfb's framebuffer file
    control: Path  # the agent's supervisor's control socket
    display_control: Path | None = None  # the display supervisor's; None: no display


@dataclass(frozen=True)
class RunLayout:
    """A local run dir. ``agent`` and ``display`` are the two quota filesystems (tmpfs
    mounts of a root worker, plain directories otherwise); ``host`` holds the control
    sockets and is reachable by root alone; the ``*-ctl`` dirs (root-owned, bound
    read-only) hold each sandbox's egress socket."""

    root: Path

    @property
    def agent(self) -> Path:
        return self.root / "agent"

    @property
    def work(self) -> Path:
        return self.agent / "work"

    @property
    def downloads(self) -> Path:
        """Chromium's download dir: written by the display uid, read by the agent."""
        return self.agent / "downloads"

    @property
    def display(self) -> Path:
        return self.root / "display"

    @property
    def fb(self) -> Path:
        return self.display / "fb"

    @property
    def host(self) -> Path:
        return self.root / "host"

    @property
    def agent_ctl(self) -> Path:
        return self.root / "agent-ctl"

    @property
    def display_ctl(self) -> Path:
        return self.root / "display-ctl"

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    def log(self, role: str) -> Path:
        """Where a sandbox's output goes: its quota filesystem's root (bound nowhere)."""
        return (self.agent if role == "agent" else self.display) / f"{role}.log"

    def paths(self, desktop: bool) -> SandboxPaths:
        return SandboxPaths(
            work=self.work,
            framebuffer=self.fb / "Xvfb_screen0",
            control=self.host / "agent.sock",
            display_control=self.host / "display.sock" if desktop else None,
        )


def make_run_dir(
    spec: SandboxSpec,
    layout: RunLayout,
    uid: int,
    display_uid: int,
    root_worker: bool,
    mounts: list[Path],
) -> None:
    """Creates the run dir: root-owned and traversable, the quota filesystems (a root
    worker), each writable dir owned by the uid that writes it, and /etc files."""
    layout.root.mkdir(parents=True)
    roots = [layout.agent, layout.display] if spec.desktop else [layout.agent]
    for directory in (*roots, layout.etc, layout.host, layout.agent_ctl, layout.display_ctl):
        directory.mkdir()
    quotas = {
        layout.agent: disk.Quota(spec.disk_bytes, spec.disk_inodes),
        layout.display: disk.Quota(spec.display_disk_bytes, spec.disk_inodes),
    }
    if root_worker:
        for directory in roots:
            disk.mount_tmpfs(directory, quotas[directory], source=f"arena-{directory.name}")
            mounts.append(directory)
    # (dir, owner, mode): the agent's own space is its alone; the downloads dir is
    # written by Chromium (display uid) and read by the agent; the framebuffer is the
    # display's alone (bound nowhere else).
    owned = [(layout.work, uid, 0o755)]
    if root_worker:
        owned += [(layout.agent / "tmp", uid, 0o700), (layout.agent / "home", uid, 0o700)]
    if spec.desktop:
        owned += [(layout.downloads, display_uid, 0o755), (layout.fb, display_uid, 0o755)]
        if root_worker:
            owned += [(layout.display / "tmp", display_uid, 0o700),
                      (layout.display / "home", display_uid, 0o700)]  # fmt: skip
    for directory, owner, mode in owned:
        directory.mkdir()
        os.chmod(directory, mode)
        if root_worker:
            os.chown(directory, owner, owner)
    if root_worker:
        os.chmod(layout.root, 0o711)  # noqa: S103 - traversable, not listable
    os.chmod(layout.host, 0o700)
    for directory in (layout.etc, layout.agent_ctl, layout.display_ctl):
        os.chmod(directory, 0o755)  # noqa: S103 - root's, read-only inside
    hosts = "127.0.0.1 localhost\n::1 localhost\n"
    for who, who_uid, home in (
        ("agent", uid, "/home/agent"),
        ("display", display_uid, "/home/display"),
    ):
        (layout.etc / f"{who}-passwd").write_text(
            f"{who}:x:{who_uid}:{who_uid}:{who}:{home}:/bin/sh\n"
        )
        (layout.etc / f"{who}-group").write_text(f"{who}:x:{who_uid}:\n")
        (layout.etc / f"{who}-hosts").write_text(hosts)
