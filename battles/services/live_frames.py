"""Live desktops (issue 39): a running lane's screen, several frames a second, to the
pages that watch it (the battle page; a human operator's page), grabbed only while
someone watches. The recorded steps stay the evidence; nothing here is stored.

- **Who watches** is a sorted set per run in Redis (``live-viewers:<run id>``): each
  open live socket (``battles.live_consumers``) is a member whose score is when it
  lapses, on Redis's own clock (so the web's and the worker's clocks never meet),
  refreshed every ``VIEWER_REFRESH_S`` while the socket is open and removed when it
  closes. A socket that died without closing lapses after ``VIEWER_TTL_S``.
- **The grabber** (``sandboxes.live_frames.LiveGrabber``) is a thread beside the lane,
  started by ``live_desktop_stream`` around the lane's sandbox: idle (one ZCOUNT a
  second) while nobody watches; otherwise it grabs the framebuffer at ``LIVE_FPS`` and
  publishes each frame to the run's group, ``live-run-<run id>``. It ends with the
  lane (the ``with`` block), before the sandbox is destroyed.
- **A frame** is one text message on the group: ``{"run": id, "seq": n, "changed":
  bool, "jpeg": base64}`` (the pages show it as a ``data:`` image: the CSP allows
  ``data:`` images and no ``blob:``).

Nothing flows the other way: the live socket is receive-only (a page that sends
anything is closed), and nothing here reaches the sandbox but the framebuffer read."""

import base64
import contextlib
import json
import logging
from collections.abc import Iterator

from arena_site.realtime import group_send
from arena_site.redis import redis_client
from sandboxes.base import Sandbox
from sandboxes.live_frames import LIVE_FPS, LiveGrabber, desktop_capture

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


def live_frame_publish(*, run_id: int, seq: int, jpeg: bytes, changed: bool) -> None:
    """Sends one frame to the run's live sockets (never raises: ``group_send``)."""
    text = json.dumps({
        "run": run_id,
        "seq": seq,
        "changed": changed,
        "jpeg": base64.b64encode(jpeg).decode("ascii"),
    })  # fmt: skip
    group_send(live_group(run_id), {"type": "live.frame", "text": text})


@contextlib.contextmanager
def live_desktop_stream(run_id: int, sandbox: Sandbox, *, fps: float = LIVE_FPS) -> Iterator[None]:
    """Streams ``sandbox``'s screen to the run's live sockets while the block runs and
    someone watches; nothing for a sandbox without a capturable screen. The grabber
    has stopped when the block is left (the sandbox is destroyed after)."""
    capture = desktop_capture(sandbox)
    if capture is None:
        yield
        return
    seq = 0

    def publish(jpeg: bytes, changed: bool) -> None:
        nonlocal seq
        seq += 1
        live_frame_publish(run_id=run_id, seq=seq, jpeg=jpeg, changed=changed)

    grabber = LiveGrabber(
        capture,
        watched=lambda: live_viewers(run_id) > 0,
        publish=publish,
        fps=fps,
        name=f"live-frames-{run_id}",
    )
    grabber.start()
    try:
        yield
    finally:
        grabber.stop()
