"""The egress proxy over real sockets, on 127.0.0.1 and unix sockets only.

"Public" hosts are local servers: the fake resolver answers public addresses
(93.184.216.34, 2606:4700::1111) and the fake dialer, which records what it was asked to
dial, connects those to the local servers. Anything it has no route for fails without
touching the network, so a test that got the policy wrong fails instead of dialing out.
"""

import asyncio
import functools
import ipaddress
import os
import socket
import socketserver
import stat
import threading
from collections.abc import Awaitable, Callable

import pytest

from sandboxes.egress import EgressProxy, dial_checked
from sandboxes.netpolicy import EgressRefused

pytestmark = pytest.mark.timeout(10)

RUN_ID = 4242
PUBLIC = "93.184.216.34"
PUBLIC_2 = "93.184.216.35"
PUBLIC_V6 = "2606:4700::1111"
ip = ipaddress.ip_address


def async_test(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async test on a fresh loop, bounded, so no test can hang the suite."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 5))

    return wrapper


class FakeResolver:
    """Answers from a table (or a list of successive answers) and records questions."""

    def __init__(self) -> None:
        self.table: dict[str, list[list[str]]] = {}
        self.calls: list[tuple[str, int]] = []

    def answer(self, name: str, *answers: list[str]) -> None:
        self.table[name] = list(answers)

    def __call__(self, host: str, port: int) -> list:
        self.calls.append((host, port))
        answers = self.table.get(host)
        if not answers:
            raise OSError(f"no such host {host}")
        current = answers.pop(0) if len(answers) > 1 else answers[0]
        return [ip(a) for a in current]


class FakeDialer:
    """Maps (public address, port) to a local port; records every dial."""

    def __init__(self) -> None:
        self.routes: dict[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int], int] = {}
        self.calls: list[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]] = []

    def route(self, address: str, port: int, local_port: int) -> None:
        self.routes[(ip(address), port)] = local_port

    async def __call__(self, address, port):
        self.calls.append((address, port))
        local_port = self.routes.get((address, port))
        if local_port is None:
            raise ConnectionRefusedError(f"test dialer has no route to {address}:{port}")
        return await asyncio.open_connection("127.0.0.1", local_port)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def read_head(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)


async def http_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers 200 with the request head and body it received, then closes."""
    head = await read_head(reader)
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    body = await asyncio.wait_for(reader.readexactly(length), 2)
    payload = head + body
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)
    await writer.drain()
    writer.close()


def http_redirect(location: str):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(
            f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode()
        )
        await writer.drain()
        writer.close()

    return handler


async def tcp_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Echoes until EOF, then closes: a stand-in for a TLS server behind CONNECT."""
    while chunk := await reader.read(65536):
        writer.write(chunk)
        await writer.drain()
    writer.close()


