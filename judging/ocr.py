"""Reading the text out of what a judge sees as images, for the identity-leak scan
(SPEC §5.1): step screenshots and delivered images, through Tesseract (``tesserocr``).
No ORM: bytes in, text out.

Every image here is untrusted input (a delivered file is the agent's; a screenshot
shows whatever the agent put on the screen): only PNG, JPEG, GIF and WebP are opened,
the pixel count is checked from the header before anything is decoded (and Pillow's
decompression-bomb check is made an error), and frames, pixels per battle and time
per recognition are bounded. An image that cannot be read within those bounds raises
``Unreadable``: the scan then cannot vouch for it, and the caller fails closed.

Cost: a run's screenshots are read in step order, and each only where it differs
from the one before it (``changed_bands``); a screenshot already seen in the battle
is skipped. Nothing is downscaled. One Tesseract engine per process, created on
first use and reused under a lock (an engine is not thread-safe)."""

import hashlib
import io
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

# One image or frame (a 1280×800 screenshot is 1.0 M); a 4096×4096 scan is 16.8 M.
MAX_IMAGE_PIXELS = 4096 * 4096
MAX_FRAMES = 50
# Pixels of delivered images read per battle (screenshots are bounded by the step
# budget and the screen size instead).
MAX_BATTLE_IMAGE_PIXELS = 64_000_000
# Rows read above and below a changed area: more than a line of text, so a word of
# which one letter changed is read whole.
BAND_MARGIN_PX = 24
# Changed areas closer than this are read as one band.
BAND_JOIN_PX = 2 * BAND_MARGIN_PX
# How much further a band reaches, at most, for a row of one colour (between lines).
BAND_REACH_PX = 256
RECOGNIZE_TIMEOUT_MS = 30_000
_FORMATS = ("PNG", "JPEG", "GIF", "WEBP")


class Unreadable(Exception):
    """An image the scan cannot read in full within its bounds."""


def image_format(data: bytes) -> str | None:
    """The format of an image file by its first bytes (never by its name), if it is
    one the scan reads."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "GIF"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


def image_frames(data: bytes) -> Iterator[tuple[int, str, Image.Image]]:
    """The frames of an image file as (frame index, backdrop, RGB image), the way a
    browser may show them: turned by the EXIF orientation, and a frame with
    transparency both over white and over black (backdrop "white", "black"; text drawn
    in the alpha channel alone shows on one of them), else backdrop "". Raises
    ``Unreadable`` for anything outside the bounds above (not an image of a read
    format, corrupt, too many pixels or frames)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(data), formats=_FORMATS)
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise Unreadable(f"{width}×{height} pixels is over {MAX_IMAGE_PIXELS:,}")
            frames = getattr(image, "n_frames", 1)
            if frames > MAX_FRAMES:
                raise Unreadable(f"{frames} frames is over {MAX_FRAMES}")
            for index in range(frames):
                image.seek(index)
                frame = ImageOps.exif_transpose(image)
                if frame.mode in ("RGBA", "LA", "PA") or "transparency" in frame.info:
                    frame = frame.convert("RGBA")
                    for backdrop in ("white", "black"):
                        under = Image.new("RGBA", frame.size, backdrop)
                        yield index, backdrop, Image.alpha_composite(under, frame).convert("RGB")
                else:
                    yield index, "", frame.convert("RGB")
        except Unreadable:
            raise
        except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError,
                Image.DecompressionBombWarning) as exc:  # fmt: skip
            raise Unreadable(f"not a readable image: {exc}") from exc


