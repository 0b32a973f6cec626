"""Writing an open-data export (docs/open-data.md): every table as JSON Lines and/or
Parquet, optional trajectories and screenshots within size bounds, schema.json,
DATA_CARD.md and manifest.json (counts, SHA-256 of every file, filters), into a new
directory; and the same as one tar.gz for the API.

Reads go through ``exports.tables`` (the consent, delay and pseudonym rules live in
``exports.selectors``); this module only writes files. Screenshots are read through
``arena_site.media.media_read`` with the arena's bound of one screenshot, never by path,
and checked to be PNGs before they are written."""

import hashlib
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.utils import timezone

from accounts.models import ConsentTerms
from agents.models import Arena
from arena_site import strict_json
from arena_site.media import MediaTooLarge, MediaUnreadable, media_read
from exports.datacard import data_card
from exports.schema import BY_NAME, CORE_TABLES, DATA_CARD_VERSION, SCHEMA_VERSION, schema_document
from exports.selectors import published_snapshot_id
from exports.tables import ExportScope, table_rows
from exports.writers import FORMATS, TableWriter
from ratings.models import RatingSnapshot
from ratings.selectors import rated_battles

PNG = b"\x89PNG\r\n\x1a\n"
DEFAULT_MAX_SCREENSHOT_BYTES = 512 * 1024**2  # all screenshots of one export
DEFAULT_MAX_BATTLE_SCREENSHOT_BYTES = 32 * 1024**2  # those of one battle
PROGRESS_EVERY = 500

Progress = Callable[[str, int], None]  # (table, rows written since the last call)


class ExportError(Exception):
    """The export cannot be written as asked; the message says what to change."""


@dataclass(frozen=True)
class ExportOptions:
    formats: tuple[str, ...] = FORMATS
    with_steps: bool = False
    with_screenshots: bool = False  # implies with_steps
    max_screenshot_bytes: int = DEFAULT_MAX_SCREENSHOT_BYTES
    max_battle_screenshot_bytes: int = DEFAULT_MAX_BATTLE_SCREENSHOT_BYTES
    delay_days: int | None = None  # None: settings.ARENA.export_delay_days

    def check(self) -> None:
        unknown = sorted(set(self.formats) - set(FORMATS))
        if unknown or not self.formats:
            raise ExportError(
                f"unknown format(s) {', '.join(unknown) or '(none given)'}; use jsonl, "
                "parquet or both (jsonl,parquet)"
            )
        if self.max_screenshot_bytes < 0 or self.max_battle_screenshot_bytes < 0:
            raise ExportError("screenshot bounds must be 0 or more bytes")
        if self.delay_days is not None and self.delay_days < 0:
            raise ExportError("the publication delay must be 0 or more days")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _Screenshots:
    """Copies step screenshots into ``screenshots/<battle>/<side>-<index>.png`` within
    the per-battle and total bounds, and says per step what happened."""

    def __init__(self, root: Path, options: ExportOptions) -> None:
        self.root = root
        self.options = options
        self.total = 0
        self.files = 0
        self.per_battle: dict[int, int] = {}

    def take(self, row: dict[str, Any]) -> dict[str, Any]:
        name = row.pop("_screenshot_name")
        row.update(screenshot=None, screenshot_bytes=None)
        if not name:
            return {**row, "screenshot_status": "none"}
        if not self.options.with_screenshots:
            return {**row, "screenshot_status": "not_requested"}
        battle = row["battle_id"]
        used = self.per_battle.get(battle, 0)
        if self.total >= self.options.max_screenshot_bytes:
            return {**row, "screenshot_status": "over_total_bound"}
        if used >= self.options.max_battle_screenshot_bytes:
            return {**row, "screenshot_status": "over_battle_bound"}
        try:
            data = media_read(name, settings.ARENA.screenshot_max_bytes)
        except MediaTooLarge:
            return {**row, "screenshot_status": "too_large"}
        except (MediaUnreadable, OSError):
            data = None
        if data is None:
            return {**row, "screenshot_status": "missing"}
        if not data.startswith(PNG):
            return {**row, "screenshot_status": "invalid"}
        if used + len(data) > self.options.max_battle_screenshot_bytes:
            return {**row, "screenshot_status": "over_battle_bound"}
        if self.total + len(data) > self.options.max_screenshot_bytes:
            return {**row, "screenshot_status": "over_total_bound"}
        relative = f"screenshots/{battle}/{row['side']}-{row['index']:04d}.png"
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        self.per_battle[battle] = used + len(data)
        self.total += len(data)
        self.files += 1
        return {
            **row,
            "screenshot": relative,
            "screenshot_bytes": len(data),
            "screenshot_status": "included",
        }


