"""Benchmark: the conversion latency of failed runs into validated training environments
(docs/environments.md), through the real job path. Prints one JSON document.

Conversion latency is the time from the failure being known to the environment being
validated (``Environment.failed_at`` → ``validated_at``, i.e. ``conversion_s``); its
target is p95 under 2 × the source run's duration + 5 min (``conversion_target_s``).

What runs, against a throwaway test database (setup_databases) and this bench's own
Redis database (REDIS_URL, flushed at the start and the end):

- two real RQ worker subprocesses on that database and Redis: ``manage.py rqworker
  default`` (the builds: consent, redaction, grader; as scripts/run_arena.py runs it, an
  ``ArenaSimpleWorker``, the janitors' worker, without a scheduler; its redaction
  analyzer warmed by one job first) and ``manage.py rqworker battles --worker-class
  battles.worker.BattleWorker`` (the two replays in fresh sandboxes, with its host's
  heartbeat and janitor);
- in this process, K battles per failure mode one after another, each driven by
  ``battles.services.battle_run`` as a battle worker would (admission's own battle job
  is not enqueued, so the battles worker never races this process for a battle), then
  screened (``judging.services.battle_screen``); for ``judged_worse`` an outsider judge
  votes for the correct side, as the crowd would. The modes, as in
  tests/environments/test_pipeline.py: ``judged_worse`` (rulebook against a scaffold
  that delivers a wrong answer; run first, so each is the one battle a judge is served),
  ``gave_up`` (rulebook against idle), ``budget`` (rulebook against a scaffold that never
  delivers, step budget 4), ``tests_failed`` (a coding battle on tests/coding/repos.py's
  FIX: a fixer against a breaker). The scaffolds talk to fake Anthropic servers on
  127.0.0.1 (loopback allow-listed);
- meanwhile a thread calls ``environments.jobs.environments_collect()`` every
  ``--collect-interval`` seconds (60: the cron's interval), as the minute cron does.

It then waits (at most ``--wait-max`` seconds) until every battle has been looked at
by the picker and every picked environment is validated, invalid, held or
needs_grader. Per environment it reports the path failed_at → picked (created_at) →
build job → validate job → validated_at (seconds after failed_at), the two replays'
duration_ms, and the source run's own duration (``run_duration_s``): the reference a
conversion is compared with (re-running the failure) and the base of its target.

Run as root (sandbox uids), e.g.:
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena REDIS_URL=redis://127.0.0.1:6379/14 \\
  ARENA_SANDBOX_UID_BASE=61000 .venv/bin/python tests/bench/bench_environments.py \\
  [--per-mode N | --quick] [--collect-interval S] [--wait-max S] [--modes a,b]
Host id ``ARENA_HOST_ID`` (default ``bench-env``); progress lines go to stderr.
"""

import argparse
import atexit
import datetime as dt
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# Everything the bench process and its worker subprocesses must agree on goes into the
# environment before the settings load; the workers inherit it (tests.servers.child_env).
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/arena")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")
os.environ.setdefault("ARENA_HOST_ID", "bench-env")
os.environ.setdefault("ARENA_CHANNEL_PREFIX", "arena-bench")
os.environ.setdefault("ARENA_CACHE_PREFIX", "arena-bench")
if not os.environ.get("ARENA_SECRET_KEY"):
    import secrets

    os.environ["ARENA_SECRET_KEY"] = secrets.token_urlsafe(50)
# The fake providers live on 127.0.0.1 (tests/agents/conftest.py LOOPBACK).
os.environ["ARENA_INTERNAL_ALLOWLIST"] = "127.0.0.0/8,::1"
# One admissible vote decides (no redundancy draw), final at once (no undo window).
os.environ["ARENA_REDUNDANCY_FRACTION"] = "0"
os.environ["ARENA_VOTE_UNDO_WINDOW_S"] = "0"
TMP = Path(tempfile.mkdtemp(prefix="bench-environments-"))
SANDBOX_ROOT = Path(tempfile.mkdtemp(prefix="bench-environments-sandboxes-", dir="/var/tmp"))
SANDBOX_ROOT.chmod(0o711)  # the slot uids traverse it
atexit.register(shutil.rmtree, TMP, ignore_errors=True)
atexit.register(shutil.rmtree, SANDBOX_ROOT, ignore_errors=True)
os.environ["ARENA_SANDBOX_ROOT"] = str(SANDBOX_ROOT)
os.environ["ARENA_PRIVATE_MEDIA_ROOT"] = str(TMP / "private")

