"""A sandbox on an engine that is not the worker's (issue 34, "Remote engines"): a second
dockerd reached only over TLS on loopback (tests/docker_remote.py), a container with
no bind mount at all (tmpfs only), the real supervisor behind the front, and everything
the worker does going through the engine's exec API: the authenticated channel, its
refusals and bounds, and egress through the tunnel to the worker's own proxy."""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
from docker.models.containers import Container
from docker.types import Mount

from sandboxes.channel import (
    PYTHON,
    RELAY,
    ChannelClient,
    ChannelRefused,
    ExecStream,
    exec_connector,
    handshake,
    new_secret,
    read_frame,
    relay_argv,
)
from sandboxes.docker_backend import HOST_ETC
from sandboxes.egress import EgressProxy, EgressProxyThread
from sandboxes.egress_tunnel import TunnelLoop, open_egress_tunnel
from sandboxes.inside import relay
from tests.docker_engine import (
    HOST_USR_IMAGE,
    docker_engine,  # noqa: F401 - the session fixture
)
from tests.docker_remote import (
    RemoteEngine,
    copy_image,
    create_probe_sandbox,
    docker_remote,  # noqa: F401 - the module's fixture
    probe_image,
    tls_client,
)

UID = 4321
RUN_ID = 77001
READY_TIMEOUT_S = 30


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


class Sandbox:
    def __init__(self, engine: RemoteEngine, container: Container, secret: bytes) -> None:
        self.engine, self.container, self.secret = engine, container, secret
        self.api = engine.client.api

    def connect(self, timeout_s: float = 10.0) -> Any:
        return exec_connector(self.api, self.container.id)(timeout_s)

    def client(self, **kwargs: Any) -> ChannelClient:
        return ChannelClient(exec_connector(self.api, self.container.id), self.secret, **kwargs)

    def front_pid(self) -> int:
        top = self.api.top(self.container.id, ps_args="-eo pid,args")
        # (docker-init's command line names it too)
        fronts = [
            row for row in top["Processes"] if row[1].startswith(f"{PYTHON} -I {RELAY} front")
        ]
        [pid] = [int(row[0]) for row in fronts]
        return pid


@pytest.fixture(scope="module")
def sandbox(docker_remote: RemoteEngine) -> Iterator[Sandbox]:  # noqa: F811
    """The agent's container of a run on the remote engine (``create_probe_sandbox``:
    the front, then the real supervisor, as uid ``UID``; tmpfs mounts only)."""
    secret = new_secret()
    container = create_probe_sandbox(docker_remote.client, secret, uid=UID, run_id=RUN_ID)
    try:
        container.start()
        assert container.attrs["Mounts"] == []  # no bind mount, no volume
        box = Sandbox(docker_remote, container, secret)
        client = box.client()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while (reply := client.call({"op": "ping"}, timeout_s=10))["ok"] is not True:
            assert reply == {"ok": False, "error": "the supervisor is not serving yet"}
            assert time.monotonic() < deadline, "the supervisor did not come up"
            time.sleep(0.1)
        client.close()
        yield box
    finally:
        container.remove(force=True, v=True)


def test_the_engine_answers_only_over_tls_with_a_client_certificate(
    docker_remote: RemoteEngine,  # noqa: F811
) -> None:
    assert docker_remote.url.startswith("https://127.0.0.1:")
    anonymous = docker.tls.TLSConfig(ca_cert=str(docker_remote.certs / "ca.pem"), verify=True)
    stranger = tls_client(docker_remote.url, anonymous, timeout=5)
    with pytest.raises(requests.exceptions.SSLError):
        stranger.ping()
    plain = docker.APIClient(base_url=docker_remote.url.replace("https", "http"), version="1.41")
    with pytest.raises(docker.errors.APIError, match="400 Client Error"):
        plain.ping()


def test_an_image_moves_from_the_local_engine(
    docker_engine: str,  # noqa: F811
    docker_remote: RemoteEngine,  # noqa: F811
) -> None:
    """The desktop image of the private engine (the small one that binds the host's
    /usr), saved there and loaded here, streamed."""
    local = docker.DockerClient(base_url=docker_engine)
    try:
        copy_image(local, docker_remote.client, HOST_USR_IMAGE)
        here = docker_remote.client.images.get(HOST_USR_IMAGE)
        assert here.id == local.images.get(HOST_USR_IMAGE).id
        assert here.labels["arena.binds-host-usr"] == "1"
    finally:
        local.close()


