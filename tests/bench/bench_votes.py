"""Benchmark: the vote API under load through real web servers on PostgreSQL: uvicorn
(the arena's), Daphne (the server before) and Granian (a candidate), each measured in
the same run against the stack's own 404 floor.

For each server (``--servers``):
1. ``post_undo_window_{0,10}s``: one judge, sequential requests on a kept-alive
   connection, one process: ``POST /api/battles/<id>/votes/`` with
   ARENA_VOTE_UNDO_WINDOW_S=0 (the vote decided in its own transaction, the heaviest
   in-request path) and =10 (the default: decided when the window ends), interleaved
   with two floors: ``GET /api/nope/`` (the whole middleware stack, a 404 in the
   envelope, no query) and ``GET /api/battles/<id>/votes/mine/`` (DRF, bearer token, the
   vote read back).
2. ``x{n}_floor_404_ramp``: locust headless (tests/bench/locust_votes.py, a subprocess)
   offers 10 → 1000 requests/s of ``GET /api/nope/`` in steps of ``--step-s`` seconds
   to ``n`` processes (``--processes``, default 2): the floor's latency, its highest
   clean rate and its server CPU per request under load.
3. ``x{n}_ramp_undo_window_10s``: the same ramp of votes, many judges each voting on
   battles served to them; per step the offered and achieved rates, p50/p99 and every
   status code; the servers' CPU per vote answered 201 (every process of their process
   groups, from /proc). As deployed by default, the request stores the vote and the
   decision waits for the window: no decider runs (its CPU would be the server's; the
   soak, tests/bench/bench_vote_soak.py, runs them together), and after the run the
   sweep decides every battle whose window has passed. Then the database is checked:
   every 201 is a stored vote (and every stored vote was answered 201), and every
   decided battle's streaming rating moved exactly once (battles carrying their
   streaming deltas = decided battles, and the agents' rated-battle counts sum to
   twice that). ``--ramp-windows 0`` adds the ramp with every vote decided in its
   request.

A step is clean with no error, p99 ≤ 100 ms and at least 90 % of the offered rate
served; ``clean_through_per_s`` is the highest step with every step up to it clean (the
ramp's figure), ``highest_clean_rate_per_s`` the highest clean step whatever came
before it, and each step lists its ``slow_seconds`` (p99 over the target). The client
shares the machine's cores with the servers: its CPU is part of what limits the
figures. Prints one JSON document; ``summary`` has, per server, those two rates, the
vote's and the 404's server CPU and their ratio.
Targets (issue 36): a clean ramp to ≥ 300 votes/s on two web processes; a vote's server
CPU ≤ 2× the 404's.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \
     .venv/bin/python tests/bench/bench_votes.py [--step-s 10] [--quick] [--servers uvicorn]
"""

import argparse
import http.client
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")
# The children read these: no per-judge limit in the way, votes final at once (decided
# in the request: the vote, the decision and the streaming update commit together).
os.environ["ARENA_VOTE_RATE_PER_MIN"] = "100000000"
os.environ["ARENA_VOTE_UNDO_WINDOW_S"] = "0"
os.environ["ARENA_REDUNDANCY_FRACTION"] = "0"

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402

from tests.bench.vote_data import vote_battles  # noqa: E402
from tests.bench.web import POSTGRES, REDIS, WebServers, cpu_of  # noqa: E402

LOCUST = str(ROOT / ".venv" / "bin" / "locust")
STEPS = [10, 25, 50, 100, 150, 200, 300, 400, 500, 750, 1000]
TARGET_POST_P50_MS = 15
TARGET_RATE = 500
TARGET_P99_MS = 100
TARGET_CPU_RATIO = 2.0  # a vote's server CPU over a 404's (issue 36)
JUDGES = 50


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def summary(ms: list[float]) -> dict:
    return {
        "p50_ms": round(statistics.median(ms), 2),
        "p90_ms": pct(ms, 0.90),
        "p99_ms": pct(ms, 0.99),
        "n": len(ms),
    }


# --- data -------------------------------------------------------------------------


def prepare(battles_n: int) -> tuple[list[tuple[str, int]], list[str]]:
    """``vote_battles`` with this benchmark's judges: ([(token, battle id)], tokens)."""
    return vote_battles(battles_n, judges_n=JUDGES)


# --- servers ----------------------------------------------------------------------


