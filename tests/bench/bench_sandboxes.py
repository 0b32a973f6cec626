"""Benchmark: desktop sandboxes on this host. Prints one JSON document.

Measures provision-to-first-screenshot (ready), click + screenshot, destroy, the
same with two desktops at once, and leaked processes (of the agents' and the displays'
uids); and, as a reference run in the same process, the screenshot path a
straightforward implementation takes (Pillow's default PNG level 6 on the same
framebuffer). Targets (issue #3): ready p50 ≤ 1.5 s, action + screenshot p50 ≤ 50 ms,
destroy ≤ 200 ms, zero leaks; issue #12: the hardening makes none of them more than
10 % slower (docs/sandboxes.md has the figures before and after).

Issue #13 (the warm pool and the step path, docs/performance.md): a desktop claimed
from a warm pool (``sandboxes.pool``, two idle desktops) ready ≤ 0.15 s p50 against a
cold start in the same rounds (claim: the run's egress identity and start page, then
the first screenshot); action + screenshot ≤ 20 ms p50 with input as XTEST events
from the agent's supervisor, against the same click through an xdotool process
(``"via": "xdotool"``) alternating on the same desktop. ``claim_alone_ms`` is the
claim's part of ready (the run's identity and start page, loaded and painted); the
rest is the first screenshot. Every section records the load average at its start
and end.

Run: .venv/bin/python tests/bench/bench_sandboxes.py [--rounds N] [--pool-rounds N]
(slots 40-46 of ARENA_SANDBOX_UID_BASE, default 61000)
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
from sandboxes.pool import DesktopPool, FixedSlots
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
        "p99": ms(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]),
        "max": ms(ordered[-1]),
        "n": len(ordered),
    }


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def leaked(slots: list[int]) -> int:
    uids = ",".join(f"{UID_BASE + s},{UID_BASE + DISPLAY_UID_OFFSET + s}" for s in slots)
    listing = subprocess.run(["ps", "-U", uids, "-o", "stat="], capture_output=True, text=True)
    # A killed process may wait a moment as a zombie for the host's init: it runs nothing.
    return sum(1 for stat in listing.stdout.split() if not stat.startswith("Z"))


def click_xdotool(box, x: int, y: int) -> None:
    """The click ``LocalSandbox.click`` sends, run by an xdotool process (the path
    before XTEST): the same-run reference."""
    argv = ["mousemove", str(x), str(y), "click", "--repeat", "1", "--delay", "0", "1"]
    request = {"op": "input", "argv": argv, "via": "xdotool"}
    reply = box._call("click", request, client=box.display_client)
    assert reply.get("via") == "xdotool", reply


def steps_both_ways(box, steps: int, out: dict) -> None:
    """``steps`` XTEST click + screenshot steps and as many through xdotool, in pairs."""
    for key in ("steps", "steps_xdotool", "action", "action_xdotool"):
        out.setdefault(key, [])

    def xtest(i: int) -> None:
        t = time.monotonic()
        assert box.click(200 + i % 50, 300).ok
        out["action"].append(time.monotonic() - t)
        assert box.screenshot().ok
        out["steps"].append(time.monotonic() - t)

    def xdotool(i: int) -> None:
        t = time.monotonic()
        click_xdotool(box, 260 + i % 50, 300)
        out["action_xdotool"].append(time.monotonic() - t)
        assert box.screenshot().ok
        out["steps_xdotool"].append(time.monotonic() - t)

    for i in range(steps):  # each path first in every other pair: neither inherits more
        for step in (xtest, xdotool) if i % 2 == 0 else (xdotool, xtest):
            step(i)


def one_desktop(backend: LocalBackend, slot: int, steps: int, out: dict) -> None:
    t0 = time.monotonic()
    box = backend.provision(SandboxSpec(run_id=slot, start_url=PAGE), slot=slot)
    first = box.screenshot()
    out["ready"] = time.monotonic() - t0
    assert first.ok, first.error
    out["reference_shot"] = []
    out["shot"] = []
    fb = str(box.paths.framebuffer)
    steps_both_ways(box, steps, out)
    for _ in range(steps):
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
    out["leaked"] = leaked([slot])


def pool_rounds(backend: LocalBackend, rounds: int, steps: int) -> dict:
    """Each round: a cold desktop (provision + first screenshot, destroyed), then one
    claimed from a full pool of two (claim + first screenshot); once the pool is full
    again, XTEST and xdotool steps on the claimed one; then it is destroyed."""
    pool_slots, cold_slot = [43, 44, 45], 46
    pool = DesktopPool(backend, SandboxSpec(run_id=0), 2, FixedSlots(pool_slots)).start()
    cold: list[float] = []
    warm: list[float] = []
    claim_only: list[float] = []  # of ``warm``: the claim, before the first screenshot
    warm_destroy: list[float] = []
    steps_out: dict = {}
    started = load()
    try:
        for r in range(rounds):
            assert pool.wait_full(180), "the pool did not fill"
            t = time.monotonic()
            box = backend.provision(SandboxSpec(run_id=500 + r, start_url=PAGE), slot=cold_slot)
            assert box.screenshot().ok
            cold.append(time.monotonic() - t)
            box.destroy()
            assert pool.wait_full(180), "the pool did not fill"
            t = time.monotonic()
            claimed = pool.claim(SandboxSpec(run_id=600 + r, start_url=PAGE))
            assert claimed is not None
            claim_only.append(time.monotonic() - t)
            first = claimed.sandbox.screenshot()
            warm.append(time.monotonic() - t)
            assert first.ok and claimed.sandbox.page_state()["title"] == "bench"
            pool.wait_full(180)  # the steps run with the pool idle, as in a run
            steps_both_ways(claimed.sandbox, steps, steps_out)
            t = time.monotonic()
            claimed.finish()
            warm_destroy.append(time.monotonic() - t)
            print(f"pool round {r + 1}/{rounds} done", file=sys.stderr)
    finally:
        pool.close()
    return {
        "pool_size": 2,
        "load_avg_start": started,
        "load_avg_end": load(),
        "ready_from_pool_ms": summary(warm),
        "claim_alone_ms": summary(claim_only),
        "ready_cold_same_rounds_ms": summary(cold),
        "action_screenshot_xtest_ms": summary(steps_out["steps"]),
        "action_screenshot_xdotool_same_run_ms": summary(steps_out["steps_xdotool"]),
        "action_alone_xtest_ms": summary(steps_out["action"]),
        "action_alone_xdotool_same_run_ms": summary(steps_out["action_xdotool"]),
        "destroy_after_run_ms": summary(warm_destroy),
        "pool_stats": dict(pool.stats),
        "leaked_processes": leaked([*pool_slots, cold_slot]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--pool-rounds", type=int, default=10)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arena-bench-", dir="/var/tmp"))
    root.chmod(0o711)
    backend = LocalBackend(root, UID_BASE)
    single: list[dict] = []
    pair: list[dict] = []
    loads = {"start": load()}
    try:
        pool_report = pool_rounds(backend, args.pool_rounds, args.steps)
        loads["after_pool"] = load()
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
    loads["end"] = load()

    def collect(runs: list[dict], key: str) -> list[float]:
        values: list[float] = []
        for run in runs:
            value = run[key]
            values.extend(value if isinstance(value, list) else [value])
        return values

    report = {
        "host": {"cpus": os.cpu_count(), "root_worker": os.geteuid() == 0},
        "load_avg": loads,
        "warm_pool": pool_report,
        "one_desktop": {
            "ready_ms": summary(collect(single, "ready")),
            "action_screenshot_ms": summary(collect(single, "steps")),
            "action_screenshot_xdotool_same_run_ms": summary(collect(single, "steps_xdotool")),
            "screenshot_ms": summary(collect(single, "shot")),
            "reference_screenshot_png6_ms": summary(collect(single, "reference_shot")),
            "destroy_ms": summary(collect(single, "destroy")),
            "leaked_processes": sum(run["leaked"] for run in single),
        },
        "two_desktops_at_once": {
            "ready_ms": summary(collect(pair, "ready")),
            "action_screenshot_ms": summary(collect(pair, "steps")),
            "action_screenshot_xdotool_same_run_ms": summary(collect(pair, "steps_xdotool")),
            "destroy_ms": summary(collect(pair, "destroy")),
            "leaked_processes": sum(run["leaked"] for run in pair),
        },
        "targets": {
            "ready_p50_ms": 1500,
            "action_screenshot_p50_ms": 50,
            "destroy_ms": 200,
            "ready_from_pool_p50_ms": 150,
            "action_screenshot_xtest_p50_ms": 20,
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
