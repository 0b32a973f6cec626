"""The step's screenshot encoder (``sandboxes.screens.frame_png``): the same pixels as
Pillow's PNG of the same frame, in both of Xvfb's byte orders, with ISA-L's deflate and
with zlib's (without isal installed), and the byte bound still applies to what it makes."""

import functools
import io
import random
import struct
import zlib

import pytest
from PIL import Image

from sandboxes import screens
from sandboxes.screens import Frame, frame_image, frame_png, framebuffer_png

DEFLATERS = {"zlib": functools.partial(zlib.compress, level=1)}
try:
    from isal.isal_zlib import compress as isal_compress

    DEFLATERS["isal"] = isal_compress
except ImportError:  # the fallback alone is tested then
    pass

W, H = 97, 41  # odd sizes: no row or channel may shift


def random_frame(raw_mode: str, seed: int = 7, width: int = W, height: int = H) -> Frame:
    rng = random.Random(seed)
    pixels = bytearray(rng.randbytes(width * height * 4))
    # A flat band too, as screens have.
    pixels[: width * 4 * 10] = bytes((10, 20, 30, 0)) * (width * 10)
    return Frame(bytes(pixels), width, height, width * 4, raw_mode)


@pytest.fixture(params=sorted(DEFLATERS))
def deflater(request, monkeypatch):
    monkeypatch.setattr(screens, "deflate_fast", DEFLATERS[request.param])
    return request.param


@pytest.mark.parametrize("raw_mode", ["BGRX", "XRGB"])
@pytest.mark.parametrize(("width", "height"), [(W, H), (1280, 800)])
def test_frame_png_has_exactly_the_frames_pixels(raw_mode, width, height, deflater):
    frame = random_frame(raw_mode, width=width, height=height)
    png = frame_png(frame)
    image = Image.open(io.BytesIO(png))
    image.load()  # decodes every row: a corrupt stream or CRC raises here
    assert (image.format, image.mode, image.size) == ("PNG", "RGB", (width, height))
    assert image.tobytes() == frame_image(frame).tobytes()
    first = frame.pixels[:4]
    expected = (first[2], first[1], first[0]) if raw_mode == "BGRX" else tuple(first[1:4])
    assert image.getpixel((0, 0)) == expected
    # Every chunk's CRC, and one zlib stream holding exactly the rows.
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    offset, idat = 8, b""
    while offset < len(png):
        (length,) = struct.unpack(">I", png[offset : offset + 4])
        tag, data = png[offset + 4 : offset + 8], png[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", png[offset + 8 + length : offset + 12 + length])
        assert crc == zlib.crc32(tag + data)
        idat += data if tag == b"IDAT" else b""
        offset += 12 + length
    assert len(zlib.decompress(idat)) == height * (1 + 3 * width)


def test_a_screen_over_the_bound_is_still_reduced(tmp_path, deflater):
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
