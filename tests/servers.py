"""Real server processes for the tests that need them: the web server and RQ workers
started as children of pytest against the pytest-django test database.

Preconditions: the calling test uses ``transactional_db`` (rows must be committed to be
seen by another process), and Redis answers at ``settings.REDIS_URL``. The children get
an explicit environment built from this process's settings: settings changed in-process
(the ``settings`` fixture, ``_private_dirs`` with its MD5 hasher) do not reach them."""

import http.client
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import django_rq
from django.conf import settings
from django.db import connection
from rq import Worker
from rq.suspension import resume, suspend

from agents.models import PUBLIC_ARENA_SLUG, Arena

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
# Django's start-up costs ~6 s on a 2-core machine; two children start at once.
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
ALL_QUEUES = ("battles", "judging", "ratings", "evals", "default", "exports")
# Tags the children's database sessions, to tell them from this process's own.
CHILD_APPLICATION_NAME = "arena-test-child"


def ensure_public_arena() -> Arena:
    """The public arena comes from a data migration; a transactional test's flush removes
    it, so every transactional test recreates it."""
    arena, _ = Arena.objects.get_or_create(
        slug=PUBLIC_ARENA_SLUG, defaults={"name": "Public arena"}
    )
    return arena


def database_url_for_children() -> str:
    """The pytest-django test database (``test_<name>``) as a URL for a child process."""
    db = connection.settings_dict
    user = quote(db.get("USER") or "postgres", safe="")
    password = db.get("PASSWORD") or ""
    auth = f"{user}:{quote(password, safe='')}" if password else user
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}?application_name={CHILD_APPLICATION_NAME}"


def child_env(*, sandbox_root: Path, private_media_root: Path) -> dict[str, str]:
    """The environment of every child: the same Redis, prefixes and data dir as this
    process, the test database, a 2 s reading floor, and private dirs of the test."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update(
        DJANGO_SETTINGS_MODULE="arena_site.settings",
        DATABASE_URL=database_url_for_children(),
        REDIS_URL=settings.REDIS_URL,
        ARENA_CHANNEL_PREFIX=settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"],
        ARENA_CACHE_PREFIX=settings.CACHES["default"]["KEY_PREFIX"],
        ARENA_DATA_DIR=str(settings.DATA_DIR),
        ARENA_SANDBOX_ROOT=str(sandbox_root),
        ARENA_PRIVATE_MEDIA_ROOT=str(private_media_root),
        ARENA_MIN_READ_S="2",
        # One admissible vote decides every battle: a 10 % draw of redundancy 3 would
        # make a one-vote test flaky.
        ARENA_REDUNDANCY_FRACTION="0",
        # As in this process (tests/conftest.py): votes final at once unless a test says.
        ARENA_VOTE_UNDO_WINDOW_S=str(settings.ARENA.vote_undo_window_s),
        ARENA_RQ_ASYNC="true",
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ServerProcess:
    """One child leading its own session; stdout and stderr go to ``log_path``."""

    name: str
    popen: subprocess.Popen
    log_path: Path

    @classmethod
    def start(cls, name: str, argv: list[str], env: dict[str, str], log_dir: Path):
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return cls(name=name, popen=popen, log_path=log_path)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return f"--- {self.name}: no log"
        body = "\n".join(text.splitlines()[-lines:])
        state = "running" if self.alive() else f"exited {self.popen.returncode}"
        return f"--- {self.name} ({state}), last {lines} lines of {self.log_path}:\n{body}"

    def wait(self, timeout: float) -> int:
        """Waits for the child to exit; on timeout stops its group and raises."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM to the whole process group, SIGKILL after ``STOP_TIMEOUT_S``."""
        if self.alive():
            with suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=STOP_TIMEOUT_S)
        # The leader may be gone while others of its group live on.
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()