class Harness:
    """A proxy serving RUN_ID on 127.0.0.1, with fakes and local upstreams."""

    def __init__(self, **proxy_kwargs) -> None:
        self.resolver = FakeResolver()
        self.dialer = FakeDialer()
        self.refusals: list[tuple[int, str, str]] = []
        self.proxy = EgressProxy(
            resolver=self.resolver,
            dialer=self.dialer,
            on_refusal=lambda run_id, target, reason: self.refusals.append(
                (run_id, target, reason)
            ),
            **proxy_kwargs,
        )
        self.upstreams: list[asyncio.Server] = []
        self.port = 0

    async def __aenter__(self) -> "Harness":
        self.port = await self.proxy.serve_tcp(RUN_ID)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.proxy.close()
        for server in self.upstreams:
            server.close()
            server.abort_clients()
            await asyncio.wait_for(server.wait_closed(), 2)

    async def upstream(self, handler, address: str, port: int) -> None:
        """Serve ``handler`` locally and route the public ``address:port`` to it."""
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        self.upstreams.append(server)
        self.dialer.route(address, port, server.sockets[0].getsockname()[1])

    async def connect(self, port: int | None = None) -> tuple:
        return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port or self.port), 2)

    async def request(self, raw: bytes, port: int | None = None) -> bytes:
        """Send ``raw``, return everything until the proxy closes."""
        reader, writer = await self.connect(port)
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 2)
        writer.close()
        return data

    async def tunnel(self, authority: str) -> tuple:
        """An established CONNECT tunnel, or AssertionError with the answer."""
        reader, writer = await self.connect()
        writer.write(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        head = await read_head(reader)
        assert head == b"HTTP/1.1 200 Connection Established\r\n\r\n", head
        return reader, writer


def status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def body(response: bytes) -> bytes:
    return response.partition(b"\r\n\r\n")[2]


def get(url: str, host: str = "ignored.example") -> bytes:
    return f"GET {url} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()


# --- allowed traffic ------------------------------------------------------------------


@async_test
async def test_absolute_form_get_reaches_the_checked_address_in_origin_form():
    async with Harness() as h:
        await h.upstream(http_echo, PUBLIC, 80)
        h.resolver.answer("public.example", [PUBLIC])

        response = await h.request(
            b"GET http://public.example/path?q=1 HTTP/1.1\r\n"
            b"Host: elsewhere.example\r\n"
            b"Proxy-Connection: keep-alive\r\n"
            b"Connection: keep-alive, X-Secret\r\n"
            b"X-Secret: hop\r\n"
            b"User-Agent: test\r\n\r\n"
        )

        assert status(response) == 200
        assert body(response) == (
            b"GET /path?q=1 HTTP/1.1\r\n"
            b"Host: public.example\r\n"
            b"User-Agent: test\r\n"
            b"Connection: close\r\n\r\n"
        )
        assert h.resolver.calls == [("public.example", 80)]
        assert h.dialer.calls == [(ip(PUBLIC), 80)]
        assert h.refusals == []


@async_test
async def test_request_body_is_forwarded_by_content_length():
    async with Harness() as h:
        await h.upstream(http_echo, PUBLIC, 80)

        response = await h.request(
            f"POST http://{PUBLIC}/form HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello".encode()
        )

        assert status(response) == 200
        assert body(response).endswith(b"Content-Length: 5\r\nConnection: close\r\n\r\nhello")
        assert h.resolver.calls == []  # a literal is never resolved


@async_test
async def test_connect_tunnel_exchanges_bytes_with_the_checked_address():
    async with Harness() as h:
        await h.upstream(tcp_echo, PUBLIC_V6, 443)
        h.resolver.answer("tls.example", [PUBLIC_V6])

        reader, writer = await h.tunnel("tls.example:443")
        writer.write(b"\x16\x03\x01 client hello")
        await writer.drain()
        echoed = await asyncio.wait_for(reader.readexactly(16), 2)
        writer.write_eof()  # half-close travels through; the echo server then closes
        rest = await asyncio.wait_for(reader.read(), 2)
        writer.close()

        assert (echoed, rest) == (b"\x16\x03\x01 client hello", b"")
        assert h.dialer.calls == [(ip(PUBLIC_V6), 443)]
        assert h.refusals == []


@async_test
async def test_dial_falls_back_only_to_other_checked_addresses():
    async with Harness() as h:
        await h.upstream(tcp_echo, PUBLIC_2, 443)  # PUBLIC itself has no route: it fails
        h.resolver.answer("multi.example", [PUBLIC, PUBLIC_2])

        _reader, writer = await h.tunnel("multi.example:443")
        writer.close()

        assert h.dialer.calls == [(ip(PUBLIC), 443), (ip(PUBLIC_2), 443)]


@async_test
async def test_unreachable_upstream_is_a_502_not_a_refusal():
    async with Harness() as h:
        response = await h.request(get(f"http://{PUBLIC}/"))

        assert status(response) == 502
        assert h.dialer.calls == [(ip(PUBLIC), 80)]
        assert h.refusals == []


# --- refused destinations -------------------------------------------------------------

REFUSED_HOSTS = [
    ("127.0.0.1", "loopback"),
    ("10.0.0.1", "private"),
    ("192.168.1.1", "private"),
    ("100.64.0.1", "cgnat"),
    ("169.254.169.254", "metadata"),
    ("[::1]", "loopback"),
    ("[::ffff:127.0.0.1]", "loopback"),
    ("[::ffff:a9fe:a9fe]", "metadata"),
    ("[fd00::1]", "private"),
    ("2130706433", "loopback"),
    ("0x7f.1", "loopback"),
    ("0177.0.0.1", "loopback"),
    ("0xa9fea9fe", "metadata"),
    ("localhost", "loopback"),
    # through the resolver
    ("internal.example", "private"),
    ("meta.example", "metadata"),
    ("mapped.example", "loopback"),
    ("mixed.example", "loopback"),  # one public and one loopback answer
]


def answer_refused_names(resolver: FakeResolver) -> None:
    resolver.answer("internal.example", ["10.1.2.3"])
    resolver.answer("meta.example", ["169.254.169.254"])
    resolver.answer("mapped.example", ["::ffff:127.0.0.1"])
    resolver.answer("mixed.example", [PUBLIC, "127.0.0.1"])


@pytest.mark.parametrize(("host", "reason"), REFUSED_HOSTS)
@async_test
async def test_get_to_a_non_public_host_is_refused(host, reason):
    async with Harness() as h:
        answer_refused_names(h.resolver)
        url = f"http://{host}/latest/meta-data/"

        response = await h.request(get(url, host))

        assert status(response) == 403
        assert body(response) == f"egress refused: {reason}\n".encode()
        assert h.dialer.calls == []
        assert h.refusals == [(RUN_ID, url, reason)]


@pytest.mark.parametrize(("host", "reason"), REFUSED_HOSTS)
@async_test
async def test_connect_to_a_non_public_host_is_refused(host, reason):
    async with Harness() as h:
        answer_refused_names(h.resolver)

        response = await h.request(f"CONNECT {host}:443 HTTP/1.1\r\n\r\n".encode())

        assert status(response) == 403
        assert body(response) == f"egress refused: {reason}\n".encode()
        assert h.dialer.calls == []
        assert h.refusals == [(RUN_ID, f"{host}:443", reason)]


@pytest.mark.parametrize(
    "raw",
    [
        get(f"http://{PUBLIC}:8080/"),
        get("http://public.example:22/"),
        f"CONNECT {PUBLIC}:22 HTTP/1.1\r\n\r\n".encode(),
        b"CONNECT public.example:6379 HTTP/1.1\r\n\r\n",
    ],
)
@async_test
async def test_ports_other_than_80_and_443_are_refused_before_resolving(raw):
    async with Harness() as h:
        h.resolver.answer("public.example", [PUBLIC])

        response = await h.request(raw)

        assert (status(response), body(response)) == (403, b"egress refused: port\n")
        assert h.resolver.calls == [] and h.dialer.calls == []
        assert [reason for _, _, reason in h.refusals] == ["port"]


@async_test
async def test_allowed_ports_are_configurable():
    async with Harness(allowed_ports=frozenset({8080})) as h:
        await h.upstream(http_echo, PUBLIC, 8080)

        allowed = await h.request(get(f"http://{PUBLIC}:8080/"))
        refused = await h.request(get(f"http://{PUBLIC}/"))

        assert (status(allowed), status(refused)) == (200, 403)


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://[::ffff:7f00:1]:80/admin", "loopback"),
        ("http://2130706433/", "loopback"),
    ],
)
@async_test
async def test_each_redirect_hop_is_a_new_check(location, reason):
    async with Harness() as h:
        await h.upstream(http_redirect(location), PUBLIC, 80)
        h.resolver.answer("public.example", [PUBLIC])

        # The client (Chromium) follows the redirect by sending a new proxied request.
        first = await h.request(get("http://public.example/start"))
        hop = first.split(b"Location: ", 1)[1].split(b"\r\n", 1)[0].decode()
        second = await h.request(get(hop))

        assert (status(first), hop) == (302, location)
        assert (status(second), body(second)) == (403, f"egress refused: {reason}\n".encode())
        assert h.dialer.calls == [(ip(PUBLIC), 80)]
        assert h.refusals == [(RUN_ID, location, reason)]


