"""Benchmark: a vote soak — votes at a constant rate for ``--minutes`` (10) through two
uvicorn processes, with the default 10 s undo window, while everything that must keep
up runs beside them on the same machine: the decider(s) (``manage.py decide``), the
judging/ratings worker with RQ's scheduler, the janitors worker (the ``default`` queue,
in a worker of its own: RQ takes a worker's queues in strict order, and behind the
judging and ratings jobs the janitors waited up to 390 s), the exports worker (the
``exports`` queue: the instructions' redaction ahead, up to ~80 s a run, behind which
battles_janitor was 7.8 s late when it shared the janitors' worker) and the cron
scheduler (arena_site/cron.py: the refit, the janitors, the sweep, the redaction), as
``make run`` starts them (scripts/run_arena.py ``queue_workers``).

Sampled every second: the decisions' backlog (battles being judged whose undo window
has passed: how many, and how long the oldest has waited). Every RQ job the soak runs
is recorded (enqueued, started, ended) while it is kept; jobs enqueued before the soak's
processes started (an earlier run's, on the same Redis database) are only counted in
``left_over_jobs_not_counted``. At the end:

- ``drained_s_after_last_window``: from the end of the last vote's undo window to the
  moment no battle is due (target: within one undo window);
- the database check of tests/bench/bench_votes.py (every 201 stored once, every
  stored vote answered 201, each decided battle's streaming rating moved exactly once)
  plus: every voted battle decided, none still being judged;
- per periodic job: its queue and the worker process serving it, its period, how many
  times it ran and its largest delay from enqueue to start (target: each below its own
  period), and the refits published;
- each process's CPU seconds (the web, the deciders, the three queue workers, the cron
  scheduler) and PostgreSQL's and Redis's.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \\
     .venv/bin/python tests/bench/bench_vote_soak.py --rate 200 [--minutes 10] [--deciders 1]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")
os.environ["ARENA_VOTE_RATE_PER_MIN"] = "100000000"
os.environ["ARENA_REDUNDANCY_FRACTION"] = "0"

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402

from tests.bench.bench_votes import check_database, child_env, pct, prepare  # noqa: E402
from tests.bench.web import POSTGRES, PYTHON, REDIS, WebServers, cpu_of  # noqa: E402

LOCUST = str(ROOT / ".venv" / "bin" / "locust")
WINDOW_S = 10


def make_run_workers() -> dict[str, list[str]]:
    """The queue workers, as `make run` starts them (scripts/run_arena.py queue_workers):
    each process's name here and its argv after ``manage.py``. The judging/ratings one
    carries RQ's scheduler (the ratings queue's delayed board pushes are the only
    scheduled jobs); the janitors one serves the default queue alone, the exports one
    the exports queue (instructions_redact_ahead) alone."""
    from tests.makerun import make_run_queue_workers

    short = {
        "judging/ratings worker": "worker",
        "janitors worker": "janitors",
        "exports worker": "exports",
    }
    return {short[name]: argv for name, argv in make_run_queue_workers().items()}


WORKERS = make_run_workers()
# Which of them serves each queue the soak follows.
WORKER_OF_QUEUE = {
    queue: name for name, argv in WORKERS.items() for queue in argv[1:] if queue.isalpha()
}


def backlog() -> tuple[int, float]:
    """(battles due and not decided, age in s of the oldest due)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), EXTRACT(EPOCH FROM now() - min(decide_due_at)) "
            "FROM battles_battle WHERE status = 'judging' AND decide_due_at <= now()"
        )
        count, age = cursor.fetchone()
    return count, float(age or 0.0)


