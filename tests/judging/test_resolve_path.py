"""vote → resolve: in the vote's own transaction (the fast path), the decider when that
fails, the sweep for a vote left unresolved, and one real worker on the judging queue
(the job a vote scheduled before the decider existed still runs)."""

import datetime as dt

import django_rq
import pytest
from django.utils import timezone

import judging.services.resolution
import judging.services.voting
from battles.models import Battle
from judging.models import Assignment, Vote
from judging.services import battles_resolve_pending, vote_cast
from judging.services.resolution import battles_resolve_due
from ratings.models import AgentRating
from tests.conftest import api_client_for
from tests.judging.battle_factories import ended_battle
from tests.servers import ServerProcess, child_env, wait_for_child_sessions_to_end, worker_command

pytestmark = pytest.mark.django_db(transaction=True)  # commits happen, on_commit runs


def served_long_ago(judge, battle):
    Assignment.objects.create(
        judge=judge, battle=battle, served_at=timezone.now() - dt.timedelta(minutes=1)
    )


def test_a_deciding_vote_is_resolved_before_the_response_with_no_job(alice, judge, roster):
    battle = ended_battle(alice)
    served_long_ago(judge, battle)

    response = api_client_for(judge).post(
        f"/api/battles/{battle.pk}/votes/", {"choice": "A"}, format="json"
    )

    assert response.status_code == 201
    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == ("decided", "A")
    assert AgentRating.objects.get(agent__slug="rulebook").streaming_rating == pytest.approx(1024)
    assert django_rq.get_queue("judging").job_ids == []


def test_when_the_in_process_resolve_fails_the_decider_takes_the_battle(
    alice, judge, roster, monkeypatch
):
    battle = ended_battle(alice)
    served_long_ago(judge, battle)
    real = judging.services.resolution._resolve_with

    def broken(*args):
        raise RuntimeError("database hiccup")

    monkeypatch.setattr(judging.services.resolution, "_resolve_with", broken)
    vote_cast(judge=judge, battle_id=battle.pk, choice="B")

    battle.refresh_from_db()
    assert battle.status == "judging"
    assert battle.decide_due_at is not None  # due at once, for the decider; no job
    assert django_rq.get_queue("judging").job_ids == []
    monkeypatch.setattr(judging.services.resolution, "_resolve_with", real)
    assert battles_resolve_due(limit=10) == (1, [battle.pk])
    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == ("decided", "B")


def test_the_sweep_resolves_what_a_lost_process_left(alice, judge, roster, monkeypatch):
    battle = ended_battle(alice)
    untouched = ended_battle(alice)
    served_long_ago(judge, battle)
    # the resolution never happened (its job lost with a dead worker, say)
    monkeypatch.setattr(judging.services.voting, "resolve_here", lambda battle, **kwargs: None)
    vote_cast(judge=judge, battle_id=battle.pk, choice="tie")
    assert Battle.objects.get(pk=battle.pk).status == "judging"

    assert battles_resolve_pending() == [battle.pk]

    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == ("decided", "tie")
    assert Battle.objects.get(pk=untouched.pk).status == "judging"
    assert battles_resolve_pending() == []


def test_a_real_worker_runs_the_judging_job(alice, judge, roster, tmp_path, sandbox_root):
    battle = ended_battle(alice)
    served_long_ago(judge, battle)
    Vote.objects.create(
        judge=judge,
        battle=battle,
        choice="A",
        served_at=timezone.now() - dt.timedelta(minutes=1),
        voted_at=timezone.now(),
        final_at=timezone.now(),
        admissible=True,
    )
    queue = django_rq.get_queue("judging")
    queue.enqueue("judging.jobs.battle_resolve", battle.pk)

    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    worker = ServerProcess.start(
        "rqworker-judging", worker_command("judging", burst=True), env, tmp_path / "logs"
    )
    try:
        returncode = worker.wait(timeout=120)
    finally:
        worker.stop()
        wait_for_child_sessions_to_end()
    assert returncode == 0, worker.tail()

    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == ("decided", "A"), worker.tail()
    assert queue.job_ids == []
