"""What a delivered archive holds, for the identity-leak scan (docs/leak-scan.md, "What is
scanned"): zip, tar, gzip, bzip2 and xz, recognised by their bytes, not their names;
every member's name and bytes, with nested archives opened in their place. Pure: bytes
in, nothing written to disk, nothing extracted.

The archive is untrusted (a zip bomb, a lying header, a member that never ends): every
size is checked as the bytes come, not taken from a header; the battle's members share
one ``Budget`` (count and uncompressed bytes) and nesting stops at ``MAX_DEPTH``. What
cannot be read in full (over a bound, corrupt, truncated, an encrypted zip member, an
xz stream that asks for too much memory) raises ``ArchiveUnreadable``: the screening
then fails closed."""

import bz2
import io
import lzma
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import NoReturn

# Layers of archives, a compression layer counted: a .tar.gz is two, a .tgz in a zip three.
MAX_DEPTH = 4
# Per battle, over all its archives: members (directories and links included) and
# uncompressed bytes; per member, as for a delivered file.
MAX_MEMBERS = 1000
MAX_BYTES = 32 * 1024**2
MEMBER_MAX_BYTES = 8 * 1024**2
# What an xz stream may ask for to be decoded (its dictionary); xz -9 needs 65 MiB.
XZ_MEMORY_LIMIT = 128 * 1024**2
_CHUNK = 1024**2
_ZIP_ENTRY = b"PK\x01\x02"  # each entry of a zip's central directory opens so
_BZIP2_BLOCKS = (b"1AY&SY", b"\x17rE8P\x90")  # a first block, or the end of an empty stream
_SUFFIXES = {".gz": "", ".tgz": ".tar", ".bz2": "", ".tbz2": ".tar", ".xz": "", ".txz": ".tar"}
# What the libraries raise on bytes they cannot read (zlib's, lzma's and tarfile's
# errors are OSError or ValueError subclasses or their own).
_UNREADABLE = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    tarfile.TarError,
    zlib.error,
    lzma.LZMAError,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
    RuntimeError,
)


class ArchiveUnreadable(Exception):
    """Part of an archive that cannot be read in full: the scan fails closed."""


@dataclass
class Budget:
    """What the battle's archives may still hold. One per scan."""

    members: int = field(default_factory=lambda: MAX_MEMBERS)
    bytes: int = field(default_factory=lambda: MAX_BYTES)

    def count(self, path: str) -> None:
        self.members -= 1
        if self.members < 0:
            raise ArchiveUnreadable(f"{path}: the battle's archives pass {MAX_MEMBERS:,} members")


@dataclass(frozen=True)
class Member:
    """One entry of an archive. ``path``: inside the delivered file, through the nested
    archives ("bundle.tar/docs/notes.txt"); ``data``: None for a directory, a link, a
    device, a nested archive (its members follow); ``texts``: (what, text) a listing
    shows beside its name (a link's target, a comment, the owner)."""

    path: str
    data: bytes | None
    texts: tuple[tuple[str, str], ...] = ()


def archive_kind(data: bytes) -> str | None:
    """The kind of archive ``data`` is, by its bytes ("zip", "tar", "gzip", "bzip2",
    "xz"), else None. A zip is also found behind other bytes (a self-extracting
    archive) by its end record."""
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if data.startswith(b"\x1f\x8b\x08"):
        return "gzip"
    if data.startswith(b"BZh") and data[3:4].isdigit() and data[4:10] in _BZIP2_BLOCKS:
        return "bzip2"
    if data.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if _is_tar(data):
        return "tar"
    if b"PK\x05\x06" in data[-65_557:] and zipfile.is_zipfile(io.BytesIO(data)):
        return "zip"
    return None


