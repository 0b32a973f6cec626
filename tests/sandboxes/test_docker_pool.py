"""The warm desktop pool on the Docker backend, for real (the private engine of
``tests.docker_engine``): a worker's pool boots a desktop's two containers ahead of
time, the janitor leaves them alone while they wait and once a run has claimed them,
the run gets its own start page and egress identity, and nothing of it is left after."""

import os
import urllib.parse

import docker
import pytest

from sandboxes import services
from sandboxes.base import SandboxSpec
from sandboxes.docker_backend import LABEL_HOST, LABEL_SANDBOX
from sandboxes.docker_sandbox import DockerSandbox
from sandboxes.models import SandboxLease
from sandboxes.pool import desktop_pool_start, desktop_pool_stop
from tests.docker_engine import docker_engine  # noqa: F401 - the session fixture
from tests.sandboxes.test_pool import _lane_fields

pytestmark = pytest.mark.django_db(transaction=True)


def page(title: str) -> str:
    return "data:text/html," + urllib.parse.quote(f"<title>{title}</title><h1>{title}</h1>")


def containers(client: docker.DockerClient, host: str) -> list:
    labels = [f"{LABEL_SANDBOX}=1", f"{LABEL_HOST}={host}"]
    return client.containers.list(all=True, filters={"label": labels})


def test_a_docker_workers_pool_serves_its_runs_and_the_janitor_spares_it(
    docker_engine,  # noqa: F811
    settings,
    monkeypatch,
):
    monkeypatch.setenv("DOCKER_HOST", docker_engine)
    settings.ARENA = settings.ARENA.replace(sandbox_backend="docker")
    host = services.host_id()
    client = docker.DockerClient(base_url=docker_engine)
    pool = desktop_pool_start(size=1)
    try:
        assert pool is not None and pool.wait_full(180)
        idle = SandboxLease.objects.get(released_at=None)
        assert idle.run_id is None and idle.worker_pid == os.getpid()
        pooled = pool._idle[0].sandbox
        assert isinstance(pooled, DockerSandbox)
        assert {c.labels["arena.role"] for c in containers(client, host)} == {"agent", "display"}
        # Waiting in the pool, its containers belong to a live lease: the janitor keeps them.
        services.sandbox_janitor()
        assert len(containers(client, host)) == 2

        spec = SandboxSpec(run_id=None, start_url=page("pooled"), **_lane_fields(settings))
        with services.sandbox_session(spec) as box:
            assert box is pooled and pool.stats["claimed"] == 1
            assert box.page_state()["title"] == "pooled"
            assert str(box.run_dir) == idle.path
            # The run's egress sockets, served again where its containers look for them.
            refused = box.shell("curl -s -m 5 -o /dev/null -w '%{http_code}' http://10.0.0.1/")
            assert refused.stdout == "403"
            # Claimed, its lease names the run, its containers the pool's identity: kept.
            services.sandbox_janitor()
            for container in box.containers.values():
                container.reload()
                assert container.status == "running"
            assert box.screenshot().ok
        assert services.reclaims_wait(30)
        assert not box.run_dir.exists()
        assert pool.wait_full(180)  # refilled in the background
    finally:
        desktop_pool_stop()
        services.sandbox_backend().close()
    assert SandboxLease.objects.filter(released_at=None).count() == 0
    assert containers(client, host) == []
