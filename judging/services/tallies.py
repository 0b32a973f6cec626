"""Counts kept on the battle row so that reads need not recount votes.

``Battle.admissible_votes`` is the number of live (not retracted) admissible votes on
the battle: the second key of the order in which judges are served
(``judging.services.serving.judge_next``). It is recounted, never incremented, so a
call is idempotent and a path that missed it is corrected by the next one (every
resolution recounts too)."""

from datetime import datetime
from functools import cache

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
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_table(Battle)} SET {_tally_set(due is not None)} WHERE id = %s",  # noqa: S608 (names from models)
            [battle_id, *_due_params(due), battle_id],
        )


def vote_insert_tallied(vote: Vote, *, due: datetime | None) -> None:
    """Stores the new ``vote`` and recounts its battle (``battle_votes_tally`` with
    ``due``): on PostgreSQL in one statement (the INSERT in a WITH clause, the recount
    adding the row it inserted, which the statement's own snapshot cannot see yet), so
    a vote makes one round trip less; elsewhere as two. Same precondition, and the same
    IntegrityError as ``Vote.objects.create`` for a second live vote."""
    if connection.vendor != "postgresql":
        vote.save(force_insert=True)
        battle_votes_tally(battle_id=vote.battle_id, due=due)
        return
    fields, sql = _insert_tallied(due is not None)
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            [
                *(f.get_db_prep_save(getattr(vote, f.attname), connection) for f in fields),
                vote.battle_id,
                *_due_params(due),
                vote.battle_id,
            ],
        )
        vote.pk = cursor.fetchone()[0]
    vote._state.adding = False
    vote._state.db = connection.alias


@cache
def _insert_tallied(with_due: bool) -> tuple[list, str]:
    """(the vote's fields to insert, ``vote_insert_tallied``'s statement on PostgreSQL):
    the same text every vote, built once."""
    fields = [f for f in Vote._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    set_sql = _tally_set(with_due, plus="(SELECT count(*) FROM v WHERE v.admissible)")
    sql = (
        f"WITH v AS (INSERT INTO {_table(Vote)} ({columns})"  # noqa: S608 (names from models)
        f" VALUES ({', '.join(['%s'] * len(fields))}) RETURNING id, admissible)"
        f" UPDATE {_table(Battle)} SET {set_sql} WHERE id = %s RETURNING (SELECT id FROM v)"
    )
    return fields, sql


def _tally_set(with_due: bool, *, plus: str = "") -> str:
    """The recount's SET clause; its parameters are the battle's id, then
    ``_due_params``. ``plus`` adds a count the recount's subquery cannot see."""
    count = (
        f"(SELECT count(*) FROM {_table(Vote)} w"  # noqa: S608 (names from models)
        " WHERE w.battle_id = %s AND NOT w.retracted AND w.admissible)"
    )
    set_sql = f"admissible_votes = {count}{f' + {plus}' if plus else ''}"
    if with_due:
        set_sql += (
            ", decide_due_at = CASE WHEN decide_due_at IS NULL OR decide_due_at > %s"
            " THEN %s ELSE decide_due_at END"
        )
    return set_sql


def _due_params(due: datetime | None) -> list[datetime]:
    return [] if due is None else [due, due]


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