def child_env() -> dict[str, str]:
    from tests.servers import database_url_for_children

    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update(
        DATABASE_URL=database_url_for_children(),
        REDIS_URL=settings.REDIS_URL,
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


# --- 1. the vote POST, sequential ------------------------------------------------------


def post_latency(base_port: int, items: list[tuple[str, int]], n: int) -> dict:
    token = items[0][0]
    mine = [battle for t, battle in items if t == token][:n]
    conn = http.client.HTTPConnection("127.0.0.1", base_port, timeout=30)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def timed(method: str, path: str, body: str | None = None) -> tuple[float, int]:
        started = time.perf_counter()
        conn.request(method, path, body, auth)
        response = conn.getresponse()
        response.read()
        return (time.perf_counter() - started) * 1000, response.status

    vote_ms, floor_ms, mine_ms = [], [], []
    for battle in mine:  # interleaved: the three see the same load
        ms, status = timed("POST", f"/api/battles/{battle}/votes/", json.dumps({"choice": "A"}))
        if status != 201:
            raise RuntimeError(f"vote on {battle}: HTTP {status}")
        vote_ms.append(ms)
        floor_ms.append(timed("GET", "/api/nope/")[0])
        mine_ms.append(timed("GET", f"/api/battles/{battle}/votes/mine/")[0])
    conn.close()
    return {
        "vote_post": summary(vote_ms),
        "floor_404_no_query": summary(floor_ms),
        "floor_vote_status_get": summary(mine_ms),
        "vote_minus_404_floor_p50_ms": round(
            statistics.median(vote_ms) - statistics.median(floor_ms), 2
        ),
    }


# --- 2. the ramp ---------------------------------------------------------------------


def ramp(servers: WebServers, items: list[tuple[str, int]], steps: list[int], step_s: float,
         work: Path, *, floor: bool = False) -> dict:  # fmt: skip
    """The locust ramp against ``servers``; ``floor``: ``GET /api/nope/`` instead of votes
    (the stack's 404 floor under the same offered rates: served = 404)."""
    served = 404 if floor else 201
    items_path, out_path = work / "items.json", work / "answers.jsonl"
    items_path.write_text(json.dumps(items))
    env = {
        **os.environ,
        "VOTES_ITEMS": str(items_path),
        "VOTES_OUT": str(out_path),
        "VOTES_HOSTS": servers.base,
        "VOTES_FLOOR": "1" if floor else "0",
        "VOTES_STEPS": ",".join(map(str, steps)),
        "VOTES_STEP_S": str(step_s),
        "VOTES_PER_USER": "2",
    }
    cpu_before = servers.cpu_s()
    services_before = cpu_of(POSTGRES), cpu_of(REDIS)
    client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(
        [LOCUST, "-f", str(ROOT / "tests" / "bench" / "locust_votes.py"), "--headless",
         "--only-summary", "--loglevel", "WARNING", "--host", servers.base,
         "--stop-timeout", "5"],
        cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=step_s * len(steps) + 120,
    )  # fmt: skip
    wall = time.monotonic() - started
    client = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = (client.ru_utime + client.ru_stime) - (
        client_before.ru_utime + client_before.ru_stime
    )
    postgres_cpu = cpu_of(POSTGRES) - services_before[0]
    redis_cpu = cpu_of(REDIS) - services_before[1]
    answers = [json.loads(line) for line in out_path.read_text().splitlines() if line]
    n_served = sum(1 for a in answers if a["status"] == served)
    per_step = []
    for index, rate in enumerate(steps):
        lo, hi = index * step_s, (index + 1) * step_s
        mine = [a for a in answers if lo <= a["t"] < hi]
        if not mine:
            break
        ok = [a["ms"] for a in mine if a["status"] == served]
        codes = Counter(str(a["status"]) for a in mine)
        per_step.append(
            {
                "offered_per_s": rate,
                "sent_per_s": round(len(mine) / step_s, 1),
                "achieved_served_per_s": round(len(ok) / step_s, 1),
                "p50_ms": pct([a["ms"] for a in mine], 0.50),
                "p99_ms": pct([a["ms"] for a in mine], 0.99),
                "p99_ms_served": pct(ok, 0.99),
                "status_codes": dict(codes),
                "error_codes": dict(Counter(a["code"] for a in mine if a["status"] != served)),
                "errors": len(mine) - len(ok),
                # the seconds of the step whose p99 was over the target, with their
                # answers' count and worst time: a stall shows where it happened
                "slow_seconds": _slow_seconds(mine),
            }
        )
    clean = [
        s["errors"] == 0 and s["p99_ms"] is not None and s["p99_ms"] <= TARGET_P99_MS
        and s["achieved_served_per_s"] >= 0.9 * s["offered_per_s"]
        for s in per_step
    ]  # fmt: skip
    through = next((i for i, ok in enumerate(clean) if not ok), len(clean))
    return {
        "steps": per_step,
        "highest_clean_rate_per_s": max(
            (s["offered_per_s"] for s, ok in zip(per_step, clean, strict=True) if ok), default=0
        ),
        # every step up to this one clean: the ramp's own figure
        "clean_through_per_s": per_step[through - 1]["offered_per_s"] if through else 0,
        "answers": len(answers),
        "bad_answers": sum(
            1
            for a in answers
            if a["status"] not in (served, 503, 429)
            or (a["status"] != served and (a["code"] == "no-json" or not a["retry_after"]))
        ),
        "server_cpu_ms_per_served": _per(
            servers.cpu_s() - cpu_before, sum(1 for a in answers if a["status"] == served)
        ),
        # the services' and the load client's CPU over the whole ramp, per request served
        # (PostgreSQL and Redis are the machine's: anything else using them counts too)
        "postgres_cpu_ms_per_served": _per(postgres_cpu, n_served),
        "redis_cpu_ms_per_served": _per(redis_cpu, n_served),
        "client_cpu_ms_per_request": _per(client_cpu, len(answers)),
        "wall_s": round(wall, 1),
        "locust_rc": done.returncode,
        "created_votes": {a["vote"] for a in answers if a["status"] == 201 and not floor},
        "no_answer": sum(1 for a in answers if a["status"] == 0),
    }


def _slow_seconds(answers: list[dict]) -> list[list[float]]:
    """[second from the ramp's start, answers in it, their p99 ms, their worst ms] for
    each second whose p99 was over the target."""
    by_second: dict[int, list[float]] = {}
    for answer in answers:
        by_second.setdefault(int(answer["t"]), []).append(answer["ms"])
    return [
        [second, len(ms), pct(ms, 0.99), round(max(ms), 1)]
        for second, ms in sorted(by_second.items())
        if pct(ms, 0.99) > TARGET_P99_MS
    ]


def _per(total: float, n: int) -> float | None:
    return round(total / n * 1000, 2) if n else None  # ms


def check_database(created: set[int]) -> dict:
    """Every 201 a stored vote and each stored vote answered 201; every decided battle's
    streaming rating moved exactly once."""
    from battles.models import Battle
    from judging.models import Vote
    from ratings.models import AgentRating

    stored = set(Vote.objects.values_list("pk", flat=True))
    decided = Battle.objects.filter(status=Battle.Status.DECIDED)
    applied = Battle.objects.filter(streaming_applied__isnull=False)
    rated = sum(AgentRating.objects.values_list("rated_battles", flat=True))
    return {
        "votes_201": len(created),
        "votes_stored": len(stored),
        "every_201_stored": created <= stored,
        "every_stored_answered_201": stored <= created,
        "decided_battles": decided.count(),
        "battles_with_streaming_update": applied.count(),
        "rated_battle_count_sum": rated,
        "streaming_moved_exactly_once": applied.count() == decided.count()
        and rated == 2 * decided.count()
        and not decided.filter(streaming_applied__isnull=True).exists(),
    }


def decide_pending(window_s: int) -> int:
    """With an undo window the votes of the ramp decide nothing in their requests; their
    decisions are scheduled on the judging queue (no worker runs here: its CPU would be
    the server's). Once the last window has passed, the sweep decides them, as it would
    for a worker that died; returns how many battles it changed. The scheduled jobs are
    dropped with the queue."""
    from arena_site.redis import queue
    from judging.services.resolution import battles_resolve_pending

    time.sleep(window_s + 1)
    changed = len(battles_resolve_pending())
    judging = queue("judging")
    judging.empty()
    for job_id in judging.scheduled_job_registry.get_job_ids():
        judging.scheduled_job_registry.remove(job_id, delete_job=True)
    return changed


def reset_votes() -> None:
    """Back to every battle judging and no vote, between the runs (same battles)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE judging_vote, judging_exclusionlogentry, ratings_agentrating CASCADE"
        )
        cursor.execute(
            "UPDATE battles_battle SET status = 'judging', outcome = '', decided_at = NULL, "
            "decision_source = '', streaming_applied = NULL, evidence_weight = NULL, "
            "cluster_judge_id = NULL, first_judgment_at = NULL, admissible_votes = 0"
        )
        cursor.execute("UPDATE judging_assignment SET voided_at = NULL")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step-s", type=float, default=10.0)
    parser.add_argument("--post-votes", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="steps 10,50,100 of 3 s")
    parser.add_argument("--steps", help="offered rates, e.g. 100,200,300,400")
    parser.add_argument("--processes", default="2")
    parser.add_argument(
        "--servers", default="uvicorn,daphne,granian",
        help="web servers to measure, each in the same run (tests/bench/web.py)",
    )  # fmt: skip
    parser.add_argument(
        "--ramp-windows", default="10",
        help="undo windows (s) the ramp runs with: 10 is the default deployment (decided "
        "later: here by the sweep after the run); 0 decides in the request",
    )  # fmt: skip
    parser.add_argument("--no-floor", action="store_true", help="skip the 404 ramp")
    args = parser.parse_args()
    steps = [10, 50, 100] if args.quick else STEPS
    if args.steps:
        steps = [int(x) for x in args.steps.split(",")]
    step_s = 3.0 if args.quick else args.step_s
    servers_to_run = args.servers.split(",")
    database = settings.DATABASES["default"]
    database.setdefault("TEST", {})["NAME"] = f"test_{database['NAME']}_bench_votes"
    config = setup_databases(verbosity=0, interactive=False)
    work = Path(tempfile.mkdtemp(prefix="bench-votes-"))
    report: dict = {"load_average_1_5_15_start": [round(x, 2) for x in os.getloadavg()]}
    windows = args.ramp_windows.split(",")
    try:
        ramps = len(servers_to_run) * len(args.processes.split(",")) * len(windows)
        budget = int(sum(steps) * step_s * 1.1) + args.post_votes * JUDGES + 100
        items, _ = prepare(budget)
        report["battles_prepared"] = len(items)
        report["ramps"] = ramps
        for server in servers_to_run:
            report[server] = run = {}
            # the POST alone, sequential on one process: decided in it (window 0), and
            # as deployed (a 10 s undo window: decided later)
            for window in ("0", "10"):
                reset_votes()
                web = WebServers(1, work, {**child_env(), "ARENA_VOTE_UNDO_WINDOW_S": window},
                                 server=server)  # fmt: skip
                try:
                    run[f"post_undo_window_{window}s"] = {
                        **post_latency(web.port, items, args.post_votes),
                        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
                    }
                finally:
                    web.stop()
            for n in [int(x) for x in args.processes.split(",")]:
                env = child_env()
                if not args.no_floor:
                    web = WebServers(n, work, env, server=server)
                    try:
                        floor = ramp(web, items, steps, step_s, work, floor=True)
                    finally:
                        web.stop()
                    floor.pop("created_votes")
                    run[f"x{n}_floor_404_ramp"] = floor
                for window in windows:
                    key = f"x{n}_ramp_undo_window_{window}s"
                    reset_votes()
                    web = WebServers(n, work, {**env, "ARENA_VOTE_UNDO_WINDOW_S": window},
                                     server=server)  # fmt: skip
                    try:
                        result = ramp(web, items, steps, step_s, work)
                    finally:
                        web.stop()
                    created = result.pop("created_votes")
                    if window != "0":
                        result["decided_after_the_run_by_the_sweep"] = decide_pending(int(window))
                    run[key] = result
                    run[f"{key}_database_check"] = check_database(created)
                    run[f"{key}_load_average_1_5_15_end"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        teardown_databases(config, verbosity=0)
    report["summary"] = _summary(report, servers_to_run)
    report["targets"] = {
        "vote_post_p50_ms": TARGET_POST_P50_MS,
        "rate_per_s": TARGET_RATE,
        "p99_ms": TARGET_P99_MS,
        "vote_cpu_over_404_cpu": TARGET_CPU_RATIO,
    }
    report["cpus"] = os.cpu_count()
    report["load_average_1_5_15_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))


def _summary(report: dict, servers: list[str]) -> dict:
    """Per server and process count: the highest clean vote rate, the vote's and the
    404's server CPU under the ramp, their ratio, and whether the database check held."""
    out: dict = {}
    for server in servers:
        for key, value in report[server].items():
            if "_ramp_undo_window_" not in key or key.endswith(("_check", "_end")):
                continue
            procs = key.split("_", 1)[0]
            floor = report[server].get(f"{procs}_floor_404_ramp") or {}
            vote_cpu, floor_cpu = (
                value["server_cpu_ms_per_served"],
                floor.get("server_cpu_ms_per_served"),
            )
            out[f"{server}_{key}"] = {
                "highest_clean_rate_per_s": value["highest_clean_rate_per_s"],
                "clean_through_per_s": value["clean_through_per_s"],
                "floor_404_highest_clean_rate_per_s": floor.get("highest_clean_rate_per_s"),
                "vote_server_cpu_ms": vote_cpu,
                "floor_404_server_cpu_ms": floor_cpu,
                "vote_cpu_over_404_cpu": round(vote_cpu / floor_cpu, 2)
                if vote_cpu and floor_cpu
                else None,
                "database_check_holds": all(
                    v
                    for k, v in report[server][f"{key}_database_check"].items()
                    if isinstance(v, bool)
                ),
                "bad_answers": value["bad_answers"],
            }
    return out


if __name__ == "__main__":
    main()