import django  # noqa: E402

django.setup()

import django_rq  # noqa: E402
import numpy as np  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Count  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402
from django.utils import timezone  # noqa: E402
from rq import Worker  # noqa: E402

import battles.services.admission as admission  # noqa: E402
from accounts.services import consent_terms_publish  # noqa: E402
from agents.models import Agent, Arena  # noqa: E402
from agents.services import roster_install_builtins  # noqa: E402
from battles.models import Battle  # noqa: E402
from battles.services import battle_run  # noqa: E402
from environments.jobs import environments_collect  # noqa: E402
from environments.models import BattleScan, Environment  # noqa: E402
from environments.selectors import conversion_latency  # noqa: E402
from judging.services import battle_screen, judge_next, vote_cast  # noqa: E402
from sandboxes.services import sandbox_janitor  # noqa: E402
from tests.agents.fake_providers import FakeAnthropic, tool_call  # noqa: E402
from tests.battles.pairing import submitted_between  # noqa: E402
from tests.coding import repos  # noqa: E402
from tests.coding.test_coding_battles import battle_between, scaffold  # noqa: E402
from tests.conftest import make_person  # noqa: E402
from tests.servers import (  # noqa: E402
    PYTHON,
    START_TIMEOUT_S,
    ServerProcess,
    child_env,
    poll_until,
    wait_for_child_sessions_to_end,
)

MODES = ("judged_worse", "gave_up", "budget", "tests_failed")
TERMINAL = {"validated", "invalid", "held", "needs_grader", "rejected"}
KEY = "sk-ant-test-environments-0123456789abcdef"
CODING_KEY = "sk-ant-test-coding-0123456789abcdef0123"
EMAIL = "maria.garcia@example.com"
READ = dt.timedelta(seconds=30)  # longer than the reading time of the messages
DEFAULT_WORKER = [
    PYTHON, "manage.py", "rqworker", "default",
    "--worker-class", "arena_site.worker.ArenaSimpleWorker",
]  # fmt: skip
BATTLES_WORKER = [
    PYTHON, "manage.py", "rqworker", "battles", "--worker-class", "battles.worker.BattleWorker",
]  # fmt: skip
T_START = time.monotonic()


def log(message: str) -> None:
    print(f"[{time.monotonic() - T_START:7.1f}s] {message}", file=sys.stderr, flush=True)


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(float(value), digits)


def since(at, zero) -> float | None:
    if at is None or zero is None:
        return None
    if isinstance(at, (int, float)):
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    return round((at - zero).total_seconds(), 1)


# --- the agents' fake model ------------------------------------------------------------


def _turns(request: dict) -> int:
    return sum(1 for m in request["messages"] if m["role"] == "assistant")


def wanderer(request: dict):  # never delivers: lists the workspace, again and again
    return tool_call("shell", {"command": "ls -la /work"})


def guesser(request: dict):  # works a little, then delivers a wrong answer
    if _turns(request) == 0:
        return tool_call("shell", {"command": "echo thinking > scratch.txt"})
    return tool_call("deliver", {"message": "6*7 = 36"})


def fixer(request: dict):
    fix = {"command": "str_replace", "path": "calc.py",
           "old_str": "def add(a, b):\n    return a - b",
           "new_str": "def add(a, b):\n    return a + b"}  # fmt: skip
    if _turns(request) == 0:
        return tool_call("edit", fix)
    return tool_call("deliver", {"message": "fixed add"})


