"""Private media (step screenshots, deliveries, attachments, evaluation files) through
Django's storage API: one storage, the ``"private"`` alias of ``settings.STORAGES``.

By default it is ``PrivateFileSystemStorage`` at ``settings.PRIVATE_MEDIA_ROOT``; with
``ARENA_MEDIA_S3_BUCKET`` set it is django-storages' ``S3Storage`` on any S3-compatible
store, so a screenshot a worker on one host saved is served by a web process on another
(docs/media.md). Names are relative, ``/``-separated, and never leave the storage's root.

Every function here is the one way its operation is done; callers never build a path
under ``PRIVATE_MEDIA_ROOT`` for these files themselves."""

import contextlib
import errno
import os
import posixpath
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from botocore.exceptions import ClientError
from django.conf import settings
from django.core.exceptions import SuspiciousFileOperation
from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, Storage, storages

PRIVATE = "private"
CHUNK_BYTES = 64 * 1024
# Stored files are private: the arena's own user reads them, nobody else.
FILE_MODE = 0o640


class MediaUnreadable(Exception):
    """A stored file that is not a plain file (a link, a device) or is over a limit."""


class MediaTooLarge(MediaUnreadable):
    """More bytes than the reader's limit."""


class PrivateFileSystemStorage(FileSystemStorage):
    """The local default. Its root follows ``settings.PRIVATE_MEDIA_ROOT`` (read at each
    call, so a test's override applies); a name is resolved, links included, and must
    stay under the root; a save is written aside and renamed into place (a failed write
    leaves no file, whole or half) and replaces what was there."""

    def __init__(self, **options: object) -> None:
        options.setdefault("allow_overwrite", True)
        super().__init__(**options)  # type: ignore[arg-type]

    @property  # type: ignore[override]
    def base_location(self) -> str:
        return os.fspath(settings.PRIVATE_MEDIA_ROOT)

    @property  # type: ignore[override]
    def location(self) -> str:
        return os.path.abspath(self.base_location)

    def path(self, name: str) -> str:
        root = Path(self.location).resolve()
        path = (root / name).resolve()
        if not path.is_relative_to(root) or (path == root and name != "."):
            raise SuspiciousFileOperation(f"{name!r} is outside the private media root")
        return str(path)

    def _save(self, name: str, content: File) -> str:
        full = Path(self.path(name))
        full.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=full.parent, prefix=f".{full.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in content.chunks(CHUNK_BYTES):
                    out.write(chunk)
            os.chmod(temp, FILE_MODE)
            os.replace(temp, full)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        return name


def private_storage() -> Storage:
    return storages[PRIVATE]


def media_is_local() -> bool:
    """True when the private media are files under ``PRIVATE_MEDIA_ROOT``."""
    return isinstance(private_storage(), FileSystemStorage)


def media_name_ok(name: str) -> bool:
    """A stored name as the arena writes them: relative, normalised, no ``..``."""
    return (
        bool(name)
        and "\x00" not in name
        and not name.startswith("/")
        and posixpath.normpath(name) == name
        and ".." not in name.split("/")
    )


def _check(name: str) -> None:
    if not media_name_ok(name):
        raise SuspiciousFileOperation(f"{name!r} is not a private media name")


def _as_os_error(exc: Exception, what: str) -> OSError:
    """A remote store's failure as the OSError a full disk raises (callers handle one
    kind); the message names the failure's kind, never a credential."""
    return OSError(errno.EIO, f"the media store refused {what} ({type(exc).__name__})")


def media_save(name: str, data: bytes) -> None:
    """Stores ``data`` as ``name``, replacing any file of that name. Raises OSError when
    the disk or the store refuses (nothing half-written stays behind)."""
    _check(name)
    try:
        private_storage().save(name, ContentFile(data))
    except OSError:
        raise
    except Exception as exc:
        raise _as_os_error(exc, name) from exc


def media_store_file(name: str, local: Path) -> None:
    """Moves the local file ``local`` (already complete and synced) in as ``name``: a
    rename on the local disk, an upload then removal with a remote store."""
    _check(name)
    storage = private_storage()
    if isinstance(storage, FileSystemStorage):
        target = Path(storage.path(name))
        target.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(local, FILE_MODE)
        os.replace(local, target)
        return
    try:
        with local.open("rb") as handle:
            storage.save(name, File(handle))
    except OSError:
        raise
    except Exception as exc:
        raise _as_os_error(exc, name) from exc
    local.unlink(missing_ok=True)


def media_store_dir(prefix: str, local_dir: Path) -> None:
    """Uploads the plain files of ``local_dir`` as ``<prefix>/<file name>`` and removes
    the directory (a remote store only: on the local disk the files are already there)."""
    if media_is_local():
        return
    try:
        for entry in sorted(local_dir.iterdir()):
            if entry.is_file() and not entry.is_symlink():
                media_store_file(f"{prefix}/{entry.name}", entry)
    finally:
        shutil.rmtree(local_dir, ignore_errors=True)


def media_local_dir(prefix: str) -> Path:
    """Where a writer that needs a local directory (a sandbox's delivery) puts files
    for ``prefix``: the directory itself on the local disk, else a fresh scratch
    directory that ``media_store_dir`` uploads and removes."""
    storage = private_storage()
    if isinstance(storage, FileSystemStorage):
        return Path(storage.path(prefix))
    scratch = Path(settings.PRIVATE_MEDIA_ROOT) / ".scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="upload-", dir=scratch))


