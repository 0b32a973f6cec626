"""A whole arena's backup and its restore (docs/operations.md, "Backup and restore"):
the PostgreSQL database as ``pg_dump``'s custom format, and every file of the private
media storage (the local disk's or the S3 bucket's: ``arena_site.media``), with a
manifest of their sizes and SHA-256 digests. A restore checks every digest before it
changes anything, replaces the database in one transaction (``pg_restore
--single-transaction --clean``) and puts every file back; it refuses a database that
holds anything unless told to replace it.

Plain PostgreSQL tools, run with the connection the arena itself uses (libpq's
``PG*`` variables from ``settings.DATABASES``): the dump restores with ``pg_restore`` by
hand too, and the media directory is the bucket's keys as files."""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from django.conf import settings
from django.db import connection, connections

from arena_site.hosts import app_version
from arena_site.media import media_delete, media_open, media_store_file, media_walk

MANIFEST = "manifest.json"
DUMP = "database.dump"
MEDIA = "media"
FORMAT = 1
CHUNK_BYTES = 1024 * 1024


class BackupError(Exception):
    """A backup or restore that cannot go on; the message says why and what to do."""


def _pg_env() -> dict[str, str]:
    db = settings.DATABASES["default"]
    env = {**os.environ, "PGDATABASE": db["NAME"]}
    for key, var in (("HOST", "PGHOST"), ("PORT", "PGPORT"), ("USER", "PGUSER")):
        if db.get(key):
            env[var] = str(db[key])
    if db.get("PASSWORD"):
        env["PGPASSWORD"] = str(db["PASSWORD"])
    return env


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, env=_pg_env(), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BackupError(f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def backup_make(dest: Path) -> dict:
    """Writes the backup into ``dest`` (a new or empty directory); returns its manifest."""
    if dest.exists() and any(dest.iterdir()):
        raise BackupError(f"{dest} is not empty: give a new directory for the backup")
    dest.mkdir(parents=True, exist_ok=True)
    _run(["pg_dump", "--format=custom", "--no-owner", "--no-privileges", f"--file={dest / DUMP}"])
    files = []
    for name in media_walk():
        out = dest / MEDIA / name
        out.parent.mkdir(parents=True, exist_ok=True)
        stored = media_open(name)
        if stored is None:
            continue  # removed meanwhile
        with stored, out.open("wb") as copy:
            for chunk in stored.chunks(CHUNK_BYTES):
                copy.write(chunk)
        files.append({"name": name, "size": out.stat().st_size, "sha256": _sha256(out)})
    manifest = {
        "format": FORMAT,
        "app_version": app_version(),
        "database": {"file": DUMP, "sha256": _sha256(dest / DUMP)},
        "media": files,
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _manifest(src: Path) -> dict:
    try:
        manifest = json.loads((src / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{src} holds no readable {MANIFEST}: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{src}: a backup of format {manifest.get('format')!r}, not {FORMAT}")
    if _sha256(src / DUMP) != manifest["database"]["sha256"]:
        raise BackupError(f"{src / DUMP} is not the dump the manifest names (digest differs)")
    for entry in manifest["media"]:
        path = src / MEDIA / entry["name"]
        if not path.is_file() or path.is_symlink() or _sha256(path) != entry["sha256"]:
            raise BackupError(f"{path} is missing or not the file the manifest names")
    return manifest


def _database_empty() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('django_migrations') IS NOT NULL")
        if not cursor.fetchone()[0]:
            return True
        cursor.execute("SELECT EXISTS (SELECT 1 FROM auth_user)")
        return not cursor.fetchone()[0]


def backup_restore(src: Path, *, replace: bool = False) -> dict:
    """Restores the backup in ``src`` over this arena's database and media; returns its
    manifest. Everything is checked first; a database with users is replaced only
    with ``replace``."""
    manifest = _manifest(src)
    if not replace and not _database_empty():
        raise BackupError(
            "the database is not empty: restoring would replace everything in it; "
            "say --replace if that is what you want"
        )
    connections.close_all()
    _run(
        ["pg_restore", "--clean", "--if-exists", "--no-owner", "--no-privileges",
         "--single-transaction", f"--dbname={settings.DATABASES['default']['NAME']}",
         str(src / DUMP)]
    )  # fmt: skip
    scratch = Path(settings.PRIVATE_MEDIA_ROOT)  # (a rename in, on the local disk)
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch, prefix=".restore-") as tmp:
        for entry in manifest["media"]:
            local = Path(tmp) / "file"
            shutil.copyfile(src / MEDIA / entry["name"], local)
            media_delete(entry["name"])  # (a file storage would store beside it)
            media_store_file(entry["name"], local)
    return manifest
