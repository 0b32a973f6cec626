"""The egress proxy: a sandbox's only way out (SPEC §4, DESIGN "egress proxy").

Each sandbox gets its own listener, a unix socket bound into its work dir (MACHINE-NOTES
"Controlled egress": a forwarder inside the sandbox points Chromium's ``--proxy-server``
and the shell's ``http_proxy`` at it). The proxy speaks two things:

- ``CONNECT host:port``: check the destination, dial exactly the checked address, then
  relay bytes both ways (TLS, WebSockets).
- Absolute-form plain HTTP (``GET http://host/path``): check, dial the checked address,
  forward the request in origin form with ``Host`` set from the URL, relay the response.

Every request is checked through :mod:`sandboxes.netpolicy` after resolution, and the
dialer receives only the addresses the check saw, never a name, so a resolver that
answers differently the second time (DNS rebinding) gains nothing. The proxy does not
follow redirects: the browser sends each hop as a new proxied request, and each is a new
check. Refusals answer 403 (policy), 429 (a per-sandbox limit), 504 (a lookup that
timed out) or 400 (malformed), and each one is reported with the sandbox's run id.

No lane can starve another: every resource a sandbox can spend here is bounded per
sandbox (docs/egress.md lists the values). Its sockets (admitted connections, and a cap
on accepted ones, at which accepting pauses), the rate of its new connections (past it,
accepting pauses: a flood waits in the sandbox's own listen backlog instead of costing
the event loop), the time its heads take, its request rate, its lookups (a few in flight
on threads of its own, each with a timeout: a resolver that hangs for one sandbox blocks
neither the event loop nor the others), its upstream connects (one deadline for all
addresses) and its log lines (a token bucket per sandbox; the rest are counted). A
sandbox over a bound gets its own refusals, never a stall of the proxy.

The wire (request heads, relays, token buckets) is in :mod:`sandboxes.egress_wire`.
Stdlib asyncio only. One proxy runs on one event loop; sync callers (the battle
orchestrator) use :meth:`EgressProxy.run_in_thread`.
"""

import asyncio
import contextlib
import hashlib
import hmac
import logging
import math
import os
import re
import secrets
import socket
import stat
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from sandboxes.egress_wire import (
    HOP_BY_HOP,
    STATUS_TEXT,
    BadRequest,
    Dialer,
    RequestHead,
    Respond,
    Streams,
    TokenBucket,
    close_writer,
    dial_checked,
    dial_simulated,
    linger,
    parse_head,
    printable,
    relay,
)
from sandboxes.netpolicy import (
    DEFAULT_ALLOWED_PORTS,
    LOOKUP_LIMIT,
    LOOKUP_TIMEOUT,
    UNRESOLVABLE,
    CheckedTarget,
    EgressRefused,
    IPAddress,
    LookupPool,
    Resolver,
    SimulatedHosts,
    check_destination,
    check_url,
    default_resolver,
    split_authority,
)

logger = logging.getLogger(__name__)

# (run id, target as the sandbox asked for it, reason). Called on the proxy's event-loop
# thread: it must be quick and must not touch the ORM (hand off to a queue instead).
RefusalCallback = Callable[[int, str, str], None]

# Reasons for refusals that are not about the destination (and, from netpolicy,
# LOOKUP_LIMIT and LOOKUP_TIMEOUT).
CONNECTION_LIMIT = "connection_limit"
RATE_LIMIT = "rate_limit"
MALFORMED = "malformed"
LENGTH_REQUIRED = "length_required"

