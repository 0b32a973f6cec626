"""Screenshots from Xvfb's framebuffer file (XWD format) to PNG, without an X client.

Reading the file Xvfb maps with ``-fbdir`` and encoding it (``frame_png``) costs 2–5 ms
for 1280×800, several times less than asking the X server for the image.

The file is untrusted input. Xvfb runs in a sandbox of its own under a uid the agent
does not have (``sandboxes.local``), but it draws what a page the agent chose makes
Chromium draw, and the Docker backend still shares one container. So nothing is read
or allocated from the header before it is checked: the width and height must be the
configured screen's, the pixel format Xvfb's 32 bits per pixel, and the file exactly
as long as that header says; only then are exactly those bytes read. Each PNG has a
byte bound: a screen that does not fit (noise, photographs) is re-encoded with 256
colours, then at half, quarter and eighth scale, and the result says which; a screen
that fits in none is a recorded error, never a larger file."""

import functools
import io
import os
import stat
import struct
import zlib
from dataclasses import dataclass

import numpy as np
from PIL import Image

try:  # ISA-L's deflate: ~6x zlib's speed at its level 1, ~10 % larger (docs/performance.md)
    from isal.isal_zlib import compress as deflate_fast
except ImportError:  # not installed: zlib's level 1, the same PNG pixels
    deflate_fast = functools.partial(zlib.compress, level=1)

XWD_HEADER = struct.Struct(">25I")  # the fixed part of an XWD file header
XWD_COLOR_BYTES = 12
MAX_HEADER_BYTES = 4096  # the fixed part, the window name and padding
MAX_COLORS = 4096  # Xvfb writes 256 for a 24-bit TrueColor screen
BYTES_PER_PIXEL = 4


class ScreenError(Exception):
    pass


@dataclass(frozen=True)
class Screenshot:
    png: bytes
    width: int  # the screen's size; the image is smaller when ``reduced`` says so
    height: int
    reduced: str = ""  # "" | "256 colours" | "256 colours, 1/2 scale" | ...


@dataclass(frozen=True)
class Frame:
    pixels: bytes
    width: int
    height: int
    bytes_per_line: int
    raw_mode: str


def framebuffer_bound(width: int, height: int) -> int:
    """The most bytes a ``width`` × ``height`` screen's framebuffer file can be."""
    return MAX_HEADER_BYTES + MAX_COLORS * XWD_COLOR_BYTES + width * height * BYTES_PER_PIXEL


def _layout(head: bytes, width: int, height: int, total: int) -> tuple[int, int, str]:
    """Checks an XWD header (its fixed part, ``head``) of a file of ``total`` bytes
    against a ``width`` × ``height`` screen: (pixel offset, pixel bytes, raw mode)."""
    if len(head) < XWD_HEADER.size:
        raise ScreenError("framebuffer too short")
    (
        header_size, _version, _format, depth, file_width, file_height, _xoffset,
        byte_order, _unit, _bit_order, _pad, bits_per_pixel, bytes_per_line, _visual,
        _red, _green, _blue, _bits_rgb, _entries, ncolors, *_rest,
    ) = XWD_HEADER.unpack(head[: XWD_HEADER.size])  # fmt: skip
    if (file_width, file_height) != (width, height):
        raise ScreenError(
            f"the framebuffer says {file_width}×{file_height}, the screen is {width}×{height}"
        )
    if bits_per_pixel != 8 * BYTES_PER_PIXEL or depth not in (24, 32):
        raise ScreenError(f"unsupported framebuffer format ({depth} bit, {bits_per_pixel} bpp)")
    if bytes_per_line != width * BYTES_PER_PIXEL:
        raise ScreenError("the framebuffer's line length is not the screen's")
    if not XWD_HEADER.size <= header_size <= MAX_HEADER_BYTES or ncolors > MAX_COLORS:
        raise ScreenError("the framebuffer header is not Xvfb's")
    offset = header_size + ncolors * XWD_COLOR_BYTES
    size = bytes_per_line * height
    if total != offset + size:
        raise ScreenError("the framebuffer's length does not match its header")
    return offset, size, "BGRX" if byte_order == 0 else "XRGB"  # LSBFirst stores B, G, R, X


