"""The probes an orchestrator asks every web process (docs/deployment.md, "Probes and
metrics"):

- ``/healthz``: the process is up and answers. It touches neither PostgreSQL nor Redis:
  a liveness probe that failed when the database is away would restart every replica
  at once for an outage no restart mends.
- ``/readyz``: this process can serve. PostgreSQL accepts a connection, Redis answers,
  every rq queue can be read (its depth is reported), and no migration this process's
  code carries is missing from the database.

Each check of ``/readyz`` runs in a thread of a small pool and has ``CHECK_TIMEOUT_S`` to
answer; one that has not is not ready ("no answer within 1 s"). Its thread ends on its
own soon after: PostgreSQL's connect gives up after ``PG_CONNECT_TIMEOUT_S`` (libpq's
minimum) and its statements after ``CHECK_TIMEOUT_S``; Redis's connects and reads after
``arena_site.redis.PROBE_TIMEOUT_S``. So a probe turns not-ready within about a second
of PostgreSQL or Redis stopping or going silent, and ready again at the first probe
after it is back. One answer serves every probe for ``RESULT_TTL_S``, and one
evaluation runs at a time: a flood of probes cannot pile up connections.

Migrations are compared with the database on every evaluation, not cached once they
were all applied: the migrations on disk are read once (the code of a running process
does not change), but the table can lose rows (a rollback with ``migrate app 00xx``) and
a process started from newer code than the database's schema must say not ready until
the migration job has run. What the database has and the code does not know (a newer
release migrated first, during a rolling upgrade) is fine: the older code still runs.

The answers name no host, port, user or password: an operator reads which part is not
ready and why in words, and finds where it is in the settings."""

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import psycopg
import redis
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.http import HttpRequest, JsonResponse
from rq import Queue

from arena_site.ops_selectors import queue_urls
from arena_site.redis import probe_client

CHECK_TIMEOUT_S = 1.0
PG_CONNECT_TIMEOUT_S = 2  # libpq and psycopg take no less
RESULT_TTL_S = 0.5
# Options of a Django DATABASES entry that are Django's or psycopg's, not libpq's.
_NOT_LIBPQ = {
    "pool", "isolation_level", "assume_role", "server_side_binding", "prepare_threshold",
    "cursor_factory", "context",
}  # fmt: skip
MIGRATE_HINT = "run `manage.py migrate` (in a rolling upgrade the migration job goes first)"

MigrationKey = tuple[str, str]


@dataclass(frozen=True)
class Check:
    ok: bool
    error: str = ""  # why not, in words an operator can act on
    details: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": self.ok, **self.details}
        if self.error:
            body["error"] = self.error
        return body


# --- migrations -----------------------------------------------------------------------


