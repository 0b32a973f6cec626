"""``manage.py arena_restore DIR [--replace]``: the arena's database and private media
from a backup of ``arena_backup`` (docs/operations.md, "Backup and restore")."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from accounts.backups import BackupError, backup_restore


class Command(BaseCommand):
    help = (
        "Restore the database and the private media from an arena_backup directory (every "
        "digest checked first; a database with users is replaced only with --replace)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("src", type=Path, help="A directory arena_backup wrote.")
        parser.add_argument(
            "--replace", action="store_true", help="Replace a database that is not empty."
        )

    def handle(self, *args, src: Path, replace: bool, **options) -> None:
        try:
            manifest = backup_restore(src, replace=replace)
        except BackupError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"restored the database and {len(manifest['media'])} media files from {src}"
        )
