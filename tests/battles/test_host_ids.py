"""Two machines with one ``ARENA_HOST_ID`` (issue 35, "a fleet that checks itself"): the
second is refused at its worker's start while the first beats, and nothing of the
first's is touched: its leases, its running battle. A row whose machine went silent, or
was declared lost, or from before machines were recorded, is taken over."""

import random
import subprocess
from datetime import timedelta

import pytest
from django.utils import timezone

from arena_site.hosts import host_id, machine_id
from battles.models import Battle
from battles.services import task_submit
from sandboxes.heartbeats import HostIdTaken, host_beat
from sandboxes.models import SandboxLease, WorkerHost
from tests.servers import PYTHON, ROOT, child_env

pytestmark = pytest.mark.django_db(transaction=True)

OTHER = "another-machine boot 00000000-0000-0000-0000-000000000000"


def _beaten_by(machine: str, seconds_ago: float, **fields) -> WorkerHost:
    then = timezone.now() - timedelta(seconds=seconds_ago)
    return WorkerHost.objects.create(
        host_id=host_id(), machine=machine, started_at=then, heartbeat_at=then, **fields
    )


def test_a_start_while_another_machine_beats_the_id_is_refused_and_changes_nothing(settings):
    row = _beaten_by(OTHER, seconds_ago=3)

    with pytest.raises(HostIdTaken) as refused:
        host_beat(starting=True)

    message = str(refused.value)
    assert f"the host id {host_id()!r} (ARENA_HOST_ID) is in use by another machine" in message
    assert OTHER in message and "an id of its own" in message
    after = WorkerHost.objects.get(pk=row.pk)
    assert (after.machine, after.heartbeat_at, after.started_at) == (
        OTHER,
        row.heartbeat_at,
        row.started_at,
    )


@pytest.mark.parametrize(
    ("machine", "seconds_ago", "lost"),
    [
        (OTHER, 61, False),  # silent past ARENA_HOST_DEAD_AFTER_S (60)
        (OTHER, 3, True),  # declared lost by a janitor
        ("", 3, False),  # a row from before machines were recorded
    ],
)
def test_an_id_whose_machine_is_gone_is_taken_over(machine, seconds_ago, lost):
    _beaten_by(machine, seconds_ago, lost_at=timezone.now() if lost else None)

    host_beat(starting=True)

    row = WorkerHost.objects.get(host_id=host_id())
    assert row.machine == machine_id() and row.lost_at is None


def test_this_machines_own_workers_share_the_id():
    _beaten_by(machine_id(), seconds_ago=1)
    host_beat(starting=True)
    host_beat(starting=True)  # a second worker of the same machine
    assert WorkerHost.objects.get(host_id=host_id()).machine == machine_id()


def test_a_battle_worker_of_a_second_machine_with_the_id_does_not_start(
    alice, roster, sandbox_root, tmp_path
):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    now = timezone.now()
    Battle.objects.filter(pk=battle.pk).update(
        status="running", worker_host=host_id(), worker_pid=4242, dequeued_at=now,
        heartbeat_at=now,
    )  # fmt: skip
    lease = SandboxLease.objects.create(
        slot=0, backend="local", host=host_id(), worker_pid=4242, run_id=None
    )
    _beaten_by(OTHER, seconds_ago=2)
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    env["ARENA_HOST_ID"] = host_id()
    argv = [PYTHON, "manage.py", "rqworker", "battles", "--burst"]
    argv += ["--worker-class", "battles.worker.BattleWorker"]

    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    assert done.returncode != 0
    assert "battle worker not started: the host id" in done.stderr, done.stderr[-2000:]
    # The other machine's battle and lease are left as they were (pid 4242 is not alive
    # here: a janitor that ran would have re-queued the one and freed the other).
    battle.refresh_from_db()
    assert (battle.status, battle.attempt) == ("running", 1)
    lease.refresh_from_db()
    assert lease.released_at is None
