"""`make run` stops cleanly however it is stopped: Ctrl-C (SIGINT to the terminal's
process group), SIGTERM to make alone, SIGTERM to the whole process group, a stop during
the preparation, and its own launcher being killed outright. Every time: every child
(Daphne, the workers, the cron scheduler, a private Redis) is gone within seconds, and no
traceback is printed. The "running" banner comes only once the web server answers."""

import json
import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from tests.makerun import BANNER, STOP_WITHIN_S, MakeRun, free_port, run_arena_module


@pytest.fixture
def arena(tmp_path):
    made: list[MakeRun] = []

    def start(redis_url: str | None = None) -> MakeRun:
        # (the test's own Redis database by default: emptied before and after each test)
        made.append(MakeRun(tmp_path, redis_url=redis_url or settings.REDIS_URL))
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
    assert len(run.processes()) >= 7  # make, launcher, redis, web, 3 workers, cron
    # the queue workers as they run: the default queue (the janitors) in one of its own,
    # the exports queue (the redaction ahead) in another
    served = [_rqworker_queues(pid) for pid in run.processes()]
    served = [queues for queues in served if queues]
    assert ["default"] in served and ["judging", "ratings"] in served, served
    assert ["exports"] in served, served
    for alone in ("default", "exports"):
        assert all(alone not in queues for queues in served if queues != [alone]), served
    # the steps before the first page said where they were, in order
    output = run.output()
    marks = ["[1/4] Redis", "[2/4] database migrated", "[3/4] web server", "[4/4] waiting"]
    assert all(mark in output for mark in marks), output
    assert sorted(marks, key=output.index) == marks, output
    # what only some pages need comes after the first page, in the background: here the
    # packages and the toolchain are in place already, so both steps end soon, done
    run.wait_for("background: the coding agents' toolchain: done", timeout_s=120)
    assert output.index(BANNER) < run.output().index("background: the sandboxes' system")
    status = json.loads((run.data_dir / "preparing.json").read_text())
    assert [(s["key"], s["state"]) for s in status["steps"]] == [
        ("bytecode", "done"),
        ("packages", "done"),
        ("toolchain", "done"),
    ]

    os.killpg(run.make.pid, signal.SIGINT)  # what a terminal's Ctrl-C does

    run.assert_gone()
    assert not (run.data_dir / "preparing.json").exists()  # no banner left behind


def _rqworker_queues(pid: int) -> list[str]:
    """The queues a running `manage.py rqworker` serves, in its order ([] for another
    process)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []
    if "rqworker" not in argv:
        return []
    queues = []
    for word in argv[argv.index("rqworker") + 1 :]:
        if not word.isalpha():
            break
        queues.append(word)
    return queues


def test_the_janitors_have_a_worker_of_their_own_and_judging_keeps_the_scheduler():
    """RQ takes a worker's queues in strict order: behind judging and ratings, the
    default queue's janitors waited up to 390 s under a vote flood. `make run` starts a
    worker for `default` alone; RQ's scheduler runs on the worker of the ratings queue,
    whose delayed board pushes it moves (a worker's scheduler handles its own queues)."""
    workers = dict(run_arena_module().queue_workers())
    assert set(workers) == {"judging/ratings worker", "janitors worker", "exports worker"}
    queues = {}
    for name, argv in workers.items():
        assert argv[1:3] == ["manage.py", "rqworker"], argv
        words = argv[3:]
        queues[name] = words[: next(i for i, w in enumerate(words) if w.startswith("-"))]
        assert words[words.index("--worker-class") + 1] == "arena_site.worker.ArenaSimpleWorker"
    assert queues == {"judging/ratings worker": ["judging", "ratings"],
                      "janitors worker": ["default"], "exports worker": ["exports"]}  # fmt: skip
    assert "--with-scheduler" in workers["judging/ratings worker"]
    assert "--with-scheduler" not in workers["janitors worker"]
    # the instructions' redaction ahead (up to ~80 s a run) never holds the janitors:
    # battles_janitor (every 5 s) was 7.8 s late behind an 8.5 s run on their worker
    assert "--with-scheduler" not in workers["exports worker"]


# The two SIGTERM stops take the path Ctrl-C and the killed launcher test below (the
# launcher's own signal handling); they run in `make soak`.
@pytest.mark.soak
def test_sigterm_to_make_alone_stops_everything(arena):
    run = arena()
    run.wait_for(BANNER)
    run.make.send_signal(signal.SIGTERM)
    run.assert_gone()


@pytest.mark.soak
def test_sigterm_to_the_process_group_stops_everything(arena):
    run = arena()
    run.wait_for(BANNER)
    os.killpg(run.make.pid, signal.SIGTERM)
    run.assert_gone()


def test_a_stop_during_the_preparation_leaves_nothing(arena):
    run = arena()
    run.wait_for("starting [2/4] preparation")
    os.killpg(run.make.pid, signal.SIGINT)
    run.assert_gone()
    assert BANNER not in run.output()


def cmdline(pid: int) -> bytes:
    """A process's command line; empty once it has exited (a short-lived child, such as
    a Background step's, can end between the listing and the read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""


def test_a_killed_launcher_takes_its_children_with_it(arena):
    run = arena()
    run.wait_for(BANNER)
    launcher = [pid for pid in run.processes() if b"run_arena.py" in cmdline(pid)]
    assert len(launcher) == 1
    os.kill(launcher[0], signal.SIGKILL)  # no handler runs: the children's death signal does
    deadline = time.monotonic() + STOP_WITHIN_S
    while run.processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run.processes() == []


def test_a_drained_battle_worker_leaves_the_arena_running_and_any_other_exit_stops_it():
    """A battle worker of a drained host exits 0 once idle (docs/deployment.md,
    "Operating hosts"): `make run` goes on without it; any other child's exit stops it."""
    import subprocess

    run_arena = run_arena_module()
    drained = subprocess.Popen(["true", "rqworker", "battles"])
    web = subprocess.Popen(["sleep", "30"])
    drained.wait()
    children = [drained, web]
    run_arena.watch(children)
    assert children == [web]
    other = subprocess.Popen(["true", "rqworker", "judging"])
    other.wait()
    with pytest.raises(run_arena.Stop):
        run_arena.watch([web, other])
    failed = subprocess.Popen(["false", "rqworker", "battles"])
    failed.wait()
    with pytest.raises(run_arena.Stop):
        run_arena.watch([web, failed])
    web.kill()
    web.wait()
