"""The leaderboard API and its live socket (real Redis channel layer)."""

import random

import django_rq
import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from agents.models import Agent, Arena
from arena_site.asgi import application
from battles.models import Battle, Task
from battles.services import task_submit
from judging.models import Assignment, Vote
from judging.services import battle_resolve
from ratings.jobs import leaderboard_push as leaderboard_push_job
from ratings.refit import arena_refit
from ratings.services import leaderboard_push_later
from tests.ratings.factories import decided_battle, judges, round_robin


@pytest.fixture(autouse=True)
def _few_replicates(settings):
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=20)


def test_leaderboard_rows_have_the_stable_fields(roster, django_assert_max_num_queries):
    with django_assert_max_num_queries(8):
        response = Client().get("/api/leaderboard/")
    assert response.status_code == 200
    rows = response.json()["rows"]
    assert {r["agent"] for r in rows} == {"Rulebook", "Surveyor", "Idle baseline"}
    for row in rows:
        assert {"agent", "rating", "streaming_rating", "votes", "provisional"} <= set(row)
        assert row["rating"] is None and row["provisional"] is True
        assert row["streaming_rating"] == 1000.0 and row["votes"] == 0
        assert row["url"] == f"/agents/{row['slug']}/"


def test_the_board_costs_the_same_queries_for_any_number_of_agents(
    alice, roster, rng, django_assert_max_num_queries
):
    # Given a published snapshot over 3 agents, then 20 more agents on the roster
    crowd = judges(2)
    round_robin(alice, roster, crowd, rounds=16, rng=rng)
    arena_refit(arena_id=Arena.objects.public().pk)
    for i in range(20):
        Agent.objects.create(
            arena=roster[0].arena, slug=f"extra-{i}", display_name=f"Extra {i}",
            kind="builtin", builtin_policy="idle",
        )  # fmt: skip
    with django_assert_max_num_queries(8):
        body = Client().get("/api/leaderboard/").json()
    assert len(body["rows"]) == 23
    assert sum(r["rating"] is not None for r in body["rows"]) == 3


def test_the_board_publishes_exclusion_counts_and_the_self_judged_tally(alice, roster):
    agents = {a.slug: a for a in roster}
    for reason in ("named_model", "named_model", "no_trajectory"):
        decided_battle(
            submitter=alice, a=agents["idle"], b=agents["rulebook"], outcome="",
            status="excluded", exclusion_reason=reason,
        )  # fmt: skip
    mine = decided_battle(
        submitter=alice, a=agents["idle"], b=agents["surveyor"], outcome="B", judge=alice
    )
    Battle.objects.filter(pk=mine.pk).update(decision_source=Battle.DecisionSource.SUBMITTER)
    body = Client().get("/api/leaderboard/").json()
    # every rule in order, then the retired one, listed because it excluded a battle
    assert list(body["exclusions"].items()) == [
        ("named_model", 2),
        ("no_run", 0),
        ("arena_fault", 0),
        ("forged_grade", 0),
        ("ended_by_submitter", 0),
        ("budget_mismatch", 0),
        ("no_admissible_vote", 0),
        ("no_trajectory", 1),
    ]
    assert body["self_judged_only"] == 1
    page = Client().get("/").content.decode()
    assert '<span data-reason="named_model">judge-visible text named a model: 2</span>' in page
    assert "(total 3)" in page and '<span class="self-judged">1</span>' in page


