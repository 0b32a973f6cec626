"""Two remote engines at once (issue 34, "Remote engines"): two battle workers, each
driving its own TLS-only engine (``tests/docker_remote.py``) in remote mode, take a
battle each; then one engine dies mid-battle (its dockerd, containerd, shims and
containers killed, as a lost machine). The other engine's battle runs to the end.

What the arena does with the killed engine's battle is what this test pins down: the
lane's next step meets a sandbox that no longer answers, the lane ends in an error that
is not its agent's, and screening excludes the battle (``arena_fault``). It is not
re-queued: only a dead *worker* or a silent *host* re-queues a battle
(``battles_recover_dead_workers``, ``battles_recover_dead_hosts``); a worker that lives
on with a dead engine ends its lanes. Nothing of either run is left on the surviving
engine or in the workers' sandbox root."""

import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

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


def test_one_engine_killed_mid_battle_the_other_finishes_its_own(
    engines: tuple[RemoteEngine, RemoteEngine],
    transactional_db,
    terms,
    tmp_path,
    sandbox_root,
):
    roster_install_builtins(arena=ensure_public_arena())
    people = [make_person("alice", "Acme", terms), make_person("bob", "Globex", terms)]
    battles = [submitted_between(who, INSTRUCTION, "rulebook", "surveyor") for who in people]
    hosts = [f"{socket.gethostname()}-engine-{n}-{battles[0].pk}" for n in (1, 2)]
    argv = [PYTHON, "manage.py", "rqworker", "battles", "--burst"]
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
            workers.append(ServerProcess.start(f"worker-{n}", argv, env, tmp_path / "logs"))

        def running() -> dict[str, Battle]:
            rows = Battle.objects.filter(pk__in=[b.pk for b in battles])
            return {b.worker_host: b for b in rows if b.lanes_started_at is not None}

        # The first battle whose lanes start: its engine dies at once (the lanes of the
        # built-in agents take a few seconds); the other engine takes the other battle.
        wait_until(lambda: running(), 90, "a battle's lanes to start")
        host, on_first = next(iter(running().items()))
        killed = hosts.index(host)
        kill_engine(engines[killed])
        wait_until(lambda: len(running()) == 2, 90, "the other battle's lanes to start")
        assert set(running()) == set(hosts)  # both engines took work
        for worker in workers:
            assert worker.wait(timeout=180) == 0, worker.tail(80)
    finally:
        for worker in workers:
            worker.stop()
        wait_for_child_sessions_to_end()
    logs = "\n".join(worker.tail(60) for worker in workers)
    outcome = {}
    for battle in Battle.objects.filter(pk__in=[b.pk for b in battles]):
        runs = battle.runs.order_by("side")
        outcome[battle.worker_host] = (
            battle.status,
            [(run.status, run.end_reason, run.agent_fault, run.error[:120]) for run in runs],
        )
    # The surviving engine's battle ran to the end both agents chose.
    survivor = Battle.objects.exclude(pk=on_first.pk).get(pk__in=[b.pk for b in battles])
    assert survivor.status == Battle.Status.SCREENING, (outcome, logs)
    assert [r.end_reason for r in survivor.runs.all()] == [Run.EndReason.DELIVERED] * 2, outcome
    assert exclusion_at_lanes_end(survivor) == ("", ""), outcome
    # The killed engine's: its lanes ended in errors that are not their agents', so
    # screening excludes it as the arena's fault; it is not re-queued or re-run.
    on_first.refresh_from_db()
    killed_runs = list(on_first.runs.all())
    assert on_first.status == Battle.Status.SCREENING, (outcome, logs)
    assert all(not run.agent_fault for run in killed_runs), (outcome, logs)
    assert any(run.end_reason == Run.EndReason.ERROR for run in killed_runs), (outcome, logs)
    lost = [run.error for run in killed_runs if run.end_reason == Run.EndReason.ERROR]
    assert all(error.startswith("SandboxLost: the sandbox's engine") for error in lost), lost
    reason, note = exclusion_at_lanes_end(on_first)
    assert reason == Battle.ExclusionReason.ARENA_FAULT, (reason, note, outcome)
    assert on_first.attempt == 1 and not Battle.objects.filter(rerun_of=on_first).exists()
    print("outcome:", outcome, note)
    # Nothing left: leases, the surviving engine's containers and volumes, worker dirs.
    assert SandboxLease.objects.filter(released_at=None).count() == 0
    survivor_engine = 1 - killed
    assert on_engine(engines[survivor_engine], hosts[survivor_engine]) == []
    assert list(sandbox_root.glob("run-*")) == []