class _Engine:
    """One Tesseract engine for the process, behind a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._api = None
        self._tessdata: Path | None = None

    def read(self, image: Image.Image, tessdata: Path) -> str:
        import tesserocr

        with self._lock:
            if self._api is None or self._tessdata != tessdata:
                if self._api is not None:
                    self._api.End()
                    self._api = None
                # Raises RuntimeError when the language data is missing: a setup
                # fault, which leaves the battle in screening rather than open.
                self._api = tesserocr.PyTessBaseAPI(path=str(tessdata), lang="eng")
                self._tessdata = tessdata
            self._api.SetImage(image)
            if not self._api.Recognize(timeout=RECOGNIZE_TIMEOUT_MS):
                raise Unreadable(f"recognition took over {RECOGNIZE_TIMEOUT_MS} ms")
            return self._api.GetUTF8Text() or ""


_ENGINE = _Engine()


def ocr(image: Image.Image, tessdata: Path) -> str:
    """The text Tesseract reads in ``image`` (English model)."""
    return _ENGINE.read(image, tessdata)


def changed_bands(before: Image.Image | None, after: Image.Image) -> list[tuple[int, int]]:
    """The horizontal bands (top, bottom) of ``after`` to read given that ``before``
    was read: the rows whose pixels differ, widened by ``BAND_MARGIN_PX``, then on to
    the nearest row that is of one colour across the changed columns above and below
    (the gap between lines of text there; at most ``BAND_REACH_PX`` further), joined
    when close. Whole rows: text runs along them, so a line of which one letter
    changed is read whole, and so is large text of which only a part changed.
    Everything when there is no ``before`` of that size."""
    height = after.height
    if before is None or before.size != after.size:
        return [(0, height)]
    pixels = np.asarray(after)
    mask = (np.asarray(before) != pixels).any(axis=2)
    bands: list[tuple[int, int]] = []
    for row in np.flatnonzero(mask.any(axis=1)).tolist():
        if bands and row - BAND_MARGIN_PX <= bands[-1][1] + BAND_JOIN_PX:
            bands[-1] = (bands[-1][0], min(height, row + 1 + BAND_MARGIN_PX))
        else:
            bands.append((max(0, row - BAND_MARGIN_PX), min(height, row + 1 + BAND_MARGIN_PX)))
    widened: list[tuple[int, int]] = []
    for top, bottom in bands:
        columns = np.flatnonzero(mask[top:bottom].any(axis=0))
        span = pixels[:, columns[0] : columns[-1] + 1]
        plain = np.flatnonzero((span == span[:, :1]).all(axis=(1, 2)))
        above, below = plain[plain < top], plain[plain >= bottom]
        top = max(int(above[-1]) if above.size else 0, top - BAND_REACH_PX)
        bottom = min(int(below[0]) + 1 if below.size else height, bottom + BAND_REACH_PX)
        if widened and top <= widened[-1][1]:
            widened[-1] = (widened[-1][0], max(bottom, widened[-1][1]))
        else:
            widened.append((top, bottom))
    return widened


class ImageReader:
    """Reads a sequence of images (a run's screenshots, an animation's frames) where
    each differs from the one before, and skips images already read.

    Why reading only the changed bands still covers everything: take any stretch of
    rows of image k that holds a line of text. If none of its rows changed, it equals
    that stretch of image k-1, which was read whole when k-1 was (by induction from
    the first image, read whole). If one did, the band around that row reaches past
    the line's edges (``changed_bands``: the margin, then to a gap between lines), so
    the line is read whole in k. So every
    image a reader has passed is covered, and ``seen`` (their digests) may be shared
    by the readers of one battle."""

    def __init__(self, tessdata: Path, seen: set[bytes] | None = None) -> None:
        self.tessdata = tessdata
        self.seen = seen if seen is not None else set()
        self.previous: Image.Image | None = None
        self.previous_digest: bytes | None = None
        self.pixels_read = 0

    def read(self, image: Image.Image, digest: bytes | None = None) -> str:
        """The text in the parts of ``image`` not covered before ("" when none)."""
        if digest is None:
            digest = hashlib.sha256(image.tobytes()).digest() + repr(image.size).encode()
        before, self.previous, self.previous_digest = self.previous, image, digest
        if digest in self.seen:
            return ""
        self.seen.add(digest)
        texts = []
        for top, bottom in changed_bands(before, image):
            band = image.crop((0, top, image.width, bottom))
            self.pixels_read += band.width * band.height
            texts.append(ocr(band, self.tessdata))
        return "\n".join(t for t in texts if t.strip())

    def read_file(self, data: bytes) -> str:
        """``read`` for an image file (a screenshot), keyed by its bytes: the same
        bytes as the previous image are not even decoded."""
        digest = hashlib.sha256(data).digest()
        if digest == self.previous_digest:
            return ""
        return "\n".join(self.read(frame, digest) for _, _, frame in image_frames(data))
