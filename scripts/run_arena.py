"""`make run`: the whole arena on one machine, on embedded defaults.

Migrates, seeds the demo accounts, roster and demo board, then starts the web server
(uvicorn: HTTP + websockets), the RQ workers and RQ's cron scheduler as children, prints
where to go and how to log in once the web server answers, and only then prepares, in the
background, what the first page does not need (``background_steps``: the sandboxes'
Debian packages, the demo battles, the coding toolchain; every page says what is still
being prepared: arena_site/preparing.py). It stops every child (its private Redis too)
however it is stopped:
Ctrl-C, SIGTERM or SIGHUP to this process or to its process group, or its parent (make)
going away. Every child leads a process group of its own and is told to die with this
process (PR_SET_PDEATHSIG), so even a SIGKILL here leaves no worker claiming jobs.

``ARENA_SEED_BATTLES=false`` seeds the demo accounts and roster without running the
demo battles (quick starts; the tests of these stop paths use it)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from arena_site.hostrun import children_stop, die_with_parent  # noqa: E402
from arena_site.preparing import Step, status_clear, status_write  # noqa: E402
from arena_site.secret import ENV_NAME, secret_key_generate  # noqa: E402
from sandboxes.reaping import become_subreaper, reap_orphans  # noqa: E402

PY = sys.executable
HOST = os.environ.get("ARENA_HOST", "127.0.0.1")
PORT = int(os.environ.get("ARENA_PORT", "8000"))
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How long a child may take to stop before it is killed.
STOP_GRACE_S = 10
# How long the web server may take to answer before the start counts as failed.
WEB_READY_TIMEOUT_S = 120


class Stop(Exception):
    """A stop signal arrived, or a child died."""


def say(message: str) -> None:
    print(f"arena: {message}", flush=True)


def redis_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except Exception:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ensure_redis(env: dict[str, str], children: list[subprocess.Popen]) -> None:
    url = env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    if redis_answers(url):
        return
    server = shutil.which("redis-server")
    if server is None:
        sys.exit(
            f"arena: no Redis answers at {url}; install it (apt-get install redis-server) "
            "or set REDIS_URL to a running one"
        )
    port = free_port()
    data = ROOT / "var" / "redis"
    data.mkdir(parents=True, exist_ok=True)
    say(f"no Redis at {urlsplit(url).netloc}; starting a private one on 127.0.0.1:{port}")
    children.append(
        subprocess.Popen(
            [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
             "--dir", str(data)],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    )  # fmt: skip
    env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
    for _ in range(50):
        if redis_answers(env["REDIS_URL"]):
            return
        time.sleep(0.1)
    sys.exit("arena: the private Redis did not start")


PREPARE = """
import sys, time
started = time.monotonic()
def say(message):
    print(f"arena: {message} ({time.monotonic() - started:.1f} s)", flush=True)
