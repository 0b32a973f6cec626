"""`make run` stops cleanly however it is stopped: Ctrl-C (SIGINT to the terminal's
process group), SIGTERM to make alone, SIGTERM to the whole process group, a stop during
the preparation, and its own launcher being killed outright. Every time: every child
(Daphne, the workers, the cron scheduler, a private Redis) is gone within seconds, and no
traceback is printed. The "running" banner comes only once the web server answers."""

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BANNER = "Agent Arena is running"
STOP_WITHIN_S = 20


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Arena:
    """`make run` in a session of its own, on a SQLite file in its own data dir, with no
    demo battles (they are not what is tested), on a Redis database of its own."""

    def __init__(self, tmp_path: Path, *, redis_url: str) -> None:
        self.data_dir = tmp_path / "data"
        self.data_dir.mkdir()
        self.port = free_port()
        self.log = tmp_path / "make-run.log"
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
        env.update(
            ARENA_DATA_DIR=str(self.data_dir),
            ARENA_PORT=str(self.port),
            REDIS_URL=redis_url,
            ARENA_SEED_BATTLES="false",
            ARENA_BATTLE_SLOTS="1",
            ARENA_CHANNEL_PREFIX="arena-run-test",
            ARENA_CACHE_PREFIX="arena-run-test",
        )
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


@pytest.fixture
def arena(tmp_path):
    made: list[Arena] = []

    def start(redis_url: str = "redis://127.0.0.1:6379/15") -> Arena:
        made.append(Arena(tmp_path, redis_url=redis_url))
        return made[-1]

    yield start
    for each in made:
        each.kill_everything()


def test_the_banner_comes_once_the_server_answers_and_ctrl_c_stops_everything(arena):
    # a Redis URL nobody answers: make run starts a private one, which must stop too
    run = arena(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    run.wait_for(BANNER)
    with urllib.request.urlopen(f"http://127.0.0.1:{run.port}/", timeout=5) as page:
        assert page.status == 200
    assert "starting a private one" in run.output()
    assert len(run.processes()) >= 6  # make, launcher, redis, web, 2 workers, cron

    os.killpg(run.make.pid, signal.SIGINT)  # what a terminal's Ctrl-C does

    run.assert_gone()


def test_sigterm_to_make_alone_stops_everything(arena):
    run = arena()
    run.wait_for(BANNER)
    run.make.send_signal(signal.SIGTERM)
    run.assert_gone()


def test_sigterm_to_the_process_group_stops_everything(arena):
    run = arena()
    run.wait_for(BANNER)
    os.killpg(run.make.pid, signal.SIGTERM)
    run.assert_gone()


def test_a_stop_during_the_preparation_leaves_nothing(arena):
    run = arena()
    run.wait_for("starting preparation")
    os.killpg(run.make.pid, signal.SIGINT)
    run.assert_gone()
    assert BANNER not in run.output()


def test_a_killed_launcher_takes_its_children_with_it(arena):
    run = arena()
    run.wait_for(BANNER)
    launcher = [
        pid
        for pid in run.processes()
        if b"run_arena.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert len(launcher) == 1
    os.kill(launcher[0], signal.SIGKILL)  # no handler runs: the children's death signal does
    deadline = time.monotonic() + STOP_WITHIN_S
    while run.processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run.processes() == []
