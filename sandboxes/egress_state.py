"""What the egress proxy keeps per sandbox (:class:`SandboxState`), and the words it
reports refusals in: the reasons that are not about the destination, the refusal
callback's shape and the one logger (``sandboxes.egress``) every part writes to."""

import asyncio
import logging
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from sandboxes.egress_wire import TokenBucket
from sandboxes.netpolicy import LookupPool

# One logger for the proxy, whichever module writes the line.
logger = logging.getLogger("sandboxes.egress")

# (run id, target as the sandbox asked for it, reason). Called on the proxy's event-loop
# thread: it must be quick and must not touch the ORM (hand off to a queue instead).
RefusalCallback = Callable[[int, str, str], None]

# Reasons for refusals that are not about the destination (and, from netpolicy,
# LOOKUP_LIMIT and LOOKUP_TIMEOUT).
CONNECTION_LIMIT = "connection_limit"
RATE_LIMIT = "rate_limit"
MALFORMED = "malformed"
LENGTH_REQUIRED = "length_required"


@dataclass
class SandboxState:
    """Per-sandbox state. Touched only on the proxy's loop, so no lock (``lookups``
    is thread-safe on its own)."""

    run_id: int
    bucket: TokenBucket
    accept_bucket: TokenBucket
    log_bucket: TokenBucket
    lookups: LookupPool
    active: int = 0  # admitted connections
    sockets: int = 0  # accepted sockets still open, admitted or not
    room: asyncio.Event = field(default_factory=asyncio.Event)  # set when a socket closes
    listeners: list[socket.socket] = field(default_factory=list)
    acceptors: list[asyncio.Task[None]] = field(default_factory=list)
    socket_paths: list[str] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    # See EgressProxy.counters.
    counters: Counter[str] = field(default_factory=Counter)
    log_suppressed: int = 0  # lines dropped since the last one logged
