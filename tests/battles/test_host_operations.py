"""An operator's hands on the fleet (issue 35, item 4): capacity read from the hosts'
rows (backend, version, load, live battle workers), and the admin's cordon, drain,
uncordon, release leases and forget, each with a reason kept in the admin's history.
A cordoned host's real battle worker takes no battle; a draining one stops when idle;
a host that still beats is never forgotten nor stripped of its leases."""

import datetime
import random
import subprocess

import django_rq
import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from arena_site.hosts import app_version, host_id
from battles.models import Battle
from battles.services import task_submit
from sandboxes.heartbeats import host_beat, host_leave
from sandboxes.models import SandboxLease, WorkerHost
from sandboxes.selectors import fleet_capacity
from tests.servers import PYTHON, ROOT, child_env

pytestmark = pytest.mark.django_db(transaction=True)


def beaten(host: str, *, seconds_ago: float = 1, workers: int = 1, **fields) -> WorkerHost:
    at = timezone.now() - datetime.timedelta(seconds=seconds_ago)
    beats = {f"{host} worker {n}": at.isoformat() for n in range(workers)}
    return WorkerHost.objects.create(
        host_id=host, started_at=at, heartbeat_at=at, workers=beats, **fields
    )


def test_capacity_is_read_from_the_hosts_rows(client, admin_user, settings):
    host_beat(starting=True)  # this process: one live battle worker of this host
    row = WorkerHost.objects.get(host_id=host_id())
    assert len(row.workers) == 1 and row.backend == "local" and row.version == app_version()
    assert row.load_1m is not None
    beaten("b", workers=3)
    beaten("c", workers=2, cordoned_at=timezone.now())  # takes no battle
    beaten("gone", seconds_ago=120, workers=5)  # silent past the dead-after time

    capacity = fleet_capacity()
    assert [(h["host"], h["workers"], h["cordoned"]) for h in capacity["hosts"]] == [
        ("b", 3, False),
        ("c", 2, True),
        (host_id(), 1, False),
    ]
    assert capacity["slots"] == 4
    client.force_login(admin_user)
    figures = client.get("/api/metrics/").json()
    assert (figures["slots"], figures["slots_source"]) == (4, "hosts")

    host_leave()  # this worker stops: out of the capacity at once
    assert fleet_capacity()["slots"] == 3


def post_action(admin_client, action: str, hosts: list[str], reason: str = "kernel upgrade"):
    ids = list(WorkerHost.objects.filter(host_id__in=hosts).values_list("pk", flat=True))
    return admin_client.post(
        "/admin/sandboxes/workerhost/",
        {"action": action, "_selected_action": ids, "reason": reason},
        follow=True,
    )


def test_cordon_drain_and_uncordon_from_the_admin_with_a_reason(admin_client):
    beaten("b")
    refused = post_action(admin_client, "cordon", ["b"], reason="  ")
    assert "Say why" in refused.content.decode()
    assert WorkerHost.objects.get(host_id="b").cordoned_at is None

    post_action(admin_client, "cordon", ["b"])
    row = WorkerHost.objects.get(host_id="b")
    assert row.cordoned_at is not None and not row.draining
    assert row.cordon_reason == "kernel upgrade"
    post_action(admin_client, "drain", ["b"], reason="retiring the machine")
    assert WorkerHost.objects.get(host_id="b").draining
    post_action(admin_client, "uncordon", ["b"], reason="done")
    row = WorkerHost.objects.get(host_id="b")
    assert (row.cordoned_at, row.draining, row.cordon_reason) == (None, False, "")
    history = [e.change_message for e in LogEntry.objects.order_by("pk")]
    assert history == [
        "cordoned: kernel upgrade",
        "draining: retiring the machine",
        "uncordoned: done",
    ]


def run_worker(sandbox_root, tmp_path, *extra: str, timeout: float = 120):
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    env["ARENA_HOST_ID"] = host_id()
    argv = [PYTHON, "manage.py", "rqworker", "battles", *extra]
    argv += ["--worker-class", "battles.worker.BattleWorker"]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_a_cordoned_hosts_worker_takes_no_battle_and_a_draining_one_stops(
    alice, roster, sandbox_root, tmp_path
):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    host_beat(starting=True)
    WorkerHost.objects.filter(host_id=host_id()).update(
        cordoned_at=timezone.now(), cordon_reason="disk replacement"
    )

    done = run_worker(sandbox_root, tmp_path, "--burst")

    assert done.returncode == 0, done.stderr[-2000:]
    assert "cordoned by an operator (disk replacement)" in done.stderr
    battle.refresh_from_db()
    assert battle.status == "queued"
    assert django_rq.get_queue("battles").count >= 1  # its job still waits

    # Draining: a worker that is not in burst mode stops by itself once idle.
    WorkerHost.objects.filter(host_id=host_id()).update(draining=True)
    done = run_worker(sandbox_root, tmp_path, timeout=60)
    assert done.returncode == 0 and "draining by an operator" in done.stderr
    battle.refresh_from_db()
    assert battle.status == "queued"


def test_a_silent_host_is_forgotten_with_its_leases_freed_and_battles_requeued(
    admin_client, alice, roster
):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(2))
    Battle.objects.filter(pk=battle.pk).update(status="running", worker_host="b", worker_pid=7)
    lease = SandboxLease.objects.create(slot=0, backend="docker", host="b", worker_pid=7)
    beaten("b", seconds_ago=5)  # still beating

    said = post_action(admin_client, "forget", ["b"], reason="machine retired").content.decode()
    assert "still beats" in said
    assert WorkerHost.objects.filter(host_id="b").exists()
    post_action(admin_client, "release_leases", ["b"], reason="machine retired")
    lease.refresh_from_db()
    assert lease.released_at is None
    battle.refresh_from_db()
    assert battle.status == "running"

    WorkerHost.objects.filter(host_id="b").update(
        heartbeat_at=timezone.now() - datetime.timedelta(seconds=300)
    )
    post_action(admin_client, "forget", ["b"], reason="machine retired")

    assert not WorkerHost.objects.filter(host_id="b").exists()
    lease.refresh_from_db()
    battle.refresh_from_db()
    assert lease.released_at is not None
    assert (battle.status, battle.attempt) == ("queued", 2)
    [entry] = LogEntry.objects.all()
    assert entry.object_repr == "b"
    assert entry.change_message.startswith("forgotten (1 leases freed, battles re-queued")
    assert entry.change_message.endswith(": machine retired")


def test_a_worker_waits_out_a_database_outage_at_its_gate(monkeypatch):
    """The gate reads the host's row before each battle: the database away is a reason
    to wait (beating), never an exception that would end the worker."""
    from django.db import OperationalError

    from battles.services import hosts

    def away(host):
        raise OperationalError("connection refused")

    monkeypatch.setattr(hosts, "host_cordon_state", away)
    problem, stop = hosts.host_takes_no_battle()
    assert "the database does not answer (connection refused)" in problem and not stop