import django
django.setup()
from django.core.management import call_command
say("[2/4] Django loaded")
call_command("migrate", interactive=False, verbosity=0)
say("[2/4] database migrated")
call_command("collectstatic", interactive=False, verbosity=0)
say("[2/4] static files collected")
call_command("seed_demo", "--no-battles", verbosity=0)
say("[2/4] demo accounts, roster and demo board in place")
"""


def prepare(env: dict[str, str], children: list[subprocess.Popen]) -> None:
    """Migrate, collect static files and seed the demo's accounts, roster and board in one
    process (Django's start-up costs seconds on a small machine; pay it once). It is a
    child like the others: a stop signal during it stops it too."""
    child = start(
        "[2/4] preparation (database, static files, demo accounts)", [PY, "-c", PREPARE], env
    )
    children.append(child)
    while child.poll() is None:
        time.sleep(0.2)
    children.remove(child)
    if child.returncode != 0:
        raise subprocess.CalledProcessError(child.returncode, child.args)


def seeding_battles(env: dict[str, str]) -> bool:
    return env.get("ARENA_SEED_BATTLES", "true").strip().lower() not in ("0", "false", "no", "off")


def background_steps(env: dict[str, str]) -> list[tuple[Step, list[str]]]:
    """What `make run` prepares after its first page answers, in order: (step, argv).
    First the .venv's bytecode, when the first page did not wait for it (setup.sh
    install_python_env; at once otherwise). The demo battles run in sandboxes (after the
    Debian packages); the coding toolchain (about 1.5 GB the first time) comes last, since
    only coding battles need it."""
    steps = [
        (
            Step("bytecode", "Python's compiled files", "processes start faster", shown=False),
            ["bash", "scripts/setup.sh", "bytecode"],
        ),
        (
            Step(
                "packages",
                "The sandboxes' system packages",
                "battles start once they are installed",
            ),
            ["bash", "scripts/setup.sh", "debian"],
        ),
    ]
    if seeding_battles(env):
        steps.append(
            (
                Step("demo", "The demo battles", "the judge page fills with them as they finish"),
                [PY, "manage.py", "seed_demo"],
            )
        )
    steps.append(
        (
            Step(
                "toolchain",
                "The coding agents' toolchain",
                "coding battles start once it is installed",
            ),
            ["bash", "scripts/toolchain.sh"],
        )
    )
    return steps


class Background:
    """The background steps, one child at a time, each step's state written for the
    pages (arena_site/preparing.py). A failed step is reported and the next one runs:
    the arena goes on without what it could not prepare."""

    def __init__(self, env: dict[str, str], data_dir: Path) -> None:
        self.env = env
        self.data_dir = data_dir
        self.steps = background_steps(env)
        self.current: subprocess.Popen | None = None
        self.index = -1
        self.started = 0.0
        self.write()

    def write(self) -> None:
        status_write(self.data_dir, [step for step, _ in self.steps], os.getpid())

    def poll(self) -> None:
        """Starts the next step when the current one has ended."""
        if self.current is not None:
            if self.current.poll() is None:
                return
            step = self.steps[self.index][0]
            step.state = "done" if self.current.returncode == 0 else "failed"
            took = time.monotonic() - self.started
            if step.state == "done":
                say(f"background: {step.label.lower()}: done in {took:.0f} s")
            else:
                code = self.current.returncode
                say(
                    f"background: {step.label.lower()} failed (exit code {code}); "
                    "the arena goes on without it"
                )
            self.current = None
            self.write()
        if self.index + 1 >= len(self.steps):
            return
        self.index += 1
        step, argv = self.steps[self.index]
        step.state = "running"
        self.write()
        self.started = time.monotonic()
        self.current = start(f"background: {step.label.lower()}", argv, self.env)

    def children(self) -> list[subprocess.Popen]:
        return [self.current] if self.current is not None else []


def queue_workers() -> list[tuple[str, list[str]]]:
    """The workers of the judging, ratings, default and exports queues: (name, argv) each.

    RQ takes a worker's queues in strict order, so the `default` queue (the janitors and
    the other periodic jobs of arena_site/cron.py) has a worker of its own: behind
    `judging` and `ratings`, which a vote flood keeps busy (screening, the delayed board
    pushes), they waited up to 390 s in a 10-minute soak (docs/performance.md).

    A worker runs one job at a time, so the `exports` queue (instructions_redact_ahead,
    every 5 min: up to 200 instructions through Presidio at ~0.4 s each, up to ~80 s a
    run) has a worker of its own too: on `default`, battles_janitor (every 5 s) was
    7.8 s late behind an 8.5 s redaction run in the vote soak.

    RQ's scheduler (--with-scheduler) moves due scheduled and retried jobs of the queues
    of the worker that runs it, and of no other queue: it runs on the judging/ratings
    worker, since the `ratings` queue is the one that gets scheduled jobs (the delayed
    full-board push, ratings.services.leaderboard_push_later). Nothing is scheduled on
    `default` or `exports` (the cron scheduler enqueues the periodic jobs directly), and
    the retries (environments.jobs' on `battles`, arena_site/worker.py's after a database
    outage) have no interval: RQ enqueues them again at once, without a scheduler."""
    simple = ["--worker-class", "arena_site.worker.ArenaSimpleWorker"]
    rqworker = [PY, "manage.py", "rqworker"]
    return [
        ("judging/ratings worker", [*rqworker, "judging", "ratings", *simple, "--with-scheduler"]),
        ("janitors worker", [*rqworker, "default", *simple]),
        ("exports worker", [*rqworker, "exports", *simple]),
    ]


def workers_start(env: dict[str, str], children: list[subprocess.Popen]) -> None:
    """The battle workers, the queue workers, the decider, the evaluations worker and
    the cron scheduler: started once the web server answers."""
    slots = int(env.get("ARENA_BATTLE_SLOTS", "4"))
    # The warm desktop pool (docs/performance.md) is opt-in: each battle worker then
    # keeps ARENA_SANDBOX_POOL_SIZE idle desktops booted (memory and a slot each).
    pooled = int(env.get("ARENA_SANDBOX_POOL_SIZE") or "0") > 0
    # Battle workers carry their host's heartbeat and janitor (battles/worker.py).
    worker_class = "PooledBattleWorker" if pooled else "BattleWorker"
    battle_worker = ["--worker-class", f"battles.worker.{worker_class}"]
    for slot in range(slots):
        children.append(
            start(
                f"battle worker {slot + 1}/{slots}",
                [PY, "manage.py", "rqworker", "battles", *battle_worker],
                env,
            )
        )
    for name, argv in queue_workers():
        children.append(start(name, argv, env))
    # Votes' decisions once their undo windows pass (judging/decider.py): a process
    # of its own, never behind the janitors and refits of the workers above.
    children.append(start("decider", [PY, "manage.py", "decide"], env))
    # Offline evaluations (docs/evaluations.md): a worker of their own, since one
    # evaluation job can run for hours and must not hold up judging or ratings.
    children.append(start("evaluations worker", [PY, "manage.py", "rqworker", "evals"], env))
    # RQ's cron scheduler, kept going through a Redis restart (arena_site/worker.py).
    children.append(start("scheduler", [PY, "-m", "arena_site.worker", "arena_site.cron"], env))


def start(name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    say(f"starting {name}")
    # Each child leads its own process group, so stopping it stops its children too, and
    # dies with this process whatever kills it.
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, start_new_session=True, preexec_fn=die_with_parent
    )


def stop_all(children: list[subprocess.Popen]) -> None:
    """Stops the arena's processes first, then the private Redis they talk to (stopped
    together, the workers would fail to release their locks on the way out)."""
    redis_servers = [c for c in children if c.args and Path(str(c.args[0])).name == "redis-server"]
    children_stop([c for c in children if c not in redis_servers], STOP_GRACE_S)
    children_stop(redis_servers, STOP_GRACE_S)


def wait_for_web(children: list[subprocess.Popen]) -> None:
    """Until the web server answers (the banner comes only then), or a child dies."""
    import urllib.error
    import urllib.request

    url = f"http://{HOST}:{PORT}/accounts/login/"
    deadline = time.monotonic() + WEB_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        watch(children)
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    say(f"the web server did not answer at {url} within {WEB_READY_TIMEOUT_S} s")
    raise Stop


def watch(children: list[subprocess.Popen], background: list[subprocess.Popen] = ()) -> None:
    """Raises Stop when a child died (the background step's child is the Background's
    to watch; its own children must not be reaped from under it)."""
    reap_orphans(keep={child.pid for child in [*children, *background]})
    for child in list(children):
        if child.poll() is None:
            continue
        if child.returncode == 0 and "battles" in child.args:
            # (a drained host's battle worker stops once idle: docs/deployment.md)
            say("a battle worker stopped (this host is drained); the rest goes on")
            children.remove(child)
            continue
        say(f"a child exited with code {child.returncode} ({child.args[:4]}); stopping")
        raise Stop


def logins() -> list[str]:
    path = Path(os.environ.get("ARENA_DATA_DIR", ROOT / "var")) / "demo-logins.txt"
    lines = []
    for user in ("demo", "judge1", "judge2", "judge3", "admin"):
        password = None
        if path.exists():
            for line in path.read_text().splitlines():
                name, _, secret = line.partition(" ")
                if name == user:
                    password = secret
        if password is None:
            env = "ARENA_ADMIN_PASSWORD" if user == "admin" else "ARENA_DEMO_PASSWORD"
            password = "(from $" + env + ")"
        lines.append(f"    {user:<7} {password}")
    return lines


def main() -> None:
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
    # Logs for the person at this terminal: text, not one JSON object per line
    # (docs/operations.md "Logs"; an operator's environment can still ask for json).
    env.setdefault("ARENA_LOG_FORMAT", "plain")
    # The demo board (docs/leaderboard.md): ratings to read from the first minute, labelled
    # as simulated; a deployment leaves it off.
    env.setdefault("ARENA_DEMO_BOARD", "true")
    if not env.get(ENV_NAME, "").strip():
        # the data dir's own key, generated once and kept with its data
        secret_key_generate(Path(env.get("ARENA_DATA_DIR", ROOT / "var")))
    # The refit's dense solves are small (n agents squared): one BLAS thread each is
    # faster than a pool contending for the cores the sandboxes use
    # (tests/bench/bench_ratings.py measures both).
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, "1")
    children: list[subprocess.Popen] = []

    def on_signal(signum, frame):
        # Once: a second Ctrl-C while stopping must not interrupt the stop itself.
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, signal.SIG_IGN)
        raise Stop

    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, on_signal)
    die_with_parent()  # make going away (SIGTERM to make alone) stops us too
    # Sandbox processes orphaned by a worker that died are reparented to us (not to
    # the host's pid 1, which reaps slowly): we reap them.
    become_subreaper()
    code = 0
    background: Background | None = None
    data_dir = Path(env.get("ARENA_DATA_DIR", ROOT / "var"))
    try:
        say("[1/4] Redis")
        ensure_redis(env, children)
        say(
            "database: " + ("DATABASE_URL" if env.get("DATABASE_URL") else "SQLite file under var/")
        )
        prepare(env, children)
        # uvicorn, one process per core (arena_site/webserver.py); one on SQLite, whose
        # single writer several processes would only queue on
        processes = env.get("ARENA_WEB_PROCESSES") or ("" if env.get("DATABASE_URL") else "1")
        web = [PY, "-m", "arena_site.webserver", "--host", HOST, "--port", str(PORT)]
        children.append(
            start(
                "[3/4] web server", [*web, *(["--processes", processes] if processes else [])], env
            )
        )
        # The web server starts alone: on a small machine a dozen Django processes
        # starting at once would hold up the first page by as many seconds.
        say("[4/4] waiting for the web server to answer")
        wait_for_web(children)
        workers_start(env, children)
        base = f"http://{HOST}:{PORT}"
        print(
            "\n".join(
                [
                    "",
                    "Agent Arena is running:",
                    f"    leaderboard  {base}/",
                    f"    submit       {base}/submit/",
                    f"    judge        {base}/judge/",
                    f"    admin        {base}/admin/",
                    f"    API schema   {base}/api/schema/",
                    "  demo logins (user password):",
                    *logins(),
                    "Still preparing in the background (every page says what is left):",
                    *(
                        f"    {step.label}: {step.waits}"
                        for step, _ in background_steps(env)
                        if step.shown
                    ),
                    "Press Ctrl-C to stop.",
                    "",
                ]
            ),
            flush=True,
        )
        background = Background(env, data_dir)
        while True:
            background.poll()
            watch(children, background.children())
            time.sleep(0.5)
    except Stop:
        pass
    except subprocess.CalledProcessError as exc:
        say(f"preparing the arena failed (exit code {exc.returncode}); see the error above")
        code = 1
    finally:
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, signal.SIG_IGN)
        say("stopping")
        stop_all(children + (background.children() if background else []))
        status_clear(data_dir)
        say("stopped")
    sys.exit(code)


if __name__ == "__main__":
    main()
