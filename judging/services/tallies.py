"""Counts kept on the battle row so that reads need not recount votes.

``Battle.admissible_votes`` is the number of live (not retracted) admissible votes on
the battle: the second key of the order in which judges are served
(``judging.services.serving.judge_next``). It is recounted, never incremented, so a
call is idempotent and a path that missed it is corrected by the next one (every
resolution recounts too)."""

from datetime import datetime

from django.db import connection

from battles.models import Battle
from judging.models import Vote


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def battle_votes_tally(*, battle_id: int, due: datetime | None = None) -> None:
    """Recounts the battle's live admissible votes onto its row: one UPDATE (written in
    SQL: it runs inside every vote's transaction, where compiling the ORM's subquery
    would cost more than running it). ``due``: a vote cast now becomes final then (the
    end of its undo window), so the battle's ``decide_due_at`` becomes that time unless
    it is already due earlier, in the same statement (the decider takes it then).
    Precondition: inside the transaction that changed the battle's votes, the battle
    row locked, so concurrent votes on one battle recount one after another and the
    last sees them all."""
    due_sql, due_params = "", []
    if due is not None:
        due_sql = (
            ", decide_due_at = CASE WHEN decide_due_at IS NULL OR decide_due_at > %s"
            " THEN %s ELSE decide_due_at END"
        )
        due_params = [due, due]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_table(Battle)} SET admissible_votes = ("  # noqa: S608 (names from models)
            f"SELECT count(*) FROM {_table(Vote)} v"
            f" WHERE v.battle_id = %s AND NOT v.retracted AND v.admissible){due_sql}"
            " WHERE id = %s",
            [battle_id, *due_params, battle_id],
        )


def battles_votes_tally(*, battle_ids: list[int]) -> None:
    """``battle_votes_tally`` for several battles in one UPDATE (the decider's batch: an
    operator's trust change may have changed what counts). Same precondition."""
    table = _table(Battle)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET admissible_votes = ("  # noqa: S608 (names from models)
            f"SELECT count(*) FROM {_table(Vote)} v WHERE v.battle_id = {table}.id"
            " AND NOT v.retracted AND v.admissible)"
            f" WHERE id IN ({', '.join(['%s'] * len(battle_ids))})",
            battle_ids,
        )
