"""Worker hosts' heartbeats and the janitor's look at hosts that stopped beating
(docs/deployment.md); the fence that stops a lane whose battle was re-queued under it.
The two-host run with a real SIGKILL is tests/faults/test_two_hosts.py."""

import random
import threading
from datetime import timedelta

import django_rq
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.utils import timezone

from arena_site.config import ArenaConfig
from arena_site.hosts import host_id
from battles.jobs import battles_janitor
from battles.models import Battle, Run, Step
from battles.services import battles_recover_dead_hosts, task_submit
from battles.services.lane_fence import LaneLost, fenced
from battles.services.lanes import _end_run, _heartbeat
from battles.services.orchestration import _battle_requeue, _lanes_done
from sandboxes.heartbeats import host_beat
from sandboxes.models import SandboxLease, WorkerHost
from sandboxes.selectors import hosts_silent

pytestmark = pytest.mark.django_db


def _silent(host: str, seconds: float = 600) -> WorkerHost:
    then = timezone.now() - timedelta(seconds=seconds)
    return WorkerHost.objects.create(host_id=host, started_at=then, heartbeat_at=then)


def _running_on(battle: Battle, host: str, *, attempt: int = 1) -> None:
    now = timezone.now()
    Battle.objects.filter(pk=battle.pk).update(
        status="running", worker_host=host, worker_pid=4242, attempt=attempt,
        dequeued_at=now, heartbeat_at=now,
    )  # fmt: skip
    Run.objects.filter(battle=battle).update(status="running", started_at=now)


def test_a_beat_registers_the_host_and_beats_its_live_leases():
    live = SandboxLease.objects.create(slot=0, backend="local", host=host_id(), worker_pid=1)
    other = SandboxLease.objects.create(slot=0, backend="local", host="elsewhere", worker_pid=1)
    host = host_beat(starting=True)
    assert host.host_id == host_id()
    live.refresh_from_db()
    other.refresh_from_db()
    assert live.heartbeat_at is not None and other.heartbeat_at is None


def test_a_beat_clears_lost_and_a_start_after_it_begins_a_new_life():
    _silent(host_id())
    WorkerHost.objects.filter(host_id=host_id()).update(lost_at=timezone.now())
    before = WorkerHost.objects.get(host_id=host_id()).started_at
    host_beat(starting=True)
    host = WorkerHost.objects.get(host_id=host_id())
    assert host.lost_at is None and host.started_at > before


def test_silent_hosts_are_those_past_the_bound_never_this_one(settings):
    _silent("gone", seconds=settings.ARENA.host_dead_after_s + 1)
    _silent("fresh", seconds=1)
    _silent(host_id(), seconds=10_000)  # this process is alive, whatever its row says
    assert hosts_silent() == ["gone"]


def test_a_dead_hosts_battles_are_requeued_by_any_janitor(
    alice, roster, django_capture_on_commit_callbacks
):
    dead = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    alive = task_submit(user=alice, instruction="name three rivers", rng=random.Random(2))
    _silent("host-gone")
    WorkerHost.objects.create(
        host_id="host-alive", started_at=timezone.now(), heartbeat_at=timezone.now()
    )
    _running_on(dead, "host-gone")
    _running_on(alive, "host-alive")
    Step.objects.create(
        run=dead.runs.first(), index=0, tool="shell", started_at=timezone.now(), duration_ms=1
    )

    with django_capture_on_commit_callbacks(execute=True):
        requeued, failed = battles_recover_dead_hosts()

    assert (requeued, failed) == ([dead.pk], [])
    dead.refresh_from_db()
    assert dead.status == "queued" and dead.attempt == 2 and dead.worker_host == ""
    assert not Step.objects.filter(run__battle=dead).exists()
    assert set(dead.runs.values_list("status", "started_at")) == {("pending", None)}
    assert django_rq.get_queue("battles").fetch_job(f"battle-{dead.pk}-attempt-2") is not None
    assert WorkerHost.objects.get(host_id="host-gone").lost_at is not None
    assert Battle.objects.get(pk=alive.pk).status == "running"
    assert battles_recover_dead_hosts() == ([], [])  # once


