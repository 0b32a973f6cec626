"""The leaderboard API and its live socket (real Redis channel layer)."""

import random

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from agents.models import Agent
from arena_site.asgi import application
from battles.models import Battle
from battles.services import task_submit
from judging.models import Assignment, Vote
from judging.services import battle_resolve


def test_leaderboard_rows_have_the_stable_fields(roster, django_assert_max_num_queries):
    with django_assert_max_num_queries(3):
        response = Client().get("/api/leaderboard/")
    assert response.status_code == 200
    rows = response.json()["rows"]
    assert {r["agent"] for r in rows} == {"Rulebook", "Surveyor", "Idle baseline"}
    for row in rows:
        assert {"agent", "rating", "streaming_rating", "votes", "provisional"} <= set(row)
        assert row["rating"] is None and row["provisional"] is True
        assert row["streaming_rating"] == 1000.0 and row["votes"] == 0


def test_retired_agents_leave_the_board(roster):
    Agent.objects.filter(slug="idle").update(retired_at="2026-11-30T00:00:00Z")
    rows = Client().get("/api/leaderboard/").json()["rows"]
    assert "Idle baseline" not in {r["agent"] for r in rows}


def test_leaderboard_page_renders_rows(roster):
    page = Client().get("/").content.decode()
    assert 'id="leaderboard-rows"' in page and "Rulebook" in page
    assert 'ws-connect="/ws/leaderboard/"' in page


@pytest.mark.django_db(transaction=True)
def test_a_decided_battle_is_pushed_to_the_leaderboard_socket(alice, judge, roster):
    battle = task_submit(user=alice, instruction="what is 1+1", rng=random.Random(3))
    Battle.objects.filter(pk=battle.pk).update(status="judging", redundancy_target=1)
    served = Assignment.objects.create(judge=judge, battle=battle, served_at="2026-11-30T12:00:00Z")
    Vote.objects.create(
        judge=judge,
        battle=battle,
        choice="A",
        served_at=served.served_at,
        voted_at="2026-11-30T12:01:00Z",
        admissible=True,
    )
    winner = battle.agent_a.slug

    async def scenario():
        socket = WebsocketCommunicator(
            application, "/ws/leaderboard/", headers=[(b"origin", b"http://127.0.0.1")]
        )
        connected, _ = await socket.connect()
        assert connected
        initial = await socket.receive_from(timeout=5)
        assert 'id="leaderboard-rows"' in initial
        from channels.db import database_sync_to_async

        await database_sync_to_async(battle_resolve)(battle_id=battle.pk)
        pushed = await socket.receive_from(timeout=5)
        await socket.disconnect()
        return pushed

    pushed = async_to_sync(scenario)()
    row = pushed.split(f'data-agent="{winner}"')[1].split("</tr>")[0]
    assert '<td class="streaming">1024.0</td>' in row
    assert '<td class="votes">1</td>' in row
