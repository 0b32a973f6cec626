"""Task attachments: the admission rules (count, size, type, name) and private storage.

Admission runs three phases, so a refusal leaves nothing behind:

1. ``attachments_check`` — metadata only, no I/O: count, each size, the total, a safe
   and unique name per file, and an allowed type by extension.
2. ``attachments_stage`` — streams each upload once into a staging file under
   ``PRIVATE_MEDIA_ROOT/attachments/.incoming`` (always the local disk), hashing and
   sniffing the content as it goes. Done outside the admission transaction (no row
   lock held while hashing).
3. ``attachments_store`` — inside the admission transaction: moves each staged file
   to ``attachments/<task id>/<sha256>`` in the private storage (arena_site/media.py)
   and creates the rows. On any failure after staging the caller calls
   ``Staged.discard()``, which removes what this submission wrote (staged and stored
   files alike).

Allowed types, by extension, each confirmed by a cheap look at the bytes:

- text (``.txt .log .csv .tsv .json .md``): valid UTF-8 without NUL bytes;
- ``.pdf`` (``%PDF-``), ``.png``, ``.jpg``/``.jpeg``, ``.gif``, ``.webp`` (magic numbers);
- ``.zip`` (local-file or empty-archive signature; its members are not inspected: the
  agents get it as an opaque file).

Everything else is refused, in particular executables and scripts (``.exe``, ``.sh``,
``.py``, ``.js`` …), which no task needs to hand over as such, and HTML, SVG and XML,
which a browser would run. The content type stored is the one of the extension, never
the client's claim.

Names: Unicode NFKC-normalised (so full-width slashes and dots become plain ones
before anything else), the last path component only (``/`` and ``\\`` both separate),
invisible and control characters dropped, anything but letters, digits and ``._-+()``
replaced by ``_``, no leading or trailing dots, dashes or underscores, at most
``NAME_MAX_CHARS``, and unique within the task (``notes.txt``, ``notes-2.txt``). A name
empty after this is refused.
"""

import codecs
import contextlib
import errno
import hashlib
import os
import re
import tempfile
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest

from arena_site.exceptions import ApplicationError
from arena_site.media import (
    media_delete,
    media_is_local,
    media_open,
    media_store_file,
)
from battles.models import Attachment, Task
from battles.parity import LaneAttachment

NAME_MAX_CHARS = 100
CHUNK_BYTES = 64 * 1024
SNIFF_BYTES = 16
# Room for the instruction, the start URL and multipart framing above the attachments.
REQUEST_OVERHEAD_BYTES = 1024 * 1024
# Where the lanes find the files inside their sandboxes.
SANDBOX_DIR = "/work/attachments"
_DIR_NAME = "attachments"


@dataclass(frozen=True)
class FileType:
    content_type: str
    # For text: the whole content must be UTF-8. Otherwise: the first bytes must pass.
    text: bool = False
    head_ok: Callable[[bytes], bool] | None = None

    @property
    def served_inline_type(self) -> str:
        """The type a download is labelled with: images, PDF and plain text as what they
        are, anything else as opaque bytes (never something a browser would render)."""
        if self.text:
            return "text/plain; charset=utf-8"
        if self.content_type.startswith("image/") or self.content_type == "application/pdf":
            return self.content_type
        return "application/octet-stream"


def _starts(*prefixes: bytes) -> Callable[[bytes], bool]:
    return lambda head: any(head.startswith(p) for p in prefixes)


_TEXT = {"text": True}
ALLOWED_TYPES: dict[str, FileType] = {
    ".txt": FileType("text/plain", **_TEXT),
    ".log": FileType("text/plain", **_TEXT),
    ".csv": FileType("text/csv", **_TEXT),
    ".tsv": FileType("text/tab-separated-values", **_TEXT),
    ".json": FileType("application/json", **_TEXT),
    ".md": FileType("text/markdown", **_TEXT),
    ".pdf": FileType("application/pdf", head_ok=_starts(b"%PDF-")),
    ".png": FileType("image/png", head_ok=_starts(b"\x89PNG\r\n\x1a\n")),
    ".jpg": FileType("image/jpeg", head_ok=_starts(b"\xff\xd8\xff")),
    ".jpeg": FileType("image/jpeg", head_ok=_starts(b"\xff\xd8\xff")),
    ".gif": FileType("image/gif", head_ok=_starts(b"GIF87a", b"GIF89a")),
    ".webp": FileType(
        "image/webp", head_ok=lambda head: head[:4] == b"RIFF" and head[8:12] == b"WEBP"
    ),
    ".zip": FileType("application/zip", head_ok=_starts(b"PK\x03\x04", b"PK\x05\x06")),
}


