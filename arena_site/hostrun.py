"""One worker host in one container: ``python -m arena_site.hostrun`` (the app image's
``arena battle-host``, deploy/compose.yaml) runs ``ARENA_BATTLE_SLOTS`` battle workers
and the evaluations worker as its children, as `make run` does on a machine.

They must share one process namespace: a host's janitor takes a lease for dead when its
worker's pid is gone (``sandboxes.services.pid_alive``), so the workers of one host id in
separate containers would see each other's pids as gone and reap each other's sandboxes.
Hence one container per host id, this process its supervisor:

- it is a subreaper and reaps what the sandboxes' process trees leave;
- SIGTERM or SIGINT (``docker stop``) passes SIGTERM to every child, which finishes or
  hands back its battle, and SIGKILLs what is left after ``ARENA_STOP_GRACE_S`` (60 s;
  compose's ``stop_grace_period`` must be longer);
- a battle worker that exits 0 stopped because the host was drained (the admin's
  "drain"): the rest go on, and once every battle worker has stopped so does the host,
  with 0; any other exit stops every child and exits with that child's code, for the
  container's restart policy to start the host again.

No Django here: the children load it."""

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sandboxes.reaping import become_subreaper, reap_orphans

APP = Path(__file__).resolve().parent.parent
PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def say(message: str) -> None:
    print(f"hostrun: {message}", file=sys.stderr, flush=True)


def die_with_parent() -> None:
    """In a child between fork and exec (or in this process): SIGTERM when the parent
    goes away. `make run`'s launcher uses it too."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def commands(environ: dict[str, str]) -> list[list[str]]:
    """The host's processes: one battle worker per slot, then the evaluations worker
    (unless ``ARENA_EVALS_WORKER`` is false)."""
    slots = int(environ.get("ARENA_BATTLE_SLOTS") or "2")
    if slots < 1:
        raise SystemExit("hostrun: ARENA_BATTLE_SLOTS must be at least 1")
    pooled = int(environ.get("ARENA_SANDBOX_POOL_SIZE") or "0") > 0
    worker_class = "battles.worker." + ("PooledBattleWorker" if pooled else "BattleWorker")
    manage = [sys.executable, str(APP / "manage.py"), "rqworker"]
    argv = [[*manage, "battles", "--worker-class", worker_class] for _ in range(slots)]
    if environ.get("ARENA_EVALS_WORKER", "true").strip().lower() not in ("0", "false", "no"):
        argv.append([*manage, "evals"])
    return argv


class Stop(Exception):
    """A stop signal arrived."""


def children_stop(children: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM to each running child's process group, then SIGKILL to those still there
    after ``grace_s`` (each child leads its own group: its children go with it)."""
    for child in children:
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"pid {child.pid} did not stop within {grace_s:.0f} s; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def run(argv: list[list[str]], grace_s: float) -> int:
    def on_signal(signum, frame):
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, signal.SIG_IGN)
        raise Stop

    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, on_signal)
    become_subreaper()
    children: list[subprocess.Popen] = []
    code = 0
    try:
        for command in argv:
            say("starting " + " ".join(command[2:]))
            children.append(
                subprocess.Popen(
                    command, cwd=APP, start_new_session=True, preexec_fn=die_with_parent
                )
            )
        while True:
            reap_orphans(keep={child.pid for child in children})
            for child in [c for c in children if c.poll() is not None]:
                if child.returncode == 0 and "battles" in child.args:
                    say(f"battle worker {child.pid} stopped (this host is drained)")
                    children.remove(child)
                    continue
                say(f"{' '.join(child.args[2:4])} exited with code {child.returncode}; stopping")
                return child.returncode or 1
            if not any("battles" in child.args for child in children):
                say("every battle worker stopped (this host is drained); stopping")
                return 0
            time.sleep(0.5)
    except Stop:
        say("stopping")
    finally:
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, signal.SIG_IGN)
        children_stop(children, grace_s)
    return code


def main() -> None:
    grace_s = float(os.environ.get("ARENA_STOP_GRACE_S") or "60")
    sys.exit(run(commands(dict(os.environ)), grace_s))


if __name__ == "__main__":
    main()
