"""A battle on a remote engine: the documented ``BattleWorker`` (``manage.py rqworker
battles --burst``) with ``DOCKER_HOST=tcp://…`` and TLS, the Docker backend in remote
mode (``sandboxes.docker_remote``), against the second engine of
``tests/docker_remote.py``, which shares nothing with the worker but its API. Both
desktop lanes run to the end their agent chose: steps, screenshots, shell and delivery
all over the sandboxes' channels; nothing is left on the engine or in the worker's
sandbox root."""

import hashlib
import random
import socket
import time

import docker
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents import policies
from agents.models import Agent
from agents.services import roster_install_builtins
from arena_site.hosts import host_id
from battles.models import Battle, Run, Step
from battles.services import battle_run, task_submit
from sandboxes import services
from sandboxes.docker_remote import RemoteDockerBackend
from sandboxes.models import SandboxLease
from tests.battles.pairing import submitted_between
from tests.battles.test_docker_battles import desktop_lanes_delivered, run_battle_worker
from tests.conftest import make_person
from tests.docker_engine import (
    HOST_USR_IMAGE,
    docker_engine,  # noqa: F401 - the session fixture
)
from tests.docker_remote import (
    API_VERSION,
    RemoteEngine,
    copy_image,
    docker_remote,  # noqa: F401 - the module's fixture
    tls_client,
)
from tests.servers import child_env, ensure_public_arena


@pytest.fixture(scope="module")
def remote_image(docker_engine: str, docker_remote: RemoteEngine) -> str:  # noqa: F811
    local = docker.DockerClient(base_url=docker_engine)
    try:
        copy_image(local, docker_remote.client, HOST_USR_IMAGE)
    finally:
        local.close()
    return HOST_USR_IMAGE


def remote_worker_env(
    engine: RemoteEngine, image: str, *, host: str, sandbox_root, private_media_root
) -> dict[str, str]:
    """A battle worker's environment that names the remote engine the way an operator
    would: ``DOCKER_HOST``, ``DOCKER_TLS_VERIFY`` and ``DOCKER_CERT_PATH``."""
    env = child_env(sandbox_root=sandbox_root, private_media_root=private_media_root)
    env.update(
        ARENA_SANDBOX_BACKEND="docker",
        ARENA_DOCKER_IMAGE=image,
        ARENA_HOST_ID=host,
        DOCKER_HOST=engine.url.replace("https://", "tcp://"),
        DOCKER_TLS_VERIFY="1",
        DOCKER_CERT_PATH=str(engine.certs),
        DOCKER_API_VERSION=API_VERSION,
    )
    return env


def on_engine(engine: RemoteEngine, host: str) -> list[str]:
    """The names of the host's containers and volumes on the engine (one listing each:
    ``containers.list`` would inspect each one, and fail on one a janitor removes
    meanwhile)."""
    label = {"label": [f"arena.host={host}"]}
    containers = engine.client.api.containers(all=True, filters=label)
    volumes = engine.client.volumes.list(filters=label)
    return [c["Names"][0].lstrip("/") for c in containers] + [v.name for v in volumes]


