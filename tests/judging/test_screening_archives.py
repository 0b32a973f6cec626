"""Screening reads inside delivered archives (docs/leak-scan.md, "What is scanned"):
zip, tar, gzip, bzip2, xz, recognised by their bytes, nested ones opened; each member's
name and contents read as a delivered file's are. An archive is untrusted: what cannot
be read in full (a bomb, too many members, too deep, encrypted, corrupt, cut short)
excludes the battle with a note that says so. Every archive here is made for real with
the standard library, delivered where the lane puts files, and screened."""

import bz2
import gzip
import io
import lzma
import tarfile
import zipfile

import pytest

from battles.models import Battle
from judging import archives
from judging.services import battle_screen
from judging.services.screening import battle_leak_note
from tests.judging.battle_factories import ended_battle
from tests.judging.leak_factories import deliver, note_of
from tests.judging.screens import encoded, text_image

SCREENING = Battle.Status.SCREENING
NAMED = b"Summary\nWritten by the Surveyor agent.\n"
PLAIN = b"Summary\nRevenue is up 12 percent.\n"


def zipped(files: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def tarred(files: dict[str, bytes], *, link: tuple[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(link[0])
            info.type, info.linkname = tarfile.SYMTYPE, link[1]
            archive.addfile(info)
    return buffer.getvalue()


def gzipped(data: bytes, name: str = "") -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(filename=name, fileobj=buffer, mode="wb", mtime=0) as stream:
        stream.write(data)
    return buffer.getvalue()


def screened(alice, name: str, data: bytes) -> tuple[str, str]:
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "A", name, data)
    reason = battle_screen(battle_id=battle.pk)
    return reason, note_of(battle) if reason else ""


@pytest.mark.parametrize(
    ("name", "data", "where"),
    [
        ("report.zip", zipped({"docs/report.txt": NAMED}), "member report.zip/docs/report.txt"),
        ("stored.zip", zipped({"r.txt": NAMED}, zipfile.ZIP_STORED), "member stored.zip/r.txt"),
        ("bz.zip", zipped({"r.txt": NAMED}, zipfile.ZIP_BZIP2), "member bz.zip/r.txt"),
        ("xz.zip", zipped({"r.txt": NAMED}, zipfile.ZIP_LZMA), "member xz.zip/r.txt"),
        ("bundle.tar", tarred({"a/r.txt": NAMED}), "member bundle.tar/a/r.txt"),
        ("bundle.tar.gz", gzipped(tarred({"r.txt": NAMED})), "bundle.tar/r.txt text"),
        ("bundle.tgz", gzipped(tarred({"r.txt": NAMED})), "member bundle.tar/r.txt"),
        ("bundle.tar.bz2", bz2.compress(tarred({"r.txt": NAMED})), "member bundle.tar/r.txt"),
        ("bundle.tar.xz", lzma.compress(tarred({"r.txt": NAMED})), "member bundle.tar/r.txt"),
        ("notes.txt.gz", gzipped(NAMED), "member notes.txt text"),
        ("notes.bz2", bz2.compress(NAMED), "member notes text"),
        ("notes.xz", lzma.compress(NAMED), "member notes text"),
        ("page.zip", zipped({"p.html": b"<p>By <b>Surv</b>eyor</p>"}), "text shown as HTML"),
        ("data.bin", zipped({"r.txt": NAMED}), "member data.bin/r.txt"),  # by bytes
        ("nested.zip", zipped({"in.tgz": gzipped(tarred({"r.txt": NAMED}))}), "r.txt"),
        ("names.zip", zipped({"by-surveyor/result.txt": PLAIN}), "result.txt name"),
        ("link.tar", tarred({"r.txt": PLAIN}, link=("x", "/home/surveyor")), "x link to"),
        ("fname.gz", gzipped(PLAIN, name="surveyor.txt"), "name"),
    ],
)
def test_a_name_inside_a_delivered_archive_excludes_the_battle(alice, roster, name, data, where):
    reason, note = screened(alice, name, data)

    assert reason == "named_model"
    assert note.startswith(f"side A delivered file 1 ({name}) member "), note
    assert where in note.split(" names ")[0] and "names 'Surveyor'" in note, note


def test_without_reading_members_the_same_archives_pass(alice, roster, monkeypatch):
    """What the members hold is not in the archive's raw bytes: such cases above fail
    without the archive reading (a compressed member)."""
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "A", "a.zip", zipped({"r.txt": NAMED}))
    deliver(battle, "A", "b.tgz", gzipped(tarred({"r.txt": NAMED})))
    deliver(battle, "B", "c.tar.xz", lzma.compress(tarred({"r.txt": NAMED})))
    runs = list(battle.runs.prefetch_related("steps"))
    assert battle_leak_note(runs).startswith("side A delivered file 1 (a.zip) member")

    monkeypatch.setattr(archives, "archive_kind", lambda data: None)

    assert battle_leak_note(runs) == ""


def test_ordinary_archives_leave_the_battle_open(alice, roster):
    files = {"docs/report.txt": PLAIN, "survey or poll.txt": b"a rule book"}
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "A", "report.zip", zipped(files))
    deliver(battle, "B", "bundle.tgz", gzipped(tarred(files)))

    assert battle_screen(battle_id=battle.pk) == ""


