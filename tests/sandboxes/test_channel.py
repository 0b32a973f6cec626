"""The network contract on this host (docs/sandboxes.md, "The network contract"): the
real front (``sandboxes/inside/relay.py`` under the system python3, as in a sandbox)
reached over its unix socket, the handshake and its refusals, the frame bounds at both
ends, and egress streams from the front's listener to the real egress proxy. Over an
engine's exec stream, with no shared file system: test_remote_engine.py."""

import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxes.channel import (
    ChannelClient,
    ChannelError,
    ChannelRefused,
    handshake,
    new_secret,
    read_frame,
    unix_connector,
)
from sandboxes.egress import EgressProxy, EgressProxyThread
from sandboxes.egress_tunnel import TunnelLoop, open_egress_tunnel
from sandboxes.inside import relay

REPO = Path(__file__).resolve().parents[2]
RELAY = REPO / "sandboxes" / "inside" / "relay.py"


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]


class LineServer:
    """Stands in for the supervisor on ``ctl.sock`` (its JSON-lines protocol): ``ping``,
    ``echo`` (the request back) and ``big`` (a reply of ``size`` bytes)."""

    def __init__(self, path: Path) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(8)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.client, args=(conn,), daemon=True).start()

    def client(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                request = json.loads(line)
                if request["op"] == "big":
                    reply = {"ok": True, "data": "x" * request["size"]}
                else:
                    reply = {"ok": True, "pid": os.getpid(), "echo": request}
                stream.write(json.dumps(reply).encode() + b"\n")
                stream.flush()


class Front:
    def __init__(self, folder: Path, secret: bytes, proc: subprocess.Popen[bytes]) -> None:
        self.folder, self.secret, self.proc = folder, secret, proc
        self.channel = folder / "channel.sock"
        self.egress = folder / "egress.sock"

    def client(self, **kwargs: int) -> ChannelClient:
        return ChannelClient(unix_connector(str(self.channel)), self.secret, **kwargs)

    def connect(self) -> socket.socket:
        return unix_connector(str(self.channel))(5.0)


@pytest.fixture
def front(tmp_path: Path) -> Iterator[Front]:
    """The real front (system python3, ``-I``) serving in ``tmp_path`` with egress."""
    folder = tmp_path / "run"
    folder.mkdir()
    LineServer(folder / "ctl.sock")
    secret = new_secret()
    env = {"PATH": "/usr/bin:/bin", relay.SECRET_ENV: secret.hex()}
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-I", str(RELAY), "front", "--egress", "--dir", str(folder)], env=env
    )
    try:
        deadline = time.monotonic() + 10
        while not (folder / "channel.sock").exists():
            assert proc.poll() is None, "the front exited"
            assert time.monotonic() < deadline, "the front did not start"
            time.sleep(0.02)
        yield Front(folder, secret, proc)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("code", "expected"),
    [("0", 0), ("7", 7), ("__import__('os').kill(__import__('os').getpid(), 9)", 137)],
)
def test_the_front_ends_as_its_supervisor_ends(code: str, expected: int, tmp_path: Path) -> None:
    """The container's main process is the front: it ends when the supervisor below it
    ends, with its status (a signal as 128 + its number), so the container stops."""
    argv = ["/usr/bin/python3", "-I", str(RELAY), "front", "--dir", str(tmp_path)]
    script = f"import sys, time; time.sleep(0.2); {code}; sys.exit({code if code.isdigit() else 0})"
    proc = subprocess.Popen(
        [*argv, "--", "/usr/bin/python3", "-c", script],
        env={"PATH": "/usr/bin:/bin", relay.SECRET_ENV: new_secret().hex()},
    )
    try:
        assert proc.wait(timeout=10) == expected
    finally:
        proc.kill()


def test_control_round_trip(front: Front) -> None:
    client = front.client()
    assert client.call({"op": "ping"}, timeout_s=5)["ok"] is True
    reply = client.call({"op": "echo", "text": "é\n" * 3}, timeout_s=5)
    assert reply["echo"] == {"op": "echo", "text": "é\n" * 3}
    client.close()


