"""Benchmark: the vote API under load, through 1 and 2 real Daphne processes on
PostgreSQL, and the vote POST's own latency against same-run floors.

1. ``post``: one judge, sequential requests on a kept-alive connection, through one
   Daphne: ``POST /api/battles/<id>/votes/`` with ARENA_VOTE_UNDO_WINDOW_S=0 (the vote
   decided in its own transaction, the heaviest in-request path) and =10 (the default:
   the decision runs when the window ends, on the judging worker), against two floors
   measured in the same run: ``GET /api/nope/`` (Django's whole middleware stack, a 404
   in the envelope, no query) and ``GET /api/battles/<id>/votes/mine/`` (DRF, bearer
   token, the vote read back).
2. ``ramp`` (window 0: every vote decides its battle in the request): locust headless
   (tests/bench/locust_votes.py, a subprocess) offers 10 → 1000 votes/s in steps of
   ``--step-s`` seconds, many judges each voting on battles served to them; per step the
   offered and achieved rates, p50/p99 and every status code. Run with 1 and with 2
   Daphne processes sharing one listening socket (the kernel spreads the connections).
   After each run the database is checked: every 201 is a stored vote (and every stored
   vote was answered 201), and every decided battle's streaming rating moved exactly
   once (battles carrying their streaming deltas = decided battles, and the agents'
   rated-battle counts sum to twice that). ``ramp_undo_window_10s``: the same with the
   default 10 s undo window, as deployed: the request stores the vote and schedules
   its decision; no judging worker runs (its CPU would be the server's), and after the
   run the sweep decides every battle whose window has passed, before the check.

The client shares the machine's cores with the server: its CPU is part of what limits
the figures (reported). Prints one JSON document.
Targets (issue #13): vote POST p50 ≤ 15 ms; ≥ 500 votes/s with p99 ≤ 100 ms, no errors.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \
     .venv/bin/python tests/bench/bench_votes.py [--step-s 10] [--quick]
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
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

PYTHON = str(ROOT / ".venv" / "bin" / "python")
LOCUST = str(ROOT / ".venv" / "bin" / "locust")
STEPS = [10, 25, 50, 100, 150, 200, 300, 400, 500, 750, 1000]
TARGET_POST_P50_MS = 15
TARGET_RATE = 500
TARGET_P99_MS = 100
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
    """Judges with tokens and consent, a submitting team, the roster, and ``battles_n``
    battles judging, each served a minute ago to one judge (round robin). Bulk inserts:
    tens of thousands in seconds. Returns ([(token, battle id)], tokens)."""
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
    team = team_create(name="bench-acme", owner=submitter)
    consent_accept(user=submitter, terms=terms)
    judges, tokens = [], []
    for i in range(JUDGES):
        judge = User.objects.create_user(f"bench-judge-{i}", password="bench-password-1")
        consent_accept(user=judge, terms=terms)
        judges.append(judge)
        tokens.append(api_token_create(user=judge, name="bench")[1])
    arena = ensure_public_arena()
    roster = roster_install_builtins(arena=arena)
    now = timezone.now()
    tasks = Task.objects.bulk_create(
        Task(team=team, submitter=submitter, instruction=f"bench task {i}")
        for i in range(battles_n)
    )
    size = len(roster)

    def pair(i: int) -> tuple:  # every pair of distinct agents in turn
        return roster[i % size], roster[(i + 1 + (i // size) % (size - 1)) % size]

    battles = Battle.objects.bulk_create(
        Battle(
            arena=arena, team=team, task=task, agent_a=pair(i)[0], agent_b=pair(i)[1],
            status=Battle.Status.JUDGING, redundancy_target=1,
            submitted_at=now - timedelta(minutes=10), ended_at=now - timedelta(minutes=2),
        )
        for i, task in enumerate(tasks)
    )  # fmt: skip
    Assignment.objects.bulk_create(
        Assignment(judge=judges[i % JUDGES], battle=battle, served_at=now - timedelta(minutes=1))
        for i, battle in enumerate(battles)
    )
    return [(tokens[i % JUDGES], battle.pk) for i, battle in enumerate(battles)], tokens


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


class Daphnes:
    """``n`` Daphne processes accepting on one listening socket (``--fd``)."""

    def __init__(self, n: int, log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.sock.set_inheritable(True)
        self.port = self.sock.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        fd = self.sock.fileno()
        self.procs = []
        for i in range(n):
            log = (log_dir / f"daphne-{n}-{i}.log").open("wb")
            self.procs.append(
                subprocess.Popen(
                    [
                        PYTHON,
                        "-m",
                        "daphne",
                        "--fd",
                        str(fd),
                        "-v",
                        "0",
                        "arena_site.asgi:application",
                    ],
                    cwd=ROOT,
                    env={**child_env(), **(env or {})},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(fd,),
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + 120
        while not self._answers():
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                self.stop()
                raise RuntimeError(f"Daphne did not start; see {log_dir}")
            time.sleep(0.3)
        # each process imports lazily on its first request: warm every one
        for _ in range(10 * n):
            self._answers()

    def _answers(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("GET", "/api/nope/")
            conn.getresponse().read()
            conn.close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.sock.close()


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


def ramp(daphnes: Daphnes, items: list[tuple[str, int]], steps: list[int], step_s: float,
         work: Path) -> dict:  # fmt: skip
    items_path, out_path = work / "items.json", work / "answers.jsonl"
    items_path.write_text(json.dumps(items))
    env = {
        **os.environ,
        "VOTES_ITEMS": str(items_path),
        "VOTES_OUT": str(out_path),
        "VOTES_HOSTS": daphnes.base,
        "VOTES_STEPS": ",".join(map(str, steps)),
        "VOTES_STEP_S": str(step_s),
        "VOTES_PER_USER": "2",
    }
    cpu_before = _cpu_s(daphnes)
    started = time.monotonic()
    done = subprocess.run(
        [LOCUST, "-f", str(ROOT / "tests" / "bench" / "locust_votes.py"), "--headless",
         "--only-summary", "--loglevel", "WARNING", "--host", daphnes.base,
         "--stop-timeout", "5"],
        cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=step_s * len(steps) + 120,
    )  # fmt: skip
    wall = time.monotonic() - started
    answers = [json.loads(line) for line in out_path.read_text().splitlines() if line]
    per_step = []
    for index, rate in enumerate(steps):
        lo, hi = index * step_s, (index + 1) * step_s
        mine = [a for a in answers if lo <= a["t"] < hi]
        if not mine:
            break
        ok = [a["ms"] for a in mine if a["status"] == 201]
        codes = Counter(str(a["status"]) for a in mine)
        per_step.append(
            {
                "offered_per_s": rate,
                "sent_per_s": round(len(mine) / step_s, 1),
                "achieved_201_per_s": round(len(ok) / step_s, 1),
                "p50_ms": pct([a["ms"] for a in mine], 0.50),
                "p99_ms": pct([a["ms"] for a in mine], 0.99),
                "p99_ms_201": pct(ok, 0.99),
                "status_codes": dict(codes),
                "error_codes": dict(Counter(a["code"] for a in mine if a["status"] != 201)),
                "errors": len(mine) - len(ok),
            }
        )
    clean = [
        s for s in per_step
        if s["errors"] == 0 and s["p99_ms"] is not None and s["p99_ms"] <= TARGET_P99_MS
        and s["achieved_201_per_s"] >= 0.9 * s["offered_per_s"]
    ]  # fmt: skip
    return {
        "steps": per_step,
        "highest_clean_rate_per_s": max((s["offered_per_s"] for s in clean), default=0),
        "answers": len(answers),
        "bad_answers": sum(
            1
            for a in answers
            if a["status"] not in (201, 503, 429)
            or (a["status"] != 201 and (a["code"] == "no-json" or not a["retry_after"]))
        ),
        "server_cpu_s_per_201": _per(
            _cpu_s(daphnes) - cpu_before, sum(1 for a in answers if a["status"] == 201)
        ),
        "wall_s": round(wall, 1),
        "locust_rc": done.returncode,
        "created_votes": {a["vote"] for a in answers if a["status"] == 201},
        "no_answer": sum(1 for a in answers if a["status"] == 0),
    }


def _per(total: float, n: int) -> float | None:
    return round(total / n * 1000, 2) if n else None  # ms


def _cpu_s(daphnes: Daphnes) -> float:
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for proc in daphnes.procs:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


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
    parser.add_argument("--processes", default="1,2")
    parser.add_argument(
        "--ramp-windows", default="0,10",
        help="undo windows (s) the ramp runs with: 0 decides in the request; 10 is the "
        "default deployment (decided later: here by the sweep after the run)",
    )  # fmt: skip
    args = parser.parse_args()
    steps = [10, 50, 100] if args.quick else STEPS
    step_s = 3.0 if args.quick else args.step_s
    database = settings.DATABASES["default"]
    database.setdefault("TEST", {})["NAME"] = f"test_{database['NAME']}_bench_votes"
    config = setup_databases(verbosity=0, interactive=False)
    work = Path(tempfile.mkdtemp(prefix="bench-votes-"))
    report: dict = {"load_average_1_5_15_start": [round(x, 2) for x in os.getloadavg()]}
    try:
        budget = int(sum(steps) * step_s * 1.1) + args.post_votes * JUDGES + 100
        items, _ = prepare(budget)
        report["battles_prepared"] = len(items)
        for n in [int(x) for x in args.processes.split(",")]:
            run: dict = {"load_average_1_5_15": [round(x, 2) for x in os.getloadavg()]}
            if n == 1:
                # the POST alone: decided in it (window 0), and as deployed by default
                # (a 10 s undo window: the decision runs later, on the judging worker)
                for window in ("0", "10"):
                    reset_votes()
                    daphnes = Daphnes(1, work, {"ARENA_VOTE_UNDO_WINDOW_S": window})
                    try:
                        run[f"post_undo_window_{window}s"] = {
                            **post_latency(daphnes.port, items, args.post_votes),
                            "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
                        }
                    finally:
                        daphnes.stop()
            for window in args.ramp_windows.split(","):
                key = "ramp" if window == "0" else f"ramp_undo_window_{window}s"
                reset_votes()
                daphnes = Daphnes(n, work, {"ARENA_VOTE_UNDO_WINDOW_S": window})
                try:
                    result = ramp(daphnes, items, steps, step_s, work)
                finally:
                    daphnes.stop()
                created = result.pop("created_votes")
                if window != "0":
                    result["decided_after_the_run_by_the_sweep"] = decide_pending(int(window))
                run[key] = result
                run[f"{key}_database_check"] = check_database(created)
                run[f"{key}_load_average_1_5_15_end"] = [round(x, 2) for x in os.getloadavg()]
            report[f"daphne_x{n}"] = run
    finally:
        shutil.rmtree(work, ignore_errors=True)
        teardown_databases(config, verbosity=0)
    one = report.get("daphne_x1", {})
    best = max(
        (
            report[k][ramp]["highest_clean_rate_per_s"]
            for k in report
            if k.startswith("daphne_x")
            for ramp in report[k]
            if ramp.startswith("ramp")
            and isinstance(report[k][ramp], dict)
            and "highest_clean_rate_per_s" in report[k][ramp]
        ),
        default=0,
    )
    report["targets"] = {
        "vote_post_p50_ms": TARGET_POST_P50_MS,
        "rate_per_s": TARGET_RATE,
        "p99_ms": TARGET_P99_MS,
    }
    report["meets"] = {
        f"vote_post_p50_{key}": one[key]["vote_post"]["p50_ms"] <= TARGET_POST_P50_MS
        for key in ("post_undo_window_0s", "post_undo_window_10s")
        if key in one
    }
    report["meets"]["rate"] = best >= TARGET_RATE
    report["cpus"] = os.cpu_count()
    report["load_average_1_5_15_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