def test_an_image_inside_an_archive_is_read_with_ocr(alice, roster):
    png = encoded(text_image("Chart by the Surveyor agent", size=(900, 120)))

    reason, note = screened(alice, "charts.zip", zipped({"img/chart.png": png}))

    assert reason == "named_model"
    assert "member charts.zip/img/chart.png image (OCR) names 'Surveyor'" in note, note


# --- failing closed ---------------------------------------------------------------------


def unscannable(note: str) -> bool:
    return note.endswith(": not scanned in full, so it may name an agent")


def test_a_zip_bomb_fails_closed_without_being_unpacked(alice, roster):
    bomb = zipped({"zeros.txt": b"\0" * (archives.MEMBER_MAX_BYTES + 1)})
    assert len(bomb) < 20_000

    reason, note = screened(alice, "bomb.zip", bomb)

    assert reason == "named_model" and unscannable(note)
    assert "bomb.zip/zeros.txt: more than the scan's 8,388,608 bytes" in note


def test_a_gzip_bomb_stops_at_the_battles_bound(alice, roster):
    bomb = gzipped(b"\0" * (archives.MAX_BYTES + 1))

    reason, note = screened(alice, "zeros.gz", bomb)

    assert reason == "named_model" and unscannable(note)
    assert "zeros: the battle's archives pass 33,554,432 bytes unpacked" in note


def test_the_battles_archives_are_bounded_together(alice, roster):
    """Five members of 7 MiB each pass no member's bound but the battle's (32 MiB)."""
    big = b"\0" * (7 * 1024**2)
    data = zipped({f"part{i}.bin": big for i in range(5)})

    reason, note = screened(alice, "parts.zip", data)

    assert reason == "named_model" and unscannable(note)
    assert "parts.zip/part4.bin: more than" not in note
    assert "the battle's archives pass 33,554,432 bytes unpacked" in note


def test_too_many_members_fail_closed(alice, roster):
    data = zipped({f"f{i}.txt": b"" for i in range(archives.MAX_MEMBERS + 1)})

    reason, note = screened(alice, "many.zip", data)

    assert reason == "named_model" and unscannable(note)
    assert "many.zip: the battle's archives pass 1,000 members" in note


def test_archives_nested_too_deep_fail_closed(alice, roster):
    data = zipped({"level0.txt": PLAIN})
    for level in range(1, archives.MAX_DEPTH + 1):
        data = zipped({f"level{level}.zip": data})

    reason, note = screened(alice, "deep.zip", data)

    assert reason == "named_model" and unscannable(note)
    assert "archives nested more than 4 deep" in note


def test_an_encrypted_member_fails_closed(alice, roster):
    data = bytearray(zipped({"secret.txt": PLAIN}))
    data[6] |= 1  # the general-purpose flag "encrypted", in the local header
    data[data.find(b"PK\x01\x02") + 8] |= 1  # and in the central directory

    reason, note = screened(alice, "locked.zip", bytes(data))

    assert reason == "named_model" and unscannable(note)
    assert "locked.zip/secret.txt: encrypted" in note


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("cut.zip", zipped({"r.txt": PLAIN * 200})[:-30], "unreadable"),
        ("cut.gz", gzipped(PLAIN * 200)[:-8], "cut short"),
        ("cut.xz", lzma.compress(PLAIN * 200)[:-20], "cut short"),
        ("cut.tar", tarred({"r.txt": PLAIN * 200})[:1024], "unreadable"),
    ],
)
def test_a_corrupt_or_cut_archive_fails_closed(alice, roster, name, data, says):
    reason, note = screened(alice, name, data)

    assert reason == "named_model" and unscannable(note)
    assert says in note, note


def test_a_zip_whose_crc_does_not_hold_fails_closed(alice, roster):
    data = bytearray(zipped({"r.txt": PLAIN}, zipfile.ZIP_STORED))
    data[data.find(PLAIN)] ^= 0x01  # the content changed, its CRC not

    reason, note = screened(alice, "crc.zip", bytes(data))

    assert reason == "named_model" and unscannable(note)
    assert "crc.zip: unreadable (BadZipFile" in note, note


def test_a_tar_header_tarfile_cannot_read_fails_closed(alice, roster):
    """GNU tar skips an unreadable header and reads on; Python's ``tarfile`` stops."""
    data = bytearray(tarred({"a.txt": PLAIN, "b.txt": NAMED}))
    data[1024 + 148 : 1024 + 156] = b"0000000\0"  # the second header's checksum

    reason, note = screened(alice, "odd.tar", bytes(data))

    assert reason == "named_model" and unscannable(note)
    assert "odd.tar: a header at byte 1,024 is unreadable" in note, note