@pytest.mark.parametrize(
    "worker_class", ["battles.worker.BattleWorker", "battles.worker.PooledBattleWorker"]
)
def test_a_battle_worker_runs_two_desktop_lanes_on_a_remote_engine(
    worker_class,
    docker_remote: RemoteEngine,  # noqa: F811
    remote_image: str,
    transactional_db,
    terms,
    tmp_path,
    sandbox_root,
):
    # Given a battle between two built-in agents, on desktops, committed and queued
    roster_install_builtins(arena=ensure_public_arena())
    alice = make_person("alice", "Acme", terms)
    battle = submitted_between(
        alice, "Create a file named notes.txt containing hello arena", "rulebook", "surveyor"
    )
    private_media = tmp_path / "private"
    host = f"{socket.gethostname()}-remote-{battle.pk}"
    env = remote_worker_env(
        docker_remote,
        remote_image,
        host=host,
        sandbox_root=sandbox_root,
        private_media_root=private_media,
    )

    # When the documented battle worker drains the queue with the remote engine
    since = int(time.time()) - 1
    logs = run_battle_worker(worker_class, env, tmp_path / "logs", timeout=180)

    # Then both lanes ran there to the end their agent chose (screenshots over the channel)
    runs = desktop_lanes_delivered(battle, logs, private_media)
    # in remote mode: each lane's downloads are a tmpfs volume of the engine (the local
    # mode binds a dir of the worker's run dir instead)
    events = docker_remote.client.events(
        since=since, until=int(time.time()) + 1, filters={"type": "volume"}, decode=True
    )
    created = {e["Actor"]["ID"] for e in events if e["Action"] == "create"}  # (once a mount)
    # (the pooled worker's desktops are booted under negative identities: "arena-run--…")
    owners = {name.split("-")[2] or "pool" for name in created}
    lanes = {str(run.pk) for run in runs.values()}
    assert owners - {"pool"} <= lanes and (owners >= lanes or "pool" in owners), created
    # And nothing is left: leases released, no container or volume, no worker dir
    assert SandboxLease.objects.filter(released_at=None).count() == 0
    assert on_engine(docker_remote, host) == []
    assert list(sandbox_root.glob("run-*")) == []


@pytest.mark.django_db(transaction=True)  # lanes run in threads with their own connections
def test_attachments_reach_both_remote_lanes_over_their_channels(
    docker_remote: RemoteEngine,  # noqa: F811
    remote_image: str,
    alice,
    roster,
    monkeypatch,
    settings,
):
    """The lanes place the attachments in the worker's own dir of the run and push them
    into /work over the agent's channel (``push_work_dir``); the agents see the same
    bytes, read-only and their own, and deliver one back."""
    files = {"temps.csv": b"city,temp\nOslo,3\n", "notes.md": "# Notes ✓\n".encode()}

    def probe(self, observation):
        if observation.step == 0:
            command = "sha256sum /work/attachments/*; stat -c '%a %u' /work/attachments/*; id -u"
            return policies.Action("shell", {"command": command})
        return policies.Action("deliver", {"message": "ok", "files": ["attachments/temps.csv"]})

    monkeypatch.setattr(policies.RulebookPolicy, "next_action", probe)
    monkeypatch.setattr(policies.IdlePolicy, "next_action", probe)
    backend = RemoteDockerBackend(
        remote_image,
        settings.ARENA.sandbox_root,
        settings.ARENA.sandbox_uid_base,
        egress=services.egress_proxy(),
        client_factory=lambda: tls_client(docker_remote.url, docker_remote.tls),
        host=host_id(),  # the janitor's and the leases' host
    )
    monkeypatch.setattr(services, "_backend", backend)
    uploads = [SimpleUploadedFile(name, data) for name, data in files.items()]
    battle = task_submit(
        user=alice, instruction="Summarise the attached files", attachments=uploads,
        rng=random.Random(0),
    )  # fmt: skip
    rulebook, idle = Agent.objects.get(slug="rulebook"), Agent.objects.get(slug="idle")
    Battle.objects.filter(pk=battle.pk).update(agent_a=rulebook, agent_b=idle)
    Run.objects.filter(battle=battle, side="A").update(agent=rulebook)
    Run.objects.filter(battle=battle, side="B").update(agent=idle)

    battle_run(battle_id=battle.pk)

    a, b = battle.runs.order_by("side")
    assert (a.end_reason, b.end_reason) == ("delivered", "delivered"), (a.error, b.error)
    outputs = [Step.objects.get(run=run, index=0).result["stdout"] for run in (a, b)]
    for output in outputs:
        *lines, uid = output.splitlines()
        sums = "".join(
            f"{hashlib.sha256(files[name]).hexdigest()}  /work/attachments/{name}\n"
            for name in sorted(files)
        )
        assert "\n".join(lines[: len(files)]) + "\n" == sums
        assert lines[len(files) :] == [f"444 {uid}"] * len(files)
    assert [r.delivered_files[0]["name"] for r in (a, b)] == ["temps.csv", "temps.csv"]
    assert services.reclaims_wait(60)
    backend.close()
    assert on_engine(docker_remote, backend.host) == []
