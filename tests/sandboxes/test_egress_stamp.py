"""The run stamp (``X-Arena-Run``) the egress proxy puts on requests to a simulated host,
through a real proxy's unix sockets as a sandbox would send them: a forged header is
replaced, the stamp verifies with the proxy's key and names the socket's run, and a
request to any other host gets no stamp. Everything stays on 127.0.0.1."""

import asyncio
import ipaddress
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxes.egress import EgressProxy, EgressProxyThread
from sandboxes.egress_stamp import STAMP_HEADER, run_stamp, verify_run_stamp
from sandboxes.netpolicy import SimulatedHost, simulated_hosts

pytestmark = pytest.mark.timeout(20)

RUN_ID = 7301
OTHER_RUN_ID = 7302
HOST = "models.arena.internal"
PUBLIC = ipaddress.ip_address("93.184.216.34")


class _EchoHead(socketserver.StreamRequestHandler):
    """Answers 200 with the request head it received (and reads the body it was sent)."""

    def handle(self) -> None:
        self.connection.settimeout(5)
        lines = []
        while (line := self.rfile.readline(65536)) not in (b"\r\n", b""):
            lines.append(line)
        head = b"".join(lines)
        length = next(
            (
                int(line.split(b":")[1])
                for line in lines
                if line.lower().startswith(b"content-length")
            ),
            0,
        )
        self.rfile.read(length)
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(head) + head)


@pytest.fixture
def upstream() -> Iterator[socketserver.ThreadingTCPServer]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _EchoHead)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


class Sandboxes:
    """A real EgressProxy on its own thread, ``HOST`` a simulated host dialled to the
    echo upstream, one unix socket for RUN_ID and one for OTHER_RUN_ID. Public
    addresses are dialled to the same echo upstream (the test's dialer)."""

    def __init__(self, upstream_port: int, tmp_path: Path) -> None:
        served = SimulatedHost(HOST, ipaddress.ip_address("127.0.0.1"), upstream_port)
        self.public_dials: list[tuple] = []

        async def dial_public(address, port):
            self.public_dials.append((address, port))
            return await asyncio.open_connection("127.0.0.1", upstream_port)

        self.proxy = EgressProxy(
            resolver=lambda host, port: [PUBLIC],
            dialer=dial_public,
            simulated=simulated_hosts(served),
        )
        self.thread: EgressProxyThread = self.proxy.run_in_thread()
        self.paths = {
            run_id: self.thread.serve_unix(tmp_path / f"egress-{run_id}.sock", run_id)
            for run_id in (RUN_ID, OTHER_RUN_ID)
        }

    def send(self, run_id: int, raw: bytes) -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(5)
            client.connect(self.paths[run_id])
            client.sendall(raw)
            chunks = []
            while chunk := client.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.thread.close()


@pytest.fixture
def sandboxes(upstream, tmp_path) -> Iterator[Sandboxes]:
    running = Sandboxes(upstream.server_address[1], tmp_path)
    yield running
    running.close()


def received_headers(response: bytes) -> list[tuple[str, str]]:
    """The headers the upstream received, from its echo of them."""
    echoed = response.partition(b"\r\n\r\n")[2].decode("latin-1")
    lines = echoed.split("\r\n")[1:]
    return [
        (name, value.strip()) for name, _, value in (line.partition(":") for line in lines if line)
    ]


def stamps(response: bytes) -> list[str]:
    return [value for name, value in received_headers(response) if name.lower() == "x-arena-run"]


def post(url: str, extra: str = "", body: bytes = b"{}") -> bytes:
    return (
        f"POST {url} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def test_a_forged_run_header_is_replaced_by_the_proxys_stamp(sandboxes):
    # Given a sandbox that claims another run's identity, twice, in two spellings,
    # one of them a stamp the other run's requests would carry if it knew the key
    forged = run_stamp(b"k" * 32, OTHER_RUN_ID)
    extra = f"X-Arena-Run: {forged}\r\nx-arena-RUN: {OTHER_RUN_ID}.00\r\n"

    # When it calls the simulated host through its own socket
    response = sandboxes.send(RUN_ID, post(f"http://{HOST}/anthropic/v1/messages", extra))

    # Then the upstream got exactly one stamp, the proxy's, naming the socket's run
    assert response.startswith(b"HTTP/1.1 200 OK")
    (stamp,) = stamps(response)
    assert stamp == run_stamp(sandboxes.proxy.stamp_key, RUN_ID)
    assert verify_run_stamp(sandboxes.proxy.stamp_key, stamp) == RUN_ID
    assert verify_run_stamp(sandboxes.proxy.stamp_key, forged) is None
    # and the rest of the request is untouched
    assert ("Host", HOST) in received_headers(response)
    assert ("Content-Type", "application/json") in received_headers(response)


def test_each_socket_is_stamped_with_its_own_run(sandboxes):
    ours = stamps(sandboxes.send(RUN_ID, post(f"http://{HOST}/v1/models")))
    theirs = stamps(sandboxes.send(OTHER_RUN_ID, post(f"http://{HOST}/v1/models")))

    key = sandboxes.proxy.stamp_key
    assert [verify_run_stamp(key, s) for s in ours + theirs] == [RUN_ID, OTHER_RUN_ID]


def test_a_header_named_in_connection_cannot_remove_the_stamp(sandboxes):
    # "Connection: X-Arena-Run" makes the proxy drop the client's header as hop-by-hop;
    # the stamp is added after that and must survive it
    response = sandboxes.send(
        RUN_ID, post(f"http://{HOST}/v1/models", "Connection: X-Arena-Run\r\nX-Arena-Run: 1.x\r\n")
    )

    assert stamps(response) == [run_stamp(sandboxes.proxy.stamp_key, RUN_ID)]


def test_requests_to_other_hosts_carry_no_stamp(sandboxes):
    # The header a sandbox sends to a public host is its own business; the proxy adds
    # nothing there (the stamp is for the worker's own servers only)
    response = sandboxes.send(RUN_ID, post("http://public.example/x", "X-Arena-Run: mine\r\n"))

    assert sandboxes.public_dials == [(PUBLIC, 80)]
    assert stamps(response) == ["mine"]


def test_the_stamp_key_is_random_per_proxy_and_can_be_given():
    assert EgressProxy().stamp_key != EgressProxy().stamp_key
    assert len(EgressProxy().stamp_key) == 32
    assert EgressProxy(stamp_key=b"s" * 32).stamp_key == b"s" * 32
    with pytest.raises(ValueError, match="16 bytes"):
        EgressProxy(stamp_key=b"short")


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "7301",
        "7301.",
        f"7301.{'0' * 64}",
        "--7301.ab",
        "+7301.ab",
        "07301.ab",
        "７３０１.ab",  # full-width digits
        f"{run_stamp(b'k' * 32, 7301)}x",
        run_stamp(b"k" * 32, 7301).upper(),
    ],
)
def test_anything_but_a_stamp_made_with_the_key_does_not_verify(value):
    assert verify_run_stamp(b"k" * 32, value) is None


@pytest.mark.parametrize("run_id", [0, 1, 7301, -5, 2**62])
def test_a_stamp_verifies_to_its_run(run_id):
    assert verify_run_stamp(b"k" * 32, run_stamp(b"k" * 32, run_id)) == run_id
    assert verify_run_stamp(b"j" * 32, run_stamp(b"k" * 32, run_id)) is None


def test_the_header_name_is_the_documented_one():
    assert STAMP_HEADER == "X-Arena-Run"
