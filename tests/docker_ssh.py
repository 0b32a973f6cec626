"""An SSH server in front of a Docker engine's API socket, for the tests of a worker
that reaches its engine with ``DOCKER_HOST=ssh://…`` (docs/sandboxes.md, "Remote
engines").

:func:`ssh_gateway` starts Debian's ``sshd`` (``scripts/docker.sh install`` installs
``openssh-server``) with a config, host key, authorized key and pid file of its own
in a temporary dir, on ``127.0.0.1:<free port>``, public keys only, no PAM. Its
``ForceCommand`` joins each session's stdio to the engine's API socket with ``socat``
(what ``docker system dial-stdio`` does on an engine's host). The client side is an
operator's: a home with ``.ssh/config`` (host alias, port, user, identity file) and
``.ssh/known_hosts`` (the server's host key, checked). It yields an
:class:`SSHGateway` and stops the server, removing every file; its log is kept
readable until then, so a test can check the sessions really went through it.
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docker_remote import free_port

SSHD = "/usr/sbin/sshd"
# where Debian's sshd chroots its pre-auth children: it refuses to start without it
PRIVSEP_DIR = Path("/run/sshd")
HOST_ALIAS = "arena-engine"
START_TIMEOUT_S = 20
STOP_TIMEOUT_S = 10
# One SSH connection carries every stream of a worker's client (paramiko's channels:
# the pooled API connections, plus one per control channel and egress tunnel of each
# run): the server's default of 10 sessions per connection is too few.
MAX_SESSIONS = 200


@dataclass
class SSHGateway:
    url: str  # the DOCKER_HOST: ssh://<user>@<alias>:<port>, the home's .ssh/config
    # naming the alias's address and the key
    home: Path  # the worker's HOME: .ssh/config, known_hosts and the client's key
    port: int
    log: Path
    pid: int
    state: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return (path.with_suffix(".pub")).read_text().strip()


def missing_parts() -> str:
    """What this machine lacks for the gateway ("" when nothing)."""
    for tool in (SSHD, "ssh-keygen", "socat"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/docker.sh install)"
    return ""


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1) as sock:
        return sock.recv(4).startswith(b"SSH-")
    return False


@contextlib.contextmanager
def ssh_gateway(engine_socket: str) -> Iterator[SSHGateway]:
    """An sshd on loopback whose every session is a stream to ``engine_socket``; nothing
    of it is left afterwards but the system's (empty) privilege separation dir."""
    state = Path(tempfile.mkdtemp(prefix="arena-ssh-", dir="/var/tmp"))
    try:
        server, home = state / "server", state / "home"
        server.mkdir(mode=0o700)
        (home / ".ssh").mkdir(mode=0o700, parents=True)
        host_public = _keygen(server / "host_key", "arena test engine host")
        client_key = home / ".ssh" / "id_engine"
        (server / "authorized_keys").write_text(_keygen(client_key, "arena test worker") + "\n")
        # (a link of the gateway's own: its sessions' socats name it, no other's)
        (server / "engine.sock").symlink_to(engine_socket)
        port = free_port()
        user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True)
        config = server / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"ListenAddress 127.0.0.1:{port}",
                    f"HostKey {server / 'host_key'}",
                    f"PidFile {server / 'sshd.pid'}",
                    f"AuthorizedKeysFile {server / 'authorized_keys'}",
                    f"AllowUsers {user.stdout.strip()}",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitTTY no",
                    "X11Forwarding no",
                    "AllowTcpForwarding no",
                    "AllowAgentForwarding no",
                    "PermitUserEnvironment no",
                    f"MaxSessions {MAX_SESSIONS}",
                    "LogLevel VERBOSE",
                    f"ForceCommand exec socat - UNIX-CONNECT:{server / 'engine.sock'}",
                    "",
                ]
            )
        )
        (home / ".ssh" / "config").write_text(
            "\n".join(
                [
                    f"Host {HOST_ALIAS}",
                    "    HostName 127.0.0.1",
                    f"    Port {port}",
                    f"    User {user.stdout.strip()}",
                    f"    IdentityFile {client_key}",
                    "    IdentitiesOnly yes",
                    "    StrictHostKeyChecking yes",
                    "",
                ]
            )
        )
        known = " ".join(host_public.split()[:2])
        (home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{port} {known}\n")
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        checked = subprocess.run([SSHD, "-t", "-f", str(config)], capture_output=True, text=True)
        if checked.returncode != 0:
            raise RuntimeError(f"sshd refuses its config: {checked.stderr.strip()}")
        log = server / "sshd.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _listening(port):
                if proc.poll() is not None:
                    raise RuntimeError(f"sshd exited: {log.read_text()[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError("sshd did not listen in time")
                time.sleep(0.05)
            # (the port in the URL: docker-py makes it 22 when absent, over the config's)
            url = f"ssh://{user.stdout.strip()}@{HOST_ALIAS}:{port}"
            yield SSHGateway(url, home, port, log, proc.pid, state)
        finally:
            # the connections' processes (each in a session of its own), then the listener
            for pid, _ in _descendants(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    finally:
        shutil.rmtree(state, ignore_errors=True)


def session_processes(gateway: SSHGateway) -> list[str]:
    """The gateway's live descendants (its connections' sshd processes and their
    socats): none once every client closed its connection."""
    return [f"{pid} {name}" for pid, name in _descendants(gateway.pid)]


def _descendants(root: int) -> list[tuple[int, str]]:
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            head, tail = (entry / "stat").read_text().rsplit(")", 1)
            fields = tail.split()
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
                names[int(entry.name)] = head.split("(", 1)[1]
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append((pid, names.get(pid, "?")))
        todo += children.get(pid, [])
    return found


def require_gateway() -> None:
    """Skips as the other real-engine tests skip where the parts are absent."""
    if problem := missing_parts():
        pytest.skip(problem)
    if os.geteuid() != 0:
        pytest.skip("sshd in front of the private engine needs root")
