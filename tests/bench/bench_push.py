"""Benchmark: a vote → the leaderboard socket frame carrying the new streaming value.

Starts real Daphne and one RQ worker (tests/servers.py) on a throwaway database made
from DATABASE_URL, opens a websocket to /ws/leaderboard/ like a browser would, and casts
N votes through ``POST /api/battles/<id>/votes/`` on battles prepared in the judging
state (served to the judge a minute ago, so every vote is admissible). For each vote it
measures the time from sending the POST to the arrival of the first frame that shows
both agents' new rated-battle counts (the small streaming frame carrying the new
streaming values; the full board follows from the ratings queue), and the POST's own
response time. Prints one JSON document.
Then N sockets (500) on one Daphne, a few votes each, for the process fan-out (one
group membership per process) and, as the same-run reference, the per-socket path.
Targets (issue #13): p50 ≤ 15 ms, p99 ≤ 50 ms to one socket; p99 ≤ 50 ms to 500.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena REDIS_URL=redis://127.0.0.1:6379/0 \
     .venv/bin/python tests/bench/bench_push.py [--votes 60] [--sockets 500]
"""

import argparse
import base64
import contextlib
import http.client
import json
import math
import os
import queue
import re
import selectors
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")
# The children read these: no per-judge vote limit in the way of a burst of votes.
os.environ["ARENA_VOTE_RATE_PER_MIN"] = "1000000"
# The path measured is a deciding vote's: final at once (no undo window), so the vote and
# its decision commit together and the frame leaves at that commit. With a window the
# same path runs when the window ends (the judging job or the judge's page).
os.environ["ARENA_VOTE_UNDO_WINDOW_S"] = "0"

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402


class WebSocket:
    """A minimal RFC 6455 client for one text-frame stream (no dependency beyond the
    standard library): a reader thread stamps each frame on arrival."""

    def __init__(self, host: str, port: int, path: str, *, reader: bool = True) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\nOrigin: http://{host}:{port}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self.sock.recv(4096)
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"websocket handshake refused: {head[:200]!r}")
        self.frames: queue.Queue[tuple[float, str]] = queue.Queue()
        if reader:
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()

    def _exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def _read(self) -> None:
        message = b""
        try:
            while True:
                first, second = self._exactly(2)
                length = second & 0x7F
                if length == 126:
                    (length,) = struct.unpack("!H", self._exactly(2))
                elif length == 127:
                    (length,) = struct.unpack("!Q", self._exactly(8))
                payload = self._exactly(length)
                opcode = first & 0x0F
                if opcode in (0x1, 0x0):
                    message += payload
                    if first & 0x80:
                        self.frames.put((time.perf_counter(), message.decode()))
                        message = b""
                elif opcode == 0x8:
                    return
        except (EOFError, OSError):
            return

    def close(self) -> None:
        try:
            self.sock.sendall(b"\x88\x80" + os.urandom(4))
        finally:
            self.sock.close()


def parse_frames(buffer: bytes) -> tuple[list[str], bytes]:
    """The complete unmasked text frames at the start of ``buffer``, and the rest."""
    texts = []
    while len(buffer) >= 2:
        first, second = buffer[0], buffer[1]
        length, at = second & 0x7F, 2
        if length == 126:
            if len(buffer) < 4:
                break
            (length,) = struct.unpack("!H", buffer[2:4])
            at = 4
        elif length == 127:
            if len(buffer) < 10:
                break
            (length,) = struct.unpack("!Q", buffer[2:10])
            at = 10
        if len(buffer) < at + length:
            break
        if first & 0x0F == 0x1:
            texts.append(buffer[at : at + length].decode())
        buffer = buffer[at + length :]
    return texts, buffer


