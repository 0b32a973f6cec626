"""Benchmark: how long a newcomer waits for the first page of `make run` on a clean
clone. Prints one JSON document.

The checkout's committed HEAD is cloned into a fresh directory (no .venv, no var/), and
`make run` is started there as a person would, on its embedded defaults (SQLite, a data
dir of its own), once with the package caches this machine already has ("warm") and once
with empty ones ("cold": uv and pip download every package again from the registry).
The clock starts with `make`; the first page is the leaderboard answering 200. Each line
the launcher prints about a step is timed too, and the board is checked for ranked
numbers. The arena is stopped once its first page answered and ``--linger`` seconds
passed (its background steps, e.g. the coding toolchain, are cut short: they come after
the first page by design, docs/operations.md "The first start").

Issue 37's target: the first page within 120 s.

Run: .venv/bin/python tests/bench/bench_first_page.py [--caches warm,cold] [--linger 5]
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET_S = 120
TIMEOUT_S = 900
STEP_LINE = re.compile(r"^(setup|arena|toolchain): ")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - http://127.0.0.1
            return response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return None


def one_start(cache: str, redis_url: str, linger_s: float) -> dict:
    work = Path(tempfile.mkdtemp(prefix="arena-first-page-"))
    try:
        clone = work / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        port = free_port()
        env = {
            k: v
            for k, v in os.environ.items()
            # (and a person's shell writes bytecode: no PYTHONDONTWRITEBYTECODE)
            if k
            not in (
                "DATABASE_URL",
                "ARENA_DATA_DIR",
                "VIRTUAL_ENV",
                "ARENA_SECRET_KEY",
                "PYTHONDONTWRITEBYTECODE",
            )
        }
        env.update(
            ARENA_PORT=str(port),
            REDIS_URL=redis_url,
            ARENA_CACHE_PREFIX=f"arena-first-page-{port}",
            ARENA_CHANNEL_PREFIX=f"arena-first-page-{port}",
            ARENA_BATTLE_SLOTS="1",
        )
        if cache == "cold":
            env.update(UV_CACHE_DIR=str(work / "uv-cache"), PIP_NO_CACHE_DIR="1")
        started = time.monotonic()
        make = subprocess.Popen(
            ["make", "--no-print-directory", "run"],
            cwd=clone,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines: list[tuple[float, str]] = []

        def read() -> None:
            for line in make.stdout:
                lines.append((round(time.monotonic() - started, 2), line.rstrip()))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        base = f"http://127.0.0.1:{port}"
        first_page_s = None
        page = None
        while time.monotonic() - started < TIMEOUT_S and make.poll() is None:
            page = answers(f"{base}/")
            if page is not None:
                first_page_s = round(time.monotonic() - started, 2)
                break
            time.sleep(0.2)
        time.sleep(linger_s)
        board = answers(f"{base}/") or page or ""
        os.killpg(make.pid, signal.SIGINT)
        try:
            make.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
        reader.join(timeout=5)
        banner = next((t for t, line in lines if "Agent Arena is running" in line), None)
        return {
            "cache": cache,
            "first_page_s": first_page_s,
            "banner_s": banner,
            "within_target": first_page_s is not None and first_page_s <= TARGET_S,
            # the board answered with ranked ratings (the demo board's rows)
            "board_ranked": re.search(r'<td class="rank">\d', board) is not None,
            "board_says_demo": "Demo data" in board,
            "steps": [{"at_s": t, "line": line} for t, line in lines if STEP_LINE.match(line)][:60],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caches", default="warm,cold", help="warm, cold or both (warm,cold)")
    parser.add_argument("--linger", type=float, default=5.0, help="seconds after the first page")
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")
    )
    args = parser.parse_args()
    runs = []
    for cache in args.caches.split(","):
        runs.append(one_start(cache, args.redis_url, args.linger))
        print(f"{cache}: first page in {runs[-1]['first_page_s']} s", file=sys.stderr)
    load = os.getloadavg()
    json.dump(
        {
            "benchmark": "first_page",
            "target_s": TARGET_S,
            "cpus": os.cpu_count(),
            "load_average_1m_at_end": round(load[0], 2),
            "runs": runs,
        },
        sys.stdout,
        indent=2,
    )
    print()


if __name__ == "__main__":
    main()
