"""Screening reads what a judge sees as images, with Tesseract for real (no mock): each
step's screenshot (only where it changed, never the same one twice) and delivered
images, within bounds (the images are untrusted). Each case shows the name is found
only with OCR: with ``leak_ocr`` off the same battle passes."""

import io
import struct
import zlib

import pytest
from django.conf import settings
from PIL import Image, ImageDraw

from battles.models import Battle
from judging import ocr
from judging.services import battle_screen
from judging.services.screening import battle_leak_note
from tests.judging.battle_factories import ended_battle
from tests.judging.leak_factories import deliver, note_of, screenshot
from tests.judging.screens import PROSE, browser_screen, encoded, font, text_image

SCREENING = Battle.Status.SCREENING
TESSDATA = settings.ARENA.leak_tessdata


def passes_without_ocr(battle: Battle, settings) -> bool:
    """Whether the battle's scan finds nothing with OCR off (the name is only in an
    image, so the case fails without the defence)."""
    arena = settings.ARENA
    settings.ARENA = arena.replace(leak_ocr=False)
    try:
        return battle_leak_note(list(battle.runs.prefetch_related("steps"))) == ""
    finally:
        settings.ARENA = arena


# --- screenshots ---------------------------------------------------------------------


def test_a_name_only_in_a_screenshot_excludes_the_battle(alice, roster, settings):
    battle = ended_battle(alice, status=SCREENING)
    lines = [*PROSE[:6], "Report prepared by the Surveyor agent.", *PROSE[6:10]]
    screenshot(battle, "A", 0, encoded(browser_screen(lines=lines)))
    assert passes_without_ocr(battle, settings)

    assert battle_screen(battle_id=battle.pk) == "named_model"

    note = note_of(battle)
    assert note.startswith("side A step 0 screenshot (OCR) names 'Surveyor': …"), note


def test_a_name_only_in_the_tab_title_or_address_bar_of_a_screenshot(alice, roster, settings):
    battle = ended_battle(alice, status=SCREENING, steps=(1, 2))
    screenshot(battle, "B", 0, encoded(browser_screen(lines=PROSE[:8])))
    screen = browser_screen(url="https://example.com/?by=rulebook", lines=PROSE[:8])
    screenshot(battle, "B", 1, encoded(screen))
    assert passes_without_ocr(battle, settings)

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle).startswith("side B step 1 screenshot (OCR) names 'Rulebook'")


def test_a_name_typed_over_two_steps_is_read_where_the_screen_changed(alice, roster, settings):
    battle = ended_battle(alice, status=SCREENING, steps=(1, 3))
    screenshot(battle, "A", 0, encoded(browser_screen(lines=PROSE, typed="Sur")))
    screenshot(battle, "A", 1, encoded(browser_screen(lines=PROSE, typed="Sur")))  # the same
    screenshot(battle, "A", 2, encoded(browser_screen(lines=PROSE, typed="Surveyor")))
    assert passes_without_ocr(battle, settings)

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle).startswith("side A step 2 screenshot (OCR) names 'Surveyor'")


def test_ordinary_screens_leave_the_battle_open(alice, roster):
    battle = ended_battle(alice, status=SCREENING, steps=(2, 1))
    screenshot(battle, "A", 0, encoded(browser_screen(lines=PROSE)))
    screenshot(battle, "A", 1, encoded(browser_screen(lines=PROSE, scroll=3, typed="a survey")))
    screenshot(battle, "B", 0, encoded(browser_screen(lines=["A survey or a rule book."])))

    assert battle_screen(battle_id=battle.pk) == ""


def test_with_ocr_off_screens_are_not_read(alice, roster, settings):
    settings.ARENA = settings.ARENA.replace(leak_ocr=False)
    battle = ended_battle(alice, status=SCREENING)
    screenshot(battle, "A", 0, encoded(browser_screen(lines=["by the Surveyor agent"])))

    assert battle_screen(battle_id=battle.pk) == ""