def file_type_of(name: str) -> FileType | None:
    return ALLOWED_TYPES.get(os.path.splitext(name)[1].lower())


def served_content_type(name: str, head: bytes) -> str:
    """The Content-Type to serve a private file with (an attachment or a delivered
    file, whose bytes an agent chose): the extension's type only when the first bytes
    agree, otherwise opaque bytes."""
    kind = file_type_of(name)
    if kind is None:
        return "application/octet-stream"
    if kind.text:
        return kind.served_inline_type if b"\x00" not in head else "application/octet-stream"
    if kind.head_ok is not None and not kind.head_ok(head):
        return "application/octet-stream"
    return kind.served_inline_type


# --- names ----------------------------------------------------------------------------

_INVISIBLE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def safe_name(raw: str) -> str:
    """The display and on-disk name of an uploaded file; "" when nothing usable is left."""
    text = unicodedata.normalize("NFKC", str(raw or ""))
    text = text.replace("\\", "/").rsplit("/", 1)[-1]
    kept = []
    for ch in text:
        if unicodedata.category(ch) in _INVISIBLE:
            continue
        kept.append(ch if ch.isalnum() or ch in "._-+()" else "_")
    name = re.sub(r"_{2,}", "_", "".join(kept))
    # No hidden files, no names a shell would read as options, nothing trailing the
    # extension.
    name = name.strip("._-")
    if len(name) > NAME_MAX_CHARS:
        stem, ext = os.path.splitext(name)
        ext = ext if len(ext) <= 16 else ""
        name = stem[: NAME_MAX_CHARS - len(ext)] + ext
    return name


def _unique(name: str, taken: set[str]) -> str:
    stem, ext = os.path.splitext(name)
    candidate, n = name, 1
    while candidate.casefold() in taken:
        n += 1
        suffix = f"-{n}{ext}"
        candidate = stem[: NAME_MAX_CHARS - len(suffix)] + suffix
    taken.add(candidate.casefold())
    return candidate


# --- phase 1: check -------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """An upload that passed the metadata checks."""

    upload: object
    name: str
    kind: FileType


def _limits() -> tuple[int, int, int]:
    arena = settings.ARENA
    return (
        arena.attachments_max_count,
        arena.attachment_max_bytes,
        arena.attachments_max_total_bytes,
    )


def _mib(n: int) -> str:
    return f"{n / 1024**2:.1f} MiB" if n >= 1024**2 else f"{n} bytes"


