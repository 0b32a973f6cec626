"""One client connection of the egress proxy, from its request head to its end:
admission (the per-sandbox connection bound), the head, a CONNECT tunnel or a
plain-HTTP forward, the destination's check (on the sandbox's own lookup threads), the
dial, and every refusal answered, reported and logged within the sandbox's log budget.

:class:`ConnectionHandling` is half of :class:`sandboxes.egress.EgressProxy`: the proxy
accepts the sandbox's sockets and hands each to :meth:`ConnectionHandling._client`.
"""

import asyncio
import contextlib
import logging
import math
import socket
from collections.abc import Callable

from sandboxes.egress_stamp import STAMP_HEADER, run_stamp
from sandboxes.egress_state import (
    CONNECTION_LIMIT,
    LENGTH_REQUIRED,
    MALFORMED,
    RATE_LIMIT,
    RefusalCallback,
    SandboxState,
    logger,
)
from sandboxes.egress_wire import (
    HOP_BY_HOP,
    STATUS_TEXT,
    BadRequest,
    Dialer,
    RequestHead,
    Respond,
    Streams,
    close_writer,
    linger,
    parse_head,
    printable,
    relay,
)
from sandboxes.netpolicy import (
    LOOKUP_LIMIT,
    LOOKUP_TIMEOUT,
    UNRESOLVABLE,
    CheckedTarget,
    EgressRefused,
    IPAddress,
    Resolver,
    SimulatedHosts,
    check_destination,
    check_url,
    split_authority,
)

OVER_LIMIT_HEADER_TIMEOUT_S = 1.0  # an over-limit connection's head, read to name it


class _LookupNeeded(Exception):
    """The host is a name: the check must run on the sandbox's lookup pool."""


def _defer_lookup(host: str, port: int) -> list[IPAddress]:
    raise _LookupNeeded(host)


class ConnectionHandling:
    """Serving one accepted connection of a sandbox. Mixed into
    :class:`sandboxes.egress.EgressProxy`, which sets these attributes (its
    constructor's arguments, documented there)."""

    resolver: Resolver
    dialer: Dialer
    on_refusal: RefusalCallback | None
    simulated: SimulatedHosts
    simulated_dialer: Dialer
    stamp_key: bytes
    max_connections: int
    max_sockets: int
    allowed_ports: frozenset[int]
    header_timeout_s: float
    idle_timeout_s: float
    connect_timeout_s: float
    resolve_timeout_s: float
    max_header_bytes: int

    async def _client(self, sandbox: SandboxState, conn: socket.socket) -> None:
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

    async def _serve_client(
        self, sandbox: SandboxState, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
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
        self, sandbox: SandboxState, level: int, message: str, *args: object, exc_info: bool = False
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

    def _report(self, sandbox: SandboxState, target: str, reason: str) -> None:
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

    def _take_token(self, sandbox: SandboxState) -> None:
        wait = sandbox.bucket.take()
        if wait > 0:
            retry = f"Retry-After: {max(1, math.ceil(wait))}"
            raise Respond(429, "rate limited", RATE_LIMIT, (retry,))

    async def _check(
        self, sandbox: SandboxState, check: Callable[[Resolver], CheckedTarget]
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

    async def _dial(self, sandbox: SandboxState, target: CheckedTarget) -> Streams:
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
        sandbox: SandboxState,
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
        sandbox: SandboxState,
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
