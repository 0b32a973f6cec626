"""Requests beyond capacity are shed with 503 + Retry-After and the JSON envelope, never
a 500; a vote whose transaction committed is always answered 201, and what could not
run after the commit (Redis gone) is logged; a vote's decision does not need Redis.

Real parts throughout: a real psycopg pool timing out, a real refused connection, a
throwaway Redis killed at the very moment a vote commits (a commit hook the test adds
stops it, so the vote's own hooks meet a dead server)."""

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import threading
from contextlib import contextmanager

import psycopg
import pytest
import redis
import time_machine
from django.db import IntegrityError, connection, transaction
from django.db.models.signals import post_save
from django.http import HttpResponse
from django.test import RequestFactory
from psycopg_pool import ConnectionPool

from arena_site.exceptions import DATABASE_AWAY, DATABASE_BUSY, REDIS_AWAY, capacity_error
from arena_site.redis import redis_client
from arena_site.shedding import CapacityMiddleware
from battles.models import Battle
from judging.models import Assignment, Vote
from judging.services import battles_resolve_pending
from judging.services.resolution import battles_resolve_due
from ratings.models import AgentRating
from tests.conftest import api_client_for
from tests.judging.battle_factories import T0, ended_battle
from tests.servers import ROOT, free_port
from tests.throwaway import throwaway_redis

factory = RequestFactory()


def envelope(response) -> dict:
    return json.loads(response.content)


# --- the in-flight bound -----------------------------------------------------------


def test_beyond_the_inflight_bound_a_request_is_answered_503_at_once(settings):
    settings.ARENA = settings.ARENA.replace(max_inflight=1)
    entered, release = threading.Event(), threading.Event()

    def view(request):
        entered.set()
        release.wait(10)
        return HttpResponse("served")

    middleware = CapacityMiddleware(view)
    first: list = []
    holder = threading.Thread(target=lambda: first.append(middleware(factory.get("/api/x/"))))
    holder.start()
    try:
        assert entered.wait(10)
        refused_api = middleware(factory.post("/api/battles/1/votes/"))
        refused_page = middleware(factory.get("/judge/"))
    finally:
        release.set()
        holder.join(10)

    assert refused_api.status_code == 503 and refused_api["Retry-After"] == "1"
    assert envelope(refused_api) == {
        "error": {
            "code": "overloaded",
            "message": "The server is handling as many requests as it can; try again shortly.",
            "retry_after": 1,
        }
    }
    assert refused_page.status_code == 503 and refused_page["Retry-After"] == "1"
    assert refused_page["Content-Type"] == "text/html; charset=utf-8"
    assert b"Try again in 1 s" in refused_page.content
    assert first[0].status_code == 200
    # the slot was given back
    assert middleware(factory.get("/api/x/")).content == b"served"


def test_static_files_are_not_counted(settings):
    settings.ARENA = settings.ARENA.replace(max_inflight=1)
    entered, release = threading.Event(), threading.Event()

    def view(request):
        if request.path == "/api/x/":
            entered.set()
            release.wait(10)
        return HttpResponse("served")

    middleware = CapacityMiddleware(view)
    holder = threading.Thread(target=lambda: middleware(factory.get("/api/x/")))
    holder.start()
    try:
        assert entered.wait(10)
        asset = middleware(factory.get(f"/{settings.STATIC_URL.lstrip('/')}arena.css"))
        page = middleware(factory.get("/judge/"))
    finally:
        release.set()
        holder.join(10)
    assert asset.status_code == 200 and page.status_code == 503
    assert middleware.inflight == 0


