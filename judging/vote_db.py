"""The vote path's one locking read, in SQL.

Casting a vote needs the battle row locked and, about this judge: whether they accepted
the current consent terms and (with ARENA_JUDGE_APPROVAL) were approved, when the battle
was served to them and whether that assignment was voided, whether they are untrusted,
whether they belong to the submitting team (a submitter vote) or to a team that entered
one of the agents (a conflict of interest), plus both final messages (the reading
time): one round trip instead of one per question. Built
through the ORM, such a query costs several milliseconds of Python to compile on this
class of machine against about one to run: here it is written once. Table names come
from the models and every value is a bound parameter; tests/judging covers each branch.
"""

from datetime import UTC, datetime

from django.db import connection
from django.utils.dateparse import parse_datetime

from accounts.models import Consent, ConsentTerms, Membership
from agents.models import Agent
from battles.models import Battle, Run, Task
from judging.models import Assignment, JudgeProfile


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def battle_for_vote(*, battle_id: int, judge_id: int) -> Battle | None:
    """The battle locked FOR UPDATE (of its own row), with ``judge_consent_current``
    (as ``accounts.selectors.consent_is_current``), ``judge_approved`` (an approval is
    recorded on the judge's profile), ``served_at`` (None when never served to this
    judge), ``held_voided``, ``judge_untrusted``, ``judge_in_team``, ``judge_entrant``,
    ``final_a`` and ``final_b`` set on it; its agents are not loaded (``agents_load``).
    None when there is no such battle. Precondition: inside a transaction."""
    lock = ""
    if connection.features.has_select_for_update_of:
        lock = " FOR UPDATE OF b"
    elif connection.features.has_select_for_update:
        lock = " FOR UPDATE"
    sql = f"""
        SELECT b.*, t.submitter_id AS task_submitter_id,
          (EXISTS (SELECT 1 FROM {_table(Consent)} c
              WHERE c.user_id = %s AND c.terms_id = (SELECT ct.id FROM {_table(ConsentTerms)} ct
                ORDER BY ct.version DESC LIMIT 1))
            OR NOT EXISTS (SELECT 1 FROM {_table(ConsentTerms)})) AS judge_consent_current,
          EXISTS (SELECT 1 FROM {_table(JudgeProfile)} p
            WHERE p.user_id = %s AND p.approved_at IS NOT NULL) AS judge_approved,
          (SELECT a.served_at FROM {_table(Assignment)} a
            WHERE a.battle_id = b.id AND a.judge_id = %s) AS served_at,
          EXISTS (SELECT 1 FROM {_table(Assignment)} a
            WHERE a.battle_id = b.id AND a.judge_id = %s AND a.voided_at IS NOT NULL)
            AS held_voided,
          EXISTS (SELECT 1 FROM {_table(JudgeProfile)} p
            WHERE p.user_id = %s AND p.is_untrusted) AS judge_untrusted,
          EXISTS (SELECT 1 FROM {_table(Membership)} m
            WHERE m.team_id = b.team_id AND m.user_id = %s) AS judge_in_team,
          EXISTS (SELECT 1 FROM {_table(Membership)} m JOIN {_table(Agent)} g
              ON g.team_id = m.team_id
            WHERE m.user_id = %s AND g.id IN (b.agent_a_id, b.agent_b_id)) AS judge_entrant,
          (SELECT r.final_message FROM {_table(Run)} r
            WHERE r.battle_id = b.id AND r.side = 'A') AS final_a,
          (SELECT r.final_message FROM {_table(Run)} r
            WHERE r.battle_id = b.id AND r.side = 'B') AS final_b
        FROM {_table(Battle)} b JOIN {_table(Task)} t ON t.id = b.task_id
        WHERE b.id = %s{lock}
    """
    with _cursor() as cursor:
        cursor.execute(sql, [judge_id] * 7 + [battle_id])
        row = cursor.fetchone()
        if row is None:
            return None
        names = [column[0] for column in cursor.description]
    # The model from its own columns (as RawQuerySet would build it, without its
    # per-query column mapping: a tenth of the vote's CPU), the rest as attributes.
    fields, extra = _layout(tuple(names))
    values = dict(zip(names, row, strict=True))
    battle = Battle.from_db(connection.alias, fields, [values[f] for f in fields])
    for name in extra:
        setattr(battle, name, values[name])
    battle.served_at = _aware(battle.served_at)
    flags = ("judge_consent_current", "judge_approved", "held_voided", "judge_untrusted",
             "judge_in_team", "judge_entrant")  # fmt: skip
    for flag in flags:
        setattr(battle, flag, bool(getattr(battle, flag)))
    return battle


def _cursor():
    """On PostgreSQL a cursor that binds on the server (the rest of the arena binds on
    the client, Django's default), so this statement — the same text every vote — is
    prepared once per pooled connection after ``ARENA_DB_PREPARE_THRESHOLD`` runs (off
    with 0, as a transaction-pooling PgBouncer needs): its nine subqueries are planned
    once, not per vote (PostgreSQL's CPU for the read 0.63–0.95 → 0.21 ms, measured
    interleaved). Wrapped like any Django cursor (debug logging, execute wrappers,
    ``CaptureQueriesContext``)."""
    if connection.vendor != "postgresql":
        return connection.cursor()
    import psycopg

    # as Django's own BaseDatabaseWrapper._cursor, with psycopg's server-binding cursor
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(psycopg.Cursor(connection.connection))


_layouts: dict[tuple[str, ...], tuple[list[str], list[str]]] = {}


def _layout(names: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(the Battle fields' attnames in the model's order, the other columns) for a row
    of these columns; every concrete field must be among them (``b.*``)."""
    if names not in _layouts:
        by_column = {f.column: f.attname for f in Battle._meta.concrete_fields}
        fields = [by_column[c] for c in names if c in by_column]
        if len(fields) != len(by_column):
            raise RuntimeError("the vote's locking read must select every battle column")
        order = [f.attname for f in Battle._meta.concrete_fields]
        # from_db takes the values in the model's field order
        _layouts[names] = (order, [c for c in names if c not in by_column])
    return _layouts[names]


def agents_load(battle: Battle) -> None:
    """Both agents of the battle in one query (deciding it and revealing it need them)."""
    agents = Agent.objects.in_bulk([battle.agent_a_id, battle.agent_b_id])
    battle.agent_a, battle.agent_b = agents[battle.agent_a_id], agents[battle.agent_b_id]


def _aware(value: datetime | str | None) -> datetime | None:
    """Raw columns outside the model: SQLite returns text, and naive UTC."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value
