"""Admission of a repo task's source and commands (docs/coding.md): checked before
anything is created; the upload is streamed to storage, hashed and sniffed (a git
bundle or a tarball, whatever the client called it)."""

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from arena_site.exceptions import ApplicationError
from battles.coding_models import RepoSource

COMMAND_MAX_CHARS = 2000
TIME_LIMIT_RANGE = (10, 3600)
_REF = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,200}$")
_BUNDLE_MAGIC = (b"# v2 git bundle\n", b"# v3 git bundle\n")


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


def _url(value: object) -> str:
    if not isinstance(value, str) or len(value) > 2000:
        raise _refuse("url must be a git URL (https:// or http://) of at most 2000 characters.")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refuse(
            "url must be an http(s) git URL the sandbox can fetch through the egress proxy; "
            "for anything else, upload a git bundle or a tarball."
        )
    if parts.username or parts.password:
        raise _refuse("url must not carry credentials: the arena fetches public repositories only.")
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


def repo_store(checked: CheckedRepo, upload: object) -> CheckedRepo:
    """Streams the upload to ``repos/uploads/<sha256>`` (content-addressed; the same
    bytes twice are stored once), bounded, and names its kind from its first bytes."""
    if upload is None:
        return checked
    # The request's own bound (battles.attachments) is the attachments' total.
    limit = settings.ARENA.attachments_max_total_bytes
    size = getattr(upload, "size", None) or 0
    if size > limit:
        raise _refuse(
            f"The repository upload is {size} bytes; the limit is {limit}.",
            code="repo_too_large",
            status=413,
        )
    root = Path(settings.PRIVATE_MEDIA_ROOT) / "repos" / "uploads"
    root.mkdir(parents=True, exist_ok=True)
    digest, written, head = hashlib.sha256(), 0, b""
    fd, temp = tempfile.mkstemp(prefix=".incoming-", dir=root)
    try:
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
        sha = digest.hexdigest()
        os.replace(temp, root / sha)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return replace(checked, origin=origin, upload_path=f"repos/uploads/{sha}", upload_sha256=sha)
