"""``manage.py export_data --out DIR``: the open data of an arena (docs/open-data.md).

Writes battles, votes, exclusions and ratings (and with --with-steps the trajectories,
with --with-screenshots their screenshots within the bounds) as JSON Lines and/or
Parquet, with schema.json, DATA_CARD.md and manifest.json, into DIR (new or empty).
Only battles whose submitter has current publication consent, decided at least
ARENA_EXPORT_DELAY_DAYS ago (--delay-days overrides); judges pseudonymised under a key
derived from the arena's secret key. A progress bar goes to stderr; the summary to
stdout."""

import sys
import time
from datetime import datetime
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from agents.models import PUBLIC_ARENA_SLUG, Arena
from exports.selectors import publication_note, publication_outlook
from exports.services import (
    DEFAULT_MAX_BATTLE_SCREENSHOT_BYTES,
    DEFAULT_MAX_SCREENSHOT_BYTES,
    ExportError,
    ExportOptions,
    export_write,
)


def _formats(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))


class Command(BaseCommand):
    help = "Export an arena's open data (decided battles, votes, exclusions, ratings)."

    def add_arguments(self, parser):
        parser.add_argument("--out", required=True, type=Path, help="a new or empty directory")
        parser.add_argument(
            "--format", default="jsonl,parquet", help="jsonl, parquet or both (jsonl,parquet)"
        )
        parser.add_argument("--arena", default=PUBLIC_ARENA_SLUG, help="the arena's slug")
        parser.add_argument("--with-steps", action="store_true", help="runs and steps too")
        parser.add_argument(
            "--with-screenshots", action="store_true", help="step screenshots (implies steps)"
        )
        parser.add_argument(
            "--max-screenshot-bytes",
            type=int,
            default=DEFAULT_MAX_SCREENSHOT_BYTES,
            metavar="N",
            help=f"screenshots in all, at most N bytes ({DEFAULT_MAX_SCREENSHOT_BYTES})",
        )
        parser.add_argument(
            "--max-battle-screenshot-bytes",
            type=int,
            default=DEFAULT_MAX_BATTLE_SCREENSHOT_BYTES,
            metavar="N",
            help=f"screenshots of one battle ({DEFAULT_MAX_BATTLE_SCREENSHOT_BYTES})",
        )
        parser.add_argument(
            "--delay-days",
            type=int,
            default=None,
            metavar="N",
            help="publication delay (default: ARENA_EXPORT_DELAY_DAYS)",
        )

    def handle(self, *args, **options):
        arena = Arena.objects.filter(slug=options["arena"]).first()
        if arena is None:
            known = ", ".join(Arena.objects.order_by("slug").values_list("slug", flat=True))
            raise CommandError(f"no arena {options['arena']!r}; the arenas are: {known}")
        export = ExportOptions(
            formats=_formats(options["format"]),
            with_steps=options["with_steps"],
            with_screenshots=options["with_screenshots"],
            max_screenshot_bytes=options["max_screenshot_bytes"],
            max_battle_screenshot_bytes=options["max_battle_screenshot_bytes"],
            delay_days=options["delay_days"],
        )
        bar = tqdm(desc="export", unit="row", file=sys.stderr, disable=None)

        def progress(table: str, rows: int) -> None:
            bar.set_description(f"export {table}", refresh=False)
            bar.update(rows)

        started = time.perf_counter()
        try:
            manifest = export_write(
                out_dir=options["out"], arena_id=arena.pk, options=export, progress=progress
            )
        except ExportError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            bar.close()
        seconds = time.perf_counter() - started
        size = sum(f["bytes"] for f in manifest["files"])
        counts = ", ".join(f"{rows} {name}" for name, rows in manifest["counts"].items())
        self.stdout.write(
            f"exported {counts} of arena {arena.slug} to {options['out']} "
            f"({len(manifest['files'])} files, {size:,} bytes, {seconds:.1f} s; cutoff "
            f"{manifest['filters']['cutoff']})"
        )
        if not manifest["counts"].get("battles") and not manifest["counts"].get("exclusions"):
            delay = manifest["filters"]["delay_days"]
            cutoff = datetime.fromisoformat(manifest["filters"]["cutoff"])
            outlook = publication_outlook(arena_id=arena.pk, cutoff=cutoff, delay_days=delay)
            self.stdout.write("note: " + publication_note(outlook, delay_days=delay))
        if not manifest["round_trip"]["complete"]:
            self.stdout.write(
                "note: not every battle of the published board is in this export (consent, "
                "delay or a newer battle); the refit of it differs from the board"
            )
