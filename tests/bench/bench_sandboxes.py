"""Benchmark: desktop sandboxes on this host. Prints one JSON document.

Measures provision-to-first-screenshot (ready), click + screenshot, destroy, the
same with two desktops at once, and leaked processes (of the agents' and the displays'
uids); and, as a reference run in the same process, the screenshot path a
straightforward implementation takes (Pillow's default PNG level 6 on the same
framebuffer). Targets (issue #3): ready p50 ≤ 1.5 s, action + screenshot p50 ≤ 50 ms,
destroy ≤ 200 ms, zero leaks; issue #12: the hardening makes none of them more than
10 % slower (docs/sandboxes.md has the figures before and after).

Run: .venv/bin/python tests/bench/bench_sandboxes.py [--rounds N]
(slots 40-42 of ARENA_SANDBOX_UID_BASE, default 61000)
"""

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sandboxes.base import SandboxSpec
from sandboxes.local_backend import LocalBackend
from sandboxes.rundir import DISPLAY_UID_OFFSET
from sandboxes.screens import frame_image, read_frame

UID_BASE = int(os.environ.get("ARENA_SANDBOX_UID_BASE") or 61000)
PAGE = "data:text/html,<title>bench</title><h1>Benchmark</h1><input autofocus>"


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50": ms(statistics.median(ordered)),
        "p95": ms(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]),
        "max": ms(ordered[-1]),
        "n": len(ordered),
    }


def one_desktop(backend: LocalBackend, slot: int, steps: int, out: dict) -> None:
    t0 = time.monotonic()
    box = backend.provision(SandboxSpec(run_id=slot, start_url=PAGE), slot=slot)
    first = box.screenshot()
    out["ready"] = time.monotonic() - t0
    assert first.ok, first.error
    out["steps"] = []
    out["reference_shot"] = []
    out["shot"] = []
    fb = str(box.paths.framebuffer)
    for i in range(steps):
        t = time.monotonic()
        box.click(200 + i % 50, 300)
        shot = box.screenshot()
        out["steps"].append(time.monotonic() - t)
        assert shot.ok
        t = time.monotonic()
        box.screenshot()
        out["shot"].append(time.monotonic() - t)
        t = time.monotonic()
        buffer = io.BytesIO()
        frame = read_frame(fb, box.spec.width, box.spec.height)
        frame_image(frame).save(buffer, format="PNG")  # Pillow's default
        out["reference_shot"].append(time.monotonic() - t)
    t = time.monotonic()
    box.destroy()
    out["destroy"] = time.monotonic() - t
    uids = f"{UID_BASE + slot},{UID_BASE + DISPLAY_UID_OFFSET + slot}"
    listing = subprocess.run(["ps", "-U", uids, "-o", "stat="], capture_output=True, text=True)
    # A killed process may wait a moment as a zombie for the host's init: it runs nothing.
    out["leaked"] = sum(1 for stat in listing.stdout.split() if not stat.startswith("Z"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arena-bench-", dir="/var/tmp"))
    root.chmod(0o711)
    backend = LocalBackend(root, UID_BASE)
    single: list[dict] = []
    pair: list[dict] = []
    try:
        for r in range(args.rounds):
            out: dict = {}
            one_desktop(backend, 40, args.steps, out)
            single.append(out)
            outs = [{}, {}]
            threads = [
                threading.Thread(target=one_desktop, args=(backend, 41 + k, args.steps, outs[k]))
                for k in range(2)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            pair.extend(outs)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def collect(runs: list[dict], key: str) -> list[float]:
        values: list[float] = []
        for run in runs:
            value = run[key]
            values.extend(value if isinstance(value, list) else [value])
        return values

    report = {
        "host": {"cpus": os.cpu_count(), "root_worker": os.geteuid() == 0},
        "one_desktop": {
            "ready_ms": summary(collect(single, "ready")),
            "action_screenshot_ms": summary(collect(single, "steps")),
            "screenshot_ms": summary(collect(single, "shot")),
            "reference_screenshot_png6_ms": summary(collect(single, "reference_shot")),
            "destroy_ms": summary(collect(single, "destroy")),
            "leaked_processes": sum(run["leaked"] for run in single),
        },
        "two_desktops_at_once": {
            "ready_ms": summary(collect(pair, "ready")),
            "action_screenshot_ms": summary(collect(pair, "steps")),
            "destroy_ms": summary(collect(pair, "destroy")),
            "leaked_processes": sum(run["leaked"] for run in pair),
        },
        "targets": {"ready_p50_ms": 1500, "action_screenshot_p50_ms": 50, "destroy_ms": 200},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
