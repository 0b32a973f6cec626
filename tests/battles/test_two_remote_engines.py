"""Two remote engines at once (issue 34, "Remote engines"): two battle workers, each
driving its own TLS-only engine (``tests/docker_remote.py``) in remote mode, take a
battle each; then one engine dies mid-battle (its dockerd, containerd, shims and
containers killed, as a lost machine).

The other engine's battle runs to the end. The killed engine's lanes meet sandboxes
that no longer answer (``SandboxLost``): nothing of that attempt is rated or counted
against either agent, and the battle is queued again. Its worker, alive with a dead
engine, takes no battle until its engine answers; the other worker takes it and runs
it to the end on its own engine. Nothing of either run is left on the surviving
engine, in the workers' sandbox root or in the leases; once the lost engine is back,
its worker's janitor removes what the lost attempt left there, and it takes work
again."""

import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from django.conf import settings

from agents.services import roster_install_builtins
from battles.models import Battle, Run
from judging.services.screening import exclusion_at_lanes_end
from sandboxes.models import SandboxLease
from tests.battles.pairing import submitted_between
from tests.battles.test_docker_remote_battles import on_engine, remote_worker_env
from tests.conftest import make_person
from tests.docker_engine import (
    HOST_USR_IMAGE,
    docker_engine,  # noqa: F401 - the session fixture
)
from tests.docker_remote import RemoteEngine, _leftovers, copy_image, leftovers, remote_engine
from tests.servers import PYTHON, ServerProcess, ensure_public_arena, wait_for_child_sessions_to_end

INSTRUCTION = "Create a file named notes.txt containing hello arena"


@pytest.fixture(scope="module")
def engines(docker_engine: str) -> Iterator[tuple[RemoteEngine, RemoteEngine]]:  # noqa: F811
    local = docker.DockerClient(base_url=docker_engine)
    with remote_engine() as first, remote_engine() as second:
        for engine in (first, second):
            copy_image(local, engine.client, HOST_USR_IMAGE)
        local.close()
        yield first, second
    # Stopped (the killed one too): no process, mount or file of either is left.
    assert leftovers(first) == [] and leftovers(second) == []


