"""A repo task's source, made once per task: the worker fetches the URL (through the
egress proxy) or unpacks the upload inside a sandbox, and keeps the canonical bundles
that every lane and judge sandbox of the task will clone (docs/coding.md)."""

import hashlib
import logging
import os
import tempfile
from dataclasses import replace
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from battles.attachments import stored_path
from battles.coding_models import RepoSource
from battles.parity import LaneRepo
from battles.services.coding_sandbox import place_bundle, sh
from coding import scripts
from sandboxes.base import ToolError
from sandboxes.services import lane_sandbox_spec, sandbox_session
from sandboxes.untrusted import storable_text

logger = logging.getLogger(__name__)

PREPARE_TIMEOUT_S = 300
# The largest canonical bundle the arena keeps (a repo task is a small project).
BUNDLE_MAX_BYTES = 64 * 1024**2


class SourceUnavailable(Exception):
    """The source could not be fetched or unpacked; the message says why."""


def _store(data: bytes) -> tuple[str, str]:
    """Keeps bundle bytes content-addressed under the private media root."""
    sha = hashlib.sha256(data).hexdigest()
    relative = f"repos/{sha}.bundle"
    path = Path(settings.PRIVATE_MEDIA_ROOT) / relative
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.part")
        temp.write_bytes(data)
        os.replace(temp, path)
    return relative, sha


def lane_repo(source: RepoSource, *, judge: bool = False) -> LaneRepo:
    """What a sandbox of the task receives: the agents' bundle, or the judge's."""
    path = source.judge_bundle_path if judge and source.judge_bundle_path else source.bundle_path
    sha = source.judge_bundle_sha256 if judge and source.judge_bundle_path else source.bundle_sha256
    stored = stored_path(path)
    if stored is None:
        raise SourceUnavailable(f"the prepared bundle {path} is missing from storage")
    return LaneRepo(
        bundle_path=path,
        bundle_sha256=sha,
        bundle_size=stored.stat().st_size,
        commit=source.commit,
        tree=source.tree,
        time_limit_s=source.time_limit_s,
        head=source.judge_commit if judge and source.judge_bundle_path else source.commit,
    )


def repo_source_prepare(*, source_id: int, run_id: int) -> RepoSource:
    """Makes the task's bundles once (a second call returns the prepared row). Raises
    ``SourceUnavailable`` with a reason a submitter can act on, also kept on the row."""
    source = RepoSource.objects.get(pk=source_id)
    if source.prepared_at is not None:
        return source
    try:
        found = _prepare(source, run_id)
    except SourceUnavailable as exc:
        RepoSource.objects.filter(pk=source.pk).update(prepare_error=str(exc)[:2000])
        raise
    with transaction.atomic():
        RepoSource.objects.filter(pk=source.pk, prepared_at=None).update(
            **found, prepared_at=timezone.now(), prepare_error=""
        )
    return RepoSource.objects.get(pk=source.pk)


def _prepare(source: RepoSource, run_id: int) -> dict:
    spec = replace(
        lane_sandbox_spec(run_id=run_id, lifetime_s=PREPARE_TIMEOUT_S + 120),
        desktop=False,
        egress=source.origin == RepoSource.Origin.URL,
        shell_timeout_s=PREPARE_TIMEOUT_S,
        deliver_max_files=2,
        deliver_max_bytes=2 * BUNDLE_MAX_BYTES,
    )
    with sandbox_session(spec) as sandbox:
        if source.origin != RepoSource.Origin.URL:
            upload = stored_path(source.upload_path)
            if upload is None:
                raise SourceUnavailable("the uploaded source is missing from storage")
            name = "upload.bundle" if source.origin == RepoSource.Origin.BUNDLE else "upload.tar"
            place_bundle(
                sandbox,
                name=name,
                path=source.upload_path,
                sha256=source.upload_sha256,
                size=upload.stat().st_size,
            )
        script = scripts.prepare_source(
            origin=source.origin, url=source.url, ref=source.ref, judge_ref=source.judge_ref
        )
        result = sh(sandbox, script, PREPARE_TIMEOUT_S)
        seen = scripts.report(result.stdout)
        if result.exit_code != 0:
            said = storable_text((result.stderr or result.stdout or result.error)[-600:])[0]
            what = "timed out" if result.timed_out else f"failed (exit {result.exit_code})"
            raise SourceUnavailable(f"fetching the source {what}: {said.strip()}")
        names = [
            f"out/{n}" for n in ("source.bundle", "judge.bundle")[: 2 if source.judge_ref else 1]
        ]
        with tempfile.TemporaryDirectory(dir=settings.PRIVATE_MEDIA_ROOT) as tmp:
            try:
                files = sandbox.collect_files(names, Path(tmp) / "out")
            except ToolError as exc:
                raise SourceUnavailable(f"the prepared source could not be read: {exc}") from None
            blobs = [f.path.read_bytes() for f in files]
    if any(len(blob) > BUNDLE_MAX_BYTES for blob in blobs):
        raise SourceUnavailable(f"the repository is larger than {BUNDLE_MAX_BYTES} bytes")
    commit, tree = scripts.git_id(seen.get("commit")), scripts.git_id(seen.get("tree"))
    if not commit or not tree:
        raise SourceUnavailable("the prepared source reported no commit")
    found = {"commit": commit, "tree": tree, "files": _count(seen.get("files"))}
    found["bundle_path"], found["bundle_sha256"] = _store(blobs[0])
    if source.judge_ref:
        found["judge_bundle_path"], found["judge_bundle_sha256"] = _store(blobs[1])
        found["judge_commit"] = scripts.git_id(seen.get("judge_commit"))
        if not found["judge_commit"]:
            raise SourceUnavailable("the judge's copy reported no commit")
    return found


def _count(value: str | None) -> int:
    try:
        return max(0, min(int(value or 0), 10**7))
    except ValueError:
        return 0