def test_the_secret_reaches_neither_the_supervisor_nor_a_process_of_its_uid() -> None:
    """The front forgets the secret before it execs the supervisor (here a script that
    prints its environment) and makes itself not dumpable: another process of the
    sandbox's uid cannot read it out of /proc."""
    uid = 65534
    folder = Path(tempfile.mkdtemp(prefix="arena-front-"))  # (pytest's tmp dirs are root's)
    os.chown(folder, uid, uid)
    secret = new_secret()
    show = "import os, sys, time; print(sorted(os.environ), flush=True); time.sleep(60)"
    argv = ["/usr/bin/python3", "-I", str(RELAY), "front", "--dir", str(folder)]
    proc = subprocess.Popen(
        [*argv, "--", "/usr/bin/python3", "-c", show],
        env={"PATH": "/usr/bin:/bin", relay.SECRET_ENV: secret.hex()},
        stdout=subprocess.PIPE,
        user=uid,
        group=uid,
    )
    try:
        assert proc.stdout is not None
        # (python3 adds LC_CTYPE to its own environment: locale coercion)
        assert proc.stdout.readline() == b"['LC_CTYPE', 'PATH']\n"  # the supervisor's
        deadline = time.monotonic() + 10
        while not (folder / "channel.sock").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        # The front is the process started, the supervisor its one child (so the front
        # is an ancestor of every command the supervisor runs)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        [supervisor_pid] = children
        peek = f"open('/proc/{proc.pid}/environ', 'rb').read()"
        same_uid = subprocess.run(
            ["/usr/bin/python3", "-c", peek], user=uid, group=uid, capture_output=True, check=False
        )
        assert same_uid.returncode == 1
        assert b"PermissionError" in same_uid.stderr
        client = ChannelClient(unix_connector(str(folder / "channel.sock")), secret)
        assert client.call({"op": "ping"}, timeout_s=5) == {
            "ok": False,
            "error": "the supervisor is not serving yet",
        }
        client.close()
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(folder)
    deadline = time.monotonic() + 5
    while alive(int(supervisor_pid)):  # it dies with its parent, the front
        assert time.monotonic() < deadline, "the supervisor outlived the front"
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: not gone, and not a zombie (a dead orphan waits for its
    reaper, which is this process when an earlier test made it a subreaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    if stat.rsplit(")", 1)[1].split()[0] == "Z":
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # ours to reap: reap it
        return False
    return True


def test_a_wrong_secret_is_refused(front: Front) -> None:
    with pytest.raises(ChannelRefused, match=r"^authentication failed$"):
        handshake(front.connect(), new_secret(), "control", timeout_s=5)
    client = ChannelClient(unix_connector(str(front.channel)), front.secret[:-1] + b"\0")
    with pytest.raises(ChannelRefused, match="authentication failed"):
        client.call({"op": "ping"}, timeout_s=5)


def test_a_wrong_version_or_kind_is_refused(front: Front) -> None:
    with pytest.raises(
        ChannelRefused, match=r"protocol version 2 is not supported \(this end: 1\)"
    ):
        handshake(front.connect(), front.secret, "control", timeout_s=5, version=2)
    with pytest.raises(ChannelRefused, match="no channel kind 'shell'"):
        handshake(front.connect(), front.secret, "shell", timeout_s=5)


def test_an_oversize_frame_is_refused_without_allocation(front: Front) -> None:
    sock = front.connect()
    handshake(sock, front.secret, "control", timeout_s=5)
    before = rss_kib(front.proc.pid)
    # A header claiming 4 GiB - 1 of request, and a few bytes of it.
    sock.sendall(relay.HEADER.pack(2**32 - 1, relay.MESSAGE, 0) + b"{" * 1000)
    with pytest.raises(
        ChannelRefused, match=r"a frame of 4294967295 bytes exceeds the limit of 16777216"
    ):
        read_frame(sock, {relay.MESSAGE: 1 << 20}, time.monotonic() + 5)
    assert sock.recv(1) == b""  # and the front closed the channel
    assert rss_kib(front.proc.pid) - before < 4096
    # An unauthenticated peer cannot even claim that much: a handshake frame is 4 KiB.
    sock = front.connect()
    sock.sendall(relay.HEADER.pack(1 << 20, relay.HANDSHAKE, 0))
    with pytest.raises(ChannelRefused, match="a frame of 1048576 bytes exceeds the limit of 4096"):
        read_frame(sock, {}, time.monotonic() + 5)


def test_a_reply_over_the_clients_bound_is_refused_unread(front: Front) -> None:
    client = front.client(max_reply_bytes=64 * 1024)
    assert client.call({"op": "big", "size": 1000}, timeout_s=5)["ok"] is True
    with pytest.raises(ChannelError, match="exceeds the limit of 65536"):
        client.call({"op": "big", "size": 200_000}, timeout_s=5)
    # The channel is dropped and a fresh one made on the next call.
    assert client.call({"op": "ping"}, timeout_s=5)["ok"] is True


def test_a_supervisor_reply_over_the_frame_limit_is_not_relayed(front: Front) -> None:
    client = front.client()
    reply = client.call({"op": "big", "size": relay.MAX_MESSAGE_BYTES + 1}, timeout_s=20)
    assert reply == {"ok": False, "error": "the reply is too large"}
    assert client.call({"op": "ping"}, timeout_s=5)["ok"] is True  # on a fresh upstream
    client.close()


def test_a_silent_peer_times_out(tmp_path: Path) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "silent.sock"))
    listener.listen(1)
    client = ChannelClient(unix_connector(str(tmp_path / "silent.sock")), new_secret())
    started = time.monotonic()
    with pytest.raises(ChannelError, match="did not answer in time"):
        client.call({"op": "ping"}, timeout_s=0.3)
    assert time.monotonic() - started < 2
    listener.close()


