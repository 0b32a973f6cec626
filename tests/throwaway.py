"""Throwaway Redis and PostgreSQL servers for the fault tests: each test starts its own
on a free loopback port under a temporary directory, stops and restarts it at will (same
port, same data), and removes it afterwards. Nothing here touches the shared servers the
rest of the suite uses.

PostgreSQL refuses to run as root, so when the tests run as root the cluster is owned by
and run as the ``postgres`` user; its directory lives under /var/tmp (pytest's own tmp
dirs are 0700 and root's)."""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(port: int) -> bool:
    with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def _wait(condition, what: str, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} within {timeout:.0f} s")


@dataclass
class RedisServer:
    """A ``redis-server`` without persistence on ``port``."""

    directory: Path
    port: int = field(default_factory=_free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [
            "redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
            "--save", "", "--appendonly", "no", "--dir", str(self.directory),
        ]  # fmt: skip
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        _wait(lambda: _answers(self.port), f"redis-server did not answer on {self.port}")

    def stop(self) -> None:
        """Kills the server (SIGKILL: an outage, not a graceful shutdown) and waits."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()


@contextmanager
def throwaway_redis() -> Iterator[RedisServer]:
    directory = Path(tempfile.mkdtemp(prefix="arena-throwaway-redis-", dir="/var/tmp"))
    server = RedisServer(directory)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _pg_bin(name: str) -> str:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    if not versions:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql")
    return str(versions[-1] / name)


def _as_postgres() -> dict:
    """Popen arguments that run a child as ``postgres`` when this process is root."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


@dataclass
class PostgresServer:
    """A PostgreSQL cluster of its own (trust auth on loopback) on ``port``."""

    directory: Path
    port: int = field(default_factory=_free_port)
    process: subprocess.Popen | None = None

    @property
    def data(self) -> Path:
        return self.directory / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def init(self) -> None:
        subprocess.run(
            [
                _pg_bin("initdb"), "-D", str(self.data), "-U", "postgres",
                "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C",
            ],
            check=True, capture_output=True, timeout=120, cwd=self.directory, **_as_postgres(),
        )  # fmt: skip

    def start(self) -> None:
        argv = [
            _pg_bin("postgres"), "-D", str(self.data), "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.directory}",
            # fsync off is safe for a killed server (the OS keeps the data); an
            # asynchronous commit is not: an immediate shutdown would lose the last ones.
            "-c", "fsync=off", "-c", "full_page_writes=off",
            "-c", "max_connections=100", "-c", "shared_buffers=32MB",
        ]  # fmt: skip
        log = (self.directory / "postgres.log").open("ab")
        self.process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.directory, **_as_postgres()
        )
        log.close()

        def ready() -> bool:
            done = subprocess.run(
                [_pg_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
                check=False,
            )
            return done.returncode == 0

        _wait(ready, f"PostgreSQL did not accept connections on {self.port}")

    def stop(self, *, immediate: bool = True) -> None:
        """Stops the server: SIGQUIT (immediate shutdown, connections cut: an outage) by
        default, SIGINT (fast shutdown) otherwise, and waits for it to exit."""
        if self.process is None or self.process.poll() is not None:
            self.process = None
            return
        self.process.send_signal(3 if immediate else 2)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()

    def log(self) -> str:
        path = self.directory / "postgres.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def throwaway_postgres() -> Iterator[PostgresServer]:
    directory = Path(tempfile.mkdtemp(prefix="arena-throwaway-pg-", dir="/var/tmp"))
    directory.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
        (directory / "postgres.log").touch()
        shutil.chown(directory / "postgres.log", "postgres", "postgres")
    server = PostgresServer(directory)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop(immediate=False)
        shutil.rmtree(directory, ignore_errors=True)
