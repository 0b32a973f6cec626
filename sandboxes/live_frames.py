"""A desktop's live frames: small JPEGs of the screen, grabbed several times a second
while someone watches, for the live view of a running lane (issue 39). They are a view,
never evidence: the steps' own screenshots (``Sandbox.screenshot``) stay what judges see.

Grabbing reads the display's framebuffer file on the host (``sandboxes.screens``), the
file ``LocalSandbox.screenshot`` reads: no request goes to the sandbox's supervisors, so
a frame never waits for a step's tool call, nor a tool call for a frame. Where the
screen is not such a file (a remote engine's sandbox, whose screenshot is a request on
its display channel) there is no live view (``desktop_capture`` answers None), rather
than frames that would queue behind the agent's steps.

The grabber runs in a process of its own (``python -m sandboxes.live_frames``, started
by ``battles.services.live_frames`` while someone watches): in the lane's process its
Python work (encoding, the layer's sends) held the GIL the lanes' threads wait for
after each of their supervisor calls, and measurably slowed their steps
(docs/performance.md, "Live desktops"). The process imports the standard library,
Pillow, numpy and channels_redis only (no Django: it starts in a fraction of a second),
lowers its CPU priority, grabs at ``--fps``, sends each frame to the run's group on the
channel layer whose config it is given, and ends when its stdin closes (the lane
stopped it, or died).

``LiveGrabber`` is its loop (a thread; usable in-process too): it asks ``watched``
about once a second, grabs and hands frames to ``publish`` at ``fps`` only while the
answer is yes, and ends when ``stop`` is called."""

import argparse
import asyncio
import base64
import io
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from PIL import Image

from sandboxes.screens import ScreenError, read_frame

if TYPE_CHECKING:
    from sandboxes.base import Sandbox

logger = logging.getLogger(__name__)

# Half of a 1280×800 screen at JPEG quality 60: ~25–60 kB a frame, readable text at
# the page's width, 3–5 ms to grab and encode (docs/performance.md, "Live desktops").
LIVE_MAX_WIDTH = 640
LIVE_JPEG_QUALITY = 60
LIVE_FPS = 4.0
# How often a grabber asks whether anyone still watches.
WATCH_CHECK_S = 1.0


