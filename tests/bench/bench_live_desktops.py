"""Benchmark: a lane's step time with and without live viewers (issue 39). Prints one
JSON document.

Two real bubblewrap desktops (the local backend, egress off) each run the same scripted
lane steps at once, as a battle's two lanes do: a step is a tool call (click, type, key
or scroll, in turn), the screenshot after it and the page state, as
``battles.services.lanes`` takes them; the agent's turn between steps (``--think-s``,
not timed) lets the grabbers run between steps as well as during them. Each desktop
runs inside ``live_desktop_stream`` as a lane's does: its thread asks once a second
whether anyone watches and runs the grabber's process while someone does. Rounds take
turns between two conditions:

- ``none``: nobody watches; the grabbers' processes have ended (one ZCOUNT a second);
- ``viewers``: two viewers per lane (two sockets' marks in the viewers' set), and two
  real receivers per lane on the channel layer (Redis), in a process of their own as
  the web's sockets are; the lanes' grabber processes grab, encode and publish at
  ``LIVE_FPS`` and Redis carries every frame to both receivers.

The figure is the median step time per condition (each lane's steps, both lanes), and
their ratio (goal ≤ 1.10). The frames the receivers got per lane and second, and the
grab's own cost, are reported beside it.

Run (as root, Redis up; ``make bench`` sets the environment): REDIS_URL=redis://...
.venv/bin/python tests/bench/bench_live_desktops.py [--rounds 10] [--steps 15]
[--think-s 0.2] (slots 90-91 of ARENA_SANDBOX_UID_BASE, default 61000; ~3.5 min)."""

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_SECRET_KEY", "bench-only-not-a-secret-" + "x" * 40)

import django

django.setup()

from channels.layers import get_channel_layer  # noqa: E402

from battles.services.live_frames import (  # noqa: E402
    live_desktop_stream,
    live_group,
    live_viewer_forget,
    live_viewer_mark,
)
from sandboxes.base import SandboxSpec  # noqa: E402
from sandboxes.live_frames import LIVE_FPS, desktop_capture  # noqa: E402
from sandboxes.local_backend import LocalBackend  # noqa: E402

UID_BASE = int(os.environ.get("ARENA_SANDBOX_UID_BASE") or 61000)
PAGE = "data:text/html," + urllib.parse.quote(
    "<title>bench</title><body style='margin:0;font:20px sans-serif'>"
    "<h1>Live desktops</h1><textarea autofocus rows=12 cols=80></textarea>"
    + "<p>filler</p>" * 80
    + "</body>"
)
RUN_IDS = (990_001, 990_002)
VIEWERS = ("bench-viewer-1", "bench-viewer-2")


def step(box, i: int) -> None:
    """One lane step: a tool call, then the screenshot and page state the lane takes."""
    kind = i % 4
    if kind == 0:
        assert box.click(300 + 7 * i % 400, 260).ok
    elif kind == 1:
        assert box.type(f"step {i} ").ok
    elif kind == 2:
        assert box.key("Return").ok
    else:
        assert box.scroll(640, 500, 0, 1 if i % 8 == 3 else -1).ok
    assert box.screenshot().ok
    box.page_state()


def lane(box, steps: int, think_s: float, out: list[float], start: threading.Barrier) -> None:
    start.wait()
    for i in range(steps):
        t = time.monotonic()
        step(box, i)
        out.append(time.monotonic() - t)
        time.sleep(think_s)  # the agent's turn (not timed): the grabber runs meanwhile too


class Receivers:
    """Two receivers per lane on the channel layer, counting frames, in a process of
    their own (as the web's sockets are: not in the lanes' process)."""

    def __enter__(self) -> "Receivers":
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--receive"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *exc) -> None:
        out, _ = self.process.communicate(timeout=30)
        self.result = json.loads(out)


def receive() -> None:
    """The receivers' process: joins each lane's group twice, counts frames until its
    stdin closes, prints the counts."""
    counts = {"frames": dict.fromkeys(map(str, RUN_IDS), 0), "text_bytes": 0}
    stop = threading.Event()

    async def main() -> None:
        layer = get_channel_layer()
        channels = []
        for run_id in RUN_IDS:
            for _ in VIEWERS:
                channel = await layer.new_channel()
                await layer.group_add(live_group(run_id), channel)
                channels.append((run_id, channel))
        print("ready", flush=True)
        began = time.monotonic()

        async def one(run_id: int, channel: str) -> None:
            while not stop.is_set():
                try:
                    message = await asyncio.wait_for(layer.receive(channel), 0.5)
                except TimeoutError:
                    continue
                counts["frames"][str(run_id)] += 1
                counts["text_bytes"] += len(message.get("text", ""))

        await asyncio.gather(*(one(r, c) for r, c in channels))
        counts["seconds"] = time.monotonic() - began
        for run_id, channel in channels:
            await layer.group_discard(live_group(run_id), channel)

    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    asyncio.run(main())
    print(json.dumps(counts))