def media_open(name: str) -> File | None:
    """The stored file opened for reading, or None when the name is not a private media
    name, leaves the root, or nothing is stored under it."""
    if not media_name_ok(name):
        return None
    storage = private_storage()
    try:
        if isinstance(storage, FileSystemStorage) and not os.path.isfile(storage.path(name)):
            return None
        return storage.open(name, "rb")
    except (SuspiciousFileOperation, FileNotFoundError, IsADirectoryError):
        return None


def media_read(name: str, limit: int) -> bytes | None:
    """The bytes of ``name``, None when nothing is stored under it. Raises
    ``MediaUnreadable`` for a link or anything but a plain file (the lanes only ever
    write files), ``MediaTooLarge`` for more than ``limit`` bytes."""
    if not media_name_ok(name):
        return None
    storage = private_storage()
    if isinstance(storage, FileSystemStorage):
        try:
            # the directory resolved, the file itself not: a link is refused, not followed
            path = Path(storage.path(posixpath.dirname(name) or ".")) / posixpath.basename(name)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except (FileNotFoundError, SuspiciousFileOperation):
            return None
        except OSError as exc:  # a link, where the lane only ever writes files
            raise MediaUnreadable(f"not a plain file ({exc.strerror})") from exc
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise MediaUnreadable("not a plain file")
            data = handle.read(limit + 1)
    else:
        handle = media_open(name)
        if handle is None:
            return None
        with handle:
            data = handle.read(limit + 1)
    if len(data) > limit:
        raise MediaTooLarge(f"more than {limit:,} bytes")
    return data


def media_head(name: str, size: int) -> bytes | None:
    """The first ``size`` bytes of ``name`` (one ranged GET on S3, not the whole
    object), or None when ``media_open`` would give None."""
    storage = private_storage()
    if isinstance(storage, FileSystemStorage) or not media_name_ok(name):
        handle = media_open(name)
        if handle is None:
            return None
        with handle:
            return handle.read(size)
    key = storage._normalize_name(name)  # type: ignore[attr-defined]
    try:
        answer = storage.bucket.Object(key).get(Range=f"bytes=0-{size - 1}")  # type: ignore[attr-defined]
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        if code in ("404", "NoSuchKey"):
            return None
        if code == "InvalidRange":  # an empty object
            return b""
        raise
    with contextlib.closing(answer["Body"]) as body:
        return body.read(size)


def media_signing() -> bool:
    """True when permitted downloads are answered with a signed URL (S3 and
    ``ARENA_MEDIA_SIGNED_URL_S`` > 0), False when they are streamed."""
    return bool(settings.MEDIA_SIGNED_URL_S) and not media_is_local()


def media_exists(name: str) -> bool:
    if not media_name_ok(name):
        return False
    try:
        return private_storage().exists(name)
    except SuspiciousFileOperation:
        return False


def media_delete(name: str) -> None:
    """Removes ``name``; nothing stored under it is not an error."""
    if not media_name_ok(name):
        return
    with contextlib.suppress(FileNotFoundError, SuspiciousFileOperation):
        private_storage().delete(name)


def media_walk() -> Iterator[str]:
    """Every stored name, in order (a backup's: ``accounts.backups``). Links and other
    files that are not plain files on the local disk are not the arena's: left out."""
    storage = private_storage()
    if isinstance(storage, FileSystemStorage):
        root = Path(storage.location)
        for directory, dirs, files in os.walk(root):
            dirs.sort()
            for file in sorted(files):
                path = Path(directory) / file
                name = path.relative_to(root).as_posix()
                if path.is_file() and not path.is_symlink() and media_name_ok(name):
                    yield name
        return
    key_prefix = storage._normalize_name("")  # type: ignore[attr-defined]
    key_prefix = key_prefix.rstrip("/") + "/" if key_prefix else ""
    for item in sorted(storage.bucket.objects.filter(Prefix=key_prefix), key=lambda o: o.key):  # type: ignore[attr-defined]
        name = item.key[len(key_prefix) :]
        if media_name_ok(name):
            yield name


def media_delete_tree(prefix: str) -> None:
    """Removes every file under ``prefix/`` (and, on the local disk, the directory)."""
    _check(prefix)
    storage = private_storage()
    if isinstance(storage, FileSystemStorage):
        with contextlib.suppress(SuspiciousFileOperation):
            shutil.rmtree(storage.path(prefix), ignore_errors=True)
        return
    bucket = storage.bucket  # type: ignore[attr-defined]
    key_prefix = storage._normalize_name(prefix).rstrip("/") + "/"  # type: ignore[attr-defined]
    bucket.objects.filter(Prefix=key_prefix).delete()


def media_signed_url(name: str, *, content_type: str, disposition: str | None = None) -> str | None:
    """A URL that serves ``name`` for ``ARENA_MEDIA_SIGNED_URL_S`` seconds, then no
    more, with these response headers; None when files are streamed through the arena
    (the default, and always on the local disk). Call only after the access check."""
    if not media_signing() or not media_name_ok(name):
        return None
    storage = private_storage()
    seconds = settings.MEDIA_SIGNED_URL_S
    parameters = {"ResponseContentType": content_type, "ResponseCacheControl": "private"}
    if disposition:
        parameters["ResponseContentDisposition"] = disposition
    return storage.url(name, parameters=parameters, expire=seconds)
