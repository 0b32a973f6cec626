"""Counts kept on the battle row so that reads need not recount votes.

``Battle.admissible_votes`` is the number of live (not retracted) admissible votes on
the battle: the second key of the order in which judges are served
(``judging.services.serving.judge_next``). It is recounted, never incremented, so a
call is idempotent and a path that missed it is corrected by the next one (every
resolution recounts too)."""

from django.db import connection

from battles.models import Battle
from judging.models import Vote


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def battle_votes_tally(*, battle_id: int) -> None:
    """Recounts the battle's live admissible votes onto its row: one UPDATE (written in
    SQL: it runs inside every vote's transaction, where compiling the ORM's subquery
    would cost more than running it). Precondition: inside the transaction that changed
    the battle's votes, the battle row locked, so concurrent votes on one battle recount
    one after another and the last sees them all."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_table(Battle)} SET admissible_votes = ("  # noqa: S608 (names from models)
            f"SELECT count(*) FROM {_table(Vote)} v"
            " WHERE v.battle_id = %s AND NOT v.retracted AND v.admissible)"
            " WHERE id = %s",
            [battle_id, battle_id],
        )
