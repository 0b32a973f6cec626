"""A worker whose sandbox engine does not answer takes no battle, and a battle that lost
its sandboxes with their engine is run again (docs/sandboxes.md, "Remote engines"). The
whole story on two real engines, one killed mid-battle, is
tests/battles/test_two_remote_engines.py; here the pieces, each against an engine that
is not there (a closed port on loopback), a real RQ worker and the real database."""

import random
import socket
import subprocess

import django_rq
import pytest
from django.utils import timezone

from battles.jobs import battle_run
from battles.models import Battle, Run, Step
from battles.services import task_submit
from battles.services.orchestration import LOST_REASON, MAX_ATTEMPTS, _battle_sandbox_lost
from sandboxes import services
from sandboxes.base import SandboxLost
from tests.servers import PYTHON, ROOT, child_env

pytestmark = pytest.mark.django_db(transaction=True)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def engine_away(settings, monkeypatch):
    """This process's sandbox backend is Docker on an engine that does not answer."""
    url = f"tcp://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("DOCKER_HOST", url)
    settings.ARENA = settings.ARENA.replace(sandbox_backend="docker")
    monkeypatch.setattr(services, "_backend", None)
    yield url
    services._backend = None


def _running(battle: Battle, attempt: int) -> None:
    now = timezone.now()
    Battle.objects.filter(pk=battle.pk).update(
        status="running", attempt=attempt, worker_host="h", worker_pid=4242,
        dequeued_at=now, heartbeat_at=now, lanes_started_at=now,
    )  # fmt: skip
    Run.objects.filter(battle=battle).update(
        status="ended", started_at=now, ended_at=now, end_reason="error",
        error="SandboxLost: the sandbox's engine does not answer",
    )  # fmt: skip
    Step.objects.create(
        run=battle.runs.first(), index=0, tool="shell", started_at=now, duration_ms=1
    )


def test_the_backend_names_an_engine_that_does_not_answer(engine_away):
    problem = services.sandbox_engine_problem()
    assert problem == "the Docker engine does not answer: [Errno 111] Connection refused"


def test_a_battle_job_taken_while_the_engine_is_away_is_handed_on(alice, roster, engine_away):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    queue = django_rq.get_queue("battles")
    before = set(queue.job_ids)

    battle_run(battle.pk)

    battle.refresh_from_db()
    assert battle.status == "queued" and battle.dequeued_at is None  # not claimed
    [handed] = set(queue.job_ids) - before
    assert handed.startswith(f"battle-{battle.pk}-handed-on-")
    assert queue.fetch_job(handed).args == (battle.pk,)


def test_a_burst_worker_whose_engine_is_away_takes_no_battle(
    alice, roster, engine_away, sandbox_root, tmp_path
):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    queue = django_rq.get_queue("battles")
    waiting = list(queue.job_ids)
    assert waiting  # the admission's job
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    env.update(ARENA_SANDBOX_BACKEND="docker", DOCKER_HOST=engine_away, ARENA_DEMO_WEB="false")
    argv = [PYTHON, "manage.py", "rqworker", "battles", "--burst"]
    argv += ["--worker-class", "battles.worker.BattleWorker"]

    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr[-3000:]
    assert "this worker takes no battle until it answers" in done.stderr, done.stderr[-3000:]
    assert list(queue.job_ids) == waiting  # left for a worker whose engine answers
    battle.refresh_from_db()
    assert battle.status == "queued" and battle.attempt == 1


def test_a_battle_that_lost_its_sandboxes_is_queued_again_and_nobody_is_blamed(
    alice, roster, django_capture_on_commit_callbacks
):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    _running(battle, attempt=1)

    with django_capture_on_commit_callbacks(execute=True):
        _battle_sandbox_lost(battle.pk, 1, SandboxLost("the channel closed"))

    battle.refresh_from_db()
    assert (battle.status, battle.attempt, battle.worker_host) == ("queued", 2, "")
    assert not Step.objects.filter(run__battle=battle).exists()
    runs = set(battle.runs.values_list("status", "end_reason", "error", "agent_fault"))
    assert runs == {("pending", "", "", False)}
    job = django_rq.get_queue("battles").fetch_job(f"battle-{battle.pk}-attempt-2")
    assert job is not None and job.args == (battle.pk,)


def test_a_battle_that_lost_its_sandboxes_on_its_last_attempt_fails_with_the_reason(alice, roster):
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    _running(battle, attempt=MAX_ATTEMPTS)

    _battle_sandbox_lost(battle.pk, MAX_ATTEMPTS, SandboxLost("the channel closed"))

    battle.refresh_from_db()
    assert battle.status == "failed"
    assert battle.failure_reason == LOST_REASON.format(attempts=MAX_ATTEMPTS)


def test_a_lost_attempt_that_is_not_the_battles_any_more_changes_nothing(alice, roster):
    # A janitor re-queued the battle meanwhile (its host was taken for dead), and another
    # worker runs attempt 2: attempt 1's loss must not touch it.
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    _running(battle, attempt=2)

    _battle_sandbox_lost(battle.pk, 1, SandboxLost("the channel closed"))

    battle.refresh_from_db()
    assert (battle.status, battle.attempt) == ("running", 2)