def one_round(
    boxes, streams, steps: int, think_s: float, viewers: bool
) -> tuple[list[float], dict]:
    times: list[float] = []
    start = threading.Barrier(len(boxes))
    with ExitStack() as stack:
        receivers = None
        if viewers:
            live_viewer_mark(run_ids=list(RUN_IDS), viewer=VIEWERS[0])
            live_viewer_mark(run_ids=list(RUN_IDS), viewer=VIEWERS[1])
            stack.callback(live_viewer_forget, run_ids=list(RUN_IDS), viewer=VIEWERS[0])
            stack.callback(live_viewer_forget, run_ids=list(RUN_IDS), viewer=VIEWERS[1])
            receivers = stack.enter_context(Receivers())
        # The condition holds before the steps start: the grabbers' processes are
        # running and sending (viewers), or have ended (none: LINGER_S after the last
        # viewer left).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all((s.child is not None) == viewers for s in streams):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the grabbers did not follow the viewers")
        time.sleep(1.5 if viewers else 0.2)  # (a process's start)
        began = time.monotonic()
        threads = [
            threading.Thread(target=lane, args=(box, steps, think_s, times, start)) for box in boxes
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        extra = {"steps_s": time.monotonic() - began}
    if receivers is not None:  # (closed: its counts are in)
        extra |= receivers.result
    return times, extra


def ms(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50": round(1000 * statistics.median(ordered), 1),
        "mean": round(1000 * statistics.fmean(ordered), 1),
        "p90": round(1000 * ordered[int(0.9 * (len(ordered) - 1))], 1),
        "min": round(1000 * ordered[0], 1),
        "max": round(1000 * ordered[-1], 1),
        "n": len(ordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--receive", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=10, help="rounds per condition")
    parser.add_argument("--steps", type=int, default=15, help="steps per lane per round")
    parser.add_argument(
        "--think-s", type=float, default=0.2, help="the agent's pause after each step"
    )
    args = parser.parse_args()
    if args.receive:
        return receive()
    root = Path(tempfile.mkdtemp(prefix="arena-bench-live-", dir="/var/tmp"))
    root.chmod(0o711)
    backend = LocalBackend(root, UID_BASE)
    loads = [round(x, 2) for x in os.getloadavg()]
    results: dict[str, list[float]] = {"none": [], "viewers": []}
    streamed: list[dict] = []
    with ExitStack() as stack:
        boxes, streams = [], []
        for slot, run_id in zip((90, 91), RUN_IDS, strict=True):
            spec = SandboxSpec(run_id=run_id, start_url=PAGE, egress=False)
            box = backend.provision(spec, slot=slot)
            stack.callback(box.destroy)
            streams.append(stack.enter_context(live_desktop_stream(run_id, box)))
            boxes.append(box)
        for box in boxes:  # warm: the page painted, the first screenshot taken
            step(box, 0)
        grab_costs: dict[str, list[float]] = {"changed": [], "unchanged": []}
        capture = desktop_capture(boxes[0])
        for i in range(80):
            if i % 2 == 0:
                capture._last_pixels = None  # as if the screen changed: a full encoding
            t = time.monotonic()
            capture.grab()
            grab_costs["changed" if i % 2 == 0 else "unchanged"].append(time.monotonic() - t)
        for n in range(2 * args.rounds):
            viewers = n % 4 in (1, 2)  # turns: none, viewers, viewers, none, ...
            times, extra = one_round(boxes, streams, args.steps, args.think_s, viewers)
            results["viewers" if viewers else "none"] += times
            if "frames" in extra:
                streamed.append(extra)
    shutil.rmtree(root, ignore_errors=True)
    none, watched = ms(results["none"]), ms(results["viewers"])
    seconds = sum(s["seconds"] for s in streamed)
    print(
        json.dumps(
            {
                "step_ms": {"none": none, "viewers": watched},
                "ratio_p50": round(watched["p50"] / none["p50"], 3),
                "ratio_mean": round(watched["mean"] / none["mean"], 3),
                "goal_ratio_max": 1.10,
                "frames_per_s_per_receiver": {
                    str(run_id): round(
                        sum(s["frames"][str(run_id)] for s in streamed) / len(VIEWERS) / seconds, 2
                    )
                    for run_id in RUN_IDS
                },
                "fps_asked": LIVE_FPS,
                "frame_kb_mean": round(
                    sum(s["text_bytes"] for s in streamed)
                    / max(1, sum(sum(s["frames"].values()) for s in streamed))
                    / 1024,
                    1,
                ),
                "grab_ms": {kind: ms(costs) for kind, costs in grab_costs.items()},
                "rounds_per_condition": args.rounds,
                "steps_per_lane_per_round": args.steps,
                "think_s": args.think_s,
                "loadavg_before": loads,
                "cpus": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
