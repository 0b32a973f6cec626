"""Which worker host this process runs on: the id its leases, battles and heartbeats
carry (``ARENA_HOST_ID``, else the machine's host name). Hosts sharing one database
must have distinct ids; two "hosts" on one machine (the multi-host test) differ only
by it, their sandbox roots and their uid ranges."""

import os
import socket
import tomllib
from functools import cache
from pathlib import Path

from django.conf import settings


def host_id() -> str:
    return settings.ARENA.host_id or socket.gethostname()


@cache
def machine_id() -> str:
    """This machine (or container) in this boot: its host name and the kernel's boot id.
    Two machines given the same ``ARENA_HOST_ID`` differ here (``sandboxes.heartbeats``
    refuses the second); a machine's worker processes share it."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "unknown"
    return f"{socket.gethostname()} boot {boot}"[:255]


def process_token(pid: int | None = None) -> str:
    """A process of this machine, told apart from any later process given the same pid
    (a restarted container's, a recycled pid): its pid and its start time in clock ticks
    since boot (``/proc/<pid>/stat``); "" when it is gone. Recorded beside a worker's pid
    on its leases and battles (``sandboxes.services.pid_alive``)."""
    pid = os.getpid() if pid is None else pid
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return ""
    fields = stat.rsplit(b")", 1)[-1].split()
    return f"{pid}:{int(fields[19])}" if len(fields) > 19 else ""


@cache
def app_version() -> str:
    """The arena's version as a host reports it: ``ARENA_RELEASE`` (a deployment's image
    tag) when set, else the project's version from pyproject.toml."""
    release = os.environ.get("ARENA_RELEASE", "").strip()
    if release:
        return release[:64]
    try:
        with (Path(__file__).resolve().parent.parent / "pyproject.toml").open("rb") as file:
            return str(tomllib.load(file)["project"]["version"])[:64]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return ""
