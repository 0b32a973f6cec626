"""The framebuffer reader treats the file as hostile (sandboxes.screens): nothing is read
or allocated from a header before it is checked against the configured screen, and a
PNG never exceeds its byte bound."""

import io
import os
import random
import struct
import tracemalloc

import pytest
from PIL import Image

from sandboxes.screens import ScreenError, bounded_png, framebuffer_png, read_frame
from tests.sandboxes.fake_engine import xwd_bytes

W, H = 64, 48


def header(width=W, height=H, *, bpp=32, depth=24, line=None, size=100, ncolors=0) -> bytes:
    return struct.pack(
        ">25I",
        size, 7, 2, depth, width, height, 0, 0, 32, 0, 32, bpp,
        width * 4 if line is None else line, 4, 0xFF0000, 0xFF00, 0xFF, 8, 256, ncolors,
        width, height, 0, 0, 0,
    )  # fmt: skip


def test_a_real_frame_becomes_a_png_of_the_screen(tmp_path):
    path = tmp_path / "Xvfb_screen0"
    path.write_bytes(xwd_bytes(W, H, (200, 30, 30)))
    shot = framebuffer_png(str(path), W, H, max_png_bytes=1 << 20)
    image = Image.open(io.BytesIO(shot.png))
    assert (image.size, shot.reduced) == ((W, H), "")
    assert image.convert("RGB").getpixel((3, 3)) == (200, 30, 30)


@pytest.mark.parametrize(
    ("content", "error"),
    [
        # a tiny file that claims a huge screen: refused before anything is allocated
        (header(100_000, 100_000), "says 100000×100000"),
        (header(W + 1, H), "the screen is 64×48"),
        (header(bpp=16), "unsupported framebuffer format"),
        (header(depth=8), "unsupported framebuffer format"),
        (header(line=W * 4 + 4), "line length"),
        (header(size=10**9), "not Xvfb's"),
        (header(ncolors=10**6), "not Xvfb's"),
        (header(), "length does not match"),  # the header alone, no pixels
        (xwd_bytes(W, H, (0, 0, 0)) + b"extra", "length does not match"),
        (b"\x00" * 40, "too short"),
    ],
)
def test_a_lying_framebuffer_is_a_recorded_error(tmp_path, content, error):
    path = tmp_path / "Xvfb_screen0"
    path.write_bytes(content)
    tracemalloc.start()
    try:
        with pytest.raises(ScreenError, match=error):
            read_frame(str(path), W, H)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024  # nothing sized from the header


def test_links_and_special_files_are_refused(tmp_path):
    target = tmp_path / "real"
    target.write_bytes(xwd_bytes(W, H, (1, 2, 3)))
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(ScreenError, match="no framebuffer"):
        read_frame(str(link), W, H)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ScreenError, match="not a regular file"):
        read_frame(str(fifo), W, H)
    with pytest.raises(ScreenError, match="no framebuffer"):
        read_frame(str(tmp_path / "missing"), W, H)


def noise(width: int, height: int) -> Image.Image:
    rng = random.Random(3)
    return Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3))


def test_a_noisy_screen_is_reencoded_under_the_bound():
    image = noise(640, 400)
    raw = len(Image.Image.tobytes(image))
    # 640×400 is 768,000 bytes raw; with 256 colours still 256,000: only half scale fits
    png, reduced = bounded_png(image, max_bytes=200_000)
    assert len(png) <= 200_000 < raw
    assert reduced == "256 colours, 1/2 scale"
    assert Image.open(io.BytesIO(png)).size == (320, 200)


def test_a_screen_that_fits_is_left_alone():
    image = Image.new("RGB", (640, 400), (10, 20, 30))
    png, reduced = bounded_png(image, max_bytes=300_000)
    assert reduced == "" and Image.open(io.BytesIO(png)).mode == "RGB"


def test_a_screen_that_fits_in_no_form_is_refused_not_stored_larger():
    with pytest.raises(ScreenError, match="does not fit in 100 bytes"):
        bounded_png(noise(640, 400), max_bytes=100)
