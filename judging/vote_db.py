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

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection
from django.db.models.expressions import Col
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
    read = _battle_read()
    with _cursor() as cursor:
        cursor.execute(read.sql, [judge_id] * 7 + [battle_id])
        row = cursor.fetchone()
    if row is None:
        return None
    # The model from its own columns, in the order they were selected, each through its
    # field's and the backend's converters as a query would (a JSON column is text on
    # PostgreSQL, a time is text on SQLite), the rest as attributes.
    n = len(read.fields)
    values = list(row[:n])
    for i, column, converters in read.converters:
        for convert in converters:
            values[i] = convert(values[i], column, connection)
    battle = Battle.from_db(connection.alias, read.fields, values)
    for name, value in zip(_EXTRA, row[n:], strict=True):
        setattr(battle, name, bool(value) if name in _FLAGS else value)
    battle.served_at = _aware(battle.served_at)
    return battle


# What the locking read selects beyond the battle's own columns, in its order.
_EXTRA = (
    "task_submitter_id", "judge_consent_current", "judge_approved", "served_at",
    "held_voided", "judge_untrusted", "judge_in_team", "judge_entrant", "final_a", "final_b",
)  # fmt: skip
_FLAGS = frozenset(
    ("judge_consent_current", "judge_approved", "held_voided", "judge_untrusted",
     "judge_in_team", "judge_entrant")
)  # fmt: skip


@dataclass(frozen=True)
class _Read:
    fields: list[str]  # the battle's attnames, in the model's (and the SELECT's) order
    sql: str
    converters: list[tuple[int, Col, list]]  # (index, column, converters) where any


_reads: dict[str, _Read] = {}


def _battle_read() -> _Read:
    """The locking read, built once per database vendor: the statement's text is the
    same every vote, and it names the battle's columns one by one (not ``b.*``) so that
    the row's layout is known without asking the cursor for its description (forty
    column objects a vote)."""
    read = _reads.get(connection.vendor)
    if read is not None:
        return read
    lock = ""
    if connection.features.has_select_for_update_of:
        lock = " FOR UPDATE OF b"
    elif connection.features.has_select_for_update:
        lock = " FOR UPDATE"
    quote = connection.ops.quote_name
    concrete = Battle._meta.concrete_fields
    columns = ", ".join(f"b.{quote(f.column)}" for f in concrete)
    sql = f"""
        SELECT {columns}, t.submitter_id AS task_submitter_id,
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
    converters = []
    for i, field in enumerate(concrete):
        column = field.get_col(Battle._meta.db_table)
        found = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        if found:
            converters.append((i, column, found))
    read = _reads[connection.vendor] = _Read([f.attname for f in concrete], sql, converters)
    return read


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
