"""The egress proxy's wire: HTTP/1.1 request heads, byte relays and token buckets.

Everything here is about one connection at a time and knows nothing of sandboxes,
policies or limits; :mod:`sandboxes.egress` decides what may pass and uses these parts
to move it. The request-head parser is strict on purpose (see :func:`parse_head`).
"""

import asyncio
import contextlib
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sandboxes.netpolicy import EgressRefused, IPAddress, address_refusal

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
# (checked address, port) -> open streams. Must connect to exactly that address.
Dialer = Callable[[IPAddress, int], Awaitable[Streams]]

STATUS_TEXT = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    411: "Length Required",
    429: "Too Many Requests",
    502: "Bad Gateway",
    504: "Gateway Timeout",
}
_TOKEN_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Hop-by-hop headers (RFC 9110 §7.6.1) plus the proxy's own: never forwarded upstream.
# Upgrade is dropped because a plain-HTTP upgrade would turn the forwarded request into
# an unframed tunnel; Chromium tunnels WebSockets through CONNECT anyway.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",  # replaced from the URL (RFC 9112 §3.2.2)
    }
)
_CHUNK = 64 * 1024
_LINGER_S = 0.5
_LINGER_MAX_BYTES = 256 * 1024


async def dial_checked(address: IPAddress, port: int) -> Streams:
    """The production dialer: a TCP connection to exactly ``address``.

    Precondition: ``address`` came out of a netpolicy check. The policy is asked again
    anyway (the dialer is the last line), and ``AI_NUMERICHOST`` guarantees the address
    text is never looked up as a name.
    """
    reason = address_refusal(address)
    if reason is not None:
        raise EgressRefused(reason, str(address))
    return await asyncio.open_connection(
        str(address), port, flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
    )


async def dial_simulated(address: IPAddress, port: int) -> Streams:
    """The dialer of the worker's simulated hosts (netpolicy.SimulatedHost): a TCP
    connection to exactly ``address`` and ``port``, which the address policy would
    refuse (the worker's own loopback server).

    Precondition: both come from a SimulatedHost the proxy was configured with, never
    from a request; the proxy calls this only for a CheckedTarget whose ``simulated``
    is set, and dials ``simulated.upstream_port``, not the port the sandbox asked for.
    """
    return await asyncio.open_connection(
        str(address), port, flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
    )


class BadRequest(Exception):
    pass


class Respond(Exception):
    """Stop handling this connection and answer with ``status``; a refusal if
    ``reason`` is set (reported through on_refusal), a plain error otherwise."""

    def __init__(
        self, status: int, text: str, reason: str | None = None, headers: tuple[str, ...] = ()
    ) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.reason = reason
        self.headers = headers


@dataclass(frozen=True)
class RequestHead:
    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]

    def values(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name]


def parse_head(data: bytes) -> RequestHead:
    """Parse a request head that ends in CRLF CRLF; strict, because the head is
    re-serialised for the upstream and any leniency is a smuggling seam."""
    lines = data[:-4].split(b"\r\n")
    if any(b"\r" in line or b"\n" in line or b"\0" in line for line in lines):
        raise BadRequest("bare CR, LF or NUL")
    try:
        request_line = lines[0].decode("ascii")
    except UnicodeDecodeError as exc:
        raise BadRequest("non-ASCII request line") from exc
    parts = request_line.split(" ")
    if len(parts) != 3 or not _TOKEN_RE.fullmatch(parts[0]) or not parts[1]:
        raise BadRequest("bad request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest("unsupported HTTP version")
    headers = []
    for raw in lines[1:]:
        if raw[:1] in (b" ", b"\t"):
            raise BadRequest("obsolete line folding")
        # Latin-1 keeps obs-text bytes in values intact for the round trip.
        name, colon, value = raw.decode("latin-1").partition(":")
        if not colon or not _TOKEN_RE.fullmatch(name):
            raise BadRequest("bad header line")
        headers.append((name, value.strip(" \t")))
    return RequestHead(method, target, version, tuple(headers))


class TokenBucket:
    """``rate`` tokens a second up to ``burst``; one token a request."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.clock = clock
        self.tokens = float(burst)
        self.stamp = clock()

    def take(self) -> float:
        """0.0 when a token was taken, else the seconds until one will be there."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class _Activity:
    """Last time bytes moved in either direction of a relay."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.loop = asyncio.get_running_loop()
        self.last = self.loop.time()

    def remaining(self) -> float:
        return self.last + self.timeout - self.loop.time()

    def touch(self) -> None:
        self.last = self.loop.time()


async def pump(
    src: asyncio.StreamReader,
    dst: asyncio.StreamWriter,
    activity: _Activity,
    *,
    limit: int | None = None,
    half_close: bool = False,
) -> str:
    """Copy src to dst until EOF, ``limit`` bytes, or both directions idle past the
    timeout. Returns why it stopped: "eof", "limit", "short" (EOF before the limit),
    "idle" or "error". Cancel-safe: StreamReader.read keeps unread data on cancel."""
    remaining = limit
    while remaining is None or remaining > 0:
        size = _CHUNK if remaining is None else min(_CHUNK, remaining)
        try:
            while True:
                wait = activity.remaining()
                if wait <= 0:
                    return "idle"
                try:
                    chunk = await asyncio.wait_for(src.read(size), wait)
                    break
                except TimeoutError:
                    continue  # the other direction may have moved meanwhile
            if not chunk:
                if limit is not None:
                    return "short"
                if half_close and dst.can_write_eof():
                    dst.write_eof()
                return "eof"
            activity.touch()
            dst.write(chunk)
            await asyncio.wait_for(dst.drain(), activity.timeout)
        except TimeoutError:
            return "idle"  # the receiver stopped reading
        except OSError:
            return "error"
        if remaining is not None:
            remaining -= len(chunk)
    return "limit"


async def relay(
    client: Streams, upstream: Streams, idle_timeout: float, *, upload_limit: int | None
) -> None:
    """Relay until the upstream is done; the client side may half-close first.

    ``upload_limit`` None is a tunnel (client bytes flow until EOF, then half-close the
    upstream); a number is an HTTP request body of that many bytes, after which nothing
    more from the client is read (no pipelining to a destination nobody checked).
    """
    activity = _Activity(idle_timeout)
    up = asyncio.create_task(
        pump(client[0], upstream[1], activity, limit=upload_limit, half_close=upload_limit is None)
    )
    down = asyncio.create_task(pump(upstream[0], client[1], activity))
    try:
        done, _ = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        if up in done and down not in done and up.result() in ("eof", "limit"):
            await down  # the request is fully sent; the response decides the end
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)


async def close_writer(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), 1.0)


async def linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """After an error answer: send FIN, then swallow what the client still sends for a
    moment. Closing a socket with unread input makes the kernel send RST, which can
    destroy the answer before the client has read it (an over-long head, a body)."""
    with contextlib.suppress(OSError):
        if writer.can_write_eof():
            writer.write_eof()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _LINGER_S
    swallowed = 0
    with contextlib.suppress(OSError, TimeoutError):
        while swallowed < _LINGER_MAX_BYTES:
            chunk = await asyncio.wait_for(reader.read(_CHUNK), max(0.0, deadline - loop.time()))
            if not chunk:
                break
            swallowed += len(chunk)


def printable(text: str, limit: int = 200) -> str:
    """Targets come from the sandbox: keep log lines one line and bounded."""
    return "".join(c if c.isprintable() else "?" for c in text[:limit])