def attachments_check_request_size(request: HttpRequest) -> None:
    """Refuses a request whose declared body is larger than any admissible submission,
    before its body is parsed (a front proxy should bound it too)."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    limit = _limits()[2] + REQUEST_OVERHEAD_BYTES
    if length > limit:
        raise ApplicationError(
            f"The request is {_mib(length)}; a submission with its attachments may be at "
            f"most {_mib(limit)}.",
            code="request_too_large",
            status=413,
        )


def attachments_check(uploads: Sequence[object]) -> list[Pending]:
    """Count, sizes, names and types, from what the upload already tells (no reading).
    Raises ``ApplicationError`` (400 or 413) naming the file and the rule."""
    max_count, max_bytes, max_total = _limits()
    if len(uploads) > max_count:
        raise ApplicationError(
            f"{len(uploads)} attachments were sent; at most {max_count} are allowed.",
            code="too_many_attachments",
        )
    pending: list[Pending] = []
    taken: set[str] = set()
    total = 0
    for upload in uploads:
        raw_name = getattr(upload, "name", None)
        size = getattr(upload, "size", None)
        if (
            not isinstance(raw_name, str)
            or not isinstance(size, int)
            or not hasattr(upload, "chunks")
        ):
            raise ApplicationError(
                "attachments must be files sent as multipart/form-data.",
                code="invalid_attachment",
            )
        shown = raw_name[:200]
        if size == 0:
            raise ApplicationError(f"{shown!r} is empty.", code="empty_attachment")
        if size > max_bytes:
            raise ApplicationError(
                f"{shown!r} is {_mib(size)}; each attachment may be at most {_mib(max_bytes)}.",
                code="attachment_too_large",
                status=413,
            )
        total += size
        if total > max_total:
            raise ApplicationError(
                f"The attachments add up to more than {_mib(max_total)}, the limit per task.",
                code="attachments_too_large",
                status=413,
            )
        name = safe_name(raw_name)
        if not name:
            raise ApplicationError(
                f"{shown!r} has no usable file name; rename it (letters, digits, ._-).",
                code="invalid_attachment_name",
            )
        kind = file_type_of(name)
        if kind is None:
            allowed = " ".join(sorted(ALLOWED_TYPES))
            raise ApplicationError(
                f"{shown!r} is not an allowed type; allowed: {allowed}.",
                code="unsupported_attachment_type",
            )
        pending.append(Pending(upload=upload, name=_unique(name, taken), kind=kind))
    return pending


# --- phase 2: stage -------------------------------------------------------------------


@dataclass(frozen=True)
class StagedFile:
    name: str
    size: int
    sha256: str
    content_type: str
    temp_path: Path


@dataclass
class Staged:
    """What a submission wrote; ``discard`` removes all of it."""

    files: list[StagedFile] = field(default_factory=list)
    # Local staging files, and names in the private storage.
    written: set[Path] = field(default_factory=set)
    stored: set[str] = field(default_factory=set)
    # The task's directory on the local disk, made by ``attachments_store`` (no other
    # submission uses it).
    task_dir: Path | None = None

    def discard(self) -> None:
        for path in self.written:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self.written.clear()
        for name in self.stored:
            media_delete(name)
        self.stored.clear()
        if self.task_dir is not None:
            with contextlib.suppress(OSError):
                self.task_dir.rmdir()


def _root() -> Path:
    return Path(settings.PRIVATE_MEDIA_ROOT) / _DIR_NAME


# The media disk (or its quota) is full: the client may try again later.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def storage_full_error(exc: OSError) -> ApplicationError:
    return ApplicationError(
        "The arena's file storage is full; the attachments were not stored. Try again later.",
        code="storage_full",
        status=507,
        extra={"detail": exc.strerror or str(exc)},
    )


def _mkdir(directory: Path) -> None:
    """Makes ``directory``; a full disk is the submitter's clear 507, not a crash."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno in DISK_FULL_ERRNOS:
            raise storage_full_error(exc) from exc
        raise