def test_the_channel_over_a_local_engines_unix_socket(
    docker_engine: str,  # noqa: F811
) -> None:
    """The same exec channel on the private engine, whose API is a unix socket: the
    worker half-closes the relay's stdin there. The desktop image binds the host's /usr
    (read-only); the run dir is not bound."""
    local = docker.DockerClient(base_url=docker_engine)
    secret = new_secret()
    usr = tuple(
        Mount(path, path, type="bind", read_only=True)
        for path in ("/usr", *HOST_ETC)
        if Path(path).exists()
    )
    container = create_probe_sandbox(
        local, secret, uid=UID, run_id=RUN_ID, image=HOST_USR_IMAGE, mounts=usr
    )
    try:
        container.start()
        client = ChannelClient(exec_connector(local.api, container.id), secret)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while client.call({"op": "ping"}, timeout_s=10)["ok"] is not True:
            assert time.monotonic() < deadline, "the supervisor did not come up"
            time.sleep(0.1)
        command = "head -c 1000000 /dev/zero | tr '\\0' b"
        reply = client.call({"op": "shell", "command": command, "max_bytes": 10**6}, 10)
        assert reply["stdout"] == "b" * 65536  # the supervisor's own bound
        with pytest.raises(ChannelRefused, match="authentication failed"):
            handshake(exec_connector(local.api, container.id)(10), new_secret(), "control")
        client.close()
        deadline = time.monotonic() + 10
        while any(
            f"{RELAY} pipe" in args
            for _, args in local.api.top(container.id, ps_args="-eo pid,args")["Processes"]
        ):
            assert time.monotonic() < deadline, "a relay outlived its channel"
            time.sleep(0.1)
    finally:
        container.remove(force=True)
        local.close()


def test_the_engine_stops_leaving_nothing(docker_remote: RemoteEngine) -> None:  # noqa: F811
    """A container left running here: stopping the engine (the fixture's end) must
    still leave no process, mount or file (checked there)."""
    image = probe_image(docker_remote.client)
    sleeper = [PYTHON, "-c", "import time; time.sleep(600)"]
    container = docker_remote.client.containers.run(
        image, sleeper, detach=True, network_mode="none", user="4321:4321", init=True
    )
    container.reload()
    assert container.status == "running"


def test_the_supervisor_answers_over_the_exec_channel(sandbox: Sandbox) -> None:
    client = sandbox.client()
    assert client.call({"op": "ping"}, timeout_s=10)["ok"] is True
    reply = client.call(
        {"op": "shell", "command": "id -u; echo $HOME; ls /run/arena"}, timeout_s=10
    )
    assert reply["exit_code"] == 0, reply
    assert reply["stdout"].split() == [
        str(UID),
        "/home/agent",
        "channel.sock",
        "ctl.sock",
        "egress.sock",
    ]
    # The secret is in none of the supervisor's (and so the agent's) environments.
    env = client.call({"op": "shell", "command": "env"}, timeout_s=10)["stdout"]
    assert relay.SECRET_ENV not in env and sandbox.secret.hex() not in env
    # A long reply crosses the engine's frames whole.
    big = client.call(
        {"op": "shell", "command": "head -c 60000 /dev/zero | tr '\\0' a"}, timeout_s=10
    )
    assert big["stdout"] == "a" * 60000
    client.close()


def test_a_wrong_secret_or_version_is_refused(sandbox: Sandbox) -> None:
    with pytest.raises(ChannelRefused, match=r"^authentication failed$"):
        handshake(sandbox.connect(), new_secret(), "control", timeout_s=10)
    with pytest.raises(
        ChannelRefused, match=r"protocol version 0 is not supported \(this end: 1\)"
    ):
        handshake(sandbox.connect(), sandbox.secret, "control", timeout_s=10, version=0)
    stranger = ChannelClient(exec_connector(sandbox.api, sandbox.container.id), new_secret())
    with pytest.raises(ChannelRefused, match="authentication failed"):
        stranger.call({"op": "shell", "command": "true"}, timeout_s=10)


def test_an_oversize_frame_is_refused_without_allocation(sandbox: Sandbox) -> None:
    front = sandbox.front_pid()
    sock = sandbox.connect()
    handshake(sock, sandbox.secret, "control", timeout_s=10)
    before = rss_kib(front)
    sock.sendall(relay.HEADER.pack(2**31, relay.MESSAGE, 0) + b"[" * 4096)
    with pytest.raises(ChannelRefused, match="a frame of 2147483648 bytes exceeds the limit"):
        read_frame(sock, {relay.MESSAGE: 1024}, time.monotonic() + 10)
    assert rss_kib(front) - before < 4096
    # The front lives on and serves the next channel. (Neither channel is closed here:
    # dropping the last reference to a channel's socket ends it too.)
    assert sandbox.client().call({"op": "ping"}, timeout_s=10)["ok"] is True