def kill_engine(engine: RemoteEngine) -> None:
    """The engine's machine lost: dockerd, containerd, the shims and every container
    process die at once (SIGKILL), nothing is told."""
    ids = [c.id for c in engine.client.containers.list()]
    os.kill(engine.pid, signal.SIGKILL)
    for pid in _leftovers(engine.exec_root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for container_id in ids:
        for procs in Path("/sys/fs/cgroup").glob(f"*/docker/{container_id}/cgroup.procs"):
            for pid in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_one_engine_killed_mid_battle_its_battle_is_run_again_on_the_other(
    engines: tuple[RemoteEngine, RemoteEngine],
    transactional_db,
    terms,
    tmp_path,
    sandbox_root,
):
    roster_install_builtins(arena=ensure_public_arena())
    people = [make_person("alice", "Acme", terms), make_person("bob", "Globex", terms)]
    battles = [submitted_between(who, INSTRUCTION, "rulebook", "surveyor") for who in people]
    ids = [b.pk for b in battles]
    hosts = [f"{socket.gethostname()}-engine-{n}-{battles[0].pk}" for n in (1, 2)]
    # Not --burst: the survivor must still be there when the lost battle comes back.
    argv = [PYTHON, "manage.py", "rqworker", "battles"]
    argv += ["--worker-class", "battles.worker.BattleWorker"]
    workers = []
    try:
        for n, (engine, host) in enumerate(zip(engines, hosts, strict=True)):
            env = remote_worker_env(
                engine,
                HOST_USR_IMAGE,
                host=host,
                sandbox_root=sandbox_root,
                private_media_root=tmp_path / "private",
            )
            # Two hosts on one machine: uid ranges of their own, as two machines' are.
            env["ARENA_SANDBOX_UID_BASE"] = str(settings.ARENA.sandbox_uid_base + 3000 * n)
            workers.append(ServerProcess.start(f"worker-{n}", argv, env, tmp_path / "logs"))

        def running() -> dict[str, Battle]:
            rows = Battle.objects.filter(pk__in=ids, attempt=1)
            return {b.worker_host: b for b in rows if b.lanes_started_at is not None}

        # The first battle whose lanes start: its engine dies at once (the lanes of the
        # built-in agents take a few seconds); the other engine takes the other battle.
        wait_until(lambda: running(), 90, "a battle's lanes to start")
        host, on_killed = next(iter(running().items()))
        killed = hosts.index(host)
        kill_engine(engines[killed])
        other = Battle.objects.filter(pk__in=ids).exclude(pk=on_killed.pk)
        wait_until(
            lambda: other.exclude(lanes_started_at=None).exists(),
            90,
            "the other battle's lanes to start",
        )

        def ended() -> bool:
            done = Battle.objects.filter(pk__in=ids).exclude(
                status__in=[Battle.Status.QUEUED, Battle.Status.RUNNING]
            )
            return done.count() == 2

        wait_until(ended, 240, "both battles to end")
        assert all(worker.alive() for worker in workers)  # the dead engine's waits
        # The machine comes back: its worker's janitor removes what the lost attempt
        # left there (its leases went with its work horse), and it takes work again.
        engines[killed].restart()
        survivor = 1 - killed

        def left() -> dict:
            log = workers[killed].log_path.read_text(errors="replace")
            return {
                "leases": list(SandboxLease.objects.filter(released_at=None).values()),
                "killed engine": on_engine(engines[killed], hosts[killed]),
                "surviving engine": on_engine(engines[survivor], hosts[survivor]),
                "worker waits": "takes battles again" not in log,
            }

        try:
            wait_until(lambda: not any(left().values()), 60, "nothing left on either engine")
        except AssertionError:
            raise AssertionError(f"left: {left()}") from None
    finally:
        for worker in workers:
            worker.stop()
        wait_for_child_sessions_to_end()
    logs = [worker.log_path.read_text(errors="replace") for worker in workers]
    outcome = {}
    for battle in Battle.objects.filter(pk__in=ids):
        runs = battle.runs.order_by("side")
        outcome[battle.pk] = (
            battle.status,
            battle.attempt,
            battle.worker_host,
            [(run.status, run.end_reason, run.agent_fault, run.error[:120]) for run in runs],
        )
    # The surviving engine's own battle ran to the end both agents chose (both engines
    # took work).
    own = Battle.objects.exclude(pk=on_killed.pk).get(pk__in=ids)
    assert (own.status, own.attempt, own.worker_host) == (
        Battle.Status.SCREENING,
        1,
        hosts[survivor],
    ), (outcome, [log[-6000:] for log in logs])
    assert [r.end_reason for r in own.runs.all()] == [Run.EndReason.DELIVERED] * 2, outcome
    assert exclusion_at_lanes_end(own) == ("", ""), outcome
    # The killed engine's battle: its first attempt lost its sandboxes, it was queued
    # again, and the surviving engine's worker ran it to the end on fresh sandboxes.
    on_killed.refresh_from_db()
    assert (on_killed.status, on_killed.attempt, on_killed.worker_host) == (
        Battle.Status.SCREENING,
        2,
        hosts[survivor],
    ), (outcome, [log[-6000:] for log in logs])
    runs = list(on_killed.runs.all())
    assert [r.end_reason for r in runs] == [Run.EndReason.DELIVERED] * 2, outcome
    assert all(not r.agent_fault and r.error == "" for r in runs), outcome
    assert exclusion_at_lanes_end(on_killed) == ("", ""), outcome
    assert f"battle {on_killed.pk} lost its sandboxes on attempt 1" in logs[killed], logs[killed][
        -6000:
    ]
    # The dead engine's worker said why it took nothing more.
    assert "this worker takes no battle until it answers" in logs[killed], logs[killed][-6000:]
    print("outcome:", outcome)
    # Nothing left (leases, containers and volumes on both engines: above), nor any
    # worker's dir of a run.
    assert list(sandbox_root.glob("run-*")) == []
