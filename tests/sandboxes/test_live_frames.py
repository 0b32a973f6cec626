"""A desktop's live frames (``sandboxes.live_frames``), from a real bubblewrap desktop:
JPEGs of the screen at half size that follow what the page shows, an unchanged screen
re-sent without a new encoding, and a grabber that grabs only while someone watches,
keeps going through failures, and stops when told."""

import io
import shutil
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
from django.conf import settings
from PIL import Image

from sandboxes.base import SandboxSpec
from sandboxes.docker_remote import RemoteDockerSandbox
from sandboxes.docker_sandbox import DockerSandbox
from sandboxes.live_frames import LIVE_MAX_WIDTH, DesktopCapture, LiveGrabber, desktop_capture
from sandboxes.local_backend import LocalBackend
from sandboxes.rundir import SandboxPaths
from sandboxes.screens import ScreenError

BLACK = "data:text/html," + urllib.parse.quote(
    "<title>black</title><body style='margin:0;background:rgb(0,0,0)'></body>"
)


@pytest.fixture(scope="module")
def desktop():
    root = Path(tempfile.mkdtemp(prefix="arena-test-live-", dir="/var/tmp"))
    root.chmod(0o711)
    backend = LocalBackend(root, uid_base=settings.ARENA.sandbox_uid_base)
    box = backend.provision(SandboxSpec(run_id=41, start_url=BLACK, egress=False), slot=7)
    yield box
    box.destroy()
    shutil.rmtree(root, ignore_errors=True)


def jpeg_image(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    assert image.format == "JPEG"
    return image.convert("RGB")


def test_a_frame_is_the_screen_as_a_half_size_jpeg(desktop):
    capture = desktop_capture(desktop)
    assert capture is not None

    jpeg, changed = capture.grab()

    assert changed is True
    image = jpeg_image(jpeg)
    assert image.size == (LIVE_MAX_WIDTH, 400)
    assert len(jpeg) < 200_000
    # the page's black body fills the middle of the screen (once painted)
    deadline = time.monotonic() + 15
    while image.getpixel((320, 300)) > (15, 15, 15) and time.monotonic() < deadline:
        time.sleep(0.2)
        image = jpeg_image(capture.grab()[0])
    assert image.getpixel((320, 300)) <= (15, 15, 15)


def test_an_unchanged_screen_is_the_same_frame_and_a_change_a_new_one(desktop):
    capture = desktop_capture(desktop)
    first, changed = capture.grab()
    deadline = time.monotonic() + 10
    while changed and time.monotonic() < deadline:  # (until the page has settled)
        time.sleep(0.2)
        first, changed = capture.grab()

    again, changed = capture.grab()

    assert (again, changed) == (first, False)
    assert desktop.navigate("about:blank").ok  # white
    seen_change, deadline = False, time.monotonic() + 10
    while time.monotonic() < deadline:
        after, changed = capture.grab()
        seen_change |= changed
        if jpeg_image(after).getpixel((320, 300)) >= (240, 240, 240):
            break  # (painted)
        time.sleep(0.1)
    assert seen_change is True
    assert after != first
    assert jpeg_image(after).getpixel((320, 300)) >= (240, 240, 240)


def test_a_sandbox_without_a_display_has_no_capture(sandbox_root):
    spec = SandboxSpec(run_id=42, desktop=False, memory_mb=256, pids=64, egress=False)
    box = LocalBackend(sandbox_root, uid_base=settings.ARENA.sandbox_uid_base).provision(spec)
    try:
        assert desktop_capture(box) is None
    finally:
        box.destroy()


@pytest.mark.parametrize(("cls", "captured"), [(DockerSandbox, True), (RemoteDockerSandbox, False)])
def test_only_a_screen_that_is_a_file_on_this_host_is_captured(cls, captured, tmp_path):
    # A local engine's container writes its framebuffer to the run dir on this host; a
    # remote engine's screen is a request on its display channel, which frames would
    # queue behind the agent's steps on: no live view there.
    box = object.__new__(cls)  # (the class decides; no engine needed)
    box.spec = SandboxSpec(run_id=43)
    box.paths = SandboxPaths(work=tmp_path, framebuffer=tmp_path / "fb", control=tmp_path / "c")

    assert (desktop_capture(box) is not None) is captured


def test_a_missing_framebuffer_is_a_screen_error(tmp_path):
    with pytest.raises(ScreenError):
        DesktopCapture(str(tmp_path / "none"), 1280, 800).grab()


def test_the_grabber_grabs_only_while_watched_and_stops(desktop):
    watching = threading.Event()
    published: list[tuple[float, bytes]] = []
    grabber = LiveGrabber(
        desktop_capture(desktop),
        watched=watching.is_set,
        publish=lambda jpeg, changed: published.append((time.monotonic(), jpeg)),
        fps=5,
    )
    grabber.start()
    try:
        # Given nobody watches: no frame
        time.sleep(1.5)
        assert published == []

        # When someone watches for 3 s: ~5 frames a second
        watching.set()
        time.sleep(3.5)
        watching.clear()
        time.sleep(1.2)  # (the grabber notices within one check)
        count = len(published)
        assert 10 <= count <= 19, count

        # Then, unwatched, it publishes nothing more
        time.sleep(1.5)
        assert len(published) == count
    finally:
        grabber.stop()
    assert not grabber.is_alive()


def test_failures_do_not_end_the_grabber(tmp_path, desktop):
    calls = {"watched": 0, "publish": 0}

    def watched() -> bool:
        calls["watched"] += 1
        if calls["watched"] == 1:
            raise ConnectionError("redis away")
        return True

    def publish(jpeg: bytes, changed: bool) -> None:
        calls["publish"] += 1
        raise ConnectionError("layer away")

    grabber = LiveGrabber(desktop_capture(desktop), watched=watched, publish=publish, fps=10)
    grabber.start()
    time.sleep(2.5)
    grabber.stop()
    assert not grabber.is_alive()
    assert calls["watched"] >= 2
    assert calls["publish"] >= 3
    assert grabber.frames == 0  # none was published
