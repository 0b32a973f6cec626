"""Backup and restore, done once for real (issue 35, item 5): a rated board and stored
media backed up with ``manage.py arena_backup``, everything dropped, restored with
``arena_restore``: the board is the same, row for row, and so is every file, on the
local disk and on a real S3 server. A backup whose file was altered, or a restore over
a database that holds anything, is refused before anything changes."""

import random
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from agents.models import Arena
from arena_site.media import media_delete, media_read, media_save, media_walk
from battles.models import Battle
from ratings.refit import arena_refit
from tests.ratings.factories import judges, round_robin
from tests.s3_server import s3_media, s3_server  # noqa: F401 - the fixtures

pytestmark = pytest.mark.django_db(transaction=True)

FILES = {
    "screens/run-1/step-0.png": b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40,
    "deliveries/run-1/answer.txt": b"the answer is 42\n",
    "attachments/task-1/data.csv": b"a,b\n1,2\n",
}


def board() -> list:
    return Client().get("/api/leaderboard/").json()["rows"]


def played(alice, roster) -> None:
    """A rated board of the three built-ins, and stored files."""
    agents = {a.slug: a for a in roster}
    order = [agents["rulebook"], agents["surveyor"], agents["idle"]]
    round_robin(alice, order, judges(3), rounds=12, rng=random.Random(3))
    arena_refit(arena_id=Arena.objects.public().pk)
    for name, data in FILES.items():
        media_save(name, data)


def stored() -> dict[str, bytes]:
    return {name: media_read(name, 1 << 20) for name in media_walk()}


def backup_drop_restore(tmp_path) -> None:
    before, files = board(), stored()
    assert len(before) >= 2 and all(row["fit_battles"] > 0 for row in before), before
    assert set(FILES) <= set(files)

    call_command("arena_backup", str(tmp_path / "backup"))
    call_command("flush", interactive=False)
    for name in files:
        media_delete(name)
    assert Battle.objects.count() == 0 and list(media_walk()) == []

    call_command("arena_restore", str(tmp_path / "backup"))

    assert board() == before
    assert stored() == files
    # Over a database that holds anything, only when told
    with pytest.raises(CommandError, match="the database is not empty"):
        call_command("arena_restore", str(tmp_path / "backup"))
    call_command("arena_restore", str(tmp_path / "backup"), "--replace")
    assert board() == before
    # An altered file: refused, nothing changed
    (tmp_path / "backup" / "media" / "deliveries/run-1/answer.txt").write_text("forged\n")
    with pytest.raises(CommandError, match="not the file the manifest names"):
        call_command("arena_restore", str(tmp_path / "backup"), "--replace")
    assert stored() == files


def test_backup_and_restore_on_the_local_disk(alice, roster, tmp_path):
    played(alice, roster)
    backup_drop_restore(tmp_path)


def test_backup_and_restore_with_the_media_in_a_bucket(
    settings,
    s3_media,  # noqa: F811
    s3_server,  # noqa: F811
    alice,
    roster,
    tmp_path,
):
    # (the files are the bucket's: none on this host's disk)
    played(alice, roster)
    assert list(Path(settings.PRIVATE_MEDIA_ROOT).rglob("*.png")) == []
    backup_drop_restore(tmp_path)


def test_a_backup_into_a_directory_that_holds_something_is_refused(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "x").write_text("x")
    with pytest.raises(CommandError, match="is not empty"):
        call_command("arena_backup", str(tmp_path / "old"))