@async_test
async def test_rebinding_resolver_cannot_redirect_the_dial():
    async with Harness() as h:
        await h.upstream(http_echo, PUBLIC, 80)
        await h.upstream(tcp_echo, PUBLIC, 443)
        # Public on the first question, loopback on every one after.
        h.resolver.answer("rebind.example", [PUBLIC], ["127.0.0.1"])

        first = await h.request(get("http://rebind.example/"))

        # One resolution, and the dialer got exactly the address that was checked.
        assert status(first) == 200
        assert h.resolver.calls == [("rebind.example", 80)]
        assert h.dialer.calls == [(ip(PUBLIC), 80)]

        second = await h.request(get("http://rebind.example/"))
        third = await h.request(b"CONNECT rebind.example:443 HTTP/1.1\r\n\r\n")

        assert (status(second), status(third)) == (403, 403)
        assert len(h.resolver.calls) == 3  # one per request, none at dial time
        assert h.dialer.calls == [(ip(PUBLIC), 80)]


# --- limits ---------------------------------------------------------------------------


@async_test
async def test_connections_over_the_per_sandbox_limit_get_429():
    async with Harness(max_connections=2) as h:
        await h.upstream(tcp_echo, PUBLIC, 443)
        first = await h.tunnel(f"{PUBLIC}:443")
        await h.tunnel(f"{PUBLIC}:443")

        over = await h.request(f"CONNECT {PUBLIC}:443 HTTP/1.1\r\n\r\n".encode())

        assert (status(over), body(over)) == (429, b"too many connections\n")
        assert h.refusals == [(RUN_ID, f"{PUBLIC}:443", "connection_limit")]
        assert h.proxy.active_connections(RUN_ID) == 2

        # Closing a tunnel frees its slot: the proxy closes our end once it let go.
        first[1].write_eof()
        assert await asyncio.wait_for(first[0].read(), 2) == b""
        await h.tunnel(f"{PUBLIC}:443")


