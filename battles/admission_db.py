"""The admission path's statements, in SQL.

Admission runs on every submission and holds the arena's row lock while it counts the
queue and writes the task, so each statement here is one round trip with no ORM query
compilation (about 0.3 ms against 1–2 ms for the same query through the ORM on this
class of machine; the benchmark is tests/bench/bench_admission.py). The SQL is plain
enough for PostgreSQL and SQLite alike (``make run`` without ``DATABASE_URL``). Table
names come from the models and every value is a bound parameter; the admission tests
cover each statement, so a renamed column fails them.
"""

from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection
from django.db.models import Model
from django.utils import timezone

from accounts.models import Consent, ConsentTerms, Membership
from agents.models import Agent, Arena
from battles.models import Battle, Task
from battles.similarity import NearDuplicateIndex, trigrams
from ratings.models import AgentRating


def _table(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


@dataclass(frozen=True)
class Submitter:
    consent_current: bool
    team_id: int | None
    earlier_tasks: int  # capped at ``cap`` of ``submitter_context``
    # The newest tasks since ``since`` (at most ``limit``), (id, created_at), newest first:
    # those the near-duplicate check compares with.
    recent: list[tuple[int, datetime]]


def submitter_context(*, user_id: int, cap: int, since: datetime, limit: int) -> Submitter:
    """Consent (the newest terms accepted, or none published), the team the user acts
    for (their earliest membership), how many tasks they submitted before (up to
    ``cap``) and their recent tasks, in one statement (one round trip): a first row of
    kind 0 with the context, then a row of kind 1 per recent task."""
    task = _table(Task)
    sql = f"""
        SELECT 0,
          CASE WHEN EXISTS (SELECT 1 FROM {_table(Consent)} c WHERE c.user_id = %s AND c.terms_id =
                  (SELECT t.id FROM {_table(ConsentTerms)} t ORDER BY t.version DESC LIMIT 1))
               OR NOT EXISTS (SELECT 1 FROM {_table(ConsentTerms)}) THEN 1 ELSE 0 END,
          (SELECT m.team_id FROM {_table(Membership)} m WHERE m.user_id = %s
           ORDER BY m.created_at, m.id LIMIT 1),
          (SELECT COUNT(*) FROM (SELECT 1 FROM {task} k WHERE k.submitter_id = %s
           LIMIT %s) AS earlier),
          NULL
        UNION ALL
        SELECT * FROM (SELECT 1, id, 0, 0, created_at FROM {task}
                       WHERE submitter_id = %s AND created_at >= %s
                       ORDER BY created_at DESC LIMIT %s) AS recent
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [user_id, user_id, user_id, cap, user_id, since, limit])
        rows = cursor.fetchall()
    (_, consent, team_id, earlier, _) = next(row for row in rows if row[0] == 0)
    recent = sorted(
        ((row[1], _aware(row[4])) for row in rows if row[0] == 1),
        key=lambda pair: pair[1],
        reverse=True,
    )
    return Submitter(bool(consent), team_id, earlier, recent)


_index = NearDuplicateIndex(max_bytes=64 * 1024**2)
# A cold process signs at most this many earlier tasks per admission (about 50 µs each,
# idle); the rest are compared exactly this time and indexed by the next admissions.
INDEX_PER_CALL = 20


def near_duplicate_index() -> NearDuplicateIndex:
    """This process's index of earlier tasks (trigrams and LSH bands), bounded by
    ARENA_DUP_CACHE_BYTES. An instruction never changes once stored, so entries never go
    stale; created_at in the key keeps a reused id (a database restored or recreated
    under a running process) from matching."""
    _index.max_bytes = settings.ARENA.dup_cache_bytes
    return _index


def near_duplicate_candidates(
    *, user_id: int, grams: frozenset, recent: list[tuple[int, datetime]]
) -> list[tuple[int, datetime, frozenset]]:
    """Of the submitter's ``recent`` tasks (``Submitter.recent``: the database's list,
    as another process may have admitted the latest), those whose trigrams must be
    compared with ``grams``, as (id, created_at, trigrams): the ones the LSH index names
    as candidates, plus every one this process had not indexed yet (read now and
    compared exactly, so a cold process decides exactly as a warm one)."""
    index = near_duplicate_index()
    known = index.lookup(recent)
    missing = [task_id for task_id, created in recent if (task_id, created) not in known]
    loaded: dict[int, frozenset] = {}
    if missing:
        marks = ", ".join(["%s"] * len(missing))
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, instruction FROM {_table(Task)} WHERE id IN ({marks})", missing
            )
            loaded = {task_id: trigrams(text) for task_id, text in cursor.fetchall()}
    created_at = dict(recent)
    for task_id in list(loaded)[:INDEX_PER_CALL]:
        index.put((task_id, created_at[task_id]), user_id, loaded[task_id])
    hits = index.candidates(user_id, grams) & known.keys()
    found = [(task_id, created, known[(task_id, created)]) for task_id, created in hits]
    found += [(task_id, created_at[task_id], got) for task_id, got in loaded.items()]
    return found


def near_duplicate_remember(*, task_id: int, created_at: datetime, user_id: int,
                            grams: frozenset) -> None:  # fmt: skip
    """Indexes a task just admitted (its submitter's next admissions compare with it)."""
    near_duplicate_index().put((task_id, created_at), user_id, grams)


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


@dataclass(frozen=True)
class RosterEntry:
    agent_id: int
    team_id: int | None  # the team that entered the agent; None for the arena's own
    step_budget: int | None
    wall_budget_s: int | None
    rated_battles: int
    streaming_rating: float | None


def queue_and_roster(*, arena_id: int, team_id: int) -> tuple[int, int, list[RosterEntry]]:
    """Queued battles in the arena and those of the team, and the active (not retired,
    not paused) agents with their rating state by id, in one statement. A statement of
    its own after the arena lock: under READ COMMITTED it then sees every battle
    committed by the submissions that held the lock before."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT q.total, q.team, a.id, a.team_id, a.step_budget, a.wall_budget_s, "
            f"r.rated_battles, r.streaming_rating "
            f"FROM (SELECT COUNT(*) AS total, "
            f"      COALESCE(SUM(CASE WHEN team_id = %s THEN 1 ELSE 0 END), 0) AS team "
            f"      FROM {_table(Battle)} WHERE arena_id = %s AND status = %s) q "
            f"LEFT JOIN {_table(Agent)} a ON a.arena_id = %s AND a.retired_at IS NULL "
            f"     AND a.is_paused = %s "
            f"LEFT JOIN {_table(AgentRating)} r ON r.agent_id = a.id "
            f"ORDER BY a.id",
            [team_id, arena_id, Battle.Status.QUEUED, arena_id, False],
        )
        rows = cursor.fetchall()
    total, team = rows[0][0], rows[0][1]
    roster = [
        RosterEntry(row[2], row[3], row[4], row[5], row[6] or 0, row[7])
        for row in rows
        if row[2] is not None
    ]
    return total, team, roster


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