def test_the_board_never_links_a_battle_or_shows_a_task(alice, roster, rng):
    """Identities are public on the board; which battle they fought is not (a judge who
    could map a battle to its agents would no longer judge blind), nor any task text."""
    crowd = judges(2)
    battles = round_robin(alice, roster, crowd, rounds=2, rng=rng)
    Task.objects.filter(battles__in=battles).update(instruction="SECRET-TASK-TEXT of Acme")
    arena_refit(arena_id=Arena.objects.public().pk)
    texts = [
        Client().get("/").content.decode(),
        Client().get("/api/leaderboard/").content.decode(),
        *(Client().get(f"/agents/{a.slug}/").content.decode() for a in roster),
    ]
    for text in texts:
        assert "/battles/" not in text and "/judge/" not in text
        assert "SECRET-TASK-TEXT" not in text and "Acme" not in text
        assert not any(f'battle" data-id="{b.pk}"' in text for b in battles)
    body = Client().get("/api/leaderboard/").json()
    assert not {"battle", "battles", "battle_id", "task"} & set(body["rows"][0])


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
        final_at="2026-11-30T12:01:00Z",
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
    # the small frame: only the two agents' streaming cells, nothing else of the board
    assert f'<td class="streaming" id="streaming-{winner}">1024.0</td>' in pushed
    assert f'<td class="votes" id="votes-{winner}">1</td>' in pushed
    assert 'id="leaderboard-rows"' not in pushed and pushed.count("<td") == 6
    # and the full board follows from the ratings queue, once for a burst
    # (scheduled half a second later, for the worker's scheduler to run)
    queue = django_rq.get_queue("ratings")
    scheduled = queue.scheduled_job_registry
    (job_id,) = scheduled.get_job_ids()
    assert queue.fetch_job(job_id).func_name == "ratings.jobs.leaderboard_push"
    leaderboard_push_later(arena_id=battle.arena_id)
    assert len(scheduled.get_job_ids()) == 1
    leaderboard_push_job(battle.arena_id)
    leaderboard_push_later(arena_id=battle.arena_id)  # a change after the render
    assert len(scheduled.get_job_ids()) == 2


@pytest.mark.django_db(transaction=True)
def test_a_refit_pushes_the_published_board_to_the_socket(alice, roster, rng):
    crowd = judges(3)
    round_robin(alice, roster, crowd, rounds=16, rng=rng)

    async def scenario():
        from channels.db import database_sync_to_async

        socket = WebsocketCommunicator(
            application, "/ws/leaderboard/", headers=[(b"origin", b"http://127.0.0.1")]
        )
        connected, _ = await socket.connect()
        assert connected
        initial = await socket.receive_from(timeout=5)
        await database_sync_to_async(arena_refit)(arena_id=roster[0].arena_id)
        pushed = await socket.receive_from(timeout=5)
        await socket.disconnect()
        return initial, pushed

    initial, pushed = async_to_sync(scenario)()
    assert "No refit published yet" in initial and 'class="value"' not in initial
    assert 'id="board-status"' in pushed and "refit of 48 rated battles" in pushed
    assert pushed.count('<span class="value">') == 3
    # ℓ: the push served the board, so every battle in the refit carries both stamps
    assert (
        Battle.objects.filter(incorporation__incorporation__leaderboard_served_at=None).count() == 0
    )


@pytest.mark.django_db(transaction=True)
def test_a_worker_with_its_scheduler_runs_the_delayed_full_push(roster, tmp_path, sandbox_root):
    """The full board is scheduled, not queued: only a worker started with its scheduler
    (as `make run` starts it) runs it, half a second later."""
    from tests.servers import (
        ServerProcess,
        child_env,
        poll_until,
        wait_for_child_sessions_to_end,
        worker_command,
    )

    arena_id = roster[0].arena_id
    queue = django_rq.get_queue("ratings")
    leaderboard_push_later(arena_id=arena_id)
    assert queue.jobs == [] and len(queue.scheduled_job_registry) == 1

    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    worker = ServerProcess.start(
        "rqworker-ratings",
        worker_command("ratings", scheduler=True),
        env,
        tmp_path / "logs",
    )
    try:
        poll_until(
            lambda: len(queue.finished_job_registry) == 1,
            timeout=30,
            what="the scheduled full-board push",
            processes=[worker],
        )
    finally:
        worker.stop()
        wait_for_child_sessions_to_end()
    assert len(queue.scheduled_job_registry) == 0
    leaderboard_push_later(arena_id=arena_id)  # the job cleared the pending mark
    assert len(queue.scheduled_job_registry) == 1
