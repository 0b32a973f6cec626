"""Live desktops (issue 39): a running lane's screen, several frames a second, to the
pages that watch it (the battle page; a human operator's page), grabbed only while
someone watches. The recorded steps stay the evidence; nothing here is stored.

- **Who watches** is a sorted set per run in Redis (``live-viewers:<run id>``): each
  open live socket (``battles.live_consumers``) is a member whose score is when it
  lapses, on Redis's own clock (so the web's and the worker's clocks never meet),
  refreshed every ``VIEWER_REFRESH_S`` while the socket is open and removed when it
  closes. A socket that died without closing lapses after ``VIEWER_TTL_S``.
- **The grabber** is a process (``python -m sandboxes.live_frames``) per watched lane:
  ``live_desktop_stream``, around the lane's sandbox, runs a thread (``_LaneStream``)
  that asks once a second (one ZCOUNT) whether anyone watches, starts the process when
  someone does and ends it ``LINGER_S`` after the last viewer left, and when the lane
  ends (the ``with`` block), before the sandbox is destroyed. The process grabs the
  framebuffer at ``LIVE_FPS`` at a lower CPU priority and sends each frame to the
  run's group, ``live-run-<run id>``, on the channel layer (a process, not a thread:
  docs/performance.md, "Live desktops", measured the thread slowing the steps).
- **A frame** is one text message on the group, framed as ``realtime.group_send``
  frames its messages (the web's hubs relay the text as it is): ``{"run": id, "seq":
  n, "changed": bool, "jpeg": base64}`` (the pages show it as a ``data:`` image: the
  CSP allows ``data:`` images and no ``blob:``).

Nothing flows the other way: the live socket is receive-only (a page that sends
anything is closed), and nothing here reaches the sandbox but the framebuffer read."""

import contextlib
import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator

from django.conf import settings

from arena_site.realtime import FRAME_TYPE
from arena_site.redis import redis_client
from sandboxes.base import Sandbox
from sandboxes.live_frames import (
    LAYER_CONFIG_ENV,
    LIVE_FPS,
    WATCH_CHECK_S,
    DesktopCapture,
    desktop_capture,
    grabber_command,
)

logger = logging.getLogger(__name__)

VIEWER_TTL_S = 15
VIEWER_REFRESH_S = 5


def live_group(run_id: int) -> str:
    return f"live-run-{run_id}"


def _viewers_key(run_id: int) -> str:
    return f"live-viewers:{run_id}"


def _redis_now() -> float:
    seconds, micros = redis_client().time()
    return seconds + micros / 1e6


def live_viewer_mark(*, run_ids: list[int], viewer: str) -> None:
    """``viewer`` (a socket's token) watches ``run_ids`` for the next ``VIEWER_TTL_S``."""
    client = redis_client()
    lapses = _redis_now() + VIEWER_TTL_S
    with client.pipeline(transaction=False) as pipe:
        for run_id in run_ids:
            pipe.zadd(_viewers_key(run_id), {viewer: lapses})
            pipe.expire(_viewers_key(run_id), 2 * VIEWER_TTL_S)
        pipe.execute()


def live_viewer_forget(*, run_ids: list[int], viewer: str) -> None:
    client = redis_client()
    with client.pipeline(transaction=False) as pipe:
        for run_id in run_ids:
            pipe.zrem(_viewers_key(run_id), viewer)
        pipe.execute()


def live_viewers(run_id: int) -> int:
    """How many sockets watch ``run_id`` now (lapsed members are not counted)."""
    return int(redis_client().zcount(_viewers_key(run_id), f"({_redis_now()}", "+inf"))


# A grabber outlives its last viewer by this long: a page that reloads keeps it.
LINGER_S = 5.0


class _LaneStream(threading.Thread):
    """Beside a lane: asks about once a second (``WATCH_CHECK_S``) whether anyone
    watches the run, starts the grabber's process when someone does, and ends it
    ``LINGER_S`` after the last one left, and when the lane ends (``stop``)."""

    def __init__(self, run_id: int, capture: DesktopCapture, fps: float) -> None:
        super().__init__(name=f"live-frames-{run_id}", daemon=True)
        self.run_id = run_id
        self.capture = capture
        self.fps = fps
        self.child: subprocess.Popen | None = None
        self.started_children = 0  # for tests and the benchmark
        self._stopping = threading.Event()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout_s)

    def run(self) -> None:
        last_watched: float | None = None
        failing = False
        while True:
            try:
                watched = live_viewers(self.run_id) > 0
                failing = False
            except Exception:
                if not failing:  # once per outage, not once a second
                    logger.warning("asking who watches run %s failed", self.run_id, exc_info=True)
                watched, failing = False, True
            now = time.monotonic()
            if watched:
                last_watched = now
                if self.child is None or self.child.poll() is not None:
                    self._start_child()
            elif self.child is not None and (last_watched is None or now - last_watched > LINGER_S):
                self._end_child()
            if self._stopping.wait(WATCH_CHECK_S):
                break
        self._end_child()

    def _start_child(self) -> None:
        command = grabber_command(
            self.capture,
            run_id=self.run_id,
            group=live_group(self.run_id),
            frame_type=FRAME_TYPE,
            fps=self.fps,
        )
        config = json.dumps(settings.CHANNEL_LAYERS["default"]["CONFIG"])
        try:
            self.child = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                cwd=settings.BASE_DIR,
                env={**os.environ, LAYER_CONFIG_ENV: config},
            )
            self.started_children += 1
        except OSError:
            logger.warning("the live grabber of run %s did not start", self.run_id, exc_info=True)
            self.child = None

    def _end_child(self) -> None:
        child, self.child = self.child, None
        if child is None:
            return
        with contextlib.suppress(OSError):
            child.stdin.close()  # type: ignore[union-attr]  # its signal to end
        try:
            child.wait(3)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(3)


@contextlib.contextmanager
def live_desktop_stream(
    run_id: int, sandbox: Sandbox, *, fps: float = LIVE_FPS
) -> "Iterator[_LaneStream | None]":
    """Streams ``sandbox``'s screen to the run's live sockets while the block runs and
    someone watches; nothing (None) for a sandbox without a capturable screen. The
    grabber's process has ended when the block is left (the sandbox is destroyed
    after)."""
    capture = desktop_capture(sandbox)
    if capture is None:
        yield None
        return
    stream = _LaneStream(run_id, capture, fps)
    stream.start()
    try:
        yield stream
    finally:
        stream.stop()