def read_frame(path: str, width: int, height: int) -> Frame:
    """Reads the framebuffer of a ``width`` × ``height`` screen from ``path``, refusing
    links, anything but a regular file, and any header or length that is not exactly
    such a screen's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise ScreenError(f"no framebuffer: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ScreenError("the framebuffer is not a regular file")
        head = os.pread(fd, XWD_HEADER.size, 0)
        offset, size, raw_mode = _layout(head, width, height, info.st_size)
        pixels = os.pread(fd, size, offset)
        if len(pixels) != size:
            raise ScreenError("the framebuffer shrank while being read")
    finally:
        os.close(fd)
    return Frame(pixels, width, height, width * BYTES_PER_PIXEL, raw_mode)


def frame_from_bytes(data: bytes, width: int, height: int) -> Frame:
    """The frame in ``data``, a framebuffer file's bytes as a sandbox sent them (the
    Docker backend's remote mode): the same checks as :func:`read_frame`, the length
    being the bytes received, never a size the sender claims."""
    offset, size, raw_mode = _layout(data[: XWD_HEADER.size], width, height, len(data))
    pixels = bytes(memoryview(data)[offset : offset + size])
    return Frame(pixels, width, height, width * BYTES_PER_PIXEL, raw_mode)


def frame_image(frame: Frame) -> Image.Image:
    return Image.frombuffer(
        "RGB", (frame.width, frame.height), frame.pixels, "raw", frame.raw_mode,
        frame.bytes_per_line, 1,
    )  # fmt: skip


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def frame_png(frame: Frame) -> bytes:
    """The frame as an RGB PNG, each row unfiltered, deflated by ``deflate_fast``: the
    same pixels as ``png_bytes(frame_image(frame))`` in a fraction of its time (Pillow
    picks a filter per row; a screen's flat areas deflate as well without). Each channel
    is copied on its own: numpy copies a reversed channel slice several times slower."""
    pixels = np.frombuffer(frame.pixels, np.uint8).reshape(frame.height, frame.width, 4)
    red, green, blue = (2, 1, 0) if frame.raw_mode == "BGRX" else (1, 2, 3)
    rows = np.empty((frame.height, 1 + 3 * frame.width), np.uint8)
    rows[:, 0] = 0  # filter type None
    rgb = rows[:, 1:].reshape(frame.height, frame.width, 3)
    rgb[:, :, 0] = pixels[:, :, red]
    rgb[:, :, 1] = pixels[:, :, green]
    rgb[:, :, 2] = pixels[:, :, blue]
    header = struct.pack(">IIBBBBB", frame.width, frame.height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return b"".join((
        b"\x89PNG\r\n\x1a\n",
        _chunk(b"IHDR", header),
        _chunk(b"IDAT", deflate_fast(rows.data)),
        _chunk(b"IEND", b""),
    ))  # fmt: skip


def png_bytes(image: Image.Image, level: int = 1) -> bytes:
    buffer = io.BytesIO()
    # Level 1: screenshots are taken after every step; speed matters more than bytes.
    image.save(buffer, format="PNG", compress_level=level)
    return buffer.getvalue()


def bounded_png(
    image: Image.Image, max_bytes: int, *, full: bytes | None = None
) -> tuple[bytes, str]:
    """``image`` as a PNG of at most ``max_bytes``: as it is when it fits, else with
    256 colours, then at 1/2, 1/4 and 1/8 scale; (png, what was reduced). ``full`` is
    the image's PNG as it is, when the caller has it already."""
    png = png_bytes(image) if full is None else full
    if len(png) <= max_bytes:
        return png, ""
    for factor in (1, 2, 4, 8):
        smaller = image.reduce(factor) if factor > 1 else image
        png = png_bytes(smaller.quantize(256, method=Image.Quantize.FASTOCTREE), level=6)
        if len(png) <= max_bytes:
            return png, "256 colours" + (f", 1/{factor} scale" if factor > 1 else "")
    raise ScreenError(f"the screen does not fit in {max_bytes} bytes even at 1/8 scale")


def framebuffer_png(path: str, width: int, height: int, max_png_bytes: int) -> Screenshot:
    return frame_screenshot(read_frame(path, width, height), max_png_bytes)


def framebuffer_bytes_png(data: bytes, width: int, height: int, max_png_bytes: int) -> Screenshot:
    """:func:`framebuffer_png` of a framebuffer file's bytes (:func:`frame_from_bytes`)."""
    return frame_screenshot(frame_from_bytes(data, width, height), max_png_bytes)


def frame_screenshot(frame: Frame, max_png_bytes: int) -> Screenshot:
    width, height = frame.width, frame.height
    png = frame_png(frame)
    if len(png) <= max_png_bytes:
        return Screenshot(png, width, height)
    png, reduced = bounded_png(frame_image(frame), max_png_bytes, full=png)
    return Screenshot(png, width, height, reduced)