@async_test
async def test_requests_over_the_rate_get_429_until_tokens_refill():
    clock = FakeClock()
    async with Harness(rate_per_s=1.0, burst=2, clock=clock) as h:
        await h.upstream(http_echo, PUBLIC, 80)
        url = f"http://{PUBLIC}/"

        answers = [await h.request(get(url)) for _ in range(3)]
        clock.now += 1.0
        refilled = await h.request(get(url))

        assert [status(a) for a in answers] == [200, 200, 429]
        assert b"\r\nRetry-After: 1\r\n" in answers[2]
        assert status(refilled) == 200
        assert h.refusals == [(RUN_ID, url, "rate_limit")]
        assert len(h.dialer.calls) == 3


@async_test
async def test_limits_are_per_sandbox():
    async with Harness(rate_per_s=1.0, burst=1, clock=FakeClock()) as h:
        await h.upstream(http_echo, PUBLIC, 80)
        other_port = await h.proxy.serve_tcp(RUN_ID + 1)
        url = f"http://{PUBLIC}/"

        mine = [status(await h.request(get(url))) for _ in range(2)]
        theirs = status(await h.request(get(url), port=other_port))

        assert (mine, theirs) == ([200, 429], 200)


# --- malformed and slow clients -------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"HELLO\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: public.example\r\n\r\n",  # origin form: not a proxy request
        b"GET https://public.example/ HTTP/1.1\r\n\r\n",  # https goes through CONNECT
        b"GET ftp://public.example/ HTTP/1.1\r\n\r\n",
        b"CONNECT public.example HTTP/1.1\r\n\r\n",  # no port
        b"CONNECT [::1 HTTP/1.1\r\n\r\n",
        b"CONNECT public.example:+443 HTTP/1.1\r\n\r\n",
        b"GET http://public.example/ HTTP/2.0\r\n\r\n",
        b"GET  http://public.example/ HTTP/1.1\r\n\r\n",
        b"GET http://public.example/ HTTP/1.1\r\nX-A: a\r\n folded\r\n\r\n",
        b"GET http://public.example/ HTTP/1.1\nHost: public.example\r\n\r\n",  # bare LF
        b"GET http://public.example/ HTTP/1.1\r\nBad Header: x\r\n\r\n",
        b"GET http://public.example/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"GET http://public.example/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"GET http://public.example/ HTTP/1.1\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n",
        b"\xff\xfe\r\n\r\n",
        b"GET http://public.example/",  # the client gives up mid-head
    ],
)
@async_test
async def test_malformed_requests_get_400(raw):
    async with Harness(max_header_bytes=1024) as h:
        h.resolver.answer("public.example", [PUBLIC])
        reader, writer = await h.connect()
        writer.write(raw)
        writer.write_eof()

        response = await asyncio.wait_for(reader.read(), 2)
        writer.close()

        assert status(response) == 400
        assert body(response).startswith(b"malformed request")
        assert h.dialer.calls == []
        assert [(run_id, reason) for run_id, _, reason in h.refusals] == [(RUN_ID, "malformed")]