def proxied(path: Path, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_egress_streams_reach_the_proxy_under_the_runs_identity(
    front: Front, tmp_path: Path
) -> None:
    refusals: list[tuple[int, str, str]] = []
    proxy = EgressProxy(on_refusal=lambda *refusal: refusals.append(refusal))
    loop = TunnelLoop()
    with EgressProxyThread(proxy) as egress:
        tunnel = open_egress_tunnel(
            loop, egress, 4242, front.connect(), front.secret, socket_dir=tmp_path / "egress"
        )
        answers = [
            proxied(front.egress, b"GET http://10.1.2.3/ HTTP/1.1\r\nHost: x\r\n\r\n")
            for _ in range(3)
        ]
        assert all(answer.startswith(b"HTTP/1.1 403 ") for answer in answers)
        assert b"egress refused: private" in answers[0]
        assert egress.counters(4242)["refused:private"] == 3
        assert refusals == [(4242, "http://10.1.2.3/", "private")] * 3
        assert tunnel.open_streams() == 0  # each closed with its connection
        # One tunnel per sandbox: a second is refused.
        with pytest.raises(ChannelRefused, match="an egress tunnel is already attached"):
            open_egress_tunnel(
                loop, egress, 4242, front.connect(), front.secret, socket_dir=tmp_path / "egress"
            )
        tunnel.close()
        assert tunnel.ended.wait(5)
    loop.close()


async def mux_pair(opener) -> tuple[relay.Mux, relay.Mux, list[asyncio.Task[None]]]:
    a, b = socket.socketpair()
    inside = relay.Mux(*await asyncio.open_connection(sock=a), first_id=1)
    worker = relay.Mux(*await asyncio.open_connection(sock=b), first_id=2, opener=opener)
    tasks = [asyncio.create_task(inside.run()), asyncio.create_task(worker.run())]
    return inside, worker, tasks


def test_a_stream_that_does_not_read_is_paused_and_the_others_go_on() -> None:
    """One stream's destination never reads: its sender is stopped at its window (and
    the kernel's buffers), while another stream on the same tunnel still round-trips;
    closing the sender's end closes the destination's."""

    async def scenario() -> None:
        accepted: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        got = asyncio.Event()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append((reader, writer))
            got.set()

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]

        async def opener(stream_id: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await asyncio.open_connection("127.0.0.1", port)

        inside, worker, tasks = await mux_pair(opener)
        # The stalled stream: an inside client writing as fast as it can.
        left, right = socket.socketpair()
        inside.open_stream(*await asyncio.open_connection(sock=left))
        await got.wait()
        stalled_reader, _ = accepted[0]
        right.setblocking(False)
        sent = 0
        chunk = b"x" * 65536
        for _ in range(400):  # up to 26 MB
            try:
                sent += right.send(chunk)
            except BlockingIOError:
                await asyncio.sleep(0.01)
        worker_stream = next(iter(worker.streams.values()))
        assert worker_stream.inflight <= relay.STREAM_WINDOW
        assert sent < 8 * 1024**2  # stopped: the rest waits in the client's own socket
        # Another stream on the same tunnel goes through meanwhile.
        got.clear()
        other_left, other_right = socket.socketpair()
        inside.open_stream(*await asyncio.open_connection(sock=other_left))
        await got.wait()
        _, echo_writer = accepted[1]
        echo_writer.write(b"pong")
        await echo_writer.drain()
        other_right.setblocking(False)
        reply = await asyncio.get_running_loop().sock_recv(other_right, 4)
        assert reply == b"pong"
        # The stalled destination reads again: everything arrives, in order.
        right.close()
        received = 0
        while data := await asyncio.wait_for(stalled_reader.read(1 << 20), 10):
            assert set(data) == {ord("x")}
            received += len(data)
        assert received == sent  # and EOF: closing the client closed the stream
        await asyncio.sleep(0.05)
        assert len(inside.streams) == 1 and len(worker.streams) == 1
        other_right.close()
        for _ in range(100):
            if not inside.streams and not worker.streams:
                break
            await asyncio.sleep(0.01)
        assert inside.streams == {} and worker.streams == {}
        inside.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        server.close()

    asyncio.run(scenario())


def test_a_peer_sending_past_its_window_breaks_the_tunnel() -> None:
    async def scenario() -> None:
        async def opener(stream_id: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            left, _right = socket.socketpair()
            return await asyncio.open_connection(sock=left)

        a, b = socket.socketpair()
        worker = relay.Mux(*await asyncio.open_connection(sock=b), first_id=2, opener=opener)
        task = asyncio.create_task(worker.run())
        _reader, writer = await asyncio.open_connection(sock=a)
        writer.write(relay.frame(relay.OPEN, 1))
        for _ in range(relay.STREAM_WINDOW // relay.MAX_DATA_BYTES + 1):
            writer.write(relay.frame(relay.DATA, 1, b"y" * relay.MAX_DATA_BYTES))
        await writer.drain()
        with pytest.raises(relay.WireError, match="stream 1 sent past its window"):
            await asyncio.wait_for(task, 5)
        assert worker.streams == {}
        writer.close()

    asyncio.run(scenario())