def _write_table(
    name: str,
    scope: ExportScope,
    out: Path,
    formats: tuple[str, ...],
    shots: _Screenshots | None,
    progress: Progress | None,
) -> TableWriter:
    table = BY_NAME[name]
    writer = TableWriter(table, out, formats)
    pending = 0
    try:
        for row in table_rows(name, scope):
            if shots is not None:
                row = shots.take(row)
            writer.write(row)
            pending += 1
            if progress is not None and pending >= PROGRESS_EVERY:
                progress(name, pending)
                pending = 0
    finally:
        writer.close()
    if progress is not None and pending:
        progress(name, pending)
    return writer


FIT_FORMAT = "1.0"  # round_trip.fit's layout (ratings.cli_export reads it)
FIT_COLUMNS = {
    "a": "agent_a",
    "b": "agent_b",
    "winner": "winner",
    "weight": "weight",
    "cluster": "cluster",
    "cluster_index": "cluster_index",
    "task": "task_id",
}


def _round_trip(scope: ExportScope, exported: int) -> dict[str, Any]:
    """How the board comes back from the export: the command, whether the export holds
    exactly the snapshot's battles, and ``fit``, every setting and seed the refit used
    (``python -m ratings fit`` reads it from this manifest: no flag needed)."""
    snapshot_id = published_snapshot_id(arena_id=scope.arena_id)
    snapshot = RatingSnapshot.objects.filter(pk=snapshot_id).first() if snapshot_id else None
    ridge = float(snapshot.ridge) if snapshot else float(settings.ARENA.ridge)
    n0 = snapshot.min_battles if snapshot else int(settings.ARENA.n0)
    r0 = float(settings.ARENA.r0)
    rated_now = rated_battles(arena_id=scope.arena_id).count()
    snapshot_battles = snapshot.battles if snapshot else 0
    replicates = (
        snapshot.bootstrap_replicates if snapshot else int(settings.ARENA.bootstrap_replicates)
    )
    seed = snapshot.seed if snapshot else 0
    unit = snapshot.bootstrap_unit if snapshot else "battles"
    tasks = " --task task_id --bootstrap-unit tasks" if unit == "tasks" else ""
    return {
        "command": "python -m ratings fit battles.jsonl",
        "explicit_command": (
            "python -m ratings fit battles.jsonl --no-export --weight weight --judge cluster "
            f"--ridge {ridge!r} --r0 {r0!r} --provisional {n0} --bootstrap {replicates} "
            f"--seed {seed}{tasks}"
        ),
        "snapshot_id": snapshot_id,
        "snapshot_battles": snapshot_battles,
        "exported_battles": exported,
        # every rated battle is exported and the snapshot is of exactly those
        "complete": snapshot is not None and exported == snapshot_battles == rated_now,
        "ridge": ridge,
        "r0": r0,
        "min_battles": n0,
        "fit": {
            "format": FIT_FORMAT,
            "ridge": ridge,
            "r0": r0,
            "min_battles": n0,
            "bootstrap_replicates": replicates,
            "seed": seed,
            "bootstrap_unit": unit,
            "interval": snapshot.interval if snapshot else "battle",
            "critical_value": float(snapshot.critical_value) if snapshot else None,
            "reference": "the agents with at least min_battles battles in the fit (all "
            "fitted agents while none has)",
            "columns": FIT_COLUMNS,
            "agents": {"table": "ratings", "agent": "agent", "index": "fit_index"},
            "threads": 1,
        },
    }