def test_without_language_data_the_battle_stays_in_screening(alice, roster, settings, tmp_path):
    settings.ARENA = settings.ARENA.replace(leak_tessdata=tmp_path)
    battle = ended_battle(alice, status=SCREENING)
    screenshot(battle, "A", 0, encoded(browser_screen(lines=PROSE[:3])))

    with pytest.raises(RuntimeError):
        battle_screen(battle_id=battle.pk)

    battle.refresh_from_db()
    assert battle.status == SCREENING  # never served; the sweep retries once it is fixed
    settings.ARENA = settings.ARENA.replace(leak_tessdata=TESSDATA)
    assert battle_screen(battle_id=battle.pk) == ""


# --- the change-region reader -----------------------------------------------------------


def test_changed_bands_are_whole_rows_around_the_change():
    before = browser_screen(lines=PROSE)
    after = browser_screen(lines=PROSE, typed="hello")
    margin = ocr.BAND_MARGIN_PX

    assert ocr.changed_bands(None, after) == [(0, 800)]
    assert ocr.changed_bands(before, before.copy()) == []
    [(top, bottom)] = ocr.changed_bands(before, after)
    assert top >= 720 - margin and bottom <= 757 + margin  # the input field's rows
    far = after.copy()
    ImageDraw.Draw(far).text((60, 20), "x", fill="black", font=font(12))
    assert len(ocr.changed_bands(before, far)) == 2


def test_a_band_reaches_to_the_gaps_around_what_changed_and_no_further():
    scrollbar = (1270, 76, 1279, 800)
    before, after = browser_screen(lines=PROSE), browser_screen(lines=PROSE, typed="hello")
    for image in (before, after):
        ImageDraw.Draw(image).rectangle(scrollbar, fill="#c1c1c1")  # no row is all one colour

    [(top, bottom)] = ocr.changed_bands(before, after)

    assert 700 <= top <= 720 and 757 <= bottom <= 790  # the input field's rows, not the page's


def test_large_text_revealed_in_part_is_read_whole():
    shown = Image.new("RGB", (1280, 800), "white")
    ImageDraw.Draw(shown).text((60, 200), "Surveyor", fill="black", font=font(150))
    ink_top = shown.convert("L").point(lambda v: 255 - v).getbbox()[1]
    covered = shown.copy()
    ImageDraw.Draw(covered).rectangle((0, 300, 1280, 800), fill="white")  # the lower part
    reader = ocr.ImageReader(TESSDATA)
    reader.read(covered)

    [(top, _bottom)] = ocr.changed_bands(covered, shown)

    assert top < ink_top < 300 - ocr.BAND_MARGIN_PX  # the margin alone would cut the letters
    assert "Surveyor" in reader.read(shown)


def test_the_reader_skips_what_it_has_read_and_reads_only_what_changed():
    reader = ocr.ImageReader(TESSDATA)
    first = browser_screen(lines=PROSE, typed="")
    full = first.width * first.height

    assert "quarterly figures" in reader.read(first)
    assert reader.pixels_read == full
    assert reader.read(first.copy()) == ""  # the same screen again: no OCR
    assert reader.pixels_read == full
    text = reader.read(browser_screen(lines=PROSE, typed="Surveyor"))
    assert "Surveyor" in text and "quarterly" not in text
    assert reader.pixels_read - full <= 1280 * 100  # the input field's band


def test_a_screen_seen_in_the_other_lane_is_not_read_again():
    seen: set[bytes] = set()
    data = encoded(browser_screen(lines=PROSE))
    lane_a, lane_b = ocr.ImageReader(TESSDATA, seen), ocr.ImageReader(TESSDATA, seen)

    assert lane_a.read_file(data) != ""
    assert lane_b.read_file(data) == ""
    assert lane_b.pixels_read == 0


# --- delivered images ------------------------------------------------------------------