def _is_tar(data: bytes) -> bool:
    """A POSIX or GNU tar ("ustar" at 257), or an old one whose first header's checksum
    holds (as ``tarfile`` checks it)."""
    if len(data) < 512:
        return False
    if data[257:262] == b"ustar":
        return True
    header = data[:512]
    try:
        stored = int(header[148:156].strip(b"\x00 ") or b"-1", 8)
    except ValueError:
        return False
    blanked = header[:148] + b" " * 8 + header[156:]
    return header[0] != 0 and stored in (sum(blanked), sum(b - 256 * (b > 127) for b in blanked))


def members(name: str, data: bytes, budget: Budget) -> Iterator[Member]:
    """Every member of the archive ``data`` (``archive_kind`` is not None) named
    ``name``, nested archives opened in their place (each also given as a member of
    its own, by name). Raises ``ArchiveUnreadable``."""
    kind = archive_kind(data)
    if kind is None:
        raise ArchiveUnreadable(f"{name}: not an archive")
    try:
        yield from _layer(kind, name, data, budget, depth=1)
    except _UNREADABLE as exc:
        raise ArchiveUnreadable(f"{name}: unreadable ({type(exc).__name__}: {exc})") from exc


def _layer(kind: str, name: str, data: bytes, budget: Budget, depth: int) -> Iterator[Member]:
    if depth > MAX_DEPTH:
        raise ArchiveUnreadable(f"{name}: archives nested more than {MAX_DEPTH} deep")
    if kind == "zip":
        entries = _zip(name, data, budget)
    elif kind == "tar":
        entries = _tar(name, data, budget)
    else:
        entries = _stream(kind, name, data, budget)
    for member in entries:
        nested = archive_kind(member.data) if member.data is not None else None
        if nested is None:
            if member.data is not None and len(member.data) > MEMBER_MAX_BYTES:
                _over(member.path, MEMBER_MAX_BYTES)  # a decompressed stream
            yield member
            continue
        # An archive's own bytes are not read as text: its members are charged instead.
        budget.bytes += len(member.data)
        yield Member(member.path, None, member.texts)
        yield from _layer(nested, member.path, member.data, budget, depth + 1)