def export_write(
    *,
    out_dir: Path,
    arena_id: int,
    options: ExportOptions | None = None,
    now: datetime | None = None,
    secret: str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Writes the arena's export into ``out_dir`` (created; it must not exist or be
    empty) and returns its manifest. ``secret`` replaces the arena's secret key as the
    source of the pseudonym key (tests). Raises ExportError for bad options or a
    non-empty directory; a failure midway leaves the partial directory without a
    manifest.json (a consumer checks for it)."""
    options = options or ExportOptions()
    options.check()
    arena = Arena.objects.get(pk=arena_id)
    if arena.demo:
        raise ExportError(
            f"arena {arena.slug!r} is the demo board: its votes are simulated, and "
            "simulated data is never exported; export the public arena instead"
        )
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ExportError(f"{out_dir} exists and is not an empty directory; name a new one")
    out_dir.mkdir(parents=True, exist_ok=True)
    now = now or timezone.now()
    scope = ExportScope.build(
        arena_id=arena.pk,
        arena_slug=arena.slug,
        now=now,
        delay_days=options.delay_days,
        secret=secret,
    )
    with_steps = options.with_steps or options.with_screenshots
    names = [*CORE_TABLES, *(("runs", "steps") if with_steps else ())]
    shots = _Screenshots(out_dir, options)
    writers = {
        name: _write_table(
            name, scope, out_dir, options.formats, shots if name == "steps" else None, progress
        )
        for name in names
    }
    counts = {name: w.rows for name, w in writers.items()}
    terms = ConsentTerms.objects.order_by("-version").values_list("version", flat=True).first()
    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "data_card_version": DATA_CARD_VERSION,
        "arena": arena.slug,
        "exported_at": now.isoformat(),
        "filters": {
            "delay_days": scope.delay_days,
            "cutoff": scope.cutoff.isoformat(),
            "consent_terms_version": terms,
            "formats": list(options.formats),
            "with_steps": with_steps,
            "with_screenshots": options.with_screenshots,
            "max_screenshot_bytes": options.max_screenshot_bytes,
            "max_battle_screenshot_bytes": options.max_battle_screenshot_bytes,
        },
        "pseudonym_key_id": scope.key_id,
        "licence": settings.ARENA.export_licence,
        "counts": counts,
        "screenshots": {"files": shots.files, "bytes": shots.total},
        "round_trip": _round_trip(scope, counts["battles"]),
    }
    (out_dir / "schema.json").write_text(strict_json.dumps(schema_document(), indent=2) + "\n")
    (out_dir / "DATA_CARD.md").write_text(data_card(manifest))
    files = sorted(p for p in out_dir.rglob("*") if p.is_file())
    manifest["files"] = [
        {"name": p.relative_to(out_dir).as_posix(), "bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in files
    ]
    (out_dir / "manifest.json").write_text(strict_json.dumps(manifest, indent=2) + "\n")
    return manifest


def export_archive(*, arena_id: int, target: IO[bytes], now: datetime | None = None) -> dict:
    """The arena's export of the core tables (JSON Lines and Parquet, no trajectories)
    as a tar.gz written to ``target``, under a directory named after the arena and the
    export date; returns its manifest."""
    now = now or timezone.now()
    arena = Arena.objects.get(pk=arena_id)
    top = f"agent-arena-{arena.slug}-{now:%Y%m%d}"
    with tempfile.TemporaryDirectory(prefix="arena-export-") as scratch:
        out = Path(scratch) / top
        manifest = export_write(out_dir=out, arena_id=arena_id, options=ExportOptions(), now=now)
        with tarfile.open(fileobj=target, mode="w:gz") as archive:
            archive.add(out, arcname=top, filter=_plain)
        shutil.rmtree(out, ignore_errors=True)
    return manifest


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """No owner names or ids of this host in the archive."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