def test_the_inflight_bound_holds_under_asgi_too(settings):
    settings.ARENA = settings.ARENA.replace(max_inflight=2)

    async def scenario():
        release = asyncio.Event()
        entered = 0

        async def view(request):
            nonlocal entered
            entered += 1
            await release.wait()
            return HttpResponse("served")

        middleware = CapacityMiddleware(view)
        held = [asyncio.create_task(middleware(factory.get("/api/x/"))) for _ in range(2)]
        while entered < 2:
            await asyncio.sleep(0.01)
        refused = await middleware(factory.get("/api/x/"))
        release.set()
        served = await asyncio.gather(*held)
        again = await middleware(factory.get("/api/x/"))
        return refused, served, again

    refused, served, again = asyncio.run(scenario())
    assert refused.status_code == 503 and envelope(refused)["error"]["code"] == "overloaded"
    assert [r.status_code for r in served] == [200, 200]
    assert again.status_code == 200


def test_more_in_flight_than_pooled_connections_stops_start_up(tmp_path):
    env = {
        **os.environ,
        "ARENA_DATA_DIR": str(tmp_path),
        "ARENA_DB_POOL_MAX": "4",
        "ARENA_MAX_INFLIGHT": "5",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "ARENA_MAX_INFLIGHT (5) must not exceed ARENA_DB_POOL_MAX (4)" in done.stderr


def test_the_asgi_application_loads_the_urlconf_before_the_server_listens(tmp_path):
    # A URLconf imported inside the first request holds an in-flight slot for seconds
    # (the provider SDKs), and a burst right after a restart would be shed behind it.
    probe = (
        "import sys; import arena_site.asgi; "
        "print('arena_site.urls' in sys.modules, 'agents.api' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT, env={**os.environ, "ARENA_DATA_DIR": str(tmp_path)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


# --- what counts as "beyond capacity" ----------------------------------------------


def _wrapped(exc: Exception) -> Exception:
    """The exception as Django raises it from the driver's."""
    try:
        with connection.wrap_database_errors:
            raise exc
    except Exception as wrapped:  # whatever Django made of it
        return wrapped
    raise AssertionError("not raised")


@pytest.mark.django_db
def test_a_pool_timeout_an_unreachable_database_and_redis_are_503s_and_a_bug_is_not():
    params = connection.get_connection_params()
    conninfo = psycopg.conninfo.make_conninfo(
        **{k: v for k, v in params.items() if k in ("dbname", "user", "password", "host", "port")}
    )
    pool = ConnectionPool(conninfo, min_size=0, max_size=1, timeout=0.2, open=True)
    with pool, pool.connection():
        try:
            pool.getconn()
        except Exception as exc:
            timeout = exc
    closed = free_port()
    try:
        psycopg.connect(host="127.0.0.1", port=closed, user="x", dbname="x", connect_timeout=2)
    except psycopg.OperationalError as exc:
        refused = exc
    try:
        redis.Redis(port=closed, socket_connect_timeout=1).ping()
    except redis.ConnectionError as exc:
        redis_gone = exc

    assert capacity_error(_wrapped(timeout)) is DATABASE_BUSY
    assert capacity_error(_wrapped(refused)) is DATABASE_AWAY
    assert capacity_error(redis_gone) is REDIS_AWAY
    assert capacity_error(IntegrityError("duplicate key")) is None
    assert capacity_error(ValueError("a bug")) is None


# --- Redis away: the API and the pages -----------------------------------------------


@contextmanager
def redis_at(settings, url: str):
    """The arena's Redis client, queues and rate counters on ``url``."""
    settings.REDIS_URL = url
    redis_client.cache_clear()
    try:
        yield
    finally:
        redis_client.cache_clear()


@pytest.fixture
def spare_redis(settings):
    with throwaway_redis() as server, redis_at(settings, server.url):
        yield server


def test_with_redis_down_the_vote_api_and_the_judge_page_answer_503(
    spare_redis, judge, alice, roster, client
):
    battle = ended_battle(alice)
    Assignment.objects.create(judge=judge, battle=battle, served_at=T0)
    spare_redis.stop()

    vote = api_client_for(judge).post(
        f"/api/battles/{battle.pk}/votes/", {"choice": "A"}, format="json"
    )
    client.force_login(judge)
    page = client.get("/judge/")

    assert vote.status_code == 503 and vote["Retry-After"] == "5"
    assert vote.json()["error"]["code"] == "unavailable"
    assert vote.json()["error"]["retry_after"] == 5
    assert page.status_code == 503 and page["Retry-After"] == "5"
    assert page["Content-Type"].startswith("text/html")
    assert not Vote.objects.exists()


# --- a committed vote is a 201, whatever fails after the commit ----------------------


@contextmanager
def at_each_vote_commit(action):
    """Runs ``action`` when a vote's transaction commits, before the vote's own commit
    hooks that follow the vote row (the resolution's scheduling, the board push)."""

    def saved(sender, instance, created, **kwargs):
        if created:
            transaction.on_commit(action)

    post_save.connect(saved, sender=Vote, weak=False, dispatch_uid="test-shedding-commit")
    try:
        yield
    finally:
        post_save.disconnect(sender=Vote, dispatch_uid="test-shedding-commit")


def ratings_moved() -> list[int]:
    return sorted(AgentRating.objects.values_list("rated_battles", flat=True))


@pytest.mark.django_db(transaction=True)
def test_redis_dying_at_the_commit_does_not_delay_the_decision(
    spare_redis, settings, judge, alice, roster
):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=1)
    battle = ended_battle(alice)
    Assignment.objects.create(judge=judge, battle=battle, served_at=T0)

    with at_each_vote_commit(spare_redis.stop):
        response = api_client_for(judge).post(
            f"/api/battles/{battle.pk}/votes/", {"choice": "A"}, format="json"
        )

    assert response.status_code == 201, response.content
    vote = Vote.objects.get()
    assert response.json()["vote"] == vote.pk and response.json()["final"] is False
    battle.refresh_from_db()
    assert battle.status == Battle.Status.JUDGING
    assert battle.decide_due_at == vote.final_at  # in the database, not in Redis
    # the decider, when the window has ended, decides it (Redis still away: the board
    # push after its commit fails quietly)
    with time_machine.travel(vote.final_at, tick=False):
        assert battles_resolve_due(limit=10) == (1, [battle.pk])
    battle.refresh_from_db()
    assert battle.status == Battle.Status.DECIDED and battle.outcome == "A"
    assert ratings_moved() == [1, 1]
    with time_machine.travel(vote.final_at + dt.timedelta(seconds=2), tick=False):
        assert battles_resolve_pending() == []  # exactly once: the sweep finds nothing


@pytest.mark.django_db(transaction=True)
def test_a_vote_decided_in_its_own_transaction_is_201_with_redis_dying_at_the_commit(
    spare_redis, judge, alice, roster
):
    battle = ended_battle(alice)
    Assignment.objects.create(judge=judge, battle=battle, served_at=T0)

    with at_each_vote_commit(spare_redis.stop):
        response = api_client_for(judge).post(
            f"/api/battles/{battle.pk}/votes/", {"choice": "B"}, format="json"
        )

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["final"] is True and body["counts"] is True
    assert body["battle_status"] == "decided" and set(body["reveal"]) == {"A", "B"}
    battle.refresh_from_db()
    assert battle.status == Battle.Status.DECIDED and battle.outcome == "B"
    assert ratings_moved() == [1, 1]


@pytest.mark.django_db(transaction=True)
def test_a_commit_hook_that_raises_after_the_vote_committed_still_gets_201(
    spare_redis, judge, alice, roster
):
    battle = ended_battle(alice)
    Assignment.objects.create(judge=judge, battle=battle, served_at=T0)

    def redis_gone_then_used() -> None:
        spare_redis.stop()
        redis_client().ping()  # raises ConnectionError, not caught by anything of ours

    with at_each_vote_commit(redis_gone_then_used):
        response = api_client_for(judge).post(
            f"/api/battles/{battle.pk}/votes/", {"choice": "A"}, format="json"
        )

    assert response.status_code == 201, response.content
    assert Vote.objects.get().pk == response.json()["vote"]