def breaker(request: dict):
    if _turns(request) == 0:
        return tool_call("shell", {"command": "cd /work/repo && echo '# todo' >> calc.py"})
    return tool_call("deliver", {"message": "looked"})


def remote_agent(slug: str, base_url: str) -> Agent:
    return Agent.objects.create(
        arena=Arena.objects.public(), slug=slug, display_name=slug.title(),
        kind="scaffold", provider="anthropic", model_id=f"{slug}-model",
        params={"base_url": base_url, "api_key_env": "ENV_TEST_ANTHROPIC_API_KEY",
                "max_tokens": 256},
    )  # fmt: skip


# --- the battles -----------------------------------------------------------------------


def between(user, instruction: str, a: Agent, b: Agent, *, step_budget: int | None = None):
    return submitted_between(user, instruction, a, b, step_budget=step_budget)


def vote_for_a(judge, battle: Battle) -> str:
    """The outsider is served the battle (READ ago, so the vote has its reading time)
    and votes A now: the decision, hence ``failed_at``, is the real present."""
    import time_machine

    with time_machine.travel(timezone.now() - READ, tick=False):
        served = judge_next(judge=judge)
    if served is None or served.pk != battle.pk:
        return f"the judge was served {served and served.pk}, not battle {battle.pk}"
    vote_cast(judge=judge, battle_id=battle.pk, choice="A")
    battle.refresh_from_db()
    if (battle.status, battle.outcome) != ("decided", "A"):
        return f"not decided for A after the vote: {battle.status} {battle.outcome}"
    return ""


def fight(mode: str, index: int, terms, agents: dict, tmp: Path) -> dict:
    """One battle of ``mode``: run, screened, voted on (judged_worse). Its record."""
    user = make_person(f"sub-{mode}-{index}", "Acme", terms)
    builtin = {a.slug: a for a in Agent.objects.filter(slug__in=("rulebook", "idle"))}
    if mode == "tests_failed":
        where = tmp / f"repo-{index}"
        where.mkdir()
        battle = battle_between(user, agents["fixer"], agents["breaker"], repos.FIX, where)
    elif mode == "gave_up":
        instruction = f"Create a file named notes.txt containing hello arena. Questions: {EMAIL}"
        battle = between(user, instruction, builtin["rulebook"], builtin["idle"])
    elif mode == "budget":
        instruction = "Create a file named notes.txt containing hello arena"
        battle = between(user, instruction, builtin["rulebook"], agents["wanderer"], step_budget=4)
    else:
        battle = between(user, "what is 6*7", builtin["rulebook"], agents["guesser"])
    started = time.perf_counter()
    battle_run(battle_id=battle.pk)
    wall = time.perf_counter() - started
    battle.refresh_from_db()
    record = {
        "mode": mode,
        "battle": battle.pk,
        "battle_wall_s": round(wall, 1),
        "ends": dict(battle.runs.values_list("side", "end_reason")),
        "error": "",
    }
    if battle.status != "screening":
        record["error"] = f"battle {battle.status}: {battle.failure_reason}"
    else:
        battle_screen(battle_id=battle.pk)
        battle.refresh_from_db()
        if mode == "judged_worse" and battle.status == "judging":
            record["error"] = vote_for_a(make_person(f"judge-{index}", None, terms), battle)
        elif battle.status not in ("judging", "decided"):
            record["error"] = f"after screening: {battle.status} {battle.exclusion_reason}"
    battle.refresh_from_db()
    record["status"] = battle.status
    return record


# --- the cron and the job timings ------------------------------------------------------