@cache
def expected_migrations() -> dict[MigrationKey, tuple[MigrationKey, ...]]:
    """Every migration this code carries (a squashed one with what it replaces). Read
    from disk once per process."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return {key: tuple(loader.graph.nodes[key].replaces or ()) for key in loader.graph.nodes}


def unapplied_migrations(
    expected: Mapping[MigrationKey, tuple[MigrationKey, ...]], applied: set[MigrationKey]
) -> list[str]:
    """The expected migrations the database has not applied, as ``app.name``, sorted."""
    return sorted(
        f"{app}.{name}"
        for (app, name), replaces in expected.items()
        if (app, name) not in applied and not (replaces and all(r in applied for r in replaces))
    )


def migrations_check(
    expected: Mapping[MigrationKey, tuple[MigrationKey, ...]], applied: set[MigrationKey]
) -> Check:
    missing = unapplied_migrations(expected, applied)
    if not missing:
        return Check(True)
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    count = f"{len(missing)} migration{'s' if len(missing) > 1 else ''}"
    return Check(False, f"{count} of this release not applied ({shown}): {MIGRATE_HINT}")


# --- the database ---------------------------------------------------------------------


def _database_error(exc: Exception) -> str:
    text = str(exc).lower()
    for needle, words in (
        ("refused", "connection refused: is PostgreSQL running and listening?"),
        ("timeout", "no answer in time: PostgreSQL or the network to it is stalled"),
        ("timed out", "no answer in time: PostgreSQL or the network to it is stalled"),
        ("canceling statement", "no answer in time: PostgreSQL is overloaded or locked"),
        ("authentication", "authentication failed: check the credentials of DATABASE_URL"),
        ("does not exist", "the database named in DATABASE_URL does not exist"),
        ("translate host", "the host name of DATABASE_URL does not resolve"),
        ("name or service", "the host name of DATABASE_URL does not resolve"),
        ("starting up", "PostgreSQL is starting up"),
        ("shutting down", "PostgreSQL is shutting down"),
        ("too many clients", "PostgreSQL refuses new connections: too many clients"),
    ):
        if needle in text:
            return f"cannot use the database: {words}"
    return f"cannot use the database ({type(exc).__name__})"


def _postgres_params(settings_dict: Mapping[str, Any]) -> dict[str, Any]:
    """libpq parameters of a DATABASES entry, with the probe's own timeouts."""
    options = {k: v for k, v in (settings_dict.get("OPTIONS") or {}).items() if k not in _NOT_LIBPQ}
    params = {
        key: settings_dict[name]
        for key, name in (
            ("dbname", "NAME"),
            ("user", "USER"),
            ("password", "PASSWORD"),
            ("host", "HOST"),
            ("port", "PORT"),
        )
        if settings_dict.get(name)
    }
    timeout_ms = int(CHECK_TIMEOUT_S * 1000)
    extra = options.pop("options", "")
    return {
        **options,
        **params,
        "connect_timeout": PG_CONNECT_TIMEOUT_S,
        "options": f"{extra} -c statement_timeout={timeout_ms}".strip(),
    }


def database_checks(
    settings_dict: Mapping[str, Any],
    expected: Mapping[MigrationKey, tuple[MigrationKey, ...]],
    alias: str = DEFAULT_DB_ALIAS,
) -> dict[str, Check]:
    """``database`` (a connection and a query) and ``migrations`` (none missing), on a
    connection of the probe's own (PostgreSQL; the pool's may all be busy) or on the
    alias's (SQLite)."""
    not_checked = Check(False, "not checked: the database cannot be used")
    if settings_dict.get("ENGINE") != "django.db.backends.postgresql":
        connection = connections[alias]
        try:
            applied = set(MigrationRecorder(connection).applied_migrations())
        except Exception as exc:
            return {"database": Check(False, _database_error(exc)), "migrations": not_checked}
        finally:
            connection.close()
        return {"database": Check(True), "migrations": migrations_check(expected, applied)}
    try:
        with psycopg.connect(**_postgres_params(settings_dict), autocommit=True) as conn:
            has_table = conn.execute("SELECT to_regclass('django_migrations')").fetchone()
            rows = (
                conn.execute("SELECT app, name FROM django_migrations").fetchall()
                if (has_table and has_table[0])
                else []
            )
    except psycopg.Error as exc:
        return {"database": Check(False, _database_error(exc)), "migrations": not_checked}
    return {"database": Check(True), "migrations": migrations_check(expected, set(rows))}


# --- Redis and the queues -------------------------------------------------------------


def _redis_error(exc: Exception, what: str) -> str:
    if isinstance(exc, redis.AuthenticationError):
        return f"{what}: authentication failed: check the credentials of REDIS_URL"
    if isinstance(exc, redis.TimeoutError):
        return f"{what}: no answer in time: Redis or the network to it is stalled"
    text = str(exc).lower()
    if "refused" in text:
        return f"{what}: connection refused: is Redis running and listening?"
    if "loading" in text:
        return f"{what}: Redis is loading its data set"
    if "name or service" in text or "resolve" in text:
        return f"{what}: the host name of REDIS_URL does not resolve"
    return f"{what} ({type(exc).__name__})"


