"""What the live battle and test-drive pages hear: the panel after every change, and
the lanes' heartbeat the janitor watches."""

from django.db import transaction
from django.db.models.functions import Now

from arena_site.realtime import group_send
from battles.drive_presenters import render_test_drive_panel
from battles.models import Battle
from battles.presenters import render_battle_panel


def battle_publish(*, battle_id: int) -> None:
    """Tells the battle's live pages that it changed (after commit)."""

    def send() -> None:
        group_send(
            f"battle-{battle_id}", {"type": "battle.update", "html": render_battle_panel(battle_id)}
        )

    transaction.on_commit(send)


def test_drive_group(drive_id: int) -> str:
    return f"test-drive-{drive_id}"


def test_drive_publish(*, drive_id: int) -> None:
    """Tells the drive's live page that it changed (after commit): queued → running,
    each step, its end or failure."""

    def send() -> None:
        group_send(
            test_drive_group(drive_id),
            {"type": "test_drive.update", "html": render_test_drive_panel(drive_id)},
        )

    transaction.on_commit(send)


def battle_heartbeat(*, battle_id: int) -> None:
    Battle.objects.filter(pk=battle_id).update(heartbeat_at=Now())  # the database's clock