def exif_rotated_jpeg(text: str) -> bytes:
    """A JPEG whose pixels hold ``text`` on its side, upright only when shown with its
    EXIF orientation (6: rotate 90° clockwise), as browsers do."""
    image = text_image(text).rotate(90, expand=True)
    exif = Image.Exif()
    exif[0x0112] = 6
    return encoded(image, "JPEG", quality=95, exif=exif.tobytes())


def alpha_only_png(text: str) -> bytes:
    """Black pixels everywhere; the text is only in the alpha channel (shows over a
    white page, vanishes when the alpha is dropped)."""
    mask = Image.new("L", (640, 160), 0)
    ImageDraw.Draw(mask).text((20, 40), text, fill=255, font=font(32))
    image = Image.new("RGBA", mask.size, (0, 0, 0, 0))
    image.putalpha(mask)
    return encoded(image)


def animated_gif(texts: list[str]) -> bytes:
    frames = [text_image(t).convert("P") for t in texts]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:], duration=500)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "make", "where"),
    [
        ("chart.png", lambda: encoded(text_image("Drawn by Surveyor")), "image (OCR)"),
        ("scan.jpg", lambda: encoded(text_image("Drawn by Surveyor"), "JPEG"), "image (OCR)"),
        ("pic.webp", lambda: encoded(text_image("Drawn by Surveyor"), "WEBP"), "image (OCR)"),
        ("anim.gif", lambda: animated_gif(["Hello", "Drawn by Surveyor"]), "frame 2"),
        ("turned.jpg", lambda: exif_rotated_jpeg("Drawn by Surveyor"), "image (OCR)"),
        ("alpha.png", lambda: alpha_only_png("Drawn by Surveyor"), "image (OCR)"),
        ("renamed.txt", lambda: encoded(text_image("Drawn by Surveyor")), "image (OCR)"),
    ],
)
def test_a_name_only_in_a_delivered_image_excludes_the_battle(
    alice, roster, settings, name, make, where
):
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "B", name, make())
    assert passes_without_ocr(battle, settings)

    assert battle_screen(battle_id=battle.pk) == "named_model"

    note = note_of(battle)
    assert note.startswith(f"side B delivered file 1 ({name})") and where in note, note
    assert "names 'Surveyor'" in note


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width``×``height`` pixels (a decompression bomb's
    shape) around one tiny compressed row."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: png_claiming(100_000, 100_000), "decompression bomb"),  # Pillow's bound
        (lambda: png_claiming(5000, 4000), "5000×4000 pixels is over"),
        (lambda: encoded(text_image("Surveyor"))[:300], "not a readable image"),
        (lambda: animated_gif([str(i) for i in range(ocr.MAX_FRAMES + 1)]), "frames is over"),
    ],
)
def test_an_image_the_scan_cannot_read_fails_closed(alice, roster, make, why):
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "A", "x.png", make())

    assert battle_screen(battle_id=battle.pk) == "named_model"

    note = note_of(battle)
    assert note.startswith("side A delivered file 1 (x.png): ") and why in note, note
    assert note.endswith("not scanned in full, so it may name an agent")


def test_the_battles_images_are_bounded_together(alice, roster, monkeypatch):
    monkeypatch.setattr(ocr, "MAX_BATTLE_IMAGE_PIXELS", 640 * 160 * 3)
    battle = ended_battle(alice, status=SCREENING)
    for name in ("a.png", "b.png", "c.png", "d.png"):
        deliver(battle, "A", name, encoded(text_image(name)))

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert "side A delivered file 4 (d.png): the battle's images pass" in note_of(battle)


def test_ordinary_images_leave_the_battle_open(alice, roster):
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "A", "chart.png", encoded(text_image("Revenue 2024: 4.2M")))
    deliver(battle, "B", "anim.gif", animated_gif(["a survey", "or two"]))

    assert battle_screen(battle_id=battle.pk) == ""
