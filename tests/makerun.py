"""`make run` as a person starts it, in a session of its own: the launcher the stop-path
tests and the newcomer's walk drive."""

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BANNER = "Agent Arena is running"
STOP_WITHIN_S = 20


def run_arena_module():
    """scripts/run_arena.py (what `make run` runs) loaded as a module: its helpers and
    the worker list it starts."""
    spec = importlib.util.spec_from_file_location("run_arena", ROOT / "scripts" / "run_arena.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_run_queue_workers() -> dict[str, list[str]]:
    """The queue workers `make run` starts (scripts/run_arena.py queue_workers): their
    argv after ``manage.py``, by name."""
    return {
        name: argv[argv.index("manage.py") + 1 :]
        for name, argv in run_arena_module().queue_workers()
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MakeRun:
    """`make run` in a session of its own, on a SQLite file in its own data dir (its
    embedded default), on a Redis database of its own. ``seed_battles`` false seeds people
    and roster only; ``extra`` adds environment variables."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        redis_url: str,
        seed_battles: bool = False,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = tmp_path / "data"
        self.data_dir.mkdir()
        self.port = free_port()
        self.log = tmp_path / "make-run.log"
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
        env.update(
            ARENA_DATA_DIR=str(self.data_dir),
            ARENA_PORT=str(self.port),
            REDIS_URL=redis_url,
            ARENA_SEED_BATTLES="true" if seed_battles else "false",
            ARENA_BATTLE_SLOTS="1",
            ARENA_CHANNEL_PREFIX="arena-run-test",
            ARENA_CACHE_PREFIX="arena-run-test",
        )
        env.update(extra or {})
        self.make = subprocess.Popen(
            ["make", "--no-print-directory", "run"],
            cwd=ROOT,
            env=env,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.output():
            assert self.make.poll() is None, self.output()
            assert time.monotonic() < deadline, f"no {text!r} after {timeout_s} s:\n{self.output()}"
            time.sleep(0.2)

    def processes(self) -> list[int]:
        """Every process started for this arena (they all carry its data dir)."""
        marker = f"ARENA_DATA_DIR={self.data_dir}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker in environ and state != "Z":
                found.append(int(entry.name))
        return found

    def assert_gone(self) -> None:
        deadline = time.monotonic() + STOP_WITHIN_S
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = self.processes()
        assert left == [], (left, self.output())
        output = self.output()
        assert "Traceback" not in output, output
        assert "arena: stopped" in output, output

    def kill_everything(self) -> None:
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