class ManySockets:
    """Reads many websockets in one thread (epoll), stamping each frame when its bytes
    arrive: 500 reader threads would measure their own scheduling, not the push."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.buffers: dict[WebSocket, bytes] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def add(self, ws: WebSocket) -> None:
        ws.sock.setblocking(False)
        texts, self.buffers[ws] = parse_frames(ws.buffer)
        for text in texts:
            ws.frames.put((time.perf_counter(), text))
        self.selector.register(ws.sock, selectors.EVENT_READ, ws)

    def _run(self) -> None:
        while not self.stopped.is_set():
            for key, _ in self.selector.select(timeout=0.1) if self.selector.get_map() else ():
                ws = key.data
                try:
                    chunk = ws.sock.recv(1 << 20)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                now = time.perf_counter()
                if not chunk:
                    self.selector.unregister(ws.sock)
                    continue
                texts, self.buffers[ws] = parse_frames(self.buffers[ws] + chunk)
                for text in texts:
                    ws.frames.put((now, text))
            if not self.selector.get_map():
                time.sleep(0.05)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        for ws in list(self.buffers):
            with contextlib.suppress(OSError):
                ws.sock.setblocking(True)
                ws.close()


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "p99_ms": round(ordered[int(0.99 * (len(ordered) - 1))] * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
        "n": len(ordered),
    }


def votes_in(frame: str, slug: str) -> int | None:
    """The agent's rated-battle count in a frame: the small streaming frame and the full
    board both carry the cell ``id="votes-<slug>"``."""
    found = re.search(rf'id="votes-{re.escape(slug)}"[^>]*>(\d+)</td>', frame)
    return int(found.group(1)) if found else None


def prepare(n: int):
    """One judge with consent and a token, the built-in roster, and n battles judging,
    each served to the judge a minute ago (tests/bench/vote_data.py). Returns (judge
    token, [(battle id, a, b)])."""
    from battles.models import Battle
    from tests.bench.vote_data import vote_battles

    items, (token,) = vote_battles(n, judges_n=1)
    slugs = {
        pk: (a, b)
        for pk, a, b in Battle.objects.filter(pk__in=[pk for _, pk in items]).values_list(
            "pk", "agent_a__slug", "agent_b__slug"
        )
    }
    return token, [(pk, *slugs[pk]) for _, pk in items]


def cast(conn, token: str, battle, counts: dict[str, int]) -> tuple[float, float, dict]:
    """POSTs a deciding vote; returns (sent, answered, the counts the frame must show)."""
    battle_id, a, b = battle
    expected = {a: counts.get(a, 0) + 1, b: counts.get(b, 0) + 1}
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    started = time.perf_counter()
    conn.request("POST", f"/api/battles/{battle_id}/votes/", json.dumps({"choice": "A"}), headers)
    response = conn.getresponse()
    answered = time.perf_counter()
    payload = response.read()
    if response.status != 201:
        raise RuntimeError(f"vote on {battle_id}: HTTP {response.status} {payload[:300]!r}")
    counts.update(expected)
    return started, answered, expected


def arrival(ws: WebSocket, expected: dict[str, int], timeout: float = 60) -> float | None:
    """When the first frame showing ``expected`` reached ``ws``; None if none within
    ``timeout`` seconds (delivery is at most once)."""
    deadline = time.perf_counter() + timeout
    while True:
        try:
            arrived, frame = ws.frames.get(timeout=max(0.0, deadline - time.perf_counter()))
        except queue.Empty:
            return None
        if all(votes_in(frame, slug) == n for slug, n in expected.items()):
            return arrived


@contextlib.contextmanager
def arena_running(fanout: str):
    from tests.servers import live_arena

    os.environ["ARENA_REALTIME_FANOUT"] = fanout  # the children read it
    tmp = Path(tempfile.mkdtemp(prefix="bench-push-"))
    sandbox_root = Path(tempfile.mkdtemp(prefix="bench-push-sandboxes-", dir="/var/tmp"))
    sandbox_root.chmod(0o711)
    try:
        with live_arena(tmp, sandbox_root) as arena:
            arena.resume_workers()
            yield int(arena.base_url.rsplit(":", 1)[1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(sandbox_root, ignore_errors=True)


def run_one_socket(token: str, battles, counts: dict[str, int]) -> dict:
    push, post = [], []
    with arena_running("process") as port:
        ws = WebSocket("127.0.0.1", port, "/ws/leaderboard/")
        ws.frames.get(timeout=30)  # the board sent on connect
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for battle in battles:
            started, answered, expected = cast(conn, token, battle, counts)
            push.append(arrival(ws, expected) - started)  # type: ignore[operator]
            post.append(answered - started)
        ws.close()
        conn.close()
    return {"push": summary(push), "post_response": summary(post)}


def run_fanout(fanout: str, n_sockets: int, token: str, battles, counts: dict[str, int]) -> dict:
    """``n_sockets`` leaderboard sockets on one Daphne; per vote, the time from the POST
    to the frame's arrival on every socket. Votes are spaced (PAUSE_S) so the full
    board that follows each one (FULL_PUSH_DELAY) lands between measurements."""
    push, last, post = [], [], []
    missed = 0
    with arena_running(fanout) as port:
        many = ManySockets()
        sockets = []
        try:
            for _ in range(n_sockets):
                ws = WebSocket("127.0.0.1", port, "/ws/leaderboard/", reader=False)
                many.add(ws)
                sockets.append(ws)
            for ws in sockets:
                ws.frames.get(timeout=120)  # the board sent on connect
            time.sleep(1.0)
            for battle in battles:
                # A connection per vote: an idle keep-alive may be closed while 500
                # sockets are read (connecting on loopback is well under a millisecond).
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                started, answered, expected = cast(conn, token, battle, counts)
                conn.close()
                deadline = time.perf_counter() + 15  # for all sockets together
                stamps = [
                    arrival(ws, expected, timeout=max(0.0, deadline - time.perf_counter()))
                    for ws in sockets
                ]
                arrivals = [stamp - started for stamp in stamps if stamp is not None]
                missed += len(stamps) - len(arrivals)
                push += arrivals
                if arrivals:
                    last.append(max(arrivals))
                post.append(answered - started)
                time.sleep(PAUSE_S)
                for ws in sockets:  # the full board meanwhile
                    while not ws.frames.empty():
                        ws.frames.get_nowait()
            published, published_last, published_missed = publish_probe(sockets)
        finally:
            many.close()
    return {
        "publish_to_frame_every_socket": summary(published) if published else None,
        "publish_to_frame_last_socket": summary(published_last) if published_last else None,
        "publish_frames_missed": published_missed,
        "fanout": fanout,
        "sockets": n_sockets,
        "votes": len(battles),
        "push_every_socket": summary(push) if push else None,
        "push_last_socket_per_vote": summary(last) if last else None,
        "frames_missed": missed,
        "post_response": summary(post),
    }


PAUSE_S = 1.2
PROBES = 10


def publish_probe(sockets: list[WebSocket]) -> tuple[list[float], list[float], int]:
    """The realtime path alone: this process publishes a small frame to the board's
    group (``group_send``, as a writer does after commit) and times its arrival on every
    socket; no vote, no render."""
    from arena_site.realtime import group_send
    from ratings.services import LEADERBOARD_GROUP

    every, last, missed = [], [], 0
    for i in range(PROBES):
        text = f'<b id="probe">{i}</b>'
        started = time.perf_counter()
        group_send(LEADERBOARD_GROUP, {"type": "leaderboard.update", "html": text})
        stamps = []
        deadline = started + 10  # for all sockets together
        for ws in sockets:
            while True:
                try:
                    arrived, frame = ws.frames.get(timeout=max(0.0, deadline - time.perf_counter()))
                except queue.Empty:
                    stamps.append(None)
                    break
                if frame == text:
                    stamps.append(arrived - started)
                    break
        got = [stamp for stamp in stamps if stamp is not None]
        missed += len(stamps) - len(got)
        every += got
        if got:
            last.append(max(got))
        time.sleep(0.3)
    return every, last, missed


def render_cost(repeats: int = 50) -> dict:
    """What every push pays before it is sent: the board's queries and its rendering,
    timed here in this process on the same database."""
    from agents.models import Arena
    from ratings.services import leaderboard_html

    arena_id = Arena.objects.public().pk
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        leaderboard_html(arena_id=arena_id)
        samples.append(time.perf_counter() - started)
    return summary(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--votes", type=int, default=60, help="votes to one socket (60)")
    parser.add_argument("--sockets", type=int, default=500, help="sockets of the fan-out (500)")
    parser.add_argument("--fanout-votes", type=int, default=10, help="votes per fan-out run")
    parser.add_argument(
        "--reference", action=argparse.BooleanOptionalAction, default=True,
        help="also run the per-socket path (ARENA_REALTIME_FANOUT=socket) as the reference",
    )  # fmt: skip
    args = parser.parse_args()
    database = settings.DATABASES["default"]
    database.setdefault("TEST", {})["NAME"] = f"test_{database['NAME']}_bench_push"
    config = setup_databases(verbosity=0, interactive=False)
    report: dict = {"load_average_1_5_15_start": [round(x, 2) for x in os.getloadavg()]}
    try:
        runs = 1 + (2 if args.reference else 1)
        token, battles = prepare(args.votes + runs * args.fanout_votes)
        counts: dict[str, int] = {}
        report.update(run_one_socket(token, battles[: args.votes], counts))
        rest = battles[args.votes :]
        modes = ["process", "socket"] if args.reference else ["process"]
        for i, mode in enumerate(modes):
            chunk = rest[i * args.fanout_votes : (i + 1) * args.fanout_votes]
            report[f"fanout_{mode}"] = run_fanout(mode, args.sockets, token, chunk, counts)
        report["render_board_in_process"] = render_cost()
    finally:
        teardown_databases(config, verbosity=0)
    report["what"] = (
        "POST /api/battles/<id>/votes/ sent → first /ws/leaderboard/ frame showing both "
        "agents' new rated-battle counts (the new streaming values); Daphne + 1 RQ worker "
        "on loopback. fanout_*: the same to every one of N sockets on one Daphne; "
        "'process' = one group membership per process, the frame encoded once; 'socket' "
        "= every socket a group member (the per-socket path, the reference)"
    )
    report["load_average_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    report["cpus"] = os.cpu_count()
    report["target"] = {"push_p50_ms": 15, "push_p99_ms": 50, "fanout_p99_ms": 50}
    fan = report["fanout_process"]["push_every_socket"] or {"p99_ms": math.inf}
    report["meets_target"] = {
        "one_socket": report["push"]["p50_ms"] <= 15 and report["push"]["p99_ms"] <= 50,
        "fanout": fan["p99_ms"] <= 50,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
