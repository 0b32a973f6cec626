"""Battles on the Docker backend under the documented battle workers: a real RQ worker
process on real Redis (``manage.py rqworker battles --worker-class …``) drains the
battles queue and runs both lanes in containers on this checkout's private engine
(``tests.docker_engine``).

``BattleWorker`` forks a work horse per job; its parent has already made its sandbox
backend, egress proxy and engine client (the janitor, at the worker's start). Before
each process made its own, the horse used the parent's proxy, whose thread does not
exist in a fork, and every lane ended with a ``TimeoutError``. Two desktop lanes of the
built-in agents and a coding battle of two CLI agents with its judge containers, each
under both battle workers, and the fork itself, with another thread holding the lock."""

import json
import os
import secrets
import select
import signal
import socket
import threading
import time

import docker
import pytest

from agents.services import roster_install_builtins
from battles.coding_models import CodingOutcome
from battles.models import Battle, Run
from battles.services import cli_lane
from sandboxes import services
from sandboxes.demoweb.server import demo_server
from sandboxes.docker_backend import DEFAULT_IMAGE
from sandboxes.docker_images import DEFAULT_CODING_IMAGE
from sandboxes.models import SandboxLease
from tests.agents.conftest import LOOPBACK
from tests.battles.pairing import submitted_between
from tests.coding import repos
from tests.coding.test_coding_battles import battle_between, claude_and_codex
from tests.conftest import make_person
from tests.docker_engine import docker_engine  # noqa: F401 - the session fixture
from tests.servers import (
    PYTHON,
    ServerProcess,
    child_env,
    ensure_public_arena,
    http_answers,
    wait_for_child_sessions_to_end,
)

CONTENT = b"hello arena\n"


def docker_worker_env(docker_host: str, *, sandbox_root, private_media_root) -> dict[str, str]:
    """A battle worker's environment on the Docker backend, with a host id of its own
    (its janitor and its containers' labels are this test's alone)."""
    env = child_env(sandbox_root=sandbox_root, private_media_root=private_media_root)
    env.update(
        ARENA_SANDBOX_BACKEND="docker",
        ARENA_DOCKER_IMAGE=DEFAULT_IMAGE,
        ARENA_HOST_ID=f"{socket.gethostname()}-docker-{secrets.token_hex(4)}",
        DOCKER_HOST=docker_host,
    )
    return env


def desktop_lanes_delivered(battle: Battle, logs: str, private_media) -> dict[str, Run]:
    """The battle's runs by agent, once both built-in agents' desktop lanes ended as
    they chose (delivered, every shell step ok, a screenshot per step, the rulebook's
    notes.txt in the deliveries) and the battle waits for screening."""
    battle.refresh_from_db()
    runs = {run.agent.slug: run for run in battle.runs.select_related("agent")}
    said = {slug: (run.status, run.end_reason, run.error) for slug, run in runs.items()}
    assert (battle.status, battle.failure_reason) == (Battle.Status.SCREENING, ""), (said, logs)
    assert said == {
        "rulebook": (Run.Status.ENDED, Run.EndReason.DELIVERED, ""),
        "surveyor": (Run.Status.ENDED, Run.EndReason.DELIVERED, ""),
    }, logs
    for run in runs.values():
        steps = list(run.steps.all())
        shell = [step.result for step in steps if step.tool == "shell"]
        assert shell and all(result["ok"] for result in shell), shell
        assert all(step.screenshot for step in steps)  # a desktop's: one per step
    delivered = private_media / "deliveries" / f"run-{runs['rulebook'].pk}" / "notes.txt"
    assert delivered.read_bytes() == CONTENT
    return runs


def run_battle_worker(worker_class: str, env: dict[str, str], log_dir, timeout: float) -> str:
    """``manage.py rqworker battles --burst`` with ``worker_class``; returns its log's
    tail once it exited 0 (fails the test otherwise)."""
    argv = [PYTHON, "manage.py", "rqworker", "battles", "--burst", "--worker-class", worker_class]
    worker = ServerProcess.start("battle-worker", argv, env, log_dir)
    try:
        returncode = worker.wait(timeout=timeout)
    finally:
        worker.stop()
        wait_for_child_sessions_to_end()
    logs = worker.tail(80)
    assert returncode == 0, logs
    return logs


def leftovers(docker_host: str, host: str) -> list[str]:
    """The names of the engine's containers labelled with ``host``."""
    client = docker.DockerClient(base_url=docker_host)
    try:
        found = client.containers.list(all=True, filters={"label": f"arena.host={host}"})
    finally:
        client.close()
    return [container.name for container in found]


