"""What a vote with a bearer token asks of Redis and the database before its own
transaction: one Redis round trip (the token's entry, the address's failed tokens, the
last-used time and the judge's vote counter in one script call) and no statement. The
per-judge limit counted there still refuses, with the same answer."""

import datetime as dt

import pytest
import redis
import time_machine
from django.core.cache import cache
from django.db import connection
from rest_framework.test import APIClient

from accounts.services import api_token_create
from judging.models import Assignment, Vote
from tests.judging.battle_factories import T0, ended_battle

pytestmark = pytest.mark.django_db


@pytest.fixture
def events(monkeypatch):
    """Every Redis round trip and database statement, in order: ("redis", commands) or
    ("sql", statement)."""
    seen: list[tuple[str, str]] = []
    original = redis.connection.AbstractConnection.send_packed_command

    def sent(conn, command, check_health=True):
        packed = command if isinstance(command, bytes) else b"".join(command)
        seen.append(("redis", packed.split(b"\r\n")[2].decode().upper()))
        return original(conn, command, check_health)

    def executed(execute, sql, params, many, context):
        seen.append(("sql", sql))
        return execute(sql, params, many, context)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", sent)
    with connection.execute_wrapper(executed):
        yield seen


def judge_client(judge) -> APIClient:
    _, plain = api_token_create(user=judge)
    client = APIClient(REMOTE_ADDR="203.0.113.7")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


def served(judge, battle, at=None) -> None:
    at = at or dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    Assignment.objects.create(judge=judge, battle=battle, served_at=at)


def test_one_round_trip_and_no_statement_before_the_votes_transaction(
    alice, judge, roster, settings, events
):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=10)
    first, second = ended_battle(alice), ended_battle(alice)
    served(judge, first)
    served(judge, second)
    client = judge_client(judge)
    assert (
        client.post(f"/api/battles/{first.pk}/votes/", {"choice": "A"}, format="json").status_code
        == 201
    )
    events.clear()  # the token's entry is cached now

    answer = client.post(f"/api/battles/{second.pk}/votes/", {"choice": "A"}, format="json")

    assert answer.status_code == 201
    start = next(i for i, (kind, _) in enumerate(events) if kind == "sql")
    assert events[:start] == [("redis", "EVALSHA")]
    assert events[start][1].startswith("SAVEPOINT")  # the vote's own transaction (a
    # savepoint inside the test's)
    # the locking read, then the vote stored and its battle recounted in one statement,
    # then the release; its commit hooks run at the commit, which the test withholds
    assert [kind for kind, _ in events[start:]] == ["sql"] * 4
    assert "FOR UPDATE" in events[start + 1][1]
    assert events[start + 2][1].lstrip().startswith("WITH v AS (INSERT INTO")
    window = int(dt.datetime.now(dt.UTC).timestamp() // 60)
    assert cache.get(f"judge-rate:vote:{judge.pk}:{window}") == 2


def test_a_cold_token_costs_one_select_and_a_second_round_trip(alice, judge, roster, events):
    battle = ended_battle(alice)
    served(judge, battle)
    client = judge_client(judge)
    events.clear()

    assert (
        client.post(f"/api/battles/{battle.pk}/votes/", {"choice": "A"}, format="json").status_code
        == 201
    )

    start = next(i for i, (kind, _) in enumerate(events) if kind == "sql" and "SAVEPOINT" in _)
    before = events[:start]
    assert [kind for kind, _ in before] == ["redis", "sql", "redis"]
    assert "accounts_apitoken" in before[1][1]


def test_the_judges_limit_counted_with_the_token_refuses_as_before(alice, judge, roster, settings):
    settings.ARENA = settings.ARENA.replace(vote_rate_per_min=2)
    battles = [ended_battle(alice) for _ in range(3)]
    for battle in battles:
        served(judge, battle, at=T0)
    client = judge_client(judge)
    with time_machine.travel(T0 + dt.timedelta(seconds=30), tick=False):
        answers = [
            client.post(f"/api/battles/{b.pk}/votes/", {"choice": "A"}, format="json")
            for b in battles
        ]
        undo = client.delete(f"/api/battles/{battles[0].pk}/votes/mine/")
        status = client.get(f"/api/battles/{battles[0].pk}/votes/mine/")  # counts nothing
    assert [a.status_code for a in answers] == [201, 201, 429]
    assert answers[2]["Retry-After"] == "30"
    assert answers[2].json()["error"]["message"] == (
        "Too many votes: at most 2 a minute. Try again in 30 s."
    )
    assert undo.status_code == 429  # undos share the vote budget
    assert status.status_code == 200
    window = int((T0 + dt.timedelta(seconds=30)).timestamp() // 60)
    assert cache.get(f"judge-rate:vote:{judge.pk}:{window}") == 4
    assert Vote.objects.filter(judge=judge).count() == 2


def test_the_next_battle_counts_its_own_limit_with_the_token(judge, settings, db):
    settings.ARENA = settings.ARENA.replace(judge_next_rate_per_min=2)
    client = judge_client(judge)
    with time_machine.travel(T0 + dt.timedelta(seconds=15), tick=False):
        codes = [client.get("/api/judge/next/").status_code for _ in range(3)]
    assert codes == [204, 204, 429]
    window = int((T0 + dt.timedelta(seconds=15)).timestamp() // 60)
    assert cache.get(f"judge-rate:next:{judge.pk}:{window}") == 3
    assert cache.get(f"judge-rate:vote:{judge.pk}:{window}") is None