def _taken(stream: io.BufferedIOBase, path: str, budget: Budget) -> bytes:
    """All of ``stream``, read a chunk at a time and never past the bounds."""
    limit = min(MEMBER_MAX_BYTES, budget.bytes)
    chunks, size = [], 0
    while chunk := stream.read(min(_CHUNK, limit + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            _over(path, limit)
    budget.bytes -= size
    return b"".join(chunks)


def _over(path: str, limit: int) -> NoReturn:
    if limit == MEMBER_MAX_BYTES:
        raise ArchiveUnreadable(f"{path}: more than the scan's {MEMBER_MAX_BYTES:,} bytes")
    raise ArchiveUnreadable(f"{path}: the battle's archives pass {MAX_BYTES:,} bytes unpacked")


def _zip(name: str, data: bytes, budget: Budget) -> Iterator[Member]:
    # Counted before ``ZipFile`` reads its whole central directory into memory.
    if data.count(_ZIP_ENTRY) > budget.members:
        raise ArchiveUnreadable(f"{name}: the battle's archives pass {MAX_MEMBERS:,} members")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        if archive.comment:
            yield Member(name, None, (("comment", archive.comment.decode("utf-8", "replace")),))
        for info in archive.infolist():
            path = f"{name}/{info.filename}"
            budget.count(path)
            texts = (("comment", info.comment.decode("utf-8", "replace")),) if info.comment else ()
            if info.is_dir():
                yield Member(path, None, texts)
                continue
            if info.flag_bits & 0x1:
                raise ArchiveUnreadable(f"{path}: encrypted")
            if info.file_size > min(MEMBER_MAX_BYTES, budget.bytes):
                _over(path, min(MEMBER_MAX_BYTES, budget.bytes))
            with archive.open(info) as stream:  # its CRC is checked at the end
                yield Member(path, _taken(stream, path, budget), texts)


def _tar(name: str, data: bytes, budget: Budget) -> Iterator[Member]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        while (entry := archive.next()) is not None:
            path = f"{name}/{entry.name}"
            budget.count(path)
            owner = f"{entry.uname}/{entry.gname}"
            texts = [("owner", owner)] if owner != "/" else []
            if entry.issym() or entry.islnk():
                texts.append(("link to", entry.linkname))
            if not entry.isreg():
                yield Member(path, None, tuple(texts))
                continue
            if entry.size > min(MEMBER_MAX_BYTES, budget.bytes):
                _over(path, min(MEMBER_MAX_BYTES, budget.bytes))
            stream = archive.extractfile(entry)
            assert stream is not None  # a regular file has contents
            data_read = _taken(stream, path, budget)
            if len(data_read) != entry.size:
                raise ArchiveUnreadable(f"{path}: cut short")
            yield Member(path, data_read, tuple(texts))
        # ``tarfile`` ends at a header it cannot read; GNU tar skips it and reads on.
        if data[archive.offset : archive.offset + 512].strip(b"\x00"):
            raise ArchiveUnreadable(f"{name}: a header at byte {archive.offset:,} is unreadable")


def _stream(kind: str, name: str, data: bytes, budget: Budget) -> Iterator[Member]:
    """A compressed stream (several concatenated ones are one, as the tools read them)
    as one member: named by the gzip header, else ``name`` less its suffix."""
    suffix = PurePosixPath(name).suffix.lower()
    inner = name[: -len(suffix)] + _SUFFIXES[suffix] if suffix in _SUFFIXES else f"{name}.out"
    texts: tuple[tuple[str, str], ...] = ()
    if kind == "gzip":
        header = _gzip_header(data)
        if header.get("name"):
            inner = f"{PurePosixPath(name).parent}/{header['name']}".removeprefix("./")
        texts = tuple(header.items())
    budget.count(inner)
    yield Member(inner, _decompressed(kind, data, inner, budget), texts)


def _gzip_header(data: bytes) -> dict[str, str]:
    """The original file name and the comment a gzip header may carry (RFC 1952)."""
    flags, position, found = data[3], 10, {}
    if flags & 4:  # FEXTRA
        position += 2 + int.from_bytes(data[position : position + 2], "little")
    for flag, key in ((8, "name"), (16, "comment")):
        if flags & flag:
            end = data.find(b"\x00", position)
            if end < 0:
                raise ArchiveUnreadable("a gzip header that does not end")
            found[key] = data[position:end].decode("latin-1")
            position = end + 1
    return found


def _decompressed(kind: str, data: bytes, path: str, budget: Budget) -> bytes:
    """Every stream of ``data`` decompressed, the output bounded as it comes (a bomb
    stops at the bound, not at its end). A stream that does not end is unreadable;
    bytes after the last stream that open no new one are left, as the tools leave them.
    Bounded by what the battle's archives may still hold: a compressed tar may be larger
    than a member (``_layer`` checks a stream that is no archive against that bound)."""
    limit = budget.bytes
    out = bytearray()
    rest = data
    while rest:
        if kind == "gzip":
            inflater = zlib.decompressobj(wbits=31)
            out += inflater.decompress(rest, limit + 1 - len(out))
            while inflater.unconsumed_tail and len(out) <= limit:
                out += inflater.decompress(inflater.unconsumed_tail, limit + 1 - len(out))
            ended, rest = inflater.eof, inflater.unused_data
        else:
            decoder = (
                bz2.BZ2Decompressor()
                if kind == "bzip2"
                else lzma.LZMADecompressor(lzma.FORMAT_XZ, memlimit=XZ_MEMORY_LIMIT)
            )
            out += decoder.decompress(rest, max_length=limit + 1 - len(out))
            while not decoder.eof and not decoder.needs_input and len(out) <= limit:
                out += decoder.decompress(b"", max_length=limit + 1 - len(out))
            ended, rest = decoder.eof, decoder.unused_data
        if len(out) > limit:
            _over(path, limit)
        if not ended:
            raise ArchiveUnreadable(f"{path}: cut short")
        if archive_kind(rest) != kind:
            break
    budget.bytes -= len(out)
    return bytes(out)