class Collector:
    """``environments_collect()`` every ``interval`` seconds in a thread, as the cron."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.calls: list[dict] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="collector", daemon=True)

    def start(self) -> "Collector":
        self._thread.start()
        return self

    def _loop(self) -> None:
        try:
            while True:
                at = time.monotonic() - T_START
                try:
                    created = environments_collect()
                except Exception as exc:  # the cron would log it and go on
                    self.errors.append(f"{exc!r}")
                    connection.close()
                    created = []
                if created:
                    self.calls.append({"at_s": round(at, 1), "created": created})
                    log(f"collect: picked environments {created}")
                if self._stop.wait(self.interval):
                    return
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)


def job_times(cache: dict, env_ids) -> None:
    """Keeps each environment's build and validate jobs' times (RQ drops finished jobs
    after their result TTL, so they are read while the bench waits)."""
    for env_id in env_ids:
        for kind, queue in (("build", "default"), ("validate", "battles")):
            job = django_rq.get_queue(queue).fetch_job(f"environment-{kind}-{env_id}")
            if job is None:
                continue
            cache[(env_id, kind)] = {
                "enqueued_at": job.enqueued_at,
                "started_at": job.started_at,
                "ended_at": job.ended_at,
                "status": job.get_status(refresh=False),
                "exc": (job.exc_info or "")[-300:] if job.is_failed else "",
            }


def settled(battle_ids: list[int]) -> bool:
    """Every battle looked at by the picker at its final stage, and every environment
    picked from them built and replayed (or stopped with a reason)."""
    battles = dict(Battle.objects.filter(pk__in=battle_ids).values_list("pk", "status"))
    scans = dict(BattleScan.objects.filter(battle_id__in=battle_ids).values_list("battle", "stage"))
    for battle_id in battle_ids:
        status = battles.get(battle_id)
        if status not in ("screening", "judging", "decided"):
            continue  # failed or excluded: never picked
        if battle_id not in scans or (status == "decided" and scans[battle_id] != "decided"):
            return False
    pending = Environment.objects.filter(battle_id__in=battle_ids).exclude(status__in=TERMINAL)
    return not pending.exists()


# --- the figures -----------------------------------------------------------------------


def figures(envs: list[dict]) -> dict:
    statuses: dict[str, int] = {}
    for env in envs:
        statuses[env["status"]] = statuses.get(env["status"], 0) + 1
    done = [e for e in envs if e["conversion_s"] is not None]
    conv = [e["conversion_s"] for e in done]
    targets = [e["target_s"] for e in envs]
    durations = [e["run_duration_s"] for e in envs]
    within = sum(1 for e in done if e["within_target"])

    def pct(values, q):
        return rounded(np.percentile(values, q)) if values else None

    p95 = pct(conv, 95)
    return {
        "n": len(envs),
        "validated": len(done),
        "statuses": statuses,
        "conversion_s": {"p50": pct(conv, 50), "p95": p95, "max": rounded(max(conv, default=None))},
        "target_s": {"p50": pct(targets, 50), "min": rounded(min(targets, default=None))},
        "run_duration_s": {"p50": pct(durations, 50), "max": rounded(max(durations, default=None))},
        "within_target": round(within / len(done), 3) if done else None,
        "within_target_n": within,
        # p95 of the conversions against the smallest target among them: the strict reading
        "p95_le_min_target": None if p95 is None else p95 <= min(targets),
    }


def environment_record(env: Environment, jobs: dict, battle_walls: dict) -> dict:
    zero = env.failed_at
    at = {"picked": since(env.created_at, zero)}
    for kind in ("build", "validate"):
        job = jobs.get((env.pk, kind), {})
        for moment in ("enqueued_at", "started_at", "ended_at"):
            at[f"{kind}_{moment.removesuffix('_at')}"] = since(job.get(moment), zero)
    at["validated"] = since(env.validated_at, zero)
    target = env.conversion_target_s
    return {
        "id": env.pk,
        "mode": env.failure_mode,
        "battle": env.battle_id,
        "run": env.run_id,
        "reference_run": env.reference_run_id,
        "status": env.status,
        "status_detail": env.status_detail,
        "failed_at": env.failed_at.isoformat(),
        "run_duration_s": rounded(env.run_duration_s),
        "battle_wall_s": battle_walls.get(env.battle_id),
        "target_s": rounded(target),
        "conversion_s": rounded(env.conversion_s),
        "within_target": None if env.conversion_s is None else env.conversion_s <= target,
        "seconds_after_failed_at": at,
        "jobs": {
            kind: {k: v for k, v in jobs[(env.pk, kind)].items() if k in ("status", "exc")}
            for kind in ("build", "validate")
            if (env.pk, kind) in jobs
        },
        "replays": [
            {
                "role": r.get("role"),
                "duration_ms": r.get("duration_ms"),
                "passed": r.get("passed"),
                "expected_pass": r.get("expected_pass"),
                "steps_replayed": r.get("steps_replayed"),
                "error": r.get("error"),
            }
            for r in env.replays
        ],
    }


# --- main ------------------------------------------------------------------------------


def start_workers(stack: ExitStack) -> list[ServerProcess]:
    env = child_env(sandbox_root=SANDBOX_ROOT, private_media_root=TMP / "private")
    processes: list[ServerProcess] = []

    def stop_all() -> None:
        for process in processes:
            process.stop()
            print(process.tail(15), file=sys.stderr)
        wait_for_child_sessions_to_end(timeout=30)

    stack.callback(stop_all)
    for name, argv in (("rqworker-default", DEFAULT_WORKER), ("rqworker-battles", BATTLES_WORKER)):
        processes.append(ServerProcess.start(name, argv, env, TMP / "logs"))
    redis = django_rq.get_connection("default")
    poll_until(
        lambda: len(Worker.all(connection=redis)) >= 2,
        timeout=START_TIMEOUT_S * 2,
        what="the two RQ workers to register",
        processes=processes,
    )
    return processes


def warm_redaction() -> float:
    """One redaction in the default worker: its analyzer is built once per process, as
    in a long-lived production worker."""
    started = time.monotonic()
    job = django_rq.get_queue("default").enqueue(
        "exports.redaction.redact_text", "Warm up, Maria Garcia of Berlin."
    )
    while job.get_status(refresh=True) not in ("finished", "failed"):
        if time.monotonic() - started > 180:
            break
        time.sleep(0.5)
    return round(time.monotonic() - started, 1)


def run(args) -> dict:
    result: dict = {
        "bench": "environments_conversion",
        "argv": sys.argv[1:],
        "config": {
            "per_mode": args.per_mode,
            "modes": args.modes,
            "collect_interval_s": args.collect_interval,
            "wait_max_s": args.wait_max,
            "workers": {
                "default": " ".join(DEFAULT_WORKER[1:]),
                "battles": " ".join(BATTLES_WORKER[1:]),
            },
            "battle_jobs": "not enqueued: this process drives battle_run itself",
            "host_id": settings.ARENA.host_id,
            "sandbox_uid_base": settings.ARENA.sandbox_uid_base,
            "sandbox_desktop": settings.ARENA.sandbox_desktop,
            "redis_url": settings.REDIS_URL,
            "cpus": os.cpu_count(),
        },
        "load_average": {"start": [round(x, 2) for x in os.getloadavg()]},
    }
    wall_started = time.monotonic()
    terms = consent_terms_publish(text="You agree.")
    roster_install_builtins(arena=Arena.objects.public())
    os.environ["ENV_TEST_ANTHROPIC_API_KEY"] = KEY
    os.environ["CODING_TEST_ANTHROPIC_API_KEY"] = CODING_KEY
    records: list[dict] = []
    jobs: dict = {}
    with ExitStack() as stack:
        fakes = {
            "wanderer": stack.enter_context(FakeAnthropic(api_key=KEY, policy=wanderer)),
            "guesser": stack.enter_context(FakeAnthropic(api_key=KEY, policy=guesser)),
            "fixer": stack.enter_context(FakeAnthropic(api_key=CODING_KEY, policy=fixer)),
            "breaker": stack.enter_context(FakeAnthropic(api_key=CODING_KEY, policy=breaker)),
        }
        arena = Arena.objects.public()
        agents = {
            "wanderer": remote_agent("wanderer", fakes["wanderer"].base_url),
            "guesser": remote_agent("guesser", fakes["guesser"].base_url),
            "fixer": scaffold(arena, "fixer", fakes["fixer"].base_url),
            "breaker": scaffold(arena, "breaker", fakes["breaker"].base_url),
        }
        log("starting the workers")
        start_workers(stack)
        result["config"]["default_worker_warm_s"] = warm_redaction()
        log(f"workers up; redaction warmed in {result['config']['default_worker_warm_s']} s")
        collector = Collector(args.collect_interval).start()
        stack.callback(collector.stop)
        for mode in args.modes:
            for index in range(args.per_mode):
                log(f"battle {mode} #{index + 1}")
                try:
                    record = fight(mode, index, terms, agents, TMP)
                except Exception as exc:
                    traceback.print_exc()
                    record = {"mode": mode, "battle": None, "error": repr(exc)}
                records.append(record)
                log(f"  -> {record}")
                ids = Environment.objects.values_list("pk", flat=True)
                job_times(jobs, ids)
        result["battles_done_s"] = round(time.monotonic() - wall_started, 1)
        battle_ids = [r["battle"] for r in records if r.get("battle")]
        deadline = time.monotonic() + args.wait_max
        last = None
        while True:
            job_times(jobs, Environment.objects.values_list("pk", flat=True))
            if settled(battle_ids):
                break
            if time.monotonic() > deadline:
                result["wait_timed_out"] = True
                log("waiting timed out")
                break
            counts = dict(
                Environment.objects.filter(battle_id__in=battle_ids)
                .values_list("status")
                .annotate(n=Count("pk"))
                .order_by()
            )
            if counts != last:
                log(f"waiting: {counts}")
                last = counts
            time.sleep(2)
        result["settled_s"] = round(time.monotonic() - wall_started, 1)
        collector.stop()
        result["collects"] = collector.calls
        result["collect_errors"] = collector.errors
    # the workers are stopped: reap any sandbox a killed replay left
    result["sandboxes_reaped_after"] = sandbox_janitor()
    walls = {r["battle"]: r.get("battle_wall_s") for r in records if r.get("battle")}
    envs = [
        environment_record(env, jobs, walls)
        for env in Environment.objects.filter(battle_id__in=walls).order_by("pk")
    ]
    result["overall"] = figures(envs)
    result["by_mode"] = {
        mode: figures([e for e in envs if e["mode"] == mode]) for mode in args.modes
    }
    result["selector_conversion_latency"] = conversion_latency()
    result["battles"] = records
    result["battles_without_environment"] = sorted(set(walls) - {e["battle"] for e in envs})
    result["environments"] = envs
    result["load_average"]["end"] = [round(x, 2) for x in os.getloadavg()]
    result["wall_s"] = round(time.monotonic() - wall_started, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-mode", type=int, default=3, help="battles per failure mode")
    parser.add_argument("--quick", action="store_true", help="one battle per mode")
    parser.add_argument("--collect-interval", type=float, default=60.0)
    parser.add_argument("--wait-max", type=float, default=900.0)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    if args.quick:
        args.per_mode = 1
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = set(args.modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; known: {', '.join(MODES)}")
    # judged_worse first: its judge must be served its own battle, and judge_next serves
    # older battles open for judging (the other modes') before it.
    args.modes = [m for m in MODES if m in args.modes]
    if not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        sys.exit("bench_environments: needs PostgreSQL (DATABASE_URL): the workers share it")
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Admission's battle job would send the battle to the battles worker; this process
    # drives each battle itself (battle_run, as a battle worker does).
    admission.battle_enqueue = lambda battle_id: None
    # A stop (SIGTERM) unwinds like an error: the workers' groups are killed, the test
    # database dropped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    redis = django_rq.get_connection("default")
    redis.flushdb()
    config = None
    try:
        config = setup_databases(verbosity=0, interactive=False)
        log(f"test database {connection.settings_dict['NAME']}")
        result = run(args)
    finally:
        connection.close()
        if config is not None:
            teardown_databases(config, verbosity=0)
        redis.flushdb()
        shutil.rmtree(TMP, ignore_errors=True)
        shutil.rmtree(SANDBOX_ROOT, ignore_errors=True)
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
