"""The Docker backend's remote mode (``sandboxes.docker_remote``) on an engine reached
with ``DOCKER_HOST=ssh://…``, as a worker on another machine reaches one: the client
is :func:`remote_client_from_env`'s, configured as an operator configures SSH (the
worker's ``~/.ssh/config`` and ``known_hosts``), and the only way to the engine is an
``sshd`` whose sessions are streams to the private engine's API socket
(``tests/docker_ssh.py``). A desktop run there (screenshot, shell, a file put into
/work and delivered back, egress through the worker's proxy, destroy), its API calls
and channels all SSH sessions, then nothing left on the engine, in the worker's root
or on the SSH server."""

import contextlib
import io
import re
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import paramiko
import pytest
from django.conf import settings as django_settings
from docker.transport import SSHHTTPAdapter
from PIL import Image

from sandboxes.base import SandboxSpec
from sandboxes.docker_backend import janitor
from sandboxes.docker_remote import (
    RemoteDockerBackend,
    RemoteDockerSandbox,
    remote_client_from_env,
)
from sandboxes.docker_volumes import janitor_volumes
from sandboxes.egress import EgressProxy, EgressProxyThread
from sandboxes.services import reclaims_wait
from tests.docker_engine import (
    HOST_USR_IMAGE,
    docker_engine,  # noqa: F401 - the session fixture
)
from tests.docker_ssh import SSHGateway, require_gateway, session_processes, ssh_gateway
from tests.sandboxes.test_docker_remote_mode import wait_for

# A page of one colour (its pixels are checked in the screenshot).
START_PAGE = "data:text/html,<title>start</title><body style='background:%23cc0033'></body>"
SLOT = 41  # no other test's


@pytest.fixture(scope="module")
def gateway(docker_engine: str) -> Iterator[SSHGateway]:  # noqa: F811
    """sshd on loopback in front of the private engine's socket (its DOCKER_HOST is
    ``unix://<socket>``)."""
    require_gateway()
    assert docker_engine.startswith("unix://")
    with ssh_gateway(docker_engine.removeprefix("unix://")) as made:
        yield made


@pytest.fixture
def worker_env(gateway: SSHGateway, monkeypatch: pytest.MonkeyPatch) -> SSHGateway:
    """The worker's environment: DOCKER_HOST the SSH URL, HOME the operator's."""
    monkeypatch.setenv("DOCKER_HOST", gateway.url)
    monkeypatch.setenv("HOME", str(gateway.home))
    for name in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_API_VERSION", "SSH_AUTH_SOCK"):
        monkeypatch.delenv(name, raising=False)
    return gateway


@pytest.fixture
def local_client(docker_engine: str) -> Iterator[docker.DockerClient]:  # noqa: F811
    """The engine through its socket, not SSH: the test's own look at what is left."""
    client = docker.DockerClient(base_url=docker_engine)
    yield client
    client.close()


def accepted_sessions(gateway: SSHGateway) -> list[str]:
    """The sessions sshd ran its forced command for (LogLevel VERBOSE)."""
    return re.findall(r"Starting session: forced-command .*", gateway.log_text())


