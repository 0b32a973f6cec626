"""The admission path's statements, in SQL.

Admission runs on every submission and holds the arena's row lock while it counts the
queue and writes the task, so each call here is one round trip with no ORM query
compilation (about 0.3 ms against 1–2 ms for the same query through the ORM on this
class of machine; the benchmark is tests/bench/bench_admission.py): one for the
submitter's context with the near-duplicate candidates, one for the lock with the
queue, one for every row. The SQL is plain enough for PostgreSQL and SQLite alike
(``make run`` without ``DATABASE_URL``); where PostgreSQL allows fewer round trips (two
statements in one simple query, INSERTs chained by CTEs) SQLite runs them one by one.
Table names and columns come from the models and every value is a bound parameter (a
null is written NULL); the admission tests cover each statement, so a renamed column
fails them.
"""

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

from django.conf import settings
from django.db import connection
from django.db.models import Model
from django.utils import timezone

from accounts.models import Consent, ConsentTerms, Membership
from agents.models import Agent, Arena
from battles.models import Battle, Run, Task
from battles.similarity import SIGNATURE_BYTES, TrigramCache, band_offsets, trigrams
from ratings.models import AgentRating


def _table(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


class Earlier(NamedTuple):
    """One of the submitter's recent tasks that the near-duplicate check must compare
    exactly with the new one."""

    id: int
    minhash: bytes | None  # the stored signature; None if absent or of another length
    instruction: str


@dataclass(frozen=True)
class Submitter:
    consent_current: bool
    team_id: int | None
    earlier_tasks: int  # capped at ``cap`` of ``submitter_context``
    # Of the newest tasks since ``since`` (at most ``limit``), the LSH candidates for the
    # new task and those without a usable signature, newest first.
    similar: list[Earlier]


# Band k of a stored signature against band k of the new one (``s.sig``, the one
# parameter; the planner folds its slices into constants).
_BAND_MATCH = " OR ".join(
    f"substr(w.minhash, {start + 1}, {width}) = substr(s.sig, {start + 1}, {width})"
    for start, width in band_offsets()
)


def submitter_context(
    *, user_id: int, cap: int, since: datetime, limit: int, minhash: bytes
) -> Submitter:
    """Consent (the newest terms accepted, or none published), the team the user acts
    for (their earliest membership), how many tasks they submitted before (up to
    ``cap``) and, of their recent tasks, those to compare exactly with a new task of
    signature ``minhash``, in one statement (one round trip): a first row of kind 0
    with the context, then a row of kind 1 per such task, newest first (the order of
    the ordered subquery, which the UNION ALL keeps).

    The LSH step runs in the database, on the signatures stored with the tasks
    (``battles.similarity.lsh_candidates`` is the rule): of the newest ``limit`` tasks
    of the window (through the submitter's recent-tasks index), those sharing a band
    with ``minhash``, plus every one without a usable signature (created before
    signatures were stored, or not by admission). Only those rows travel, each with
    its instruction: usually none, against 200 signatures read and compared here."""
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
          NULL, NULL
        UNION ALL
        SELECT * FROM (
          SELECT 1, w.id, 0, 0, CASE WHEN length(w.minhash) = %s THEN w.minhash END,
                 w.instruction
          FROM (SELECT id, minhash, instruction, created_at FROM {task}
                WHERE submitter_id = %s AND created_at >= %s
                ORDER BY created_at DESC LIMIT %s) AS w, (SELECT %s AS sig) AS s
          WHERE w.minhash IS NULL OR length(w.minhash) <> %s OR {_BAND_MATCH}
          ORDER BY w.created_at DESC) AS candidates
    """
    params = [user_id, user_id, user_id, cap, SIGNATURE_BYTES, user_id, since, limit, minhash]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, SIGNATURE_BYTES])
        rows = cursor.fetchall()
    (_, consent, team_id, earlier, *_) = next(row for row in rows if row[0] == 0)
    similar = [Earlier(row[1], row[4], row[5]) for row in rows if row[0] == 1]
    return Submitter(bool(consent), team_id, earlier, similar)


_cache = TrigramCache(max_bytes=64 * 1024**2)


def near_duplicate_cache() -> TrigramCache:
    """This process's trigram sets of earlier tasks, bounded by ARENA_DUP_CACHE_BYTES.
    Keyed by the task's id and what its trigrams are computed from (the stored
    signature, or the instruction when there is none), so an entry never goes stale:
    an id reused for another text (a database restored or recreated under a running
    process) does not match."""
    _cache.max_bytes = settings.ARENA.dup_cache_bytes
    return _cache


def near_duplicate_trigrams(*, earlier: list[Earlier]) -> list[tuple[int, frozenset]]:
    """The trigram sets of ``earlier`` (``Submitter.similar``), in its order, from the
    cache or split from the instructions read with them."""
    cache = near_duplicate_cache()
    keys = [(task.id, task.minhash if task.minhash is not None else task.instruction)
            for task in earlier]  # fmt: skip
    known = cache.lookup(keys)
    found = []
    for task, key in zip(earlier, keys, strict=True):
        grams = known.get(key)
        if grams is None:
            grams = trigrams(task.instruction)
            cache.put(key, grams)
        found.append((task.id, grams))
    return found


def near_duplicate_remember(*, task_id: int, minhash: bytes, grams: frozenset) -> None:
    """Caches a task just admitted (its submitter's next admissions may compare with it)."""
    near_duplicate_cache().put((task_id, minhash), grams)


def task_created_at(*, task_id: int) -> datetime:
    """When the task was created (the earlier task a near-duplicate refusal names)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT created_at FROM {_table(Task)} WHERE id = %s", [task_id])
        return _aware(cursor.fetchone()[0])


def _aware(value: datetime) -> datetime:
    """Raw cursors on SQLite return naive UTC datetimes."""
    return value if timezone.is_aware(value) else value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class RosterEntry:
    agent_id: int
    team_id: int | None  # the team that entered the agent; None for the arena's own
    step_budget: int | None
    wall_budget_s: int | None
    rated_battles: int
    streaming_rating: float | None
    # Battle lanes that failed through the agent's own fault: exposure for the draw.
    failed_lanes: int = 0
    kind: str = ""
    tool_set: list | None = None

    def runs(self, task_kind: str) -> bool:
        """Whether the agent can take a task of this kind: a repo task needs the shell
        (a CLI agent, or a scaffold or remote agent offered it); a CLI agent only ever
        works on repositories."""
        if task_kind == "repo":
            return self.kind == "cli" or (
                self.kind in ("scaffold", "remote")
                and (not self.tool_set or "shell" in self.tool_set)
            )
        return self.kind != "cli"


@dataclass(frozen=True)
class Locked:
    arena_id: int
    queued: int  # battles queued in the arena
    queued_team: int  # of those, the team's
    roster: list[RosterEntry]  # the arena's active agents, by id


def _one_round_trip() -> bool:
    """Whether several statements can go in one ``execute``: PostgreSQL with
    client-side binding (Django's default) sends them as one simple query."""
    options = connection.settings_dict.get("OPTIONS") or {}
    return connection.vendor == "postgresql" and not options.get("server_side_binding")


def admission_lock(*, slug: str, team_id: int) -> Locked | None:
    """Locks the arena's row (the admission lock: concurrent submissions queue here),
    then counts its queued battles (all, and the team's) and reads its active (not
    retired, not paused) agents with their rating state and the battle lanes each
    failed through its own fault (the draw's exposure; one partial-index count per
    agent), in a statement of its own:
    under READ COMMITTED that statement takes its snapshot after the lock was granted,
    so it sees every battle committed by the submissions that held the lock before.
    On PostgreSQL both statements go in one round trip (one simple query of two
    statements, each with its own snapshot). None when no arena has that slug.
    Call inside the admission transaction."""
    arena = _table(Arena)
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    locking = f"SELECT id FROM {arena} WHERE slug = %s{lock}"
    counting = (
        f"SELECT q.total, q.team, a.id, a.team_id, a.step_budget, a.wall_budget_s, "
        f"r.rated_battles, r.streaming_rating, "
        f"(SELECT COUNT(*) FROM {_table(Run)} f WHERE f.agent_id = a.id "
        f" AND f.agent_fault = %s AND f.battle_id IS NOT NULL), a.kind, a.tool_set "
        f"FROM (SELECT COUNT(*) AS total, "
        f"      COALESCE(SUM(CASE WHEN team_id = %s THEN 1 ELSE 0 END), 0) AS team "
        f"      FROM {_table(Battle)} WHERE status = %s "
        f"      AND arena_id = (SELECT id FROM {arena} WHERE slug = %s)) q "
        f"LEFT JOIN {_table(Agent)} a ON a.arena_id = (SELECT id FROM {arena} WHERE slug = %s) "
        f"     AND a.retired_at IS NULL AND a.is_paused = %s AND a.approval = %s "
        f"LEFT JOIN {_table(AgentRating)} r ON r.agent_id = a.id "
        f"ORDER BY a.id"
    )
    counting_params = [
        True,
        team_id,
        Battle.Status.QUEUED,
        slug,
        slug,
        False,
        Agent.Approval.APPROVED,
    ]
    with connection.cursor() as cursor:
        if _one_round_trip():
            cursor.execute(f"{locking}; {counting}", [slug, *counting_params])
            found = cursor.fetchall()
            cursor.nextset()
        else:
            cursor.execute(locking, [slug])
            found = cursor.fetchall()
            cursor.execute(counting, counting_params)
        rows = cursor.fetchall()
    if not found:
        return None
    roster = [
        RosterEntry(
            row[2], row[3], row[4], row[5], row[6] or 0, row[7], row[8] or 0, row[9], row[10]
        )
        for row in rows
        if row[2] is not None
    ]
    return Locked(found[0][0], rows[0][0], rows[0][1], roster)


@functools.cache
def _insert_columns(model: type[Model]) -> tuple[tuple, tuple[str, ...]]:
    """The model's fields to INSERT (all concrete ones but the primary key) and their
    quoted column names."""
    fields = tuple(field for field in model._meta.concrete_fields if not field.primary_key)
    return fields, tuple(connection.ops.quote_name(field.column) for field in fields)


def _values(obj: Model, links: dict[str, str]) -> tuple[tuple[str, ...], str, list]:
    """The columns, the VALUES row and its parameters to INSERT ``obj`` (an unsaved
    model instance). Field defaults, ``auto_now_add`` and value conversion are the
    fields' own (``pre_save``, ``get_db_prep_save``); a column named in ``links`` takes
    that SQL instead of a parameter (the id of a row inserted by the same statement),
    and a null is written as NULL."""
    fields, columns = _insert_columns(type(obj))
    marks, params = [], []
    for field in fields:
        if field.column in links:
            marks.append(links[field.column])
            continue
        value = field.get_db_prep_save(field.pre_save(obj, add=True), connection)
        if value is None:  # fewer parameters: psycopg caches the parsing of ≤ 50
            marks.append("NULL")
        else:
            marks.append("%s")
            params.append(value)
    return columns, "(" + ", ".join(marks) + ")", params


def _saved(obj: Model, pk: int) -> None:
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = connection.alias


def rows_insert(*objs: Model) -> None:
    """INSERTs ``objs`` (unsaved model instances, all of one model) in one statement and
    sets their primary keys. No signals are sent (the arena uses none)."""
    meta = objs[0]._meta
    rows = [_values(obj, {}) for obj in objs]
    quote = connection.ops.quote_name
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(rows[0][0])}) "
        f"VALUES {', '.join(row[1] for row in rows)} RETURNING {quote(meta.pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [param for row in rows for param in row[2]])
        ids = [row[0] for row in cursor.fetchall()]
    for obj, pk in zip(objs, ids, strict=True):
        _saved(obj, pk)


