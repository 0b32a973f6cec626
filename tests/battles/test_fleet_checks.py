"""A fleet that checks itself (issue 35, item 4): hosts whose settings are not the
fleet's are refused at start, every "dead" is decided on the fleet's dead-after and
the database's clock, and no live battle is re-queued by a host that is wrong about
the fleet: one with a shorter dead-after, one with another key-encryption key, one
whose clock runs five minutes late. (Two hosts with one id: ``test_host_ids.py``.)"""

import datetime
import os
import random
import subprocess

import pytest
import time_machine
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.utils import timezone

from arena_site.hosts import process_token
from arena_site.secret import KEK_ENV_NAME, key_fingerprint
from battles.models import Battle
from battles.services import task_submit
from battles.services.orchestration import (
    battles_recover_dead_hosts,
    battles_recover_dead_workers,
)
from sandboxes.fleet import FleetMismatch, fleet_join
from sandboxes.heartbeats import host_beat
from sandboxes.models import FleetSettings, WorkerHost
from sandboxes.selectors import hosts_silent
from tests.servers import PYTHON, ROOT, child_env

pytestmark = pytest.mark.django_db(transaction=True)

K1, K2 = Fernet.generate_key().decode(), Fernet.generate_key().decode()


@pytest.fixture
def live_battle(alice, roster, settings):
    """A battle running on host "other", which beat two seconds ago (database clock)."""
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    settings.ARENA = settings.ARENA.replace(host_id="other")
    host_beat(starting=True)
    Battle.objects.filter(pk=battle.pk).update(
        status="running", worker_host="other", worker_pid=4242, dequeued_at=timezone.now(),
        heartbeat_at=timezone.now(),
    )  # fmt: skip
    WorkerHost.objects.filter(host_id="other").update(
        heartbeat_at=timezone.now() - datetime.timedelta(seconds=20)
    )
    settings.ARENA = settings.ARENA.replace(host_id="janitor")
    return battle


def still_running(battle: Battle) -> bool:
    battle.refresh_from_db()
    return (battle.status, battle.attempt) == ("running", 1)


def test_the_first_host_writes_the_fleets_settings_and_the_same_host_joins_again(settings):
    settings.ARENA = settings.ARENA.replace(host_id="first")
    monkey_ring = [key_fingerprint(K1)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(KEK_ENV_NAME, K1)
        row = fleet_join()
        assert fleet_join().pk == row.pk
    assert (row.heartbeat_s, row.dead_after_s, row.set_by) == (5.0, 60.0, "first")
    assert row.kek_fingerprints == monkey_ring
    assert K1 not in str(FleetSettings.objects.values().get())  # a fingerprint, not the key


def test_a_host_with_a_shorter_dead_after_is_refused_and_its_janitor_uses_the_fleets(
    settings, live_battle
):
    fleet_join()  # (the fleet: heartbeat 5 s, dead after 60 s)
    settings.ARENA = settings.ARENA.replace(host_dead_after_s=10.0)

    with pytest.raises(FleetMismatch) as refused:
        fleet_join()

    assert "are 5 s and 10 s here, the fleet's 5 s and 60 s" in str(refused.value)
    # A janitor that runs with the short setting all the same (a process started before
    # the fleet's row, a command): "dead" is the fleet's, so the host silent for 20 s is
    # not dead and its battle stays.
    assert "other" not in hosts_silent()
    assert battles_recover_dead_hosts() == ([], [])
    assert still_running(live_battle)
    assert FleetSettings.objects.get().dead_after_s == 60.0


def test_a_host_with_another_key_encryption_key_is_refused(monkeypatch, live_battle):
    monkeypatch.setenv(KEK_ENV_NAME, K1)
    fleet_join()

    for ring in (K2, f"{K2},{K1}"):  # another key; or another key sealing
        monkeypatch.setenv(KEK_ENV_NAME, ring)
        with pytest.raises(FleetMismatch, match="is not the fleet's") as refused:
            fleet_join()
        assert key_fingerprint(K2) in str(refused.value) and K2 not in str(refused.value)
    monkeypatch.setenv(KEK_ENV_NAME, f"{K1},{K2}")  # the fleet's key sealing, one more
    fleet_join()
    assert still_running(live_battle)

    # Rotation: the new key first, every stored key sealed again, and the fleet's ring
    # follows; a host that lacks the new key is refused from then on.
    monkeypatch.setenv(KEK_ENV_NAME, f"{K2},{K1}")
    call_command("agent_keys_rotate")
    assert FleetSettings.objects.get().kek_fingerprints == [
        key_fingerprint(K2),
        key_fingerprint(K1),
    ]
    fleet_join()
    monkeypatch.setenv(KEK_ENV_NAME, K1)
    with pytest.raises(FleetMismatch):
        fleet_join()


def test_a_host_whose_clock_runs_five_minutes_late_is_not_taken_for_dead(settings, live_battle):
    settings.ARENA = settings.ARENA.replace(host_id="late")
    battle = live_battle
    Battle.objects.filter(pk=battle.pk).update(worker_host="late")
    five_minutes_ago = timezone.now() - datetime.timedelta(minutes=5)
    with time_machine.travel(five_minutes_ago, tick=True):
        assert timezone.now() < five_minutes_ago + datetime.timedelta(seconds=30)
        host_beat(starting=True)  # the late host beats, on its own clock's say
        host_beat()

    # The beat is the database's time: another host's janitor sees a live host
    beat = WorkerHost.objects.get(host_id="late").heartbeat_at
    assert abs((timezone.now() - beat).total_seconds()) < 30
    settings.ARENA = settings.ARENA.replace(host_id="janitor")
    assert "late" not in hosts_silent()
    assert battles_recover_dead_hosts() == ([], [])
    assert still_running(battle)


def test_a_battle_worker_whose_settings_are_not_the_fleets_does_not_start(
    live_battle, sandbox_root, tmp_path
):
    fleet_join()
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    env.update(ARENA_HOST_ID="misconfigured", ARENA_HOST_DEAD_AFTER_S="10")
    argv = [PYTHON, "manage.py", "rqworker", "battles", "--burst"]
    argv += ["--worker-class", "battles.worker.BattleWorker"]

    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    assert done.returncode != 0
    assert "battle worker not started: ARENA_HOST_HEARTBEAT_S and ARENA_HOST_DEAD_AFTER_S" in (
        done.stderr
    ), done.stderr[-2000:]
    assert not WorkerHost.objects.filter(host_id="misconfigured").exists()
    assert still_running(live_battle)


def test_a_battle_whose_workers_pid_now_names_another_process_is_taken_for_dead(
    alice, roster, settings
):
    """A worker's pid is given again (a restarted container's worker is pid 1 again, a
    recycled pid): the battle it held is recovered, not kept by a stranger's pid. The
    process token (pid and start time) tells the two apart; a live worker keeps its own."""
    settings.ARENA = settings.ARENA.replace(host_id="here")
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(2))
    mine = process_token()
    assert mine.startswith(f"{os.getpid()}:")
    running = {"status": "running", "worker_host": "here", "worker_pid": os.getpid()}
    Battle.objects.filter(pk=battle.pk).update(**running, worker_token=mine)
    assert battles_recover_dead_workers() == ([], [])  # this very process: alive

    stale = f"{os.getpid()}:{int(mine.split(':')[1]) - 1}"  # the pid's earlier owner
    Battle.objects.filter(pk=battle.pk).update(worker_token=stale)
    assert battles_recover_dead_workers() == ([battle.pk], [])
    battle.refresh_from_db()
    assert (battle.status, battle.attempt, battle.worker_token) == ("queued", 2, "")
