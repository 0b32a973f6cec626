"""Benchmark: what one vote POST costs the web process, counted in process.

``POST /api/battles/<id>/votes/`` with a bearer token through ``django.test.Client`` (the
whole middleware chain, DRF, the token, the per-judge rate counter, the vote's
transaction and its commit hooks), ``--votes`` times (500) after ``--warm`` votes (20)
that load the URLconf and fill what is cached. Per vote: the database statements
(``CaptureQueriesContext``) by kind, the Redis round trips (every packet redis-py sends,
``send_packed_command``, with the commands in it), the CPU of this process
(``time.process_time``: Django, DRF, the client's own request building, the drivers) and
the wall time. No web server and no second process: the figure is the vote path's own
cost, not the HTTP server's; the undo window is ARENA_VOTE_UNDO_WINDOW_S (10 s unless
set, as deployed: the request stores the vote and schedules its decision).

Run before and after a change on the same machine, back to back (a worktree of the old
code runs the same file), e.g.:

  DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena_bvp REDIS_URL=redis://127.0.0.1:6379/2 \
      .venv/bin/python tests/bench/bench_vote_path.py --flush-redis

It makes (and drops) a test database ``test_<name>`` of DATABASE_URL. Prints one JSON
document."""

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")
os.environ.setdefault("ARENA_VOTE_UNDO_WINDOW_S", "10")
os.environ["ARENA_VOTE_RATE_PER_MIN"] = "100000000"  # the limit is counted, never reached
os.environ["ARENA_REDUNDANCY_FRACTION"] = "0"
os.environ.setdefault("ARENA_CACHE_PREFIX", "bench-vote-path")

import django  # noqa: E402

django.setup()

import redis  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import (  # noqa: E402
    CaptureQueriesContext,
    setup_databases,
    teardown_databases,
)

JUDGES = 10
COMMAND = re.compile(rb"\*\d+\r\n\$\d+\r\n([A-Za-z]+)\r\n")


class RedisTrips:
    """Counts what redis-py sends: one ``send_packed_command`` is one round trip (a
    single command, a pipeline, a MULTI/EXEC or a script call), with its commands."""

    def __init__(self) -> None:
        self.trips = 0
        self.commands: Counter[str] = Counter()
        self.shapes: Counter[str] = Counter()
        self._original = redis.connection.AbstractConnection.send_packed_command

    def __enter__(self):
        original = self._original
        trips = self

        def counted(conn, command, check_health=True):
            packed = command if isinstance(command, bytes | bytearray) else b"".join(command)
            names = [m.decode().upper() for m in COMMAND.findall(bytes(packed))]
            trips.trips += 1
            trips.commands.update(names)
            trips.shapes["+".join(names)] += 1
            return original(conn, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counted
        return self

    def __exit__(self, *exc) -> None:
        redis.connection.AbstractConnection.send_packed_command = self._original


def prepare(battles_n: int) -> list[tuple[str, int]]:
    """[(token, battle id)]: ``battles_n`` battles judging, each served a minute ago to
    one of JUDGES judges (round robin; tests/bench/vote_data.py)."""
    from tests.bench.vote_data import vote_battles

    return vote_battles(battles_n, judges_n=JUDGES)[0]


def statement_kind(sql: str) -> str:
    words = sql.lstrip().split(None, 2)
    head = words[0].upper() if words else "?"
    if head in ("SAVEPOINT", "RELEASE", "ROLLBACK", "BEGIN", "COMMIT"):
        return head
    if head == "SELECT" and "FOR UPDATE" in sql:
        return "SELECT … FOR UPDATE (the vote's locking read)"
    table = re.search(r'(?:FROM|INTO|UPDATE)\s+"?([a-z_]+)"?', sql)
    return f"{head} {table.group(1) if table else ''}".strip()


def run(items: list[tuple[str, int]], votes: int, warm: int) -> dict:
    client = Client(REMOTE_ADDR="127.0.0.1", HTTP_HOST="localhost")

    def vote(token: str, battle_id: int) -> None:
        response = client.post(
            f"/api/battles/{battle_id}/votes/",
            data=json.dumps({"choice": "A"}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        if response.status_code != 201:
            raise SystemExit(f"vote on {battle_id}: {response.status_code} {response.content!r}")

    for token, battle_id in items[:warm]:
        vote(token, battle_id)
    measured = items[warm : warm + votes]
    kinds: Counter[str] = Counter()
    per_vote_statements: list[int] = []
    wall: list[float] = []
    with RedisTrips() as trips:
        cpu0 = time.process_time()
        for token, battle_id in measured:
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                vote(token, battle_id)
                wall.append((time.perf_counter() - started) * 1000)
            per_vote_statements.append(len(queries.captured_queries))
            kinds.update(statement_kind(q["sql"]) for q in queries.captured_queries)
        cpu = time.process_time() - cpu0
    n = len(measured)
    # the same loop without counting anything: the counters' own cost is not the vote's
    uncounted = items[warm + votes : warm + 2 * votes]
    from tests.bench.web import POSTGRES, cpu_of

    postgres0 = cpu_of(POSTGRES)
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    for token, battle_id in uncounted:
        vote(token, battle_id)
    cpu_plain = time.process_time() - cpu0
    wall_plain = time.perf_counter() - wall0
    postgres = cpu_of(POSTGRES) - postgres0
    return {
        "votes": n,
        "db_statements_per_vote": round(sum(per_vote_statements) / n, 3),
        "db_statements_per_vote_min_max": [min(per_vote_statements), max(per_vote_statements)],
        "db_statements_by_kind_per_vote": {
            k: round(v / n, 3) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])
        },
        "redis_round_trips_per_vote": round(trips.trips / n, 3),
        "redis_round_trips_by_shape_per_vote": {
            k: round(v / n, 3) for k, v in sorted(trips.shapes.items(), key=lambda kv: -kv[1])
        },
        "cpu_ms_per_vote_counted": round(cpu / n * 1000, 3),
        "cpu_ms_per_vote": round(cpu_plain / len(uncounted) * 1000, 3),
        # every PostgreSQL process of the machine over the same loop: its backends,
        # WAL writer and checkpointer (and anyone else's queries: run it alone)
        "postgres_cpu_ms_per_vote": round(postgres / len(uncounted) * 1000, 3),
        "wall_ms_per_vote": round(wall_plain / len(uncounted) * 1000, 3),
        "wall_ms_p50_counted": round(statistics.median(wall), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--votes", type=int, default=500)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument(
        "--flush-redis", action="store_true",
        help="empty REDIS_URL's database before and after (the votes' scheduled "
        "resolutions stay there otherwise): only for a database of its own",
    )  # fmt: skip
    args = parser.parse_args()
    from django.conf import settings

    from arena_site.redis import redis_client

    if args.flush_redis:
        redis_client().flushdb()
    config = setup_databases(verbosity=0, interactive=False)
    report: dict = {
        "load_average_1_5_15_start": [round(x, 2) for x in os.getloadavg()],
        "undo_window_s": settings.ARENA.vote_undo_window_s,
        "git_head": os.popen(f"git -C {ROOT} rev-parse --short HEAD").read().strip(),  # noqa: S605
    }
    try:
        items = prepare(args.warm + 2 * args.votes)
        report.update(run(items, args.votes, args.warm))
    finally:
        teardown_databases(config, verbosity=0)
        if args.flush_redis:
            redis_client().flushdb()
    report["load_average_1_5_15_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
