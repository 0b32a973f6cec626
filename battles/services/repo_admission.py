"""Admission of a repo task's source and commands (docs/coding.md): checked before
anything is created; the upload is streamed to a staging file, hashed and sniffed (a
git bundle or a tarball, whatever the client called it), and moved into place only
with the task's rows, so a refused submission leaves no file behind."""

import hashlib
import logging
import os
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction

from agents.models import PUBLIC_ARENA_SLUG, Arena
from arena_site.exceptions import ApplicationError
from battles.attachments import DISK_FULL_ERRNOS, storage_full_error
from battles.coding_models import RepoSource
from sandboxes.netpolicy import (
    INVALID_HOST,
    MALFORMED_URL,
    SCHEME,
    USERINFO,
    EgressRefused,
    check_url,
)

COMMAND_MAX_CHARS = 2000
TIME_LIMIT_RANGE = (10, 3600)
_REF = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,200}$")
_BUNDLE_MAGIC = (b"# v2 git bundle\n", b"# v3 git bundle\n")
# Uploaded repositories, under PRIVATE_MEDIA_ROOT (this host's disk: docs/media.md).
UPLOADS_DIR = "repos/uploads"

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RepoRequest:
    """What a submitter sends for a repo task (the API's and the form's fields)."""

    url: object = ""
    ref: object = "HEAD"
    judge_ref: object = ""
    upload: object = None  # an UploadedFile
    success_cmd: object = ""
    test_cmd: object = ""
    time_limit_s: object = 600


@dataclass(frozen=True)
class CheckedRepo:
    origin: str
    url: str
    ref: str
    judge_ref: str
    success_cmd: str
    test_cmd: str
    time_limit_s: int
    upload_path: str = ""
    upload_sha256: str = ""


def _refuse(message: str, code: str = "invalid_repo", status: int = 400) -> ApplicationError:
    return ApplicationError(message, code=code, status=status)


def _command(value: object, field: str, *, required: bool) -> str:
    if value in (None, "") and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise _refuse(f"{field} must be a shell command, e.g. 'python3 -m pytest -q'.")
    if len(value) > COMMAND_MAX_CHARS or "\x00" in value:
        raise _refuse(f"{field} must be at most {COMMAND_MAX_CHARS} characters, without NUL.")
    return value.strip()


def _ref(value: object, field: str, *, default: str) -> str:
    if value in (None, ""):
        return default
    if not isinstance(value, str) or not _REF.fullmatch(value):
        raise _refuse(
            f"{field} must be a branch, tag or HEAD (letters, digits, '.', '_', '-', '/'), "
            f"not {str(value)[:80]!r}."
        )
    return value


class _NameNotChecked(Exception):
    """A host name: its destination is the egress proxy's to check, when dialled."""


def _no_names(host: str, port: int) -> list:
    raise _NameNotChecked(host)


def _url(value: object) -> str:
    """The repository URL, refused with a message naming ``repo_url`` when it is not an
    http(s) URL without credentials that the egress proxy's strict parser reads as
    written (``sandboxes.netpolicy.check_url``): not a bracket left open, an IPv6
    literal that is not one, a zone id or a port that is not 1-65535 (urllib raises
    ValueError for some of these, which must not become a 500). Where it points is the
    proxy's to decide when the sandbox fetches it."""
    if not isinstance(value, str) or len(value) > 2000:
        raise _refuse(
            "repo_url must be a git URL (https:// or http://) of at most 2000 characters."
        )
    try:
        parts = urlsplit(value)
        hostname, _ = parts.hostname, parts.port  # both raise on a malformed authority
    except ValueError:
        parts, hostname = None, None
    if parts is not None and parts.scheme not in ("http", "https"):
        raise _refuse(
            "repo_url must be an http(s) git URL the sandbox can fetch through the egress "
            "proxy; for anything else, upload a git bundle or a tarball."
        )
    if parts is not None and (parts.username or parts.password):
        raise _refuse(
            "repo_url must not carry credentials: the arena fetches public repositories only."
        )
    # A zone id (fe80::1%eth0) names an interface of the host that reads it: never a
    # place a sandbox can fetch from.
    malformed = parts is None or not hostname or "%" in hostname
    if not malformed:
        try:
            check_url(value, _no_names, allowed_ports=None)
        except _NameNotChecked:
            pass
        except EgressRefused as refused:
            malformed = refused.reason in (MALFORMED_URL, INVALID_HOST, SCHEME, USERINFO)
    if malformed:
        raise _refuse(
            f"repo_url {value[:100]!r} is not a well-formed http(s) URL: it needs a host "
            "name or address (an IPv6 address in brackets, e.g. https://[2001:db8::1]/r.git), "
            "an optional port from 1 to 65535, no zone id, and no spaces, backslashes or "
            "control characters."
        )
    return value


def _time_limit(value: object) -> int:
    low, high = TIME_LIMIT_RANGE
    try:
        seconds = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        seconds = -1
    if isinstance(value, bool) or not low <= seconds <= high:
        raise _refuse(f"time_limit_s must be a whole number of seconds from {low} to {high}.")
    return seconds