def redis_check(url: str) -> Check:
    try:
        probe_client(url).ping()
    except redis.RedisError as exc:
        return Check(False, _redis_error(exc, "cannot reach Redis (REDIS_URL)"))
    return Check(True)


def queues_check(urls: Mapping[str, str]) -> Check:
    """Each rq queue's depth (jobs waiting); not ready when one cannot be read."""
    depths: dict[str, int] = {}
    for name, url in urls.items():
        try:
            depths[name] = Queue(name, connection=probe_client(url)).count
        except redis.RedisError as exc:
            return Check(False, _redis_error(exc, f"cannot read the rq queue {name!r}"))
    return Check(True, details={"depths": depths})


# --- all of it, in time ---------------------------------------------------------------


@dataclass(frozen=True)
class Targets:
    """What ``/readyz`` checks, from the settings."""

    database: Mapping[str, Any]
    redis_url: str
    queues: Mapping[str, str]

    @classmethod
    def from_settings(cls) -> "Targets":
        return cls(
            database=settings.DATABASES[DEFAULT_DB_ALIAS],
            redis_url=settings.REDIS_URL,
            queues=queue_urls(),
        )

    def key(self) -> tuple:
        return (repr(sorted(self.database.items())), self.redis_url, tuple(self.queues.items()))


_pool = ThreadPoolExecutor(max_workers=6, thread_name_prefix="readyz")


def readiness(
    targets: Targets,
    expected: Mapping[MigrationKey, tuple[MigrationKey, ...]] | None = None,
    timeout_s: float = CHECK_TIMEOUT_S,
) -> dict[str, Check]:
    """Every check by name (database, migrations, redis, queues), at most ``timeout_s``
    after the call."""
    expected = expected_migrations() if expected is None else expected
    jobs: dict[tuple[str, ...], Callable[[], dict[str, Check]]] = {
        ("database", "migrations"): lambda: database_checks(targets.database, expected),
        ("redis",): lambda: {"redis": redis_check(targets.redis_url)},
        ("queues",): lambda: {"queues": queues_check(targets.queues)},
    }
    futures = {names: _pool.submit(job) for names, job in jobs.items()}
    wait(futures.values(), timeout=timeout_s)
    checks: dict[str, Check] = {}
    for names, future in futures.items():
        if future.done() and future.exception() is None:
            checks.update(future.result())
        elif future.done():
            exc = future.exception()
            checks.update(
                {n: Check(False, f"the check failed ({type(exc).__name__})") for n in names}
            )
        else:
            checks.update({n: Check(False, f"no answer within {timeout_s:g} s") for n in names})
    return checks


class _Memo:
    """The last answer per targets, for ``RESULT_TTL_S``; one evaluation at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[tuple, tuple[float, dict[str, Check]]] = {}

    def get(self, targets: Targets) -> dict[str, Check]:
        with self._lock:
            key = targets.key()
            at, checks = self._answers.get(key, (0.0, {}))
            if time.monotonic() - at > RESULT_TTL_S:
                checks = readiness(targets)
                self._answers = {key: (time.monotonic(), checks)}
            return checks


_memo = _Memo()


def _no_store(response: JsonResponse) -> JsonResponse:
    response["Cache-Control"] = "no-store"
    return response


def healthz(request: HttpRequest) -> JsonResponse:
    return _no_store(JsonResponse({"status": "ok"}))


def readyz(request: HttpRequest) -> JsonResponse:
    checks = _memo.get(Targets.from_settings())
    ready = all(check.ok for check in checks.values())
    body: dict[str, Any] = {"ready": ready, "checks": {n: c.as_json() for n, c in checks.items()}}
    if not ready:
        body["not_ready"] = sorted(n for n, c in checks.items() if not c.ok)
    return _no_store(JsonResponse(body, status=200 if ready else 503))