@async_test
async def test_chunked_request_bodies_get_411():
    async with Harness() as h:
        response = await h.request(
            f"POST http://{PUBLIC}/ HTTP/1.1\r\n".encode()
            + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        )

        assert status(response) == 411
        assert h.dialer.calls == []
        assert h.refusals == [(RUN_ID, f"http://{PUBLIC}/", "length_required")]


@async_test
async def test_a_client_that_never_finishes_its_head_is_timed_out():
    async with Harness(header_timeout_s=0.1) as h:
        reader, writer = await h.connect()
        writer.write(b"GET http://")

        response = await asyncio.wait_for(reader.read(), 2)
        writer.close()

        assert status(response) == 408
        assert h.refusals == []


@async_test
async def test_an_idle_tunnel_is_closed():
    async with Harness(idle_timeout_s=0.2) as h:
        await h.upstream(tcp_echo, PUBLIC, 443)
        reader, writer = await h.tunnel(f"{PUBLIC}:443")

        assert await asyncio.wait_for(reader.read(), 2) == b""
        writer.close()
        assert h.proxy.active_connections(RUN_ID) == 0


# --- lifecycle ------------------------------------------------------------------------


@async_test
async def test_release_cuts_live_tunnels_and_stops_listening():
    async with Harness() as h:
        await h.upstream(tcp_echo, PUBLIC, 443)
        reader, writer = await h.tunnel(f"{PUBLIC}:443")

        await h.proxy.release(RUN_ID)

        assert await asyncio.wait_for(reader.read(), 2) == b""
        writer.close()
        with pytest.raises(ConnectionRefusedError):
            await h.connect()


@async_test
async def test_tcp_listeners_bind_loopback_only():
    proxy = EgressProxy(resolver=FakeResolver(), dialer=FakeDialer())
    with pytest.raises(ValueError, match="loopback only"):
        await proxy.serve_tcp(RUN_ID, host="0.0.0.0")  # noqa: S104 - must be refused


@async_test
async def test_a_failing_refusal_callback_does_not_break_the_answer():
    def explode(run_id: int, target: str, reason: str) -> None:
        raise RuntimeError("callback bug")

    proxy = EgressProxy(resolver=FakeResolver(), dialer=FakeDialer(), on_refusal=explode)
    port = await proxy.serve_tcp(RUN_ID)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(get("http://127.0.0.1/"))
        response = await asyncio.wait_for(reader.read(), 2)
        writer.close()
    finally:
        await proxy.close()

    assert status(response) == 403


@async_test
async def test_the_production_dialer_refuses_non_public_addresses_itself():
    # Refused before any socket exists; 10.0.0.1 is never dialed.
    with pytest.raises(EgressRefused) as refused:
        await dial_checked(ip("10.0.0.1"), 80)
    assert refused.value.reason == "private"


class _EchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.settimeout(2)
        while data := self.request.recv(65536):
            self.request.sendall(data)