def repo_check(request: RepoRequest) -> CheckedRepo:
    """Every field checked; the source's kind decided. Raises with a message a person
    can act on. The upload is not read here (``repo_store`` does that)."""
    has_url = bool(request.url)
    has_upload = request.upload is not None
    if has_url == has_upload:
        raise _refuse("A repo task needs exactly one source: a url, or an uploaded repository.")
    origin = RepoSource.Origin.URL if has_url else ""
    return CheckedRepo(
        origin=origin,
        url=_url(request.url) if has_url else "",
        ref=_ref(request.ref, "ref", default="HEAD"),
        judge_ref=_ref(request.judge_ref, "judge_ref", default=""),
        success_cmd=_command(request.success_cmd, "success_cmd", required=True),
        test_cmd=_command(request.test_cmd, "test_cmd", required=False),
        time_limit_s=_time_limit(request.time_limit_s),
    )


def _sniff(head: bytes) -> str:
    if head.startswith(_BUNDLE_MAGIC):
        return RepoSource.Origin.BUNDLE
    is_tar = head[257:262] == b"ustar"
    compressed = head.startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00"))
    if is_tar or compressed:
        return RepoSource.Origin.TARBALL
    return ""


@dataclass
class StagedUpload:
    """A repository upload streamed to a staging file beside its final place. Admission
    moves it to ``repos/uploads/<sha256>`` under the arena's lock, just before the
    task's rows are written (``place``); a submission refused or failed at any point
    removes what it wrote (``discard``)."""

    temp: Path
    final: Path
    # This submission put the final file there (no task of the same bytes had).
    created: bool = False

    @property
    def name(self) -> str:
        return f"{UPLOADS_DIR}/{self.final.name}"

    def place(self) -> None:
        """Call inside the admission transaction, holding the arena's row lock."""
        self.created = not self.final.exists()
        os.replace(self.temp, self.final)

    def discard(self) -> None:
        """Removes the staging file and, if ``place`` created the final file, that file
        too unless a task refers to it. The check runs under the arena's row lock, which
        every placement holds until its transaction ends: a concurrent submission of the
        same bytes has either committed its row (the file stays) or not yet placed it
        (it moves its own staging file in). Never raises: a file left behind is only
        space, and the original error is the caller's to report."""
        self.temp.unlink(missing_ok=True)
        if not self.created:
            return
        try:
            with transaction.atomic():
                lock = Arena.objects.select_for_update().filter(slug=PUBLIC_ARENA_SLUG)
                list(lock.values_list("pk", flat=True))
                if not RepoSource.objects.filter(upload_path=self.name).exists():
                    self.final.unlink(missing_ok=True)
        except Exception:
            logger.warning("could not remove the refused upload %s", self.name, exc_info=True)
        self.created = False


def repo_stage(checked: CheckedRepo, upload: object) -> tuple[CheckedRepo, StagedUpload | None]:
    """Streams the upload, bounded, to a staging file under ``repos/uploads/``, hashing
    it and naming its kind from its first bytes; refuses (removing the file) an upload
    too large or neither a bundle nor a tarball. Returns ``checked`` with the upload's
    final name and hash, and the staged file to ``place`` or ``discard``."""
    if upload is None:
        return checked, None
    # The request's own bound (battles.attachments) is the attachments' total.
    limit = settings.ARENA.attachments_max_total_bytes
    size = getattr(upload, "size", None) or 0
    if size > limit:
        raise _refuse(
            f"The repository upload is {size} bytes; the limit is {limit}.",
            code="repo_too_large",
            status=413,
        )
    root = Path(settings.PRIVATE_MEDIA_ROOT) / UPLOADS_DIR
    temp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=".incoming-", dir=root)
        digest, written, head = hashlib.sha256(), 0, b""
        with os.fdopen(fd, "wb") as out:
            for chunk in upload.chunks():  # type: ignore[attr-defined]
                written += len(chunk)
                if written > limit:
                    raise _refuse(
                        f"The repository upload is over {limit} bytes.",
                        code="repo_too_large",
                        status=413,
                    )
                if len(head) < 512:
                    head += chunk[: 512 - len(head)]
                digest.update(chunk)
                out.write(chunk)
        origin = _sniff(head)
        if not origin:
            raise _refuse(
                "The upload is neither a git bundle (git bundle create repo.bundle --all) "
                "nor a tar archive (.tar, .tar.gz, .tar.bz2, .tar.xz).",
                code="invalid_repo_upload",
            )
    except BaseException as exc:
        if temp is not None:
            Path(temp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            raise storage_full_error(exc) from exc
        raise
    sha = digest.hexdigest()
    staged = StagedUpload(temp=Path(temp), final=root / sha)
    return (
        replace(checked, origin=origin, upload_path=staged.name, upload_sha256=sha),
        staged,
    )


def repo_store(checked: CheckedRepo, upload: object) -> CheckedRepo:
    """``repo_stage`` and ``place`` at once, for a caller that creates its rows in the
    same transaction right after (an evaluation's repo tasks): the upload is kept as
    ``repos/uploads/<sha256>`` (content-addressed; the same bytes twice are stored
    once)."""
    checked, staged = repo_stage(checked, upload)
    if staged is not None:
        try:
            staged.place()
        except BaseException:
            staged.temp.unlink(missing_ok=True)
            raise
    return checked