class JobLog:
    """Every RQ job of the soak's queues, read from the registries every few seconds
    (a finished job is kept there only for its result TTL)."""

    QUEUES = tuple(WORKER_OF_QUEUE)

    def __init__(self, since: float) -> None:
        """``since``: when the soak's processes started; a job enqueued before (left in
        the registries, or still queued, by an earlier run on the same Redis database)
        is counted in ``left_over`` and nowhere else."""
        self.since = since
        self.jobs: dict[str, dict] = {}
        self.left_over: set[str] = set()

    def sample(self) -> None:
        from rq.exceptions import NoSuchJobError
        from rq.job import Job

        from arena_site.redis import queue

        for name in self.QUEUES:
            q = queue(name)
            ids = set(q.finished_job_registry.get_job_ids())
            ids |= set(q.started_job_registry.get_job_ids())
            for job_id in ids - {k for k, v in self.jobs.items() if v.get("ended")}:
                try:
                    job = Job.fetch(job_id, connection=q.connection)
                except NoSuchJobError:  # expired between the two reads
                    continue
                if job.enqueued_at is None or job.started_at is None:
                    continue
                if job.enqueued_at.timestamp() < self.since:
                    self.left_over.add(job_id)
                    continue
                self.jobs[job_id] = {
                    "queue": name,
                    "func": job.func_name,
                    "enqueued": job.enqueued_at.timestamp(),
                    "started": job.started_at.timestamp(),
                    "ended": job.ended_at.timestamp() if job.ended_at else None,
                }

    def delays(self, periods: dict[str, float]) -> dict:
        out: dict = {}
        for job in self.jobs.values():
            short = job["func"].rsplit(".", 1)[-1]
            queue = job["queue"]
            entry = out.setdefault(
                short, {"queue": queue, "worker": WORKER_OF_QUEUE[queue], "runs": 0, "delays": []}
            )
            entry["runs"] += 1
            entry["delays"].append(job["started"] - job["enqueued"])
        for short, entry in out.items():
            delays = entry.pop("delays")
            entry["max_delay_s"] = round(max(delays), 3)
            entry["p50_delay_s"] = round(sorted(delays)[len(delays) // 2], 3)
            entry["period_s"] = periods.get(short)
            entry["within_period"] = periods.get(short) is None or max(delays) < periods[short]
        return out


def cron_periods() -> dict[str, float]:
    """Each periodic job's period, as arena_site/cron.py registers it."""
    from rq import cron

    import arena_site.cron  # noqa: F401  (registers the jobs)

    return {job["func"].__name__: job["interval"] for job in cron._job_data_registry}


def start(name: str, argv: list[str], env: dict, logs: Path) -> subprocess.Popen:
    log = (logs / f"{name}.log").open("wb")
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip


def stop_all(procs: list[subprocess.Popen]) -> None:
    import signal

    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, required=True, help="votes/s offered")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--deciders", type=int, default=1)
    parser.add_argument("--processes", type=int, default=2, help="web processes")
    args = parser.parse_args()
    duration = args.minutes * 60
    database = settings.DATABASES["default"]
    database.setdefault("TEST", {})["NAME"] = f"test_{database['NAME']}_bench_soak"
    config = setup_databases(verbosity=0, interactive=False)
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    report: dict = {"load_average_1_5_15_start": [round(x, 2) for x in os.getloadavg()],
                    "rate_offered_per_s": args.rate, "minutes": args.minutes,
                    "deciders": args.deciders, "web_processes": args.processes}  # fmt: skip
    procs: list[subprocess.Popen] = []
    web = None
    try:
        t = time.monotonic()
        items, _ = prepare(int(args.rate * duration * 1.02) + 100)
        report["battles_prepared"] = len(items)
        report["prepare_s"] = round(time.monotonic() - t, 1)
        # (bench_votes, imported above, sets the window to 0 for its own children)
        env = {**child_env(), "ARENA_VOTE_UNDO_WINDOW_S": str(WINDOW_S)}
        web = WebServers(args.processes, work, env, server="uvicorn")
        manage = [PYTHON, "manage.py"]
        processes_started = time.time()
        for i in range(args.deciders):
            procs.append(start(f"decider-{i}", [*manage, "decide"], env, work))
        for name, argv in WORKERS.items():
            procs.append(start(name, [*manage, *argv], env, work))
        procs.append(start("cron", [PYTHON, "-m", "arena_site.worker", "arena_site.cron"],
                           env, work))  # fmt: skip
        names = [*(f"decider-{i}" for i in range(args.deciders)), *WORKERS, "cron"]
        jobs = JobLog(since=processes_started)
        samples: list[tuple[float, int, float]] = []
        stop = threading.Event()

        def sampler() -> None:
            from django.db import connection

            tick = 0
            while not stop.is_set():
                count, age = backlog()
                samples.append((time.time(), count, age))
                if tick % 5 == 0:
                    jobs.sample()
                tick += 1
                stop.wait(1.0)
            connection.close()

        thread = threading.Thread(target=sampler, daemon=True)
        thread.start()
        items_path, out_path = work / "items.json", work / "answers.jsonl"
        items_path.write_text(json.dumps(items))
        cpu_before = web.cpu_s()
        services_before = cpu_of(POSTGRES), cpu_of(REDIS)
        started = time.time()
        done = subprocess.run(
            [LOCUST, "-f", str(ROOT / "tests" / "bench" / "locust_votes.py"), "--headless",
             "--only-summary", "--loglevel", "WARNING", "--host", web.base,
             "--stop-timeout", "5"],
            cwd=ROOT, capture_output=True, text=True, timeout=duration + 300,
            env={**os.environ, "VOTES_ITEMS": str(items_path), "VOTES_OUT": str(out_path),
                 "VOTES_HOSTS": web.base, "VOTES_STEPS": str(args.rate),
                 "VOTES_STEP_S": str(duration), "VOTES_PER_USER": "2"},
        )  # fmt: skip
        answers = [json.loads(line) for line in out_path.read_text().splitlines() if line]
        web_cpu = web.cpu_s() - cpu_before
        others_cpu = {name: _proc_cpu(proc.pid) for name, proc in zip(names, procs, strict=True)}
        services_cpu = {"postgres": cpu_of(POSTGRES) - services_before[0],
                        "redis": cpu_of(REDIS) - services_before[1]}  # fmt: skip
        last_vote = max(started + a["t"] for a in answers if a["status"] == 201)
        last_window = last_vote + WINDOW_S
        # until nothing is due, past the last window
        deadline = time.time() + 600
        drained_at = None
        while time.time() < deadline:
            if samples and samples[-1][0] >= last_window and samples[-1][1] == 0:
                drained_at = samples[-1][0]
                break
            time.sleep(0.5)
        stop.set()
        thread.join(5)
        jobs.sample()
        ok = [a for a in answers if a["status"] == 201]
        created = {a["vote"] for a in ok}
        during = [s for s in samples if s[0] <= last_window]
        report["votes"] = {
            "answers": len(answers),
            "answered_201": len(ok),
            "achieved_201_per_s": round(len(ok) / duration, 1),
            "p50_ms": pct([a["ms"] for a in answers], 0.5),
            "p99_ms": pct([a["ms"] for a in answers], 0.99),
            "max_ms": round(max(a["ms"] for a in answers), 1),
            "non_201": len(answers) - len(ok),
            "web_cpu_ms_per_201": round(web_cpu / max(1, len(ok)) * 1000, 2),
            "web_cpu_ms_per_answer": round(web_cpu / max(1, len(answers)) * 1000, 2),
            "error_codes": dict(Counter(str(a["code"]) for a in answers if a["status"] != 201)),
            "per_minute": _per_minute(answers),
            "cpu_s": {
                "web": round(web_cpu, 1),
                **{k: round(v, 1) for k, v in {**others_cpu, **services_cpu}.items()},
            },
            "locust_rc": done.returncode,
        }
        report["decisions"] = {
            "drained_s_after_last_window": None
            if drained_at is None
            else round(max(0.0, drained_at - last_window), 1),
            "backlog_max": max((s[1] for s in during), default=0),
            "oldest_due_max_s": round(max((s[2] for s in during), default=0.0), 1),
            "oldest_due_p99_s": pct([s[2] for s in during], 0.99),
            "within_one_window": drained_at is not None and drained_at - last_window <= WINDOW_S,
        }
        report["database_check"] = check_database(created)
        report["database_check"].update(_every_voted_battle_decided())
        report["periodic_jobs"] = jobs.delays(cron_periods())
        report["left_over_jobs_not_counted"] = len(jobs.left_over)
        report["refits_published"] = _refits()
    finally:
        stop_all(procs)
        if web is not None:
            web.stop()
        report["logs"] = str(work)
        teardown_databases(config, verbosity=0)
    report["load_average_1_5_15_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))
    if all(job["within_period"] for job in report.get("periodic_jobs", {}).values()):
        shutil.rmtree(work, ignore_errors=True)  # else its logs stay: which job was late


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a live process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _per_minute(answers: list[dict]) -> list[dict]:
    """Per minute of the soak: the votes answered 201 per second, the others, the p99."""
    out = []
    for minute in range(int(max(a["t"] for a in answers) // 60) + 1):
        mine = [a for a in answers if minute * 60 <= a["t"] < (minute + 1) * 60]
        ok = sum(1 for a in mine if a["status"] == 201)
        p99 = pct([a["ms"] for a in mine], 0.99)
        out.append({"minute": minute, "answered_201_per_s": round(ok / 60, 1),
                    "other": len(mine) - ok, "p99_ms": p99})  # fmt: skip
    return out


def _every_voted_battle_decided() -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT b.id) FILTER (WHERE b.status = 'judging'), "
            "count(DISTINCT b.id) FROM judging_vote v JOIN battles_battle b ON b.id = v.battle_id"
        )
        judging, voted = cursor.fetchone()
    return {"voted_battles": voted, "voted_battles_still_judging": judging,
            "every_voted_battle_decided": judging == 0}  # fmt: skip


def _refits() -> int:
    from ratings.models import RatingSnapshot

    return RatingSnapshot.objects.count()


if __name__ == "__main__":
    main()