def test_a_relay_that_cannot_connect_says_why(sandbox: Sandbox) -> None:
    argv = relay_argv("/run/arena/none.sock", wait_s=0.5)
    stream = ExecStream(sandbox.api, sandbox.container.id, argv)
    stream.socket.sendall(b"x")
    stream.socket.settimeout(20)
    assert stream.socket.recv(1) == b""
    assert "relay: cannot connect to /run/arena/none.sock" in stream.stderr()
    assert stream.exit_code() == 1


def test_egress_from_inside_reaches_the_workers_proxy(sandbox: Sandbox, tmp_path: Path) -> None:
    """curl in the container, through the supervisor's forwarder and the tunnel, to the
    worker's proxy: a private address gets its 403, counted under the run's id."""
    refusals: list[tuple[int, str, str]] = []
    proxy = EgressProxy(on_refusal=lambda *refusal: refusals.append(refusal))
    loop = TunnelLoop()
    client = sandbox.client()
    try:
        with EgressProxyThread(proxy) as egress:
            tunnel = open_egress_tunnel(
                loop,
                egress,
                RUN_ID,
                sandbox.connect(),
                sandbox.secret,
                socket_dir=tmp_path / "egress",
            )
            curl = "curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://10.20.30.40/x"
            reply = client.call({"op": "shell", "command": curl}, timeout_s=15)
            assert reply["stdout"] == "403", reply
            tls = "curl -s -o /dev/null --max-time 10 https://192.168.7.7/; echo $?"
            reply = client.call({"op": "shell", "command": tls}, timeout_s=15)
            assert reply["stdout"].strip() == "56", reply  # the CONNECT refused
            counters = egress.counters(RUN_ID)
            assert counters["refused:private"] == 2
            assert refusals == [
                (RUN_ID, "http://10.20.30.40/x", "private"),
                (RUN_ID, "192.168.7.7:443", "private"),
            ]
            assert tunnel.open_streams() == 0
            tunnel.close()
            assert tunnel.ended.wait(10)
            # Without a tunnel the forwarder's connections wait; none reach the proxy.
            late = "curl -s -o /dev/null -w '%{http_code}' --max-time 1 http://10.9.9.9/; true"
            reply = client.call({"op": "shell", "command": late}, timeout_s=15)
            assert reply["stdout"] == "000"
            assert egress.counters(RUN_ID)["connections"] == 2
    finally:
        client.close()
        loop.close()


def test_a_second_tunnel_is_refused_while_one_is_attached(sandbox: Sandbox, tmp_path: Path) -> None:
    loop = TunnelLoop()
    try:
        with EgressProxyThread(EgressProxy()) as egress:
            first = open_egress_tunnel(
                loop, egress, RUN_ID, sandbox.connect(), sandbox.secret, socket_dir=tmp_path
            )
            with pytest.raises(ChannelRefused, match="an egress tunnel is already attached"):
                open_egress_tunnel(
                    loop, egress, RUN_ID, sandbox.connect(), sandbox.secret, socket_dir=tmp_path
                )
            first.close()
            # Once the front saw it end, another may attach.
            deadline = time.monotonic() + 10
            while True:
                try:
                    second = open_egress_tunnel(
                        loop, egress, RUN_ID, sandbox.connect(), sandbox.secret, socket_dir=tmp_path
                    )
                    break
                except ChannelRefused:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
            second.close()
    finally:
        loop.close()


def test_closed_channels_leave_no_process_behind(sandbox: Sandbox) -> None:
    """Each exec channel is a relay process in the container: closing the channel on
    the worker's side ends it (over TLS, where stdin cannot be half-closed, too)."""
    for _ in range(3):
        client = sandbox.client()
        assert client.call({"op": "ping"}, timeout_s=10)["ok"] is True
        client.close()
    deadline = time.monotonic() + 10
    while True:
        top = sandbox.api.top(sandbox.container.id, ps_args="-eo pid,args")["Processes"]
        relays = [args for _, args in top if f"{RELAY} pipe" in args]
        if not relays:
            break
        assert time.monotonic() < deadline, relays
        time.sleep(0.1)
    commands = sorted(args.split()[2] for _, args in top if args.startswith(PYTHON))
    assert commands == [RELAY, "/opt/arena/inside/supervisor.py"]
