"""The step's screenshot encoder (``sandboxes.screens.frame_png``): the same pixels as
Pillow's PNG of the same frame, in both of Xvfb's byte orders, and the byte bound
still applies to what it makes."""

import io
import random
import struct

import pytest
from PIL import Image

from sandboxes.screens import Frame, frame_image, frame_png, framebuffer_png

W, H = 97, 41  # odd sizes: no row or channel may shift


def random_frame(raw_mode: str, seed: int = 7) -> Frame:
    rng = random.Random(seed)
    pixels = bytearray(rng.randbytes(W * H * 4))
    # A flat band too, as screens have.
    pixels[: W * 4 * 10] = bytes((10, 20, 30, 0)) * (W * 10)
    return Frame(bytes(pixels), W, H, W * 4, raw_mode)


@pytest.mark.parametrize("raw_mode", ["BGRX", "XRGB"])
def test_frame_png_has_exactly_the_frames_pixels(raw_mode):
    frame = random_frame(raw_mode)
    image = Image.open(io.BytesIO(frame_png(frame)))
    assert (image.format, image.mode, image.size) == ("PNG", "RGB", (W, H))
    assert image.tobytes() == frame_image(frame).tobytes()
    first = frame.pixels[:4]
    expected = (first[2], first[1], first[0]) if raw_mode == "BGRX" else tuple(first[1:4])
    assert image.getpixel((0, 0)) == expected


def test_a_screen_over_the_bound_is_still_reduced(tmp_path):
    frame = random_frame("BGRX")
    header = struct.pack(
        ">25I",
        100, 7, 2, 24, W, H, 0, 0, 32, 0, 32, 32, W * 4, 4, 0xFF0000, 0xFF00, 0xFF, 8, 256,
        0, W, H, 0, 0, 0,
    )  # fmt: skip
    path = tmp_path / "Xvfb_screen0"
    path.write_bytes(header + frame.pixels)
    whole = framebuffer_png(str(path), W, H, max_png_bytes=1 << 20)
    assert whole.reduced == "" and whole.png == frame_png(frame)
    small = framebuffer_png(str(path), W, H, max_png_bytes=len(whole.png) - 1)
    assert small.reduced and len(small.png) < len(whole.png)
