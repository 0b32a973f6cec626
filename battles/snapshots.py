"""Every run's initial state, kept so that it can be rebuilt (docs/environments.md,
"Snapshots"): the instruction, the start URL and the simulated web's content, the
screen, the tool set and the budgets, the attachments' bytes and a repo task's bundle.

Content-addressed twice: a manifest is stored once per SHA-256 of its canonical JSON
(both lanes of a battle have identical inputs, so they share one row), and each file
once per SHA-256 of its bytes under ``snapshots/blobs/`` in the private storage. The
copies make a snapshot independent of the task's own files. Retention: a snapshot no
run started from for ``ARENA_SNAPSHOT_RETENTION_DAYS`` is deleted with the blobs no
other snapshot names (``snapshots_prune``)."""

import hashlib
import json
import logging
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from arena_site.media import media_delete, media_exists, media_open, media_save
from battles.models import Run, RunSnapshot
from battles.parity import LaneAttachment, LaneInputs, LaneRepo
from sandboxes.base import SandboxSpec

logger = logging.getLogger(__name__)

MANIFEST_VERSION = 1
BLOB_PREFIX = "snapshots/blobs/"
_DEMOWEB_SOURCES = ("data.py", "pages.py")


def blob_name(sha256: str, prefix: str = BLOB_PREFIX) -> str:
    return f"{prefix}{sha256}"


@lru_cache(maxsize=1)
def simulated_web_digest() -> str:
    """The SHA-256 of the demo web's content (its data and page modules): a snapshot
    whose start URL is on the demo web names the version of the site it saw."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent / "sandboxes" / "demoweb"
    for name in _DEMOWEB_SOURCES:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    return digest.hexdigest()


def _simulated_web(start_url: str) -> dict | None:
    from sandboxes.demoweb import HOST  # the demo web's host name only

    if not start_url or urlsplit(start_url).hostname != HOST:
        return None
    return {"host": HOST, "content_sha256": simulated_web_digest()}


def snapshot_manifest(inputs: LaneInputs, spec: SandboxSpec) -> dict:
    """The canonical description of a lane's initial state (files by hash)."""
    repo = inputs.repo
    return {
        "version": MANIFEST_VERSION,
        "kind": "repo" if repo is not None else "desktop",
        "instruction": inputs.instruction,
        "start_url": inputs.start_url,
        "simulated_web": _simulated_web(inputs.start_url),
        "screen": {"width": spec.width, "height": spec.height} if spec.desktop else None,
        "tools": list(inputs.tools),
        "step_budget": inputs.step_budget,
        "wall_budget_s": inputs.wall_budget_s,
        "attachments": [
            {"name": a.name, "sha256": a.sha256, "size": a.size} for a in inputs.attachments
        ],
        "repo": None
        if repo is None
        else {
            "sha256": repo.bundle_sha256,
            "size": repo.bundle_size,
            "commit": repo.commit,
            "tree": repo.tree,
            "head": repo.head or repo.commit,
            "time_limit_s": repo.time_limit_s,
        },
    }


def manifest_digest(manifest: dict) -> str:
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class SnapshotIncomplete(Exception):
    """A file the snapshot names could not be copied (gone, or changed since hashed)."""


def blob_put(data: bytes, *, prefix: str = BLOB_PREFIX) -> dict:
    """Stores ``data`` once under ``prefix`` by its SHA-256 (a second put of the same
    bytes writes nothing); returns its manifest entry ``{"sha256", "size"}``."""
    sha256 = hashlib.sha256(data).hexdigest()
    if not media_exists(blob_name(sha256, prefix)):
        media_save(blob_name(sha256, prefix), data)
    return {"sha256": sha256, "size": len(data)}


def _blob_keep(*, source: str, sha256: str, size: int) -> None:
    """Copies the stored file ``source`` into the blob store, once per hash."""
    name = blob_name(sha256)
    if media_exists(name):
        return
    handle = media_open(source)
    if handle is None:
        raise SnapshotIncomplete(f"{source} is missing from storage")
    with handle:
        data = handle.read(size + 1)
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
        raise SnapshotIncomplete(f"{source} no longer has the bytes its hash names")
    media_save(name, data)


def snapshot_record(*, run_id: int, inputs: LaneInputs, spec: SandboxSpec) -> RunSnapshot:
    """Keeps the initial state of a lane about to start and points the run at it."""
    manifest = snapshot_manifest(inputs, spec)
    for item in inputs.attachments:
        _blob_keep(source=item.path, sha256=item.sha256, size=item.size)
    if inputs.repo is not None:
        repo = inputs.repo
        _blob_keep(source=repo.bundle_path, sha256=repo.bundle_sha256, size=repo.bundle_size)
    digest, now = manifest_digest(manifest), timezone.now()
    try:
        with transaction.atomic():
            snapshot, created = RunSnapshot.objects.get_or_create(
                digest=digest, defaults={"manifest": manifest, "last_used_at": now}
            )
    except IntegrityError:  # the other lane created it first
        snapshot, created = RunSnapshot.objects.get(digest=digest), False
    if not created:
        RunSnapshot.objects.filter(pk=snapshot.pk).update(last_used_at=now)
    Run.objects.filter(pk=run_id).update(snapshot=snapshot)
    return snapshot


def snapshot_attachments(
    manifest: dict, *, prefix: str = BLOB_PREFIX
) -> tuple[LaneAttachment, ...]:
    """The snapshot's attachments as a lane receives them, read from the blob store
    under ``prefix`` (an environment's redacted copies live under a prefix of its own)."""
    return tuple(
        LaneAttachment(a["name"], a["sha256"], a["size"], blob_name(a["sha256"], prefix))
        for a in manifest["attachments"]
    )


def snapshot_repo(manifest: dict, *, head: str = "", prefix: str = BLOB_PREFIX) -> LaneRepo | None:
    """A repo snapshot's bundle as a lane receives it (``head``: the commit the copy
    checks out when it is not the agents' commit, a judge bundle's)."""
    repo = manifest.get("repo")
    if repo is None:
        return None
    return LaneRepo(
        bundle_path=blob_name(repo["sha256"], prefix),
        bundle_sha256=repo["sha256"],
        bundle_size=repo["size"],
        commit=repo["commit"],
        tree=repo["tree"],
        time_limit_s=repo["time_limit_s"],
        head=head,
    )


def _blobs_named(manifest: dict) -> set[str]:
    named = {a["sha256"] for a in manifest.get("attachments", ())}
    if manifest.get("repo"):
        named.add(manifest["repo"]["sha256"])
    return named


def snapshots_prune(*, now=None) -> int:
    """Deletes the snapshots past retention and the blobs no remaining snapshot names;
    returns how many snapshots went. Runs keep their rows (``snapshot`` set null)."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.ARENA.snapshot_retention_days)
    expired = list(RunSnapshot.objects.filter(last_used_at__lt=cutoff))
    if not expired:
        return 0
    candidates = set().union(*(_blobs_named(s.manifest) for s in expired))
    RunSnapshot.objects.filter(pk__in=[s.pk for s in expired], last_used_at__lt=cutoff).delete()
    for manifest in RunSnapshot.objects.values_list("manifest", flat=True).iterator():
        candidates -= _blobs_named(manifest)
    for sha256 in sorted(candidates):
        try:
            media_delete(blob_name(sha256))
        except OSError:
            logger.exception("snapshot blob %s could not be deleted", sha256)
    return len(expired)