# The per-sandbox bounds (docs/egress.md). A sandbox that exceeds one gets refusals of
# its own; nothing here is shared between sandboxes but the event loop, which never
# blocks on a sandbox.
MAX_CONNECTIONS = 32  # admitted connections: head read, checked, relayed
MAX_SOCKETS = 64  # accepted sockets in all; at it, accepting pauses for that sandbox
LISTEN_BACKLOG = 64  # a sandbox's connects beyond that wait (or fail) on its side
# New connections accepted a second (after a burst): twice the request rate, since a
# request needs one connection and more only cost the loop; over it, accepting pauses.
ACCEPT_RATE_PER_S, ACCEPT_BURST = 20.0, 100
RATE_PER_S, BURST = 10.0, 50  # requests (a CONNECT or a plain-HTTP request each)
MAX_LOOKUPS = 4  # lookups in flight, each on a thread of the sandbox's own
RESOLVE_TIMEOUT_S = 5.0  # per lookup
HEADER_TIMEOUT_S = 10.0  # the whole request head, however slowly it trickles
OVER_LIMIT_HEADER_TIMEOUT_S = 1.0  # an over-limit connection's head, read to name it
CONNECT_TIMEOUT_S = 10.0  # all of a destination's addresses together
IDLE_TIMEOUT_S = 60.0  # a relay with no byte in either direction
MAX_HEADER_BYTES = 32 * 1024
LOG_LINES_PER_S, LOG_BURST = 1.0, 20  # the worker's log lines about one sandbox

# The run stamp: on every request to a simulated host the proxy replaces whatever
# ``X-Arena-Run`` the sandbox sent with ``<run id>.<hex HMAC-SHA256(stamp key, run id)>``.
# A server of the worker's behind a simulated host (the model gateway) learns from it
# which run is calling, and a sandbox cannot claim another run's identity: it never
# sees the key, which lives only in the worker process.
STAMP_HEADER = "X-Arena-Run"
STAMP_KEY_BYTES = 32
_RUN_ID_RE = re.compile(r"-?(0|[1-9][0-9]{0,18})")


def run_stamp(key: bytes, run_id: int) -> str:
    """The ``X-Arena-Run`` value the proxy sends for ``run_id``."""
    digest = hmac.new(key, str(run_id).encode("ascii"), hashlib.sha256).hexdigest()
    return f"{run_id}.{digest}"


def verify_run_stamp(key: bytes, value: str | None) -> int | None:
    """The run id ``value`` (an ``X-Arena-Run`` header) was stamped for with ``key``, or
    None when it is missing, malformed or not made with ``key``."""
    if not value or len(value) > 100:
        return None
    run_text = value.partition(".")[0]
    if not _RUN_ID_RE.fullmatch(run_text):
        return None
    run_id = int(run_text)
    if not hmac.compare_digest(run_stamp(key, run_id).encode(), value.encode()):
        return None
    return run_id


@dataclass
class _Sandbox:
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


class _LookupNeeded(Exception):
    """The host is a name: the check must run on the sandbox's lookup pool."""


def _defer_lookup(host: str, port: int) -> list[IPAddress]:
    raise _LookupNeeded(host)