class DesktopCapture:
    """The screen of one desktop sandbox as JPEG frames at most ``max_width`` wide.
    ``grab`` returns the newest frame and whether it differs from the one before: an
    unchanged screen costs the read and a comparison, not another scaling and
    encoding. Not thread-safe: one grabber owns it."""

    def __init__(
        self,
        framebuffer: str,
        width: int,
        height: int,
        *,
        max_width: int = LIVE_MAX_WIDTH,
        quality: int = LIVE_JPEG_QUALITY,
    ) -> None:
        self.framebuffer = framebuffer
        self.width, self.height = width, height
        self.factor = max(1, -(-width // max_width))  # ceil: never wider than max_width
        self.quality = quality
        self._last_pixels: bytes | None = None
        self._last_jpeg: bytes | None = None

    def grab(self) -> tuple[bytes, bool]:
        """(the frame's JPEG, whether the screen changed since the last grab). Raises
        ``ScreenError`` when the framebuffer is missing or not the screen's."""
        frame = read_frame(self.framebuffer, self.width, self.height)
        if frame.pixels == self._last_pixels and self._last_jpeg is not None:
            return self._last_jpeg, False  # (a memcmp: ~0.2 ms for 4 MB)
        image = Image.frombuffer(
            "RGB", (frame.width, frame.height), frame.pixels, "raw", frame.raw_mode,
            frame.bytes_per_line, 1,
        )  # fmt: skip
        if self.factor > 1:
            image = image.reduce(self.factor)  # box average: text stays legible
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=self.quality)
        self._last_pixels, self._last_jpeg = frame.pixels, buffer.getvalue()
        return self._last_jpeg, True


def desktop_capture(sandbox: "Sandbox") -> DesktopCapture | None:
    """The capture of ``sandbox``'s screen, None when it has no display or its screen
    is not a framebuffer file on this host. A sandbox class with a ``screenshot`` of its
    own (the remote engine's: a request on its display channel) has none."""
    from sandboxes.local import LocalSandbox  # (not in the grabber's process)

    if not sandbox.spec.desktop or not isinstance(sandbox, LocalSandbox):
        return None
    if type(sandbox).screenshot is not LocalSandbox.screenshot:
        return None
    return DesktopCapture(str(sandbox.paths.framebuffer), sandbox.spec.width, sandbox.spec.height)


class LiveGrabber(threading.Thread):
    """Grabs ``capture``'s frames at ``fps`` while ``watched()`` says someone watches
    and hands each to ``publish(jpeg, changed)``; idle (one ``watched`` call a
    ``WATCH_CHECK_S``) otherwise. ``stop`` ends it. Neither a failed grab (the display
    not up yet, or gone) nor a failed publish or check ends it: the view is best effort
    and the lane must never notice it."""

    def __init__(
        self,
        capture: DesktopCapture,
        *,
        watched: Callable[[], bool],
        publish: Callable[[bytes, bool], None],
        fps: float = LIVE_FPS,
        name: str = "live-frames",
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.capture = capture
        self.watched = watched
        self.publish = publish
        self.period = 1.0 / fps
        self.frames = 0  # published, for tests and the benchmark
        self._stopping = threading.Event()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout_s)

    def _is_watched(self) -> bool:
        try:
            return bool(self.watched())
        except Exception:
            logger.warning("asking who watches a live desktop failed", exc_info=True)
            return False

    def run(self) -> None:
        watching, next_check, failing = False, 0.0, False
        while not self._stopping.is_set():
            started = time.monotonic()
            if started >= next_check:
                watching, next_check = self._is_watched(), started + WATCH_CHECK_S
            if not watching:
                self._stopping.wait(max(0.0, next_check - started))
                continue
            try:
                jpeg, changed = self.capture.grab()
            except ScreenError:
                jpeg = None  # the display is not up yet, or was torn down
            if jpeg is not None:
                try:
                    self.publish(jpeg, changed)
                    self.frames += 1
                    failing = False
                except Exception:
                    if not failing:  # once per outage, not at every frame
                        logger.warning("publishing a live frame failed", exc_info=True)
                    failing = True
            self._stopping.wait(max(0.0, self.period - (time.monotonic() - started)))


# --- the grabber's process ------------------------------------------------------------

# The environment variable that carries the channel layer's config (channels_redis
# ``CONFIG``, JSON) to the grabber's process.
LAYER_CONFIG_ENV = "ARENA_LIVE_LAYER_CONFIG"
PUBLISH_TIMEOUT_S = 2.0
NICENESS = 10


def frame_text(*, run_id: int, seq: int, jpeg: bytes, changed: bool) -> str:
    """A frame as the pages receive it: ``{"run", "seq", "changed", "jpeg"}`` (base64)."""
    return json.dumps({
        "run": run_id,
        "seq": seq,
        "changed": changed,
        "jpeg": base64.b64encode(jpeg).decode("ascii"),
    })  # fmt: skip


def grabber_command(
    capture: DesktopCapture, *, run_id: int, group: str, frame_type: str, fps: float
) -> list[str]:
    """The grabber process's command line (run from the project's root)."""
    return [
        sys.executable, "-m", "sandboxes.live_frames",
        "--framebuffer", capture.framebuffer,
        "--width", str(capture.width), "--height", str(capture.height),
        "--run", str(run_id), "--group", group, "--frame-type", frame_type,
        "--fps", str(fps),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """The grabber process: frames of one screen to one group until stdin closes."""
    from channels_redis.core import RedisChannelLayer

    parser = argparse.ArgumentParser(prog="python -m sandboxes.live_frames")
    parser.add_argument("--framebuffer", required=True)
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--height", type=int, required=True)
    parser.add_argument("--run", type=int, required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--frame-type", required=True)
    parser.add_argument("--fps", type=float, default=LIVE_FPS)
    args = parser.parse_args(argv)
    os.nice(NICENESS)  # the lanes' steps first
    layer = RedisChannelLayer(**json.loads(os.environ[LAYER_CONFIG_ENV]))
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    seq = 0

    def publish(jpeg: bytes, changed: bool) -> None:
        nonlocal seq
        seq += 1
        text = frame_text(run_id=args.run, seq=seq, jpeg=jpeg, changed=changed)
        message = {"type": args.frame_type, "group": args.group, "text": text}
        sent = asyncio.run_coroutine_threadsafe(layer.group_send(args.group, message), loop)
        try:
            sent.result(PUBLISH_TIMEOUT_S)
        except TimeoutError:
            sent.cancel()
            raise

    capture = DesktopCapture(args.framebuffer, args.width, args.height)
    grabber = LiveGrabber(capture, watched=lambda: True, publish=publish, fps=args.fps)
    grabber.start()
    sys.stdin.buffer.read()  # until the lane closes the pipe, or ends
    grabber.stop()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
