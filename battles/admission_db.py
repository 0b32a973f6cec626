"""The admission path's statements, in SQL.

Admission runs on every submission and holds the arena's row lock while it counts the
queue and writes the task, so each statement here is one round trip with no ORM query
compilation (about 0.3 ms against 1–2 ms for the same query through the ORM on this
class of machine; the benchmark is tests/bench/bench_admission.py). The SQL is plain
enough for PostgreSQL and SQLite alike (``make run`` without ``DATABASE_URL``). Table
names come from the models and every value is a bound parameter; the admission tests
cover each statement, so a renamed column fails them.
"""

from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from threading import Lock

from django.db import connection
from django.db.models import Model
from django.utils import timezone

from accounts.models import Consent, ConsentTerms, Membership
from agents.models import Agent, Arena
from battles.models import Battle, Task
from battles.similarity import trigrams
from ratings.models import AgentRating


def _table(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


@dataclass(frozen=True)
class Submitter:
    consent_current: bool
    team_id: int | None
    earlier_tasks: int  # capped at ``cap`` of ``submitter_context``


def submitter_context(*, user_id: int, cap: int) -> Submitter:
    """Consent (the newest terms accepted, or none published), the team the user acts
    for (their earliest membership) and how many tasks they submitted before (up to
    ``cap``), in one statement."""
    sql = f"""
        SELECT
          EXISTS (SELECT 1 FROM {_table(Consent)} c WHERE c.user_id = %s AND c.terms_id =
                  (SELECT t.id FROM {_table(ConsentTerms)} t ORDER BY t.version DESC LIMIT 1))
          OR NOT EXISTS (SELECT 1 FROM {_table(ConsentTerms)}),
          (SELECT m.team_id FROM {_table(Membership)} m WHERE m.user_id = %s
           ORDER BY m.created_at, m.id LIMIT 1),
          (SELECT COUNT(*) FROM (SELECT 1 FROM {_table(Task)} k WHERE k.submitter_id = %s
           LIMIT %s) AS earlier)
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [user_id, user_id, user_id, cap])
        consent, team_id, earlier = cursor.fetchone()
    return Submitter(bool(consent), team_id, earlier)


class _TrigramCache:
    """Word trigrams of earlier tasks by (task id, created_at). An instruction never
    changes once stored, so entries never go stale; created_at in the key keeps a
    reused id (a database restored or recreated under a running process) from
    matching. The cache only bounds its size (LRU)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._grams: OrderedDict[tuple[int, datetime], frozenset] = OrderedDict()
        self._lock = Lock()

    def get(self, key: tuple[int, datetime]) -> frozenset | None:
        with self._lock:
            grams = self._grams.get(key)
            if grams is not None:
                self._grams.move_to_end(key)
            return grams

    def clear(self) -> None:
        with self._lock:
            self._grams.clear()

    def put(self, key: tuple[int, datetime], grams: frozenset) -> None:
        with self._lock:
            self._grams[key] = grams
            self._grams.move_to_end(key)
            while len(self._grams) > self._size:
                self._grams.popitem(last=False)


trigram_cache = _TrigramCache(size=50_000)


def recent_task_grams(
    *, user_id: int, since: datetime, limit: int
) -> list[tuple[int, datetime, frozenset]]:
    """The submitter's newest tasks since ``since`` (at most ``limit``) as (id,
    created_at, trigrams), newest first. Instructions are read only for tasks whose
    trigrams this process has not seen yet."""
    table = _table(Task)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, created_at FROM {table} WHERE submitter_id = %s AND created_at >= %s "
            f"ORDER BY created_at DESC LIMIT %s",
            [user_id, since, limit],
        )
        rows = [(task_id, _aware(created)) for task_id, created in cursor.fetchall()]
        grams = {task_id: trigram_cache.get((task_id, created)) for task_id, created in rows}
        missing = [task_id for task_id, known in grams.items() if known is None]
        if missing:
            marks = ", ".join(["%s"] * len(missing))
            cursor.execute(f"SELECT id, instruction FROM {table} WHERE id IN ({marks})", missing)
            created_at = dict(rows)
            for task_id, text in cursor.fetchall():
                grams[task_id] = trigrams(text)
                trigram_cache.put((task_id, created_at[task_id]), grams[task_id])
    return [(task_id, created, grams[task_id]) for task_id, created in rows]


def _aware(value: datetime) -> datetime:
    """Raw cursors on SQLite return naive UTC datetimes."""
    return value if timezone.is_aware(value) else value.replace(tzinfo=UTC)


def arena_lock(*, slug: str) -> int | None:
    """Locks the arena's row (the admission lock: concurrent submissions queue here)
    and returns its id."""
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {_table(Arena)} WHERE slug = %s{lock}", [slug])
        row = cursor.fetchone()
    return row[0] if row else None


def queued_counts(*, arena_id: int, team_id: int) -> tuple[int, int]:
    """Queued battles in the arena, and those of the team. A statement of its own after
    the arena lock: under READ COMMITTED it then sees every battle committed by the
    submissions that held the lock before."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*), COALESCE(SUM(CASE WHEN team_id = %s THEN 1 ELSE 0 END), 0) "
            f"FROM {_table(Battle)} WHERE arena_id = %s AND status = %s",
            [team_id, arena_id, Battle.Status.QUEUED],
        )
        total, team = cursor.fetchone()
    return total, team


@dataclass(frozen=True)
class RosterEntry:
    agent_id: int
    team_id: int | None  # the team that entered the agent; None for the arena's own
    step_budget: int | None
    wall_budget_s: int | None
    rated_battles: int
    streaming_rating: float | None


def active_roster(*, arena_id: int) -> list[RosterEntry]:
    """Active (not retired, not paused) agents with their rating state, by id."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT a.id, a.team_id, a.step_budget, a.wall_budget_s, r.rated_battles, "
            f"r.streaming_rating "
            f"FROM {_table(Agent)} a LEFT JOIN {_table(AgentRating)} r ON r.agent_id = a.id "
            f"WHERE a.arena_id = %s AND a.retired_at IS NULL AND a.is_paused = %s "
            f"ORDER BY a.id",
            [arena_id, False],
        )
        rows = cursor.fetchall()
    return [RosterEntry(row[0], row[1], row[2], row[3], row[4] or 0, row[5]) for row in rows]


def rows_insert(*objs: Model) -> None:
    """INSERTs ``objs`` (unsaved model instances, all of one model) in one statement and
    sets their primary keys. Field defaults, ``auto_now_add`` and value conversion are
    the fields' own (``pre_save``, ``get_db_prep_save``); no signals are sent (the
    arena uses none)."""
    meta = objs[0]._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    values, params = [], []
    for obj in objs:
        values.append("(" + ", ".join(["%s"] * len(fields)) + ")")
        params += [f.get_db_prep_save(f.pre_save(obj, add=True), connection) for f in fields]
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES {', '.join(values)} RETURNING {quote(meta.pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        ids = [row[0] for row in cursor.fetchall()]
    for obj, pk in zip(objs, ids, strict=True):
        obj.pk = pk
        obj._state.adding = False
        obj._state.db = connection.alias
