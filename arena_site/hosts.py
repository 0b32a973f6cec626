"""Which worker host this process runs on: the id its leases, battles and heartbeats
carry (``ARENA_HOST_ID``, else the machine's host name). Hosts sharing one database
must have distinct ids; two "hosts" on one machine (the multi-host test) differ only
by it, their sandbox roots and their uid ranges."""

import socket

from django.conf import settings


def host_id() -> str:
    return settings.ARENA.host_id or socket.gethostname()