def test_a_dead_hosts_battle_on_its_last_attempt_fails_with_the_reason(alice, roster):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    _silent("host-gone")
    _running_on(battle, "host-gone", attempt=2)
    assert battles_janitor() == [battle.pk]
    battle.refresh_from_db()
    assert battle.status == "failed"
    assert "died on each of its 2 attempts" in battle.failure_reason
    assert "heartbeat stopped" in battle.failure_reason
    assert set(battle.runs.values_list("end_reason", flat=True)) == {"error"}


def test_a_host_that_never_beat_is_never_taken_for_dead(alice, roster):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    _running_on(battle, "a-command-on-some-host")
    assert battles_recover_dead_hosts() == ([], [])
    assert Battle.objects.get(pk=battle.pk).status == "running"


def test_a_lane_whose_battle_was_requeued_under_it_stops(alice, roster):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    _running_on(battle, host_id())
    run = Run.objects.get(battle=battle, side="A")
    _heartbeat(run)  # still its own
    # another janitor re-queues the battle; the next attempt starts the run again
    Run.objects.filter(pk=run.pk).update(started_at=timezone.now() + timedelta(seconds=5))
    with pytest.raises(LaneLost):
        _heartbeat(run)


def test_the_end_of_a_lost_attempt_is_not_taken(alice, roster):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    _running_on(battle, "host-b", attempt=2)  # the second attempt owns it now
    Run.objects.filter(battle=battle).update(status="ended", end_reason="delivered")
    _lanes_done(battle.pk, attempt=1)
    assert Battle.objects.get(pk=battle.pk).status == "running"
    _lanes_done(battle.pk, attempt=2)
    assert Battle.objects.get(pk=battle.pk).status == "screening"


def test_the_dead_bound_must_cover_two_beats():
    with pytest.raises(ImproperlyConfigured, match="at least twice"):
        ArenaConfig.from_env({"ARENA_HOST_HEARTBEAT_S": "5", "ARENA_HOST_DEAD_AFTER_S": "9"})


def test_a_lane_that_froze_mid_step_writes_nothing_into_the_next_attempts_run(alice, roster):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    _running_on(battle, host_id())
    run = Run.objects.get(battle=battle, side="A")
    with fenced(run):  # still its own: the step is kept
        Step.objects.create(
            run=run,
            index=0,
            tool="screenshot",
            args={},
            result={},
            started_at=timezone.now(),
            duration_ms=0,
        )
    # another janitor re-queues the battle, and the next attempt starts the run again
    next_start = timezone.now() + timedelta(seconds=5)
    Run.objects.filter(pk=run.pk).update(started_at=next_start, status="running")
    with pytest.raises(LaneLost), fenced(run):
        Step.objects.create(
            run=run,
            index=1,
            tool="click",
            args={},
            result={},
            started_at=timezone.now(),
            duration_ms=0,
        )
    _end_run(run, Run.EndReason.DELIVERED, final_message="the frozen lane's answer")
    fresh = Run.objects.get(pk=run.pk)
    assert list(Step.objects.filter(run=run).values_list("index", flat=True)) == [0]
    assert (fresh.status, fresh.end_reason, fresh.final_message) == ("running", "", "")


@pytest.mark.django_db(transaction=True)
def test_a_requeue_waits_for_a_fenced_write_in_hand_then_removes_it(alice, roster):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    _running_on(battle, "host-a")
    run = Run.objects.get(battle=battle, side="A")
    in_fence, release = threading.Event(), threading.Event()

    def frozen_lane() -> None:
        try:
            with fenced(run):
                Step.objects.create(
                    run=run,
                    index=0,
                    tool="click",
                    args={},
                    result={},
                    started_at=timezone.now(),
                    duration_ms=0,
                )
                in_fence.set()
                release.wait(10)
        finally:
            connection.close()

    def requeue() -> None:
        try:
            with transaction.atomic():
                _battle_requeue(Battle.objects.select_for_update().get(pk=battle.pk))
        finally:
            connection.close()

    lane = threading.Thread(target=frozen_lane)
    lane.start()
    assert in_fence.wait(10)
    janitor = threading.Thread(target=requeue)
    janitor.start()
    janitor.join(1.0)
    assert janitor.is_alive()  # the re-queue waits for the write in hand…
    release.set()
    lane.join(10)
    janitor.join(10)
    assert not janitor.is_alive()
    # …which landed first and went with the rest of the attempt
    assert not Step.objects.filter(run=run).exists()
    assert Run.objects.get(pk=run.pk).started_at is None
    with pytest.raises(LaneLost), fenced(run):  # and nothing more of that lane is taken
        pass
