"""FIFO dispatch: whichever job a battle worker takes, it runs the oldest queued battle;
the janitor gives a lost job back to a battle left waiting."""

import datetime as dt
import threading

import django_rq
import pytest
from django.db import connection
from django.utils import timezone

from agents.services import roster_install_builtins
from battles import jobs
from battles.models import Battle
from battles.queueing import fifo_next
from battles.services import battle_claim_oldest, task_submit
from tests.conftest import make_person
from tests.servers import ensure_public_arena

TASKS = ["list the files here", "print the date and time", "count the words of a file"]


@pytest.fixture
def queued(alice, roster, rng):
    """Three queued battles, submitted a minute apart, created newest first."""
    battles = [task_submit(user=alice, instruction=text, rng=rng) for text in TASKS]
    start = timezone.now() - dt.timedelta(hours=1)
    for minutes, battle in zip([2, 1, 0], battles, strict=True):
        Battle.objects.filter(pk=battle.pk).update(
            submitted_at=start + dt.timedelta(minutes=minutes)
        )
    return battles


def test_claims_follow_submission_order_like_fifo_next(queued):
    waiting = list(Battle.objects.filter(status="queued").values_list("pk", "submitted_at"))
    expected = []
    while waiting:
        pick = fifo_next(waiting, running=0, slots=1)
        expected.append(pick)
        waiting = [(pk, at) for pk, at in waiting if pk != pick]

    claimed = [battle_claim_oldest() for _ in queued]

    assert claimed == expected == [b.pk for b in reversed(queued)]
    assert battle_claim_oldest() is None
    for battle in Battle.objects.filter(pk__in=claimed):
        assert battle.status == Battle.Status.RUNNING and battle.dequeued_at


@pytest.mark.django_db(transaction=True)  # lanes run in threads with own connections
def test_the_job_of_a_newer_battle_runs_the_oldest_first(queued):
    oldest, newest = queued[2], queued[0]
    jobs.battle_run(newest.pk)
    oldest.refresh_from_db()
    newest.refresh_from_db()
    assert oldest.status == Battle.Status.SCREENING, oldest.failure_reason  # real lanes
    assert newest.status == Battle.Status.QUEUED


@pytest.mark.django_db(transaction=True)
def test_concurrent_workers_claim_each_battle_once(terms, rng):
    roster_install_builtins(arena=ensure_public_arena())
    alice = make_person("alice", "Acme", terms)
    for text in TASKS:
        task_submit(user=alice, instruction=text, rng=rng)
    claims: list[int | None] = []
    gate = threading.Barrier(6)

    def claim() -> None:
        gate.wait()
        try:
            claims.append(battle_claim_oldest())
        finally:
            connection.close()

    threads = [threading.Thread(target=claim) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    got = sorted(c for c in claims if c is not None)
    assert got == sorted(Battle.objects.values_list("pk", flat=True))
    assert claims.count(None) == 3


def test_janitor_gives_a_lost_job_back_to_a_waiting_battle(
    queued, settings, django_capture_on_commit_callbacks
):
    settings.ARENA = settings.ARENA.replace(stuck_after_s=60)
    queue = django_rq.get_queue("battles")
    with django_capture_on_commit_callbacks(execute=True):  # django-rq enqueues on commit
        queue.enqueue("battles.jobs.battle_run", queued[0].pk, job_id=f"battle-{queued[0].pk}")
    assert queue.job_ids == [f"battle-{queued[0].pk}"]  # the other two lost theirs

    with django_capture_on_commit_callbacks(execute=True):
        requeued = jobs.battles_requeue_orphans()
    assert sorted(requeued) == sorted([queued[1].pk, queued[2].pk])
    assert sorted(queue.job_ids) == sorted(f"battle-{b.pk}" for b in queued)
    assert jobs.battles_requeue_orphans() == []  # jobs waiting: nothing to do
