"""/healthz and /readyz (arena_site/probes.py, arena_site/ops.py) against the test
PostgreSQL and Redis; unreachable ones are a closed or a silent port of this machine, and
the outage is a throwaway server stopped and started again (tests/throwaway.py), never
the shared ones."""

import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import django_rq
import pytest
from django.conf import settings
from django.test import Client
from rq import Queue

from arena_site import probes
from arena_site.probes import Targets, database_checks, readiness, unapplied_migrations
from tests.servers import free_port
from tests.throwaway import throwaway_postgres, throwaway_redis

# The probe's answer and its checks must come within CHECK_TIMEOUT_S (1 s); the issue's
# bound is 2 s from an outage to not-ready.
BOUND_S = 2.0


@pytest.fixture(autouse=True)
def _fresh_answers(monkeypatch):
    """No answer of an earlier test is reused (they are kept RESULT_TTL_S)."""
    monkeypatch.setattr(probes, "_memo", probes._Memo())


@contextmanager
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel's backlog) and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


def get(path: str, **extra):
    started = time.monotonic()
    response = Client().get(path, **extra)
    return response, time.monotonic() - started


def test_healthz_answers_without_database_session_or_host_check():
    # No db fixture: pytest-django refuses any query. A probe names the pod's address as
    # its Host, which ALLOWED_HOSTS does not list.
    response, _ = get("/healthz", HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"
    assert "Set-Cookie" not in response


def test_probes_answer_get_and_head_only(db):
    assert Client().post("/healthz").status_code == 405
    response = Client().post("/readyz")
    assert (response.status_code, response["Allow"]) == (405, "GET, HEAD")


def test_readyz_ready_with_queue_depths(db):
    # rq's own queue: django-rq's would wait for the test's transaction to commit
    queue = Queue("judging", connection=django_rq.get_connection("judging"))
    queue.enqueue("builtins.len", "x")
    queue.enqueue("builtins.len", "y")
    response, elapsed = get("/readyz", HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["ready"] is True
    assert body["checks"] == {
        "database": {"ok": True},
        "migrations": {"ok": True},
        "redis": {"ok": True},
        "queues": {
            "ok": True,
            "depths": {
                "battles": 0,
                "judging": 2,
                "ratings": 0,
                "default": 0,
                "exports": 0,
                "evals": 0,
            },
        },
    }
    assert response["Cache-Control"] == "no-store"
    assert elapsed < BOUND_S


def _redis_at(url: str) -> dict:
    queues = {name: {**conf, "URL": url} for name, conf in settings.RQ_QUEUES.items()}
    return {"REDIS_URL": url, "RQ_QUEUES": queues}


def test_readyz_not_ready_when_redis_refuses(db, settings):
    port = free_port()
    for key, value in _redis_at(f"redis://:hunter2@127.0.0.1:{port}/0").items():
        setattr(settings, key, value)
    response, elapsed = get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["ready"] is False
    assert body["not_ready"] == ["queues", "redis"]
    assert body["checks"]["redis"] == {
        "ok": False,
        "error": "cannot reach Redis (REDIS_URL): connection refused: is Redis running and "
        "listening?",
    }
    assert body["checks"]["queues"]["error"].startswith("cannot read the rq queue 'battles'")
    assert body["checks"]["database"] == {"ok": True}
    assert elapsed < BOUND_S
    # no address, port or password of the configuration in the answer
    text = response.content.decode()
    assert str(port) not in text and "hunter2" not in text and "127.0.0.1" not in text


def _database_at(port: int, password: str = "") -> dict:
    return {**settings.DATABASES["default"], "PORT": port, "PASSWORD": password}


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_readyz_not_ready_when_database_refuses(db, settings):
    port = free_port()
    settings.DATABASES = {**settings.DATABASES, "default": _database_at(port, "hunter2")}
    response, elapsed = get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["not_ready"] == ["database", "migrations"]
    assert body["checks"]["database"] == {
        "ok": False,
        "error": "cannot use the database: connection refused: is PostgreSQL running and "
        "listening?",
    }
    assert body["checks"]["migrations"]["error"] == "not checked: the database cannot be used"
    assert body["checks"]["redis"] == {"ok": True}
    assert elapsed < BOUND_S
    text = response.content.decode()
    assert str(port) not in text and "hunter2" not in text and "127.0.0.1" not in text


def test_silent_servers_are_not_ready_within_the_bound(db):
    """A PostgreSQL or Redis that accepts the connection and then says nothing (stopped,
    swapped out, a network that drops packets) is not ready within the bound."""
    with silent_port() as pg_port, silent_port() as redis_port:
        url = f"redis://127.0.0.1:{redis_port}/0"
        targets = Targets(database=_database_at(pg_port), redis_url=url, queues={"battles": url})
        started = time.monotonic()
        checks = readiness(targets, expected={})
        elapsed = time.monotonic() - started
    assert elapsed < BOUND_S
    assert {name for name, check in checks.items() if not check.ok} == {
        "database", "migrations", "redis", "queues",
    }  # fmt: skip
    assert checks["database"].error == "no answer within 1 s"
    assert "no answer" in checks["redis"].error


def test_a_migration_of_this_release_missing_is_not_ready(db):
    expected = {**probes.expected_migrations(), ("battles", "9999_future"): ()}
    checks = database_checks(settings.DATABASES["default"], expected)
    assert checks["database"].ok
    assert not checks["migrations"].ok
    assert checks["migrations"].error == (
        "1 migration of this release not applied (battles.9999_future): run `manage.py "
        "migrate` (in a rolling upgrade the migration job goes first)"
    )
    # and everything this release carries is applied in the test database
    assert database_checks(settings.DATABASES["default"], probes.expected_migrations())[
        "migrations"
    ].ok


A, B, C, S = ("app", "0001_a"), ("app", "0002_b"), ("app", "0003_c"), ("app", "0001_squashed")


@pytest.mark.parametrize(
    ("expected", "applied", "missing"),
    [
        ({A: (), B: ()}, {A, B}, []),
        ({A: (), B: ()}, {A}, ["app.0002_b"]),
        ({A: (), B: ()}, set(), ["app.0001_a", "app.0002_b"]),
        # a newer release migrated first: what the database has beyond this code is fine
        ({A: ()}, {A, B, C}, []),
        # a squashed migration counts as applied when all it replaces is
        ({S: (A, B), C: ()}, {A, B, C}, []),
        ({S: (A, B), C: ()}, {S, C}, []),
        ({S: (A, B), C: ()}, {A, C}, ["app.0001_squashed"]),
    ],
)
def test_unapplied_migrations(expected, applied, missing):
    assert unapplied_migrations(expected, applied) == missing


def _first_not_ready(targets: Targets, part: str, since: float) -> float:
    while time.monotonic() - since < 10:
        checks = readiness(targets, expected={})
        if not checks[part].ok:
            return time.monotonic() - since
        time.sleep(0.05)
    raise AssertionError(f"{part} still ready 10 s after it stopped")


def _ready_again(targets: Targets) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(check.ok for check in readiness(targets, expected={}).values()):
            return
        time.sleep(0.05)
    raise AssertionError(json.dumps({n: c.as_json() for n, c in readiness(targets).items()}))


def test_not_ready_within_2_s_of_an_outage_and_ready_again():
    """Throwaway PostgreSQL and Redis, stopped and started again in turn."""
    with throwaway_postgres() as pg, throwaway_redis() as redis_server:
        database = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "postgres",
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": pg.port,
            "OPTIONS": {},
        }
        targets = Targets(
            database=database,
            redis_url=redis_server.url,
            queues={"battles": redis_server.url, "judging": redis_server.url},
        )
        _ready_again(targets)

        redis_server.stop()
        assert _first_not_ready(targets, "redis", time.monotonic()) < BOUND_S
        assert not readiness(targets, expected={})["queues"].ok
        redis_server.start()
        _ready_again(targets)

        pg.stop()
        assert _first_not_ready(targets, "database", time.monotonic()) < BOUND_S
        pg.start()
        _ready_again(targets)
