"""Benchmark: a vote → the leaderboard socket frame carrying the new streaming value.

Starts real Daphne and one RQ worker (tests/servers.py) on a throwaway database made
from DATABASE_URL, opens a websocket to /ws/leaderboard/ like a browser would, and casts
N votes through ``POST /api/battles/<id>/votes/`` on battles prepared in the judging
state (served to the judge a minute ago, so every vote is admissible). For each vote it
measures the time from sending the POST to the arrival of the first frame that shows
both agents' new rated-battle counts (the small streaming frame carrying the new
streaming values; the full board follows from the ratings queue), and the POST's own
response time. Prints one JSON document.
Target (issue #7): push p50 ≤ 50 ms on loopback.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena REDIS_URL=redis://127.0.0.1:6379/0 \
     .venv/bin/python tests/bench/bench_push.py [--votes 60]
"""

import argparse
import base64
import http.client
import json
import os
import queue
import random
import re
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from datetime import timedelta
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

TARGET_P50_MS = 50


class WebSocket:
    """A minimal RFC 6455 client for one text-frame stream (no dependency beyond the
    standard library): a reader thread stamps each frame on arrival."""

    def __init__(self, host: str, port: int, path: str) -> None:
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


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
        "n": len(ordered),
    }


def votes_in(frame: str, slug: str) -> int | None:
    """The agent's rated-battle count in a frame: the small streaming frame and the full
    board both carry the cell ``id="votes-<slug>"``."""
    found = re.search(rf'id="votes-{re.escape(slug)}"[^>]*>(\d+)</td>', frame)
    return int(found.group(1)) if found else None


def prepare(n: int):
    """Users with consent and teams, the built-in roster, and n battles judging, each
    served to the judge a minute ago. Returns (judge token, [(battle id, a, b)])."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from accounts.services import (
        api_token_create,
        consent_accept,
        consent_terms_publish,
        team_create,
    )
    from agents.services import roster_install_builtins
    from battles.models import Battle, Task
    from judging.models import Assignment
    from tests.servers import ensure_public_arena

    User = get_user_model()
    terms = consent_terms_publish(text="bench")
    submitter = User.objects.create_user("bench-submitter", password="bench-password-1")
    judge = User.objects.create_user("bench-judge", password="bench-password-1")
    team = team_create(name="bench-acme", owner=submitter)
    team_create(name="bench-judges", owner=judge)
    for user in (submitter, judge):
        consent_accept(user=user, terms=terms)
    arena = ensure_public_arena()
    roster = roster_install_builtins(arena=arena)
    rng = random.Random(11)
    now = timezone.now()
    battles = []
    for i in range(n):
        a, b = rng.sample(roster, 2)
        task = Task.objects.create(team=team, submitter=submitter, instruction=f"bench task {i}")
        battle = Battle.objects.create(
            arena=arena, team=team, task=task, agent_a=a, agent_b=b,
            status=Battle.Status.JUDGING, redundancy_target=1,
            submitted_at=now - timedelta(minutes=10), ended_at=now - timedelta(minutes=2),
        )  # fmt: skip
        Assignment.objects.create(judge=judge, battle=battle, served_at=now - timedelta(minutes=1))
        battles.append((battle.pk, a.slug, b.slug))
    _, token = api_token_create(user=judge, name="bench")
    return token, battles


def run(n_votes: int) -> dict:
    from tests.servers import live_arena

    token, battles = prepare(n_votes)
    tmp = Path(tempfile.mkdtemp(prefix="bench-push-"))
    sandbox_root = Path(tempfile.mkdtemp(prefix="bench-push-sandboxes-", dir="/var/tmp"))
    sandbox_root.chmod(0o711)
    counts: dict[str, int] = {}
    push, post = [], []
    try:
        with live_arena(tmp, sandbox_root) as arena:
            arena.resume_workers()
            port = int(arena.base_url.rsplit(":", 1)[1])
            ws = WebSocket("127.0.0.1", port, "/ws/leaderboard/")
            ws.frames.get(timeout=30)  # the board sent on connect
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            body = json.dumps({"choice": "A"})
            for index, (battle_id, a, b) in enumerate(battles):
                expected = {a: counts.get(a, 0) + 1, b: counts.get(b, 0) + 1}
                started = time.perf_counter()
                conn.request("POST", f"/api/battles/{battle_id}/votes/", body, headers)
                response = conn.getresponse()
                answered = time.perf_counter()
                payload = response.read()
                if response.status != 201:
                    raise RuntimeError(f"vote {index}: HTTP {response.status} {payload[:300]!r}")
                while True:
                    arrived, frame = ws.frames.get(timeout=30)
                    if all(votes_in(frame, slug) == n for slug, n in expected.items()):
                        break
                counts.update(expected)
                post.append(answered - started)
                push.append(arrived - started)
            ws.close()
            conn.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(sandbox_root, ignore_errors=True)
    return {
        "push": summary(push),
        "post_response": summary(post),
        "render_board_in_process": render_cost(),
    }


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
    parser.add_argument("--votes", type=int, default=60, help="votes to cast (60)")
    args = parser.parse_args()
    database = settings.DATABASES["default"]
    database.setdefault("TEST", {})["NAME"] = f"test_{database['NAME']}_bench_push"
    config = setup_databases(verbosity=0, interactive=False)
    try:
        report = run(args.votes)
    finally:
        teardown_databases(config, verbosity=0)
    report["what"] = (
        "POST /api/battles/<id>/votes/ sent → first /ws/leaderboard/ frame showing both "
        "agents' new rated-battle counts (the new streaming values); Daphne + 1 RQ worker "
        "on loopback"
    )
    report["load_average_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    report["cpus"] = os.cpu_count()
    report["target"] = {"push_p50_ms": TARGET_P50_MS}
    report["meets_target"] = report["push"]["p50_ms"] <= TARGET_P50_MS
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
