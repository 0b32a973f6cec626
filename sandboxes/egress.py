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

Where things are: this module holds the bounds, the proxy's listeners and the fair
accepting of each sandbox's sockets (:class:`EgressProxy`), and its thread for sync
callers (:class:`EgressProxyThread`); :mod:`sandboxes.egress_connection` serves one
connection (its head, CONNECT or plain HTTP, the check, the dial, refusals);
:mod:`sandboxes.egress_state` is the per-sandbox state and the refusal reasons;
:mod:`sandboxes.egress_stamp` the run stamp; :mod:`sandboxes.egress_wire` the wire
(request heads, relays, token buckets); :mod:`sandboxes.netpolicy` the address policy.
Stdlib asyncio only. One proxy runs on one event loop; sync callers (the battle
orchestrator) use :meth:`EgressProxy.run_in_thread`.
"""

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import stat
import threading
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self

from sandboxes.egress_connection import ConnectionHandling
from sandboxes.egress_stamp import STAMP_KEY_BYTES
from sandboxes.egress_state import (
    CONNECTION_LIMIT,
    RATE_LIMIT,
    RefusalCallback,
    SandboxState,
    logger,
)
from sandboxes.egress_wire import Dialer, TokenBucket, dial_checked, dial_simulated
from sandboxes.netpolicy import (
    DEFAULT_ALLOWED_PORTS,
    LookupPool,
    Resolver,
    SimulatedHosts,
    default_resolver,
)

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
CONNECT_TIMEOUT_S = 10.0  # all of a destination's addresses together
IDLE_TIMEOUT_S = 60.0  # a relay with no byte in either direction
MAX_HEADER_BYTES = 32 * 1024
LOG_LINES_PER_S, LOG_BURST = 1.0, 20  # the worker's log lines about one sandbox


class EgressProxy(ConnectionHandling):
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
        self._sandboxes: dict[int, SandboxState] = {}

    # --- listeners ------------------------------------------------------------------

    def _sandbox(self, run_id: int) -> SandboxState:
        sandbox = self._sandboxes.get(run_id)
        if sandbox is None:
            sandbox = self._sandboxes[run_id] = SandboxState(
                run_id,
                bucket=TokenBucket(self.rate_per_s, self.burst, self.clock),
                accept_bucket=TokenBucket(self.accept_rate_per_s, self.accept_burst, self.clock),
                log_bucket=TokenBucket(self.log_lines_per_s, self.log_burst, self.clock),
                lookups=LookupPool(self.max_lookups, name=f"egress-lookup-{run_id}"),
            )
        return sandbox

    def _listen(self, sandbox: SandboxState, listener: socket.socket) -> None:
        listener.setblocking(False)
        sandbox.listeners.append(listener)
        acceptor = asyncio.get_running_loop().create_task(self._accept(sandbox, listener))
        sandbox.acceptors.append(acceptor)

    async def _accept(self, sandbox: SandboxState, listener: socket.socket) -> None:
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
        self, sandbox: SandboxState, listener: socket.socket, *, seconds: float | None = None
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
