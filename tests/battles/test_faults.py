"""Faults the orchestration survives: a side ended by the submitter, a worker killed
mid-battle (SIGKILL) — the janitors fail the battle visibly and reap its sandboxes."""

import random
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from battles.models import Battle, Run
from battles.services import battle_run, battles_fail_stuck, task_submit
from sandboxes.models import SandboxLease
from sandboxes.reaping import become_subreaper
from sandboxes.services import sandbox_janitor
from tests.processes import live_processes
from tests.servers import ROOT, child_env, ensure_public_arena

pytestmark = pytest.mark.django_db(transaction=True)


def test_submitter_ends_a_side_early(alice, roster, client):
    battle = task_submit(user=alice, instruction="list the files", rng=random.Random(4))
    client.force_login(alice)
    response = client.post(f"/battles/{battle.pk}/end/B/")
    assert response.status_code == 302

    battle_run(battle_id=battle.pk)

    b = Run.objects.get(battle=battle, side="B")
    a = Run.objects.get(battle=battle, side="A")
    assert b.end_reason == "ended_by_submitter" and b.steps.count() == 0
    assert a.end_reason in ("delivered", "gave_up")


def test_only_the_submitter_may_end_a_side(alice, bob, charlie, roster, client):
    battle = task_submit(user=alice, instruction="list the files", rng=random.Random(4))
    for other in (bob, charlie):
        client.force_login(other)
        assert client.post(f"/battles/{battle.pk}/end/A/").status_code == 404
    assert not Run.objects.exclude(end_requested_at=None).exists()


def test_a_worker_killed_mid_battle_leaves_nothing_stuck(alice, roster, sandbox_root, tmp_path):
    ensure_public_arena()
    become_subreaper()  # the killed worker's orphans come to us, as to `make run`
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(4))
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "rqworker", "battles", "--burst",
         "--worker-class", "rq.worker.SimpleWorker"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    # When the battle is running in the worker...
    deadline = time.monotonic() + 60
    while Battle.objects.get(pk=battle.pk).status != "running":
        assert time.monotonic() < deadline, "the worker never started the battle"
        assert worker.poll() is None, "the worker exited before running the battle"
        time.sleep(0.05)
    # ...it is killed without a chance to clean up.
    worker.send_signal(signal.SIGKILL)
    worker.wait()

    # Then the janitors fail the battle with a visible reason and reap its sandboxes.
    Battle.objects.filter(pk=battle.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=600))
    assert battles_fail_stuck(stuck_after_s=60) == [battle.pk]
    battle.refresh_from_db()
    assert battle.status == "failed"
    assert "worker running this battle stopped" in battle.failure_reason
    assert set(battle.runs.values_list("status", flat=True)) == {"ended"}
    sandbox_janitor()
    assert SandboxLease.objects.filter(released_at=None).count() == 0
    assert list(sandbox_root.iterdir()) == []
    base = settings.ARENA.sandbox_uid_base
    assert live_processes(*(base + slot for slot in range(8))) == []
    assert battles_fail_stuck(stuck_after_s=60) == []  # idempotent


def test_a_live_battle_is_not_failed(alice, roster):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(4))
    Battle.objects.filter(pk=battle.pk).update(
        status="running", dequeued_at=timezone.now(), heartbeat_at=timezone.now()
    )
    assert battles_fail_stuck(stuck_after_s=60) == []