class EgressProxy:
    """A filtering HTTP/CONNECT proxy serving one listener per sandbox.

    ``resolver`` (blocking, run on the sandbox's own lookup threads) and ``dialer`` are
    injectable so tests never touch the network. Limits apply per sandbox (per run id,
    across that run's listeners); the defaults are the module's constants, documented
    in docs/egress.md: ``max_connections`` admitted connections and ``max_sockets``
    accepted sockets in all, ``accept_rate_per_s`` new connections a second after a
    burst of ``accept_burst``, a token bucket of ``rate_per_s`` requests a second with
    bursts of ``burst``, ``max_lookups`` lookups in flight of ``resolve_timeout_s``
    each, ``header_timeout_s`` for a whole request head, ``connect_timeout_s`` for all
    of a destination's addresses, and ``log_lines_per_s`` / ``log_burst`` log lines.
    ``clock`` feeds the token buckets only, so tests can move time without sleeping.
    ``simulated`` names the worker's simulated hosts (``netpolicy.SimulatedHost``, the
    demo web): plain-HTTP requests for one of them on its port are dialled to its fixed
    upstream by ``simulated_dialer``, with every per-sandbox bound and refusal record
    of any other request; everything else about them is refused (docs/demo-web.md).
    Those requests carry the run stamp (``X-Arena-Run``, :func:`run_stamp`) made with
    ``stamp_key`` (default: 32 random bytes), which the worker's servers behind them
    verify with :func:`verify_run_stamp` and the proxy's ``stamp_key`` attribute.

    Preconditions: all coroutine methods run on one event loop (use
    :meth:`run_in_thread` from sync code); ``on_refusal`` must be quick and thread-agnostic.
    """

    def __init__(
        self,
        *,
        resolver: Resolver = default_resolver,
        dialer: Dialer = dial_checked,
        on_refusal: RefusalCallback | None = None,
        simulated: SimulatedHosts | None = None,
        simulated_dialer: Dialer = dial_simulated,
        stamp_key: bytes | None = None,
        max_connections: int = MAX_CONNECTIONS,
        max_sockets: int = MAX_SOCKETS,
        accept_rate_per_s: float = ACCEPT_RATE_PER_S,
        accept_burst: int = ACCEPT_BURST,
        rate_per_s: float = RATE_PER_S,
        burst: int = BURST,
        allowed_ports: frozenset[int] = DEFAULT_ALLOWED_PORTS,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        resolve_timeout_s: float = RESOLVE_TIMEOUT_S,
        max_lookups: int = MAX_LOOKUPS,
        max_header_bytes: int = MAX_HEADER_BYTES,
        log_lines_per_s: float = LOG_LINES_PER_S,
        log_burst: int = LOG_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (
            max_connections < 1
            or max_sockets < max_connections
            or rate_per_s <= 0
            or burst < 1
            or accept_rate_per_s <= 0
            or accept_burst < 1
            or max_lookups < 1
            or log_lines_per_s <= 0
            or log_burst < 1
        ):
            raise ValueError("limits must be positive (and max_sockets >= max_connections)")
        if stamp_key is not None and len(stamp_key) < 16:
            raise ValueError("stamp_key must be at least 16 bytes")
        self.resolver = resolver
        self.dialer = dialer
        self.on_refusal = on_refusal
        self.simulated = dict(simulated or {})
        self.simulated_dialer = simulated_dialer
        self.stamp_key = stamp_key or secrets.token_bytes(STAMP_KEY_BYTES)
        self.max_connections = max_connections
        self.max_sockets = max_sockets
        self.accept_rate_per_s = accept_rate_per_s
        self.accept_burst = accept_burst
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.allowed_ports = allowed_ports
        self.header_timeout_s = header_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.resolve_timeout_s = resolve_timeout_s
        self.max_lookups = max_lookups
        self.max_header_bytes = max_header_bytes
        self.log_lines_per_s = log_lines_per_s
        self.log_burst = log_burst
        self.clock = clock
        self._sandboxes: dict[int, _Sandbox] = {}

    # --- listeners ------------------------------------------------------------------

    def _sandbox(self, run_id: int) -> _Sandbox:
        sandbox = self._sandboxes.get(run_id)
        if sandbox is None:
            sandbox = self._sandboxes[run_id] = _Sandbox(
                run_id,
                bucket=TokenBucket(self.rate_per_s, self.burst, self.clock),
                accept_bucket=TokenBucket(self.accept_rate_per_s, self.accept_burst, self.clock),
                log_bucket=TokenBucket(self.log_lines_per_s, self.log_burst, self.clock),
                lookups=LookupPool(self.max_lookups, name=f"egress-lookup-{run_id}"),
            )
        return sandbox

    def _listen(self, sandbox: _Sandbox, listener: socket.socket) -> None:
        listener.setblocking(False)
        sandbox.listeners.append(listener)
        acceptor = asyncio.get_running_loop().create_task(self._accept(sandbox, listener))
        sandbox.acceptors.append(acceptor)

    async def _accept(self, sandbox: _Sandbox, listener: socket.socket) -> None:
        """Accept the sandbox's connections while it holds fewer than ``max_sockets``.

        At the cap, and past ``accept_rate_per_s``, the proxy stops accepting from this
        sandbox (until one of its sockets closes, or for as long as its bucket needs):
        its further connects wait in its own listen backlog, which costs the worker
        neither a descriptor nor a moment of the event loop (accepting a flood only to
        close it would cost both)."""
        loop = asyncio.get_running_loop()
        while True:
            if sandbox.sockets >= self.max_sockets:
                await self._pause(sandbox, listener)
            wait = sandbox.accept_bucket.take()
            if wait > 0:
                await self._pause(sandbox, listener, seconds=wait)
                continue
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:  # out of descriptors and the like: the host's trouble
                self._log(
                    sandbox, logging.ERROR, "egress accept failed run=%s: %r", sandbox.run_id, exc
                )
                await asyncio.sleep(0.1)
                continue
            sandbox.sockets += 1
            sandbox.counters["connections"] += 1
            task = loop.create_task(self._client(sandbox, conn))
            sandbox.tasks.add(task)
            task.add_done_callback(sandbox.tasks.discard)

    async def _pause(
        self, sandbox: _Sandbox, listener: socket.socket, *, seconds: float | None = None
    ) -> None:
        """Stop accepting for ``seconds`` (the accept rate), or while the sandbox holds
        ``max_sockets`` (None). A connect that arrives meanwhile makes the pause one
        refusal, target ``-`` (``rate_limit`` or ``connection_limit``): the sandbox went
        over the bound, not merely up to it."""
        loop = asyncio.get_running_loop()
        arrived = loop.create_future()

        def on_connect() -> None:
            if not arrived.done():
                arrived.set_result(None)

        loop.add_reader(listener.fileno(), on_connect)
        deadline = None if seconds is None else loop.time() + seconds
        try:
            while True:
                if deadline is None:
                    if sandbox.sockets < self.max_sockets:
                        return
                    sandbox.room.clear()
                    wake = asyncio.ensure_future(sandbox.room.wait())
                else:
                    left = deadline - loop.time()
                    if left <= 0:
                        return
                    wake = asyncio.ensure_future(asyncio.sleep(left))
                waiting = {wake} if arrived.done() else {wake, arrived}
                try:
                    done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    wake.cancel()
                if arrived in done and wake not in done:
                    loop.remove_reader(listener.fileno())
                    sandbox.counters["accept_pauses"] += 1
                    self._report(sandbox, "-", RATE_LIMIT if seconds else CONNECTION_LIMIT)
        finally:
            loop.remove_reader(listener.fileno())
            arrived.cancel()

    async def _client(self, sandbox: _Sandbox, conn: socket.socket) -> None:
        try:
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(limit=self.max_header_bytes)
            protocol = asyncio.StreamReaderProtocol(reader)
            try:
                transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn)
            except OSError:
                conn.close()
                return
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            try:
                await self._serve_client(sandbox, reader, writer)
            except asyncio.CancelledError:
                raise
            except Exception:
                self._log(
                    sandbox,
                    logging.ERROR,
                    "egress proxy error run=%s",
                    sandbox.run_id,
                    exc_info=True,
                )
            finally:
                await close_writer(writer)
        finally:
            sandbox.sockets -= 1
            if sandbox.sockets < self.max_sockets:
                sandbox.room.set()

    async def serve_unix(
        self,
        path: str | os.PathLike[str],
        run_id: int,
        *,
        mode: int = 0o600,
        owner_uid: int | None = None,
    ) -> str:
        """Listen for ``run_id``'s sandbox on a unix socket at ``path``; returns the path.

        Preconditions: ``path`` is in a directory only that sandbox can reach (its work
        dir), and the sandbox has not started yet (chmod/chown follow symlinks); a stale
        socket file there is replaced, any other file makes this raise OSError.
        ``owner_uid`` chowns the socket to the sandbox's uid (needs root), ``mode`` sets
        who may connect.
        """
        path = os.fspath(path)
        sandbox = self._sandbox(run_id)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            os.chmod(path, mode)
            if owner_uid is not None:
                os.chown(path, owner_uid, owner_uid)
            listener.listen(LISTEN_BACKLOG)
        except BaseException:
            listener.close()
            raise
        sandbox.socket_paths.append(path)
        self._listen(sandbox, listener)
        return path

    async def serve_tcp(self, run_id: int, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen for ``run_id`` on loopback TCP (tests, forwarders); returns the port.

        Refuses any non-loopback bind: the proxy must never be reachable off the host.
        """
        if host not in ("127.0.0.1", "::1"):
            raise ValueError(f"the egress proxy binds loopback only, not {host!r}")
        sandbox = self._sandbox(run_id)
        listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, port))
            listener.listen(LISTEN_BACKLOG)
        except BaseException:
            listener.close()
            raise
        self._listen(sandbox, listener)
        return int(listener.getsockname()[1])

    def active_connections(self, run_id: int) -> int:
        """Client connections currently admitted for ``run_id`` (0 if unknown)."""
        sandbox = self._sandboxes.get(run_id)
        return sandbox.active if sandbox else 0

    def counters(self, run_id: int) -> dict[str, int]:
        """What ``run_id``'s sandbox has done so far: ``connections`` accepted,
        ``requests`` whose head was read, ``header_timeouts``, ``upstream_failures``,
        ``accept_pauses`` (pauses a connect arrived in), ``refused:<reason>`` per
        refusal reason, ``log_suppressed`` (log lines not written). Only the keys that
        happened; empty for an unknown or released run."""
        sandbox = self._sandboxes.get(run_id)
        return dict(sandbox.counters) if sandbox else {}

    async def release(self, run_id: int) -> None:
        """Stop serving ``run_id``: close its listeners, cut its live connections and
        remove its socket files. Idempotent."""
        sandbox = self._sandboxes.pop(run_id, None)
        if sandbox is None:
            return
        if sandbox.counters["log_suppressed"]:
            logger.warning(
                "egress run=%s: %d refusals in all, %d log lines about them suppressed",
                run_id,
                sum(n for key, n in sandbox.counters.items() if key.startswith("refused:")),
                sandbox.counters["log_suppressed"],
            )
        for acceptor in sandbox.acceptors:
            acceptor.cancel()
        await asyncio.gather(*sandbox.acceptors, return_exceptions=True)
        for listener in sandbox.listeners:
            listener.close()
        tasks = list(sandbox.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for path in sandbox.socket_paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    async def reassign(
        self, old_run_id: int, run_id: int, sockets: list[tuple[str, int | None]]
    ) -> None:
        """Releases ``old_run_id``, then serves each of ``sockets`` (a path and its
        owner's uid, as ``serve_unix`` takes them) for ``run_id``: a pooled sandbox's
        identity changed in one step on the loop (``LocalSandbox.assign``). Nothing of
        the old identity's connections, counters or refusals carries over."""
        await self.release(old_run_id)
        for path, owner_uid in sockets:
            await self.serve_unix(path, run_id, owner_uid=owner_uid)

    async def close(self) -> None:
        """Release every sandbox."""
        for run_id in list(self._sandboxes):
            await self.release(run_id)

    def run_in_thread(self) -> "EgressProxyThread":
        """Start this proxy on its own event loop in a daemon thread (for sync code)."""
        return EgressProxyThread(self).start()

    # --- one client connection ------------------------------------------------------

    async def _serve_client(
        self, sandbox: _Sandbox, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # Over the limit the head is still read (briefly) so the refusal names its
        # target and the client sees a 429 rather than a reset.
        admitted = sandbox.active < self.max_connections
        if admitted:
            sandbox.active += 1
        target = "-"
        try:
            head_timeout = (
                self.header_timeout_s
                if admitted
                else min(self.header_timeout_s, OVER_LIMIT_HEADER_TIMEOUT_S)
            )
            head = await self._read_head(reader, head_timeout)
            if isinstance(head, RequestHead):
                target = printable(head.target)
                sandbox.counters["requests"] += 1
            if not admitted:
                raise Respond(429, "too many connections", CONNECTION_LIMIT)
            if head is None:
                # A client that never finished its head (or closed without one) is its
                # own loss, not a refusal: an idle preconnect looks the same.
                sandbox.counters["header_timeouts"] += 1
                await self._send(writer, 408, "request timeout")
                await linger(reader, writer)
                return
            if not isinstance(head, RequestHead):
                raise Respond(400, f"malformed request: {head}", MALFORMED)
            if head.method == "CONNECT":
                await self._tunnel(sandbox, head, reader, writer)
            else:
                await self._forward(sandbox, head, reader, writer)
        except Respond as answer:
            if answer.reason is not None:
                self._report(sandbox, target, answer.reason)
            await self._send(writer, answer.status, answer.text, answer.headers)
            await linger(reader, writer)
        finally:
            # Before the caller closes the socket: a client that sees EOF may count on
            # its slot being free again.
            if admitted:
                sandbox.active -= 1

    async def _read_head(
        self, reader: asyncio.StreamReader, timeout: float
    ) -> RequestHead | str | None:
        """The parsed head, a malformation description, or None on timeout / early EOF."""
        try:
            data = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        except TimeoutError:
            return None
        except asyncio.LimitOverrunError:
            return "head too large"
        except asyncio.IncompleteReadError as exc:
            return "incomplete head" if exc.partial.strip() else None
        try:
            return parse_head(data)
        except BadRequest as exc:
            return str(exc)

    def _log(
        self, sandbox: _Sandbox, level: int, message: str, *args: object, exc_info: bool = False
    ) -> None:
        """Log a line about ``sandbox`` within its log budget; count the rest. A flood
        of refusals costs the worker's log a burst and then a line a second."""
        if sandbox.log_bucket.take() > 0:
            sandbox.log_suppressed += 1
            sandbox.counters["log_suppressed"] += 1
            return
        if sandbox.log_suppressed:
            message += " (%d lines about this run suppressed before this one)"
            args = (*args, sandbox.log_suppressed)
            sandbox.log_suppressed = 0
        logger.log(level, message, *args, exc_info=exc_info)

    def _report(self, sandbox: _Sandbox, target: str, reason: str) -> None:
        sandbox.counters[f"refused:{reason}"] += 1
        self._log(
            sandbox,
            logging.WARNING,
            "egress refused run=%s target=%s reason=%s",
            sandbox.run_id,
            target,
            reason,
        )
        if self.on_refusal is not None:
            try:
                self.on_refusal(sandbox.run_id, target, reason)
            except Exception:
                self._log(
                    sandbox,
                    logging.ERROR,
                    "egress on_refusal callback failed run=%s",
                    sandbox.run_id,
                    exc_info=True,
                )

    async def _send(
        self, writer: asyncio.StreamWriter, status: int, text: str, headers: tuple[str, ...] = ()
    ) -> None:
        body = f"{text}\n".encode()
        head = "".join(
            [
                f"HTTP/1.1 {status} {STATUS_TEXT[status]}\r\n",
                "Content-Type: text/plain; charset=utf-8\r\n",
                f"Content-Length: {len(body)}\r\n",
                "Connection: close\r\n",
                *(f"{line}\r\n" for line in headers),
                "\r\n",
            ]
        )
        with contextlib.suppress(OSError, TimeoutError):
            writer.write(head.encode("ascii") + body)
            await asyncio.wait_for(writer.drain(), 2.0)

    def _take_token(self, sandbox: _Sandbox) -> None:
        wait = sandbox.bucket.take()
        if wait > 0:
            retry = f"Retry-After: {max(1, math.ceil(wait))}"
            raise Respond(429, "rate limited", RATE_LIMIT, (retry,))

    async def _check(
        self, sandbox: _Sandbox, check: Callable[[Resolver], CheckedTarget]
    ) -> CheckedTarget:
        """Run a netpolicy check with ``check(resolver)``.

        An address literal is checked right here (pure and quick). A name's check runs
        on the sandbox's own lookup pool: at most ``max_lookups`` in flight (over it:
        429 ``lookup_limit`` at once), each waited for ``resolve_timeout_s`` (then 504
        ``lookup_timeout``; the thread finishes on its own). Nothing a resolver does
        for one sandbox can hold up the loop or another sandbox's lookups."""
        try:
            try:
                return check(_defer_lookup)
            except _LookupNeeded:
                pass
            future = sandbox.lookups.submit(lambda: check(self.resolver))
            return await asyncio.wait_for(asyncio.wrap_future(future), self.resolve_timeout_s)
        except TimeoutError as exc:
            raise Respond(504, f"egress refused: {LOOKUP_TIMEOUT}", LOOKUP_TIMEOUT) from exc
        except EgressRefused as refused:
            reason = refused.reason
            if reason == LOOKUP_LIMIT:
                raise Respond(
                    429, f"egress refused: {reason}", reason, ("Retry-After: 1",)
                ) from None
            status = 502 if reason == UNRESOLVABLE else 403
            raise Respond(status, f"egress refused: {reason}", reason) from None
        except Exception as exc:
            # A broken resolver is the host's fault, not the sandbox's: no refusal report.
            self._log(sandbox, logging.ERROR, "egress check failed", exc_info=True)
            raise Respond(502, "resolver error") from exc

    async def _dial(self, sandbox: _Sandbox, target: CheckedTarget) -> Streams:
        """Connect to the first reachable checked address, never to anything else,
        within ``connect_timeout_s`` for all of them together (a name with many
        black-holed addresses must not hold the connection for each in turn)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout_s
        timed_out = False
        served = target.simulated
        if served is not None:
            # The checks set this only for a configured simulated host: its upstream is
            # fixed there, whatever port or address the request named.
            try:
                return await asyncio.wait_for(
                    self.simulated_dialer(served.address, served.upstream_port),
                    self.connect_timeout_s,
                )
            except (TimeoutError, OSError) as exc:
                self._log(
                    sandbox,
                    logging.ERROR,  # the worker's own server: the host's trouble
                    "egress simulated host %s unreachable run=%s: %r",
                    served.name,
                    sandbox.run_id,
                    exc,
                )
                sandbox.counters["upstream_failures"] += 1
                raise Respond(502, "upstream unreachable") from None
        for address in target.addresses:
            left = deadline - loop.time()
            if left <= 0:
                timed_out = True
                break
            try:
                return await asyncio.wait_for(self.dialer(address, target.port), left)
            except EgressRefused as refused:  # the dialer's own last check
                raise Respond(403, f"egress refused: {refused.reason}", refused.reason) from None
            except TimeoutError:
                timed_out = True
                self._log(
                    sandbox,
                    logging.INFO,
                    "egress dial timed out run=%s %s:%s",
                    sandbox.run_id,
                    address,
                    target.port,
                )
            except OSError as exc:
                self._log(
                    sandbox,
                    logging.INFO,
                    "egress dial failed run=%s %s:%s: %r",
                    sandbox.run_id,
                    address,
                    target.port,
                    exc,
                )
        sandbox.counters["upstream_failures"] += 1
        if timed_out:
            raise Respond(504, "upstream timed out")
        raise Respond(502, "upstream unreachable")

    async def _tunnel(
        self,
        sandbox: _Sandbox,
        head: RequestHead,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        try:
            host, port = split_authority(head.target)
        except EgressRefused:
            raise Respond(400, "malformed request: CONNECT needs host:port", MALFORMED) from None
        if port is None:
            raise Respond(400, "malformed request: CONNECT needs host:port", MALFORMED)
        self._take_token(sandbox)
        target = await self._check(
            sandbox,
            lambda resolver: check_destination(
                host, port, resolver, allowed_ports=self.allowed_ports, simulated=self.simulated
            ),
        )
        upstream = await self._dial(sandbox, target)
        try:
            writer.write(f"{head.version} 200 Connection Established\r\n\r\n".encode("ascii"))
            await asyncio.wait_for(writer.drain(), self.idle_timeout_s)
            await relay((reader, writer), upstream, self.idle_timeout_s, upload_limit=None)
        finally:
            await close_writer(upstream[1])

    async def _forward(
        self,
        sandbox: _Sandbox,
        head: RequestHead,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        scheme = head.target.partition(":")[0].lower()
        if scheme == "https":
            raise Respond(400, "malformed request: use CONNECT for https", MALFORMED)
        if head.target[:7].lower() != "http://":
            raise Respond(400, "malformed request: absolute-form http URL required", MALFORMED)
        if head.values("transfer-encoding"):
            # Relaying a chunked body means parsing it; browsers send Content-Length.
            raise Respond(411, "chunked request bodies are not supported", LENGTH_REQUIRED)
        lengths = head.values("content-length")
        # One value, ASCII digits only: int() would take "+5", " 5" or full-width digits,
        # and two lengths are the classic smuggling seam.
        if len(lengths) > 1 or (lengths and not (lengths[0].isascii() and lengths[0].isdigit())):
            raise Respond(400, "malformed request: Content-Length", MALFORMED)
        body_length = int(lengths[0]) if lengths else 0
        self._take_token(sandbox)
        url = head.target
        target = await self._check(
            sandbox,
            lambda resolver: check_url(
                url, resolver, allowed_ports=self.allowed_ports, simulated=self.simulated
            ),
        )
        upstream = await self._dial(sandbox, target)
        stamp = None if target.simulated is None else run_stamp(self.stamp_key, sandbox.run_id)
        try:
            upstream[1].write(self._upstream_head(head, target, stamp))
            await asyncio.wait_for(upstream[1].drain(), self.idle_timeout_s)
            await relay((reader, writer), upstream, self.idle_timeout_s, upload_limit=body_length)
        finally:
            await close_writer(upstream[1])

    @staticmethod
    def _upstream_head(head: RequestHead, target: CheckedTarget, stamp: str | None) -> bytes:
        """Origin-form request for the upstream. ``Connection: close`` makes the
        upstream end the response with EOF, so the proxy never parses responses.
        With ``stamp`` (a simulated host), every ``X-Arena-Run`` the sandbox sent is
        dropped and the stamp is the only one."""
        named_in_connection = {
            token.strip().lower()
            for value in head.values("connection")
            for token in value.split(",")
        }
        lines = [f"{head.method} {target.request_target} HTTP/1.1", f"Host: {target.authority}"]
        for name, value in head.headers:
            lowered = name.lower()
            if lowered in HOP_BY_HOP or lowered in named_in_connection:
                continue
            if stamp is not None and lowered == STAMP_HEADER.lower():
                continue
            lines.append(f"{name}: {value}")
        if stamp is not None:
            lines.append(f"{STAMP_HEADER}: {stamp}")
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class EgressProxyThread:
    """An :class:`EgressProxy` on its own event loop in a daemon thread.

    Every method blocks until the loop has done the work (bounded by ``timeout``), so a
    sync caller can ``serve_unix`` a sandbox's socket before starting the sandbox, and
    ``release`` it after. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, proxy: EgressProxy, *, timeout: float = 10.0) -> None:
        self.proxy = proxy
        self.timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError("already started")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run, args=(self._loop,), name="egress-proxy", daemon=True
        )
        self._thread.start()
        return self

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            # Lookups run on daemon threads of their own, never on the default executor;
            # anything else there gets a second.
            loop.run_until_complete(loop.shutdown_default_executor(timeout=1.0))
            loop.close()

    def _call[T](self, coro: Awaitable[T]) -> T:
        if self._loop is None:
            raise RuntimeError("not started")

        async def wrapper() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrapper(), self._loop).result(self.timeout)

    def serve_unix(
        self,
        path: str | os.PathLike[str],
        run_id: int,
        *,
        mode: int = 0o600,
        owner_uid: int | None = None,
    ) -> str:
        """See :meth:`EgressProxy.serve_unix`; returns the socket path."""
        return self._call(self.proxy.serve_unix(path, run_id, mode=mode, owner_uid=owner_uid))

    def serve_tcp(self, run_id: int, host: str = "127.0.0.1", port: int = 0) -> int:
        """See :meth:`EgressProxy.serve_tcp`; returns the bound port."""
        return self._call(self.proxy.serve_tcp(run_id, host, port))

    def active_connections(self, run_id: int) -> int:
        async def read() -> int:
            return self.proxy.active_connections(run_id)

        return self._call(read())

    def counters(self, run_id: int) -> dict[str, int]:
        """See :meth:`EgressProxy.counters`."""

        async def read() -> dict[str, int]:
            return self.proxy.counters(run_id)

        return self._call(read())

    def release(self, run_id: int) -> None:
        """See :meth:`EgressProxy.release`."""
        self._call(self.proxy.release(run_id))

    def reassign(self, old_run_id: int, run_id: int, sockets: list[tuple[str, int | None]]) -> None:
        """See :meth:`EgressProxy.reassign` (one hop to the proxy's thread)."""
        self._call(self.proxy.reassign(old_run_id, run_id, sockets))

    def close(self) -> None:
        """Release every sandbox, stop the loop and join the thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            return
        try:
            self._call(self.proxy.close())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(self.timeout)

    def __enter__(self) -> Self:
        if self._thread is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