def created_images(docker_host: str, host: str, since: int) -> list[tuple[str, str]]:
    """(image, role) of each container the engine created with label ``host`` since
    the unix time ``since`` (from its events: the containers are gone by now)."""
    client = docker.DockerClient(base_url=docker_host)
    try:
        events = client.events(
            since=since,
            until=int(time.time()) + 1,
            filters={"type": "container", "event": "create", "label": f"arena.host={host}"},
            decode=True,
        )
        attributes = [event["Actor"]["Attributes"] for event in events]
    finally:
        client.close()
    return sorted((a["image"], a["arena.role"]) for a in attributes)


@pytest.mark.parametrize(
    "worker_class", ["battles.worker.BattleWorker", "battles.worker.PooledBattleWorker"]
)
def test_a_battle_worker_runs_two_desktop_lanes_on_docker(
    worker_class,
    docker_engine,  # noqa: F811
    transactional_db,
    terms,
    tmp_path,
    sandbox_root,
):
    # Given a battle between two built-in agents, on desktops, committed and queued
    roster_install_builtins(arena=ensure_public_arena())
    alice = make_person("alice", "Acme", terms)
    instruction = "Create a file named notes.txt containing hello arena"
    battle = submitted_between(alice, instruction, "rulebook", "surveyor")
    private_media = tmp_path / "private"
    env = docker_worker_env(
        docker_engine, sandbox_root=sandbox_root, private_media_root=private_media
    )

    # When the documented battle worker drains the battles queue on the Docker backend
    logs = run_battle_worker(worker_class, env, tmp_path / "logs", timeout=180)

    # Then both lanes ran in their containers to the end their agent chose
    runs = desktop_lanes_delivered(battle, logs, private_media)
    # And nothing of a sandbox is left: every lease released, no container, no run dir
    assert SandboxLease.objects.filter(released_at=None).count() == 0
    # (the pooled worker's idle desktops hold leases of no run)
    leases = list(SandboxLease.objects.all())
    assert {lease.backend for lease in leases} == {"docker"}
    assert sorted(lease.run_id for lease in leases if lease.run_id is not None) == sorted(
        run.pk for run in runs.values()
    )
    assert leftovers(docker_engine, env["ARENA_HOST_ID"]) == []
    assert list(sandbox_root.glob("run-*")) == []


class BindWatcher:
    """The bind mounts of every container the engine starts with the host's label, seen
    (inspected) as each starts: a run's containers are gone by the battle's end."""

    def __init__(self, docker_host: str, host: str) -> None:
        self.client = docker.DockerClient(base_url=docker_host)
        self.binds: list[tuple[str, str]] = []
        self.started = 0
        self.events = self.client.events(
            filters={"type": "container", "event": "start", "label": f"arena.host={host}"},
            decode=True,
        )
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        try:
            for event in self.events:
                self.started += 1
                try:
                    attrs = self.client.api.inspect_container(event["id"])
                except docker.errors.NotFound:  # (a seal's, done and removed meanwhile:
                    continue  # its settings are its agent container's, seen here)
                name = attrs["Name"]
                self.binds += [(name, m["Source"]) for m in attrs["Mounts"] if m["Type"] == "bind"]
        except Exception:  # noqa: S110 - the stream closed at the test's end
            pass

    def close(self) -> None:
        self.events.close()
        self.thread.join(10)
        self.client.close()