def _recv_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_thread_helper_serves_a_sandbox_on_a_unix_socket(tmp_path):
    refusals: list[tuple[int, str, str]] = []
    dialer = FakeDialer()
    upstream = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _EchoHandler)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, args=(0.05,), daemon=True).start()
    dialer.route(PUBLIC, 443, upstream.server_address[1])
    proxy = EgressProxy(
        resolver=FakeResolver(), dialer=dialer, on_refusal=lambda *a: refusals.append(a)
    )
    try:
        with proxy.run_in_thread() as handle:
            path = handle.serve_unix(tmp_path / "egress.sock", RUN_ID)
            mode = os.stat(path).st_mode

            with socket.socket(socket.AF_UNIX) as client:
                client.settimeout(2)
                client.connect(path)
                client.sendall(f"CONNECT {PUBLIC}:443 HTTP/1.1\r\n\r\n".encode())
                assert client.recv(39) == b"HTTP/1.1 200 Connection Established\r\n\r\n"
                client.sendall(b"ping")
                assert client.recv(4) == b"ping"

            with socket.socket(socket.AF_UNIX) as client:
                client.settimeout(2)
                client.connect(path)
                client.sendall(get("http://169.254.169.254/latest/meta-data/"))
                refused = _recv_all(client)

            handle.release(RUN_ID)
            released = not os.path.exists(path)
    finally:
        upstream.shutdown()
        upstream.server_close()

    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert (status(refused), body(refused)) == (403, b"egress refused: metadata\n")
    assert refusals == [(RUN_ID, "http://169.254.169.254/latest/meta-data/", "metadata")]
    assert released
    assert dialer.calls == [(ip(PUBLIC), 443)]
    assert handle._thread is not None and not handle._thread.is_alive()


def test_reassign_moves_a_sandbox_to_a_new_identity_in_one_step(tmp_path):
    """A pooled desktop claimed by a run (``LocalSandbox.assign``): the old identity's
    listeners, sockets and counters are gone, the new one's sockets answer for it."""
    refusals: list[tuple[int, str, str]] = []
    proxy = EgressProxy(
        resolver=FakeResolver(), dialer=FakeDialer(), on_refusal=lambda *a: refusals.append(a)
    )
    old_path, new_paths = tmp_path / "old.sock", [tmp_path / "a.sock", tmp_path / "b.sock"]
    with proxy.run_in_thread() as handle:
        handle.serve_unix(old_path, -5)
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(2)
            client.connect(str(old_path))
            client.sendall(get("http://169.254.169.254/"))
            _recv_all(client)
        assert handle.counters(-5)["requests"] == 1
        handle.reassign(-5, RUN_ID, [(str(p), None) for p in new_paths])
        assert handle.counters(-5) == {} and not old_path.exists()
        for path in new_paths:
            with socket.socket(socket.AF_UNIX) as client:
                client.settimeout(2)
                client.connect(str(path))
                client.sendall(get("http://169.254.169.254/"))
                assert status(_recv_all(client)) == 403
        assert handle.counters(RUN_ID)["requests"] == 2
    assert [r[0] for r in refusals] == [-5, RUN_ID, RUN_ID]


# --- per-sandbox bounds: no lane can starve another --------------------------------------


