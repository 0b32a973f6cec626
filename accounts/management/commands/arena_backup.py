"""``manage.py arena_backup DIR``: the arena's database and private media into DIR
(docs/operations.md, "Backup and restore")."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from accounts.backups import BackupError, backup_make


class Command(BaseCommand):
    help = "Back up the database (pg_dump) and every private media file into a new directory."

    def add_arguments(self, parser) -> None:
        parser.add_argument("dest", type=Path, help="A new (or empty) directory.")

    def handle(self, *args, dest: Path, **options) -> None:
        try:
            manifest = backup_make(dest)
        except BackupError as exc:
            raise CommandError(str(exc)) from None
        size = sum(entry["size"] for entry in manifest["media"])
        self.stdout.write(
            f"backed up the database and {len(manifest['media'])} media files "
            f"({size} bytes) into {dest}"
        )