def poll_until(condition, *, timeout: float, what: str, processes=(), interval: float = 0.2):
    """Polls ``condition()`` until truthy; fails early if a watched process died."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        dead = [p for p in processes if not p.alive()]
        if dead or time.monotonic() > deadline:
            reason = "a process exited" if dead else f"no answer after {timeout:g} s"
            logs = "\n".join(p.tail() for p in processes)
            raise AssertionError(f"waiting for {what}: {reason}\n{logs}")
        time.sleep(interval)


def http_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - 127.0.0.1 only
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP status means the server is up
    except OSError:
        return False


def child_sessions() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, state, left(query, 80) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            [CHILD_APPLICATION_NAME],
        )
        return cursor.fetchall()


def wait_for_child_sessions_to_end(timeout: float = STOP_TIMEOUT_S) -> None:
    """A backend outlives its client briefly; pytest-django cannot drop the test
    database at the end of the session while any is left."""
    deadline = time.monotonic() + timeout
    while sessions := child_sessions():
        if time.monotonic() > deadline:
            raise AssertionError(f"database sessions outlived the children: {sessions}")
        time.sleep(0.1)


def web_command(port: int) -> list[str]:
    """The web server as ``make run`` starts it (arena_site/webserver.py: uvicorn), one
    process, on loopback ``port``."""
    return [
        PYTHON, "-m", "arena_site.webserver", "--host", "127.0.0.1", "--port", str(port),
        "--processes", "1",
    ]  # fmt: skip


def worker_command(*queues: str, burst: bool = False, scheduler: bool = False) -> list[str]:
    argv = [PYTHON, "manage.py", "rqworker", *queues]
    if burst:
        argv.append("--burst")
    if scheduler:  # runs jobs enqueued for later (the coalesced full-board push)
        argv.append("--with-scheduler")
    return [*argv, "--worker-class", "rq.worker.SimpleWorker"]


def rq_connection():
    return django_rq.get_connection("battles")


@dataclass
class LiveArena:
    base_url: str
    web: ServerProcess
    worker: ServerProcess
    log_dir: Path
    private_media_root: Path
    processes: list[ServerProcess] = field(default_factory=list)

    def resume_workers(self) -> None:
        """Lets the (started suspended) worker take jobs; it notices within ~1 s."""
        resume(rq_connection())

    def logs(self) -> str:
        return "\n".join(p.tail() for p in self.processes)


@contextmanager
def live_arena(tmp_dir: Path, sandbox_root: Path) -> Iterator[LiveArena]:
    """The web server (uvicorn, as make run starts it) on a free port plus one
    SimpleWorker on every queue, against the test database; sandboxes go under
    ``sandbox_root``, which the slot uids must be able to traverse (the
    ``sandbox_root`` fixture). The worker starts suspended (RQ's suspend
    flag, checked before each dequeue), so a test can watch a battle sit in the queue;
    it calls ``resume_workers()`` when jobs may run. Stops both process groups on exit
    and waits for their database sessions to end."""
    private_media = tmp_dir / "private"
    log_dir = tmp_dir / "logs"
    connection_ = rq_connection()
    suspend(connection_)
    env = child_env(sandbox_root=sandbox_root, private_media_root=private_media)
    port = free_port()
    processes: list[ServerProcess] = []
    try:
        web = ServerProcess.start("web", web_command(port), env, log_dir)
        processes.append(web)
        worker = ServerProcess.start(
            "rqworker", worker_command(*ALL_QUEUES, scheduler=True), env, log_dir
        )
        processes.append(worker)
        base_url = f"http://127.0.0.1:{port}"
        poll_until(
            lambda: http_answers(base_url + "/accounts/login/"),
            timeout=START_TIMEOUT_S,
            what=f"the web server at {base_url}",
            processes=processes,
        )
        poll_until(
            lambda: any(w.get_state() == "suspended" for w in Worker.all(connection=connection_)),
            timeout=START_TIMEOUT_S,
            what="the RQ worker to register",
            processes=processes,
        )
        yield LiveArena(
            base_url=base_url,
            web=web,
            worker=worker,
            log_dir=log_dir,
            private_media_root=private_media,
            processes=processes,
        )
    finally:
        resume(connection_)
        for process in processes:
            process.stop()
        wait_for_child_sessions_to_end()


def vote_over_http(port: int, token: str, battle_id: int, *, timeout: float = 30.0,
                   before_send=None) -> dict:  # fmt: skip
    """One ``POST /api/battles/<id>/votes/`` (choice A) on a connection of its own to the
    web server on ``port``, as a judge's script would send it; ``before_send`` runs once
    connected (a barrier, so many land at once). The answer: its battle, status,
    Retry-After, Content-Type and body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        if before_send is not None:
            before_send()
        conn.request(
            "POST",
            f"/api/battles/{battle_id}/votes/",
            json.dumps({"choice": "A"}),
            {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        return {
            "battle": battle_id,
            "status": response.status,
            "retry_after": response.getheader("Retry-After"),
            "content_type": response.getheader("Content-Type"),
            "body": response.read(),
        }
    finally:
        conn.close()
