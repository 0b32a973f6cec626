"""What the live battle page hears: the panel after every change, and the lanes'
heartbeat the janitor watches."""

from django.db import transaction
from django.db.models.functions import Now

from arena_site.realtime import group_send
from battles.models import Battle
from battles.presenters import render_battle_panel


def battle_publish(*, battle_id: int) -> None:
    """Tells the battle's live pages that it changed (after commit)."""

    def send() -> None:
        group_send(
            f"battle-{battle_id}", {"type": "battle.update", "html": render_battle_panel(battle_id)}
        )

    transaction.on_commit(send)


def battle_heartbeat(*, battle_id: int) -> None:
    Battle.objects.filter(pk=battle_id).update(heartbeat_at=Now())  # the database's clock