def attachments_stage(pending: Sequence[Pending]) -> Staged:
    """Streams every upload once into a staging file, hashing it and confirming its
    type from its bytes. Refuses with ``ApplicationError`` (after removing what it
    wrote) when a file is not what its name says."""
    staged = Staged()
    if not pending:
        return staged
    incoming = _root() / ".incoming"
    _mkdir(incoming)
    max_bytes = _limits()[1]
    try:
        for item in pending:
            fd, temp = tempfile.mkstemp(dir=incoming, prefix="upload-")
            staged.written.add(Path(temp))
            digest, size, head = hashlib.sha256(), 0, b""
            decoder = codecs.getincrementaldecoder("utf-8")("strict")
            is_text = True
            with os.fdopen(fd, "wb") as out:
                for chunk in item.upload.chunks(CHUNK_BYTES):  # type: ignore[attr-defined]
                    size += len(chunk)
                    if size > max_bytes:  # the upload grew after it was measured
                        raise ApplicationError(
                            f"{item.name!r} is larger than {_mib(max_bytes)}.",
                            code="attachment_too_large",
                            status=413,
                        )
                    digest.update(chunk)
                    if len(head) < SNIFF_BYTES:
                        head += chunk[: SNIFF_BYTES - len(head)]
                    if item.kind.text and is_text:
                        is_text = _decodes(decoder, chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            if item.kind.text:
                is_text = is_text and _decodes(decoder, b"", final=True)
            if size == 0:
                raise ApplicationError(f"{item.name!r} is empty.", code="empty_attachment")
            matches = is_text if item.kind.text else item.kind.head_ok(head)  # type: ignore[misc]
            if not matches:
                what = "UTF-8 text" if item.kind.text else item.kind.content_type
                raise ApplicationError(
                    f"{item.name!r} does not contain {what}, as its name says.",
                    code="attachment_content_mismatch",
                )
            staged.files.append(
                StagedFile(
                    name=item.name,
                    size=size,
                    sha256=digest.hexdigest(),
                    content_type=item.kind.content_type,
                    temp_path=Path(temp),
                )
            )
    except OSError as exc:
        staged.discard()
        if exc.errno in DISK_FULL_ERRNOS:
            raise storage_full_error(exc) from exc
        raise
    except BaseException:
        staged.discard()
        raise
    return staged


def _decodes(decoder: codecs.IncrementalDecoder, chunk: bytes, *, final: bool = False) -> bool:
    if b"\x00" in chunk:
        return False
    try:
        decoder.decode(chunk, final=final)
    except UnicodeDecodeError:
        return False
    return True


# --- phase 3: store -------------------------------------------------------------------


def attachments_store(*, task: Task, staged: Staged) -> list[Attachment]:
    """Moves the staged files to ``attachments/<task id>/<sha256>`` in the private
    storage (an atomic rename each on the local disk, an upload to a remote store) and
    creates their rows. Call inside the admission transaction; on rollback the caller
    discards ``staged``, which now also lists the stored files."""
    if not staged.files:
        return []
    prefix = f"{_DIR_NAME}/{task.pk}"
    if media_is_local():
        directory = _root() / str(task.pk)
        _mkdir(directory)
        staged.task_dir = directory
    rows = []
    for item in staged.files:
        name = f"{prefix}/{item.sha256}"
        staged.stored.add(name)
        try:
            media_store_file(name, item.temp_path)
        except OSError as exc:
            if exc.errno in DISK_FULL_ERRNOS:
                raise storage_full_error(exc) from exc
            raise
        staged.written.discard(item.temp_path)
        rows.append(
            Attachment(
                task=task,
                team_id=task.team_id,
                name=item.name,
                size=item.size,
                sha256=item.sha256,
                content_type=item.content_type,
                path=name,
            )
        )
    return Attachment.objects.bulk_create(rows)


def stored_path(relative: str) -> Path | None:
    """The absolute path of a file kept on this host's disk under PRIVATE_MEDIA_ROOT
    (repository uploads, which are not in the private storage: docs/media.md), or None
    when it escapes the private root or is missing."""
    root = Path(settings.PRIVATE_MEDIA_ROOT).resolve()
    path = (root / relative).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path


# --- lanes ----------------------------------------------------------------------------


class AttachmentCorrupted(Exception):
    """A stored attachment no longer has the bytes admission hashed."""


def sandbox_paths(attachments: Sequence[LaneAttachment]) -> tuple[str, ...]:
    return tuple(f"{SANDBOX_DIR}/{a.name}" for a in attachments)


def attachments_place(
    *, work_dir: Path, owner_uid: int | None, attachments: Sequence[LaneAttachment]
) -> tuple[str, ...]:
    """Copies the attachments into a sandbox's work dir as ``attachments/<name>``
    (read-only files, owned by the sandbox's uid when the worker is root), verifying
    each copy against its hash, and returns their paths inside the sandbox.

    The work dir belongs to the sandbox, so nothing in it is trusted: the directory
    is created fresh and every file is opened relative to it with O_NOFOLLOW|O_EXCL."""
    if not attachments:
        return ()
    chown = owner_uid is not None and os.geteuid() == 0
    work_fd = os.open(work_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.mkdir(_DIR_NAME, 0o700, dir_fd=work_fd)
        dir_fd = os.open(_DIR_NAME, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=work_fd)
    finally:
        os.close(work_fd)
    try:
        for item in attachments:
            if not item.name or item.name != safe_name(item.name) or "/" in item.name:
                raise AttachmentCorrupted(f"attachment name {item.name!r} is not a safe name")
            source = media_open(item.path)
            if source is None:
                raise AttachmentCorrupted(f"attachment {item.name!r} is missing from storage")
            fd = os.open(
                item.name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                0o600,
                dir_fd=dir_fd,
            )
            with os.fdopen(fd, "wb") as out, source as src:
                digest, size = hashlib.sha256(), 0
                while chunk := src.read(CHUNK_BYTES):
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
                if digest.hexdigest() != item.sha256 or size != item.size:
                    raise AttachmentCorrupted(f"attachment {item.name!r} changed in storage")
                os.fchmod(out.fileno(), 0o444)
                if chown:
                    os.fchown(out.fileno(), owner_uid, owner_uid)  # type: ignore[arg-type]
        os.fchmod(dir_fd, 0o755)
        if chown:
            os.fchown(dir_fd, owner_uid, owner_uid)  # type: ignore[arg-type]
    finally:
        os.close(dir_fd)
    return sandbox_paths(attachments)