def test_a_desktop_on_an_engine_reached_over_ssh(
    worker_env: SSHGateway, local_client: docker.DockerClient, tmp_path: Path
) -> None:
    gateway = worker_env
    refusals: list = []
    root = Path(tempfile.mkdtemp(prefix="arena-test-ssh-", dir="/var/tmp"))
    host = f"{socket.gethostname()}-test-ssh-{secrets.token_hex(4)}"
    label = {"label": [f"arena.host={host}"]}
    proxy = EgressProxy(on_refusal=lambda *refusal: refusals.append(refusal))
    with EgressProxyThread(proxy) as egress:
        backend = RemoteDockerBackend(
            HOST_USR_IMAGE,
            root,
            django_settings.ARENA.sandbox_uid_base,
            egress=egress,
            client_factory=remote_client_from_env,  # the worker's own (sandboxes.services)
            host=host,
        )
        try:
            started = time.monotonic()
            client = backend.client()
            # The client speaks SSH (paramiko's transport, authenticated with the
            # operator's key to the host key in known_hosts), nothing else.
            assert client.api.base_url == "http+docker://ssh"
            adapter = client.api.get_adapter("http+docker://ssh/_ping")
            assert isinstance(adapter, SSHHTTPAdapter) and adapter.ssh_client is not None
            transport = adapter.ssh_client.get_transport()
            assert transport.getpeername()[:2] == ("127.0.0.1", gateway.port)
            assert transport.get_remote_server_key().get_name() == "ssh-ed25519"

            run_id = 10**9 + secrets.randbelow(10**9)
            spec = SandboxSpec(
                run_id=run_id, desktop=True, start_url=START_PAGE, shell_timeout_s=10
            )
            box = backend.provision(spec, slot=SLOT)
            ready_s = time.monotonic() - started
            assert isinstance(box, RemoteDockerSandbox)
            try:
                assert len(box.tunnels) == 2
                assert wait_for(lambda: (box.page_state() or {}).get("title") == "start")
                shot = box.screenshot()
                assert shot.ok, shot.error
                image = Image.open(io.BytesIO(shot.image)).convert("RGB")
                assert image.size == (1280, 800)
                assert image.getpixel((1000, 700)) == (204, 0, 51)  # the page's own colour

                shell = box.shell("id -u; pwd")
                assert shell.ok and shell.stdout.split() == [str(box.uid), "/work"], shell

                data = secrets.token_bytes(200_000)  # several SSH windows' worth
                assert box.put_file("in/blob.bin", data) == "/work/in/blob.bin"
                seen = box.shell("stat -c %s in/blob.bin; cp in/blob.bin out.bin")
                assert seen.stdout == "200000\n", seen
                delivered = box.collect_files(["out.bin"], tmp_path / "out")
                assert [(d.name, d.size) for d in delivered] == [("out.bin", 200_000)]
                assert (tmp_path / "out" / "out.bin").read_bytes() == data

                curl = "curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://10.20.30.40/"
                assert box.shell(curl).stdout == "403"
                assert egress.counters(run_id)["refused:private"] == 1
                assert box.health()["ok"] is True
            finally:
                box.destroy()
            assert reclaims_wait(30)
            destroyed_s = time.monotonic() - started
            # The API calls, both control channels and both egress tunnels went over the
            # SSH server: each is a session of its forced command.
            sessions = accepted_sessions(gateway)
            assert len(sessions) >= 5, gateway.log_text()[-3000:]
            assert "Accepted publickey for" in gateway.log_text()
            # Nothing of the run on the engine (asked through its socket, not SSH).
            assert local_client.containers.list(all=True, filters=label) == []
            assert local_client.volumes.list(filters=label) == []
            assert list(root.iterdir()) == []  # the worker's sandbox root
        finally:
            with contextlib.suppress(Exception):  # (a failure above is the one to see)
                janitor(backend.client(), host, lambda run_id: False, root=root)
                janitor_volumes(backend.client(), host, lambda run_id: False)
            backend.close()
            shutil.rmtree(root, ignore_errors=True)
    # The client closed its connection: no session is left on the SSH server.
    assert wait_for(lambda: session_processes(gateway) == [], 10), session_processes(gateway)
    print(
        f"ssh: desktop ready in {ready_s:.2f} s, destroyed and reclaimed by {destroyed_s:.2f} s,"
        f" {len(sessions)} SSH sessions"
    )


def test_an_engine_whose_host_key_is_unknown_is_refused(worker_env: SSHGateway) -> None:
    """Host key checking is on: the same engine with known_hosts emptied is refused."""
    known = worker_env.home / ".ssh" / "known_hosts"
    saved = known.read_text()
    known.write_text("")
    try:
        with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
            remote_client_from_env().close()
    finally:
        known.write_text(saved)
