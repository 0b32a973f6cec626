"""Which worker host this process runs on: the id its leases, battles and heartbeats
carry (``ARENA_HOST_ID``, else the machine's host name). Hosts sharing one database
must have distinct ids; two "hosts" on one machine (the multi-host test) differ only
by it, their sandbox roots and their uid ranges."""

import socket
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