def battle_and_runs_insert(*, battle: Battle, runs: list[Run]) -> None:
    """INSERTs a battle of a stored task and its runs (unsaved; each run's ``battle`` is
    ``battle``) and sets their primary keys, in two statements."""
    battle.task_id = battle.task.pk  # the task had no id yet when the battle was built
    rows_insert(battle)
    for run in runs:
        run.battle = battle
    rows_insert(*runs)


def task_battle_runs_insert(*, task: Task, battle: Battle, runs: list[Run]) -> None:
    """INSERTs a new task, its battle and the battle's runs (unsaved; ``battle.task``
    is ``task`` and each run's ``battle`` is ``battle``) and sets their primary keys.
    On PostgreSQL in one statement (data-modifying CTEs, each row taking the id the
    INSERT before it returned), elsewhere in three."""
    if connection.vendor != "postgresql":
        rows_insert(task)
        battle_and_runs_insert(battle=battle, runs=runs)
        return
    side = connection.ops.quote_name(Run._meta.get_field("side").column)
    task_columns, task_row, params = _values(task, {})
    battle_columns, battle_row, battle_params = _values(
        battle, {Battle._meta.get_field("task").column: "(SELECT id FROM t)"}
    )
    params += battle_params
    run_rows = []
    for run in runs:
        run_columns, run_row, run_params = _values(
            run, {Run._meta.get_field("battle").column: "(SELECT id FROM b)"}
        )
        run_rows.append(run_row)
        params += run_params
    sql = (
        f"WITH t AS (INSERT INTO {_table(Task)} ({', '.join(task_columns)}) "
        f"VALUES {task_row} RETURNING id), "
        f"b AS (INSERT INTO {_table(Battle)} ({', '.join(battle_columns)}) "
        f"VALUES {battle_row} RETURNING id), "
        f"r AS (INSERT INTO {_table(Run)} ({', '.join(run_columns)}) "
        f"VALUES {', '.join(run_rows)} RETURNING id, {side}) "
        f"SELECT (SELECT id FROM t), (SELECT id FROM b), r.id, r.{side} FROM r"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    _saved(task, rows[0][0])
    battle.task = task
    _saved(battle, rows[0][1])
    run_ids = {run_side: pk for _, _, pk, run_side in rows}
    for run in runs:
        run.battle = battle
        _saved(run, run_ids[run.side])