class HangingResolver(FakeResolver):
    """A FakeResolver whose ``hang.example`` lookups block until released (at most 5 s,
    so a failing test cannot leave a thread behind for long)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def __call__(self, host: str, port: int) -> list:
        if host == "hang.example":
            self.calls.append((host, port))
            self.release.wait(5)
            return [ip(PUBLIC)]
        return super().__call__(host, port)


async def timed(coro) -> tuple[bytes, float]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await coro
    return result, loop.time() - started


@async_test
async def test_a_resolver_that_hangs_for_one_sandbox_holds_up_only_that_sandbox():
    harness = Harness(max_lookups=2, resolve_timeout_s=0.5)
    harness.resolver = resolver = HangingResolver()
    harness.proxy.resolver = resolver
    async with harness as h:
        try:
            await h.upstream(http_echo, PUBLIC, 80)
            resolver.answer("public.example", [PUBLIC])
            other = await h.proxy.serve_tcp(RUN_ID + 1)
            hung = [
                asyncio.create_task(timed(h.request(get("http://hang.example/")))) for _ in range(2)
            ]
            while len(resolver.calls) < 2:  # both lookups are in flight
                await asyncio.sleep(0.01)

            over, over_s = await timed(h.request(get("http://hang.example/again")))
            literal = await h.request(get(f"http://{PUBLIC}/"))  # needs no lookup slot
            theirs, theirs_s = await timed(h.request(get("http://public.example/"), port=other))
            timed_out = await asyncio.gather(*hung)
        finally:
            resolver.release.set()

        assert (status(over), body(over)) == (429, b"egress refused: lookup_limit\n")
        assert b"\r\nRetry-After: 1\r\n" in over and over_s < 0.3
        assert status(literal) == 200
        assert status(theirs) == 200 and theirs_s < 0.3
        assert [status(r) for r, _ in timed_out] == [504, 504]
        assert all(0.5 <= s < 1.5 for _, s in timed_out)
        assert body(timed_out[0][0]) == b"egress refused: lookup_timeout\n"
        assert sorted(reason for run, _, reason in h.refusals if run == RUN_ID) == [
            "lookup_limit",
            "lookup_timeout",
            "lookup_timeout",
        ]
        assert [r for r in h.refusals if r[0] != RUN_ID] == []


@async_test
async def test_at_its_socket_cap_a_sandbox_waits_on_its_own_side():
    async with Harness(max_connections=1, max_sockets=1) as h:
        await h.upstream(tcp_echo, PUBLIC, 443)
        await h.upstream(http_echo, PUBLIC, 80)
        other = await h.proxy.serve_tcp(RUN_ID + 1)
        reader, writer = await h.tunnel(f"{PUBLIC}:443")  # the one socket it may hold

        # The next connect waits in the sandbox's own listen backlog: not accepted, so
        # it costs the proxy nothing, and the pause is recorded as a refusal.
        waiting_reader, waiting_writer = await h.connect()
        waiting_writer.write(get(f"http://{PUBLIC}/"))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(waiting_reader.read(1), 0.3)
        theirs = await h.request(get(f"http://{PUBLIC}/"), port=other)  # unaffected
        refusals_while_paused = list(h.refusals)

        writer.write_eof()  # the tunnel ends, its socket goes: the waiting one is served
        assert await asyncio.wait_for(reader.read(), 2) == b""
        writer.close()
        answered = await asyncio.wait_for(waiting_reader.read(), 2)
        waiting_writer.close()
        counters = h.proxy.counters(RUN_ID)

    assert status(theirs) == 200
    assert refusals_while_paused == [(RUN_ID, "-", "connection_limit")]
    assert status(answered) == 200
    assert (counters["connections"], counters["accept_pauses"]) == (2, 1)


@async_test
async def test_past_its_connection_rate_a_sandbox_waits_on_its_own_side():
    async with Harness(accept_rate_per_s=4.0, accept_burst=1) as h:
        await h.upstream(http_echo, PUBLIC, 80)
        other = await h.proxy.serve_tcp(RUN_ID + 1)

        first, first_s = await timed(h.request(get(f"http://{PUBLIC}/")))
        second = asyncio.create_task(timed(h.request(get(f"http://{PUBLIC}/"))))
        await asyncio.sleep(0.05)
        theirs, theirs_s = await timed(h.request(get(f"http://{PUBLIC}/"), port=other))
        (answer, second_s) = await second

    assert (status(first), status(answer), status(theirs)) == (200, 200, 200)
    assert first_s < 0.2 and theirs_s < 0.2  # the other sandbox has a bucket of its own
    assert 0.2 <= second_s < 1.0  # accepted once the bucket had a token again
    assert h.refusals == [(RUN_ID, "-", "rate_limit")]


@async_test
async def test_log_lines_about_one_sandbox_are_rate_limited_and_counted(caplog):
    clock = FakeClock()
    caplog.set_level("WARNING", logger="sandboxes.egress")
    async with Harness(log_lines_per_s=1.0, log_burst=3, clock=clock) as h:
        other = await h.proxy.serve_tcp(RUN_ID + 1)
        for n in range(6):
            await h.request(get(f"http://127.0.0.{n + 1}/"))
        await h.request(get("http://10.0.0.1/"), port=other)
        clock.now += 1.0
        await h.request(get("http://127.0.0.9/"))
        counters = h.proxy.counters(RUN_ID)

    lines = [r.getMessage() for r in caplog.records if r.name == "sandboxes.egress"]
    mine = [line for line in lines if f"run={RUN_ID} " in line]
    assert len(h.refusals) == 8  # every refusal is reported, logged or not
    assert mine[:3] == [
        f"egress refused run={RUN_ID} target=http://127.0.0.{n}/ reason=loopback" for n in (1, 2, 3)
    ]
    assert mine[3] == (
        f"egress refused run={RUN_ID} target=http://127.0.0.9/ reason=loopback"
        " (3 lines about this run suppressed before this one)"
    )
    assert f"egress refused run={RUN_ID + 1} target=http://10.0.0.1/ reason=private" in lines
    assert (counters["refused:loopback"], counters["log_suppressed"]) == (7, 3)
    assert f"egress run={RUN_ID}: 7 refusals in all, 3 log lines about them suppressed" in lines


@async_test
async def test_one_connect_deadline_covers_all_of_a_destinations_addresses():
    class HangingDialer(FakeDialer):
        async def __call__(self, address, port):
            self.calls.append((address, port))
            await asyncio.sleep(30)

    harness = Harness(connect_timeout_s=0.3)
    harness.dialer = harness.proxy.dialer = dialer = HangingDialer()
    async with harness as h:
        h.resolver.answer("blackhole.example", [PUBLIC, PUBLIC_2, PUBLIC_V6])

        response, took = await timed(h.request(get("http://blackhole.example/")))

        assert (status(response), body(response)) == (504, b"upstream timed out\n")
        assert 0.3 <= took < 1.0
        assert dialer.calls == [(ip(PUBLIC), 80)]
        assert h.refusals == []  # the upstream's fault, not the sandbox's
        assert h.proxy.counters(RUN_ID)["upstream_failures"] == 1


@async_test
async def test_counters_say_what_a_sandbox_did():
    async with Harness(header_timeout_s=0.1) as h:
        await h.upstream(http_echo, PUBLIC, 80)
        await h.request(get(f"http://{PUBLIC}/"))
        await h.request(get("http://10.0.0.1/"))
        reader, writer = await h.connect()
        await asyncio.wait_for(reader.read(), 2)  # sends nothing: 408 after the timeout
        writer.close()
        counters = h.proxy.counters(RUN_ID)

    assert counters == {
        "connections": 3,
        "requests": 2,
        "refused:private": 1,
        "header_timeouts": 1,
    }
    assert h.proxy.counters(RUN_ID) == {}  # released


# --- refusal records kept with the run (sandboxes.services) -----------------------------


def test_refusal_records_are_aggregated_bounded_and_counted(monkeypatch):
    from sandboxes import services

    monkeypatch.setattr(services, "MAX_REFUSALS_KEPT", 3)
    run_id = 987_654
    for target, reason in [
        ("http://10.0.0.1/", "private"),
        ("http://10.0.0.1/", "private"),
        ("-", "connection_limit"),
        ("x" * 1000, "malformed"),
        ("http://127.0.0.1/", "loopback"),  # past the bound: counted per reason only
        ("http://127.0.0.2/", "loopback"),
        ("-", "connection_limit"),  # an existing record still counts
    ]:
        services._record_refusal(run_id, target, reason)

    records = services.egress_refusals_take(run_id)

    assert records == [
        {"target": "http://10.0.0.1/", "reason": "private", "count": 2},
        {"target": "-", "reason": "connection_limit", "count": 2},
        {"target": "x" * 300, "reason": "malformed", "count": 1},
        {"target": "*", "reason": "loopback", "count": 2},
    ]
    assert services.egress_refusals_take(run_id) == []