@pytest.mark.parametrize(
    ("worker_class", "remote"),
    [
        ("battles.worker.BattleWorker", False),
        ("battles.worker.PooledBattleWorker", False),
        ("battles.worker.BattleWorker", True),
    ],
    ids=["BattleWorker", "PooledBattleWorker", "BattleWorker-remote-mode"],
)
def test_a_battle_worker_runs_a_coding_battle_on_docker(
    worker_class,
    remote,
    docker_engine,  # noqa: F811
    transactional_db,
    terms,
    tmp_path,
    sandbox_root,
    monkeypatch,
):
    """Claude Code against the Codex CLI (their real binaries from the coding image)
    through the worker's model gateway, then a judge container per side: the patch
    applied, the tree sealed, pytest through the harness (whose guard wants docker-init
    as pid 1 and a uid that is not root). On a local engine the worker seals the tree
    through the bind mount; in remote mode (``ARENA_DOCKER_REMOTE``: the engine is taken
    for another host's, no file of the worker's in any container) the files go in over
    the channel and each seal is a short root container on the judge's /work volume."""
    ensure_public_arena()
    alice = make_person("alice", "Acme", terms)
    with claude_and_codex(monkeypatch) as (claude, codex, claude_api, openai_api):
        battle = battle_between(alice, claude, codex, repos.FIX, tmp_path)
        env = docker_worker_env(
            docker_engine, sandbox_root=sandbox_root, private_media_root=tmp_path / "private"
        )
        # (the fake providers are on loopback, which an operator allow-lists here)
        env["ARENA_INTERNAL_ALLOWLIST"] = LOOPBACK
        if remote:
            env["ARENA_DOCKER_REMOTE"] = "true"
        started = int(time.time())
        watcher = BindWatcher(docker_engine, env["ARENA_HOST_ID"])
        try:
            logs = run_battle_worker(worker_class, env, tmp_path / "logs", 240)
        finally:
            watcher.close()

    battle.refresh_from_db()
    said = [(r.side, r.end_reason, r.error) for r in battle.runs.order_by("side")]
    assert (battle.status, battle.failure_reason) == ("screening", ""), (said, logs)
    assert said == [("A", "delivered", ""), ("B", "delivered", "")], logs
    for outcome in CodingOutcome.objects.filter(run__battle=battle):
        assert "-    return a - b\n+    return a + b\n" in outcome.diff
        assert outcome.applied == "apply"
        assert outcome.checks["sealed"] is True
        assert outcome.checks["success"]["verdict"] == "passed", outcome.checks
        assert outcome.checks["tests"]["verified"] is True
        assert outcome.checks["tests"]["counts"]["passed"] == 2
        assert (outcome.functional, outcome.regression, outcome.lint) == (1.0, 1.0, 1.0)
    assert len(claude_api.calls("/v1/messages")) == 4
    assert len(openai_api.calls("/v1/responses")) == 3
    # The clone's, both agents' and both judges' sandboxes, all containers, all gone
    # (besides the pooled worker's idle desktops: run dirs of a negative identity)
    leases = SandboxLease.objects.all()
    assert all(lease.released_at for lease in leases)
    coding = [lease for lease in leases if not lease.path.rpartition("/")[2].startswith("run--")]
    assert [lease.backend for lease in coding] == ["docker"] * 5
    # Both agents' and both judges' containers from the coding image (no bind of the
    # worker's toolchain), the clone's from the desktop image
    images = created_images(docker_engine, env["ARENA_HOST_ID"], started)
    coding = [(DEFAULT_CODING_IMAGE, "agent")] * 4
    if remote:  # and each judge's two seals (the harness, the repository)
        coding += [(DEFAULT_CODING_IMAGE, "seal")] * 4
    assert [i for i in images if i[0] == DEFAULT_CODING_IMAGE] == coding
    assert watcher.started >= len(coding) + 1
    if remote:
        assert watcher.binds == []
    else:
        assert any(source.startswith(str(sandbox_root)) for _, source in watcher.binds)
    assert leftovers(docker_engine, env["ARENA_HOST_ID"]) == []
    assert list(sandbox_root.glob("run-*")) == []


def _in_child(parents: tuple) -> dict:
    """What a forked child finds (runs in the child)."""
    proxy, backend = services.egress_proxy(), services.sandbox_backend()
    gateway, demo = cli_lane.worker_gateway(), demo_server()
    return {
        "own": [x is not y for x, y in zip((proxy, backend, gateway, demo), parents, strict=True)],
        "backend's proxy": backend.egress is proxy,
        "proxy serves": proxy.serve_tcp(1) > 0,  # (its loop answers)
        "gateway served": "models.arena.internal" in proxy.proxy.simulated,
        "gateway answers": http_answers(f"http://127.0.0.1:{gateway.port}/"),
        "demo site answers": http_answers(demo.url),
    }


def test_a_forked_child_makes_its_own_proxy_backend_gateway_and_demo_site(settings):
    """A work horse forked while another thread of its parent held the sandboxes' lock
    (the host's janitor making the backend): it must neither use the parent's threads
    nor wait on that lock for ever. No engine: the backend's client is made on use."""
    settings.ARENA = settings.ARENA.replace(sandbox_backend="docker", demo_web=True)
    parents = (services.egress_proxy(), services.sandbox_backend())
    parents += (cli_lane.worker_gateway(), demo_server())
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with services._egress_lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    held.wait(5)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and never return into pytest
        try:
            report = _in_child(parents)
        except BaseException as exc:
            report = {"error": repr(exc)}
        os.write(write_end, json.dumps(report).encode())
        os._exit(0)
    os.close(write_end)
    release.set()
    holder.join()
    try:
        ready, _, _ = select.select([read_end], [], [], 30)
        report = json.loads(os.read(read_end, 65536) or b"{}") if ready else "hung"
    finally:
        os.close(read_end)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert report == {
        "own": [True, True, True, True],
        "backend's proxy": True,
        "proxy serves": True,
        "gateway served": True,
        "gateway answers": True,
        "demo site answers": True,
    }
