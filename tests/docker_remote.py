"""A second, separate Docker engine for the tests, reached only over TCP with TLS, as a
worker reaches an engine on another machine: nothing of it is shared with the tests
but its API on ``127.0.0.1:<port>``.

:func:`remote_engine` starts a ``dockerd`` with a data root, exec root and pid file of
its own (no bridge, no iptables, ``vfs`` storage, as ``scripts/docker.sh`` runs the
private engine), listening only on loopback with ``--tlsverify``; the CA, the server's
and the client's certificates are made here with ``cryptography``. It yields a
:class:`RemoteEngine` (its client, its TLS material) and stops the daemon, its
containerd and shims, unmounts what they left and removes every file, leaving nothing.

:func:`probe_image` builds a small self-contained image there, without a registry: the
host's ``python3`` and its standard library, ``sh``, ``curl``, a few tools and the shared libraries
they load (found with ``ldd``), and ``sandboxes/inside/`` at ``/opt/arena/inside``, so
the real supervisor and front run with no bind mount at all. :func:`copy_image` moves
an image of another engine there (``docker save`` piped into ``load``).
"""

import contextlib
import datetime
import io
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from docker.models.containers import Container
from docker.types import Mount

from sandboxes.base import SandboxSpec
from sandboxes.channel import PYTHON as SANDBOX_PYTHON
from sandboxes.channel import front_argv
from sandboxes.control import supervisor_config
from sandboxes.inside import relay

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 20
PROBE_IMAGE = "arena-probe"
API_VERSION = "1.41"
TOOLS = ("cat", "env", "head", "id", "ls", "tr")  # in the probe image, beside sh and curl
PYTHON = "/usr/bin/python3"
# The standard library the probe image leaves out (tests, tools, GUIs, build files).
STDLIB_SKIP = {
    "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "distutils",
    "site-packages", "dist-packages", "pydoc_data", "__pycache__",
}  # fmt: skip


@dataclass
class RemoteEngine:
    client: docker.DockerClient
    url: str
    tls: docker.tls.TLSConfig
    certs: Path
    pid: int
    state: Path  # data root, certificates, log
    exec_root: str
    argv: list[str]
    proc: subprocess.Popen

    def restart(self) -> None:
        """Starts the engine again on its data root after it was killed, as a machine
        that rebooted: its run state (the exec root, a tmpfs's on a real machine) is
        gone, its data root kept. Waits until it answers."""
        self.proc.wait(STOP_TIMEOUT_S)  # reaped (a zombie's pid holds the pid file)
        (self.state / "dockerd.pid").unlink(missing_ok=True)  # a crash leaves it
        # Else containerd spends its start dialling the dead containers' shims, and
        # dockerd gives up waiting for it on a busy machine.
        _unmount_under(self.exec_root)
        shutil.rmtree(self.exec_root, ignore_errors=True)
        self.proc = _start_dockerd(self.argv, self.state)
        self.pid = self.proc.pid
        _wait_answering(self.proc, self.url, self.tls, self.state)


def leftovers(engine: RemoteEngine) -> list[str]:
    """What a stopped engine left: processes, mounts, files (nothing, after
    :func:`remote_engine`)."""
    left = [f"process {pid}" for pid in _leftovers(engine.exec_root)]
    if _alive(engine.pid):
        left.append(f"dockerd {engine.pid}")
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    left += [f"mount {m}" for m in mounts if m.startswith((str(engine.state), engine.exec_root))]
    left += [f"dir {p}" for p in (engine.state, Path(engine.exec_root)) if p.exists()]
    return left


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )
    if ca:
        usage_bits = dict.fromkeys(
            ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement",
             "encipher_only", "decipher_only", "digital_signature"), False)  # fmt: skip
        builder = builder.add_extension(
            x509.KeyUsage(key_cert_sign=True, crl_sign=True, **usage_bits), critical=True
        )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        san = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_certificates(folder: Path) -> None:
    """``ca.pem``, ``server-cert.pem``/``server-key.pem`` (for 127.0.0.1) and
    ``cert.pem``/``key.pem`` (the client's), all signed by a CA made for this engine."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_key = _key()
    ca = _cert("arena test CA", ca_key, None, ca_key, ca=True)
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    for prefix, usage in (
        ("server-", ExtendedKeyUsageOID.SERVER_AUTH),
        ("", ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        key = _key()
        cert = _cert(f"arena {prefix or 'client'}", key, ca.subject, ca_key, usage=usage)
        (folder / f"{prefix}cert.pem").write_bytes(cert.public_bytes(pem))
        (folder / f"{prefix}key.pem").write_bytes(
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )


def tls_client(url: str, tls: docker.tls.TLSConfig, timeout: int = 30) -> docker.DockerClient:
    """A client of a TLS engine that trusts ``tls``'s CA alone: requests would take
    ``REQUESTS_CA_BUNDLE`` (and any proxy) from the environment over the client's own
    CA, so the session ignores the environment (and the API version is not probed
    before that is set: ``API_VERSION``, which Debian's dockerd 20.10 speaks)."""
    client = docker.DockerClient(base_url=url, tls=tls, version=API_VERSION, timeout=timeout)
    client.api.trust_env = False
    return client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _leftovers(exec_root: str) -> list[int]:
    """This engine's containerd and shims: they name its exec root on their command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if f"{exec_root}/".encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def _unmount_under(*roots: str) -> None:
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for mount in sorted(
        (m for m in mounts if any(m.startswith(f"{r}/") or m == r for r in roots)), reverse=True
    ):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)


def _start_dockerd(argv: list[str], state: Path) -> subprocess.Popen:
    with (state / "dockerd.log").open("ab") as log:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )


def _wait_answering(
    proc: subprocess.Popen, url: str, tls: docker.tls.TLSConfig, state: Path
) -> docker.DockerClient:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"dockerd exited: {(state / 'dockerd.log').read_text()[-2000:]}")
        try:
            client = tls_client(url, tls)
            client.ping()
            return client
        except (docker.errors.DockerException, requests.RequestException) as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the remote engine did not answer: {exc}") from None
            time.sleep(0.2)


@contextlib.contextmanager
def remote_engine() -> Iterator[RemoteEngine]:
    """A TLS-only engine on 127.0.0.1 for the block; nothing of it is left afterwards."""
    state = Path(tempfile.mkdtemp(prefix="arena-remote-", dir=REPO / "var"))
    exec_root = f"/run/arena-remote-{secrets.token_hex(4)}"
    certs, port = state / "certs", free_port()
    make_certificates(certs)
    (state / "daemon.json").write_text("{}")
    url = f"https://127.0.0.1:{port}"
    argv = [
        "dockerd",
        "--config-file",
        str(state / "daemon.json"),
        "--host",
        f"tcp://127.0.0.1:{port}",
        "--tlsverify",
        "--tlscacert",
        str(certs / "ca.pem"),
        "--tlscert",
        str(certs / "server-cert.pem"),
        "--tlskey",
        str(certs / "server-key.pem"),
        "--data-root",
        str(state / "data"),
        "--exec-root",
        exec_root,
        "--pidfile",
        str(state / "dockerd.pid"),
        "--storage-driver",
        "vfs",
        "--bridge",
        "none",
        "--iptables=false",
        "--ip6tables=false",
        "--ip-forward=false",
        "--ip-masq=false",
        "--userland-proxy=false",
        "--exec-opt",
        "native.cgroupdriver=cgroupfs",
        "--shutdown-timeout",
        "2",
        "--log-level",
        "warn",
    ]
    tls = docker.tls.TLSConfig(
        client_cert=(str(certs / "cert.pem"), str(certs / "key.pem")),
        ca_cert=str(certs / "ca.pem"),
        verify=True,
    )
    engine = None
    proc = _start_dockerd(argv, state)
    try:
        client = _wait_answering(proc, url, tls, state)
        engine = RemoteEngine(client, url, tls, certs, proc.pid, state, exec_root, argv, proc)
        yield engine
    finally:
        if engine is not None:
            proc = engine.proc  # (a restarted engine's)
            with contextlib.suppress(Exception):
                for container in engine.client.containers.list(all=True):
                    container.remove(force=True, v=True)
                engine.client.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for pid in _leftovers(exec_root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.05)
        _unmount_under(str(state), exec_root)
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(exec_root, ignore_errors=True)


@pytest.fixture(scope="module")
def docker_remote() -> Iterator[RemoteEngine]:
    """A second engine, TLS on loopback only, for this module's tests."""
    if shutil.which("dockerd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") is None:
        pytest.skip("dockerd is not installed (scripts/docker.sh install)")
    if os.geteuid() != 0:
        pytest.skip("a Docker engine needs root")
    with remote_engine() as engine:
        yield engine
    assert leftovers(engine) == []


# -- images ----------------------------------------------------------------------------


def _libraries(*binaries: str) -> set[str]:
    """The shared libraries ``binaries`` load (ldd), the dynamic loader included."""
    found: set[str] = set()
    for binary in binaries:
        output = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False).stdout
        for line in output.splitlines():
            parts = line.split()
            path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0] if parts else ""
            if path.startswith("/"):
                found.add(path)
    return found


def _probe_files() -> dict[str, str]:
    """Image path -> host path of everything the probe image carries."""
    version = subprocess.run(
        [PYTHON, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    stdlib = Path(f"/usr/lib/python{version}")
    files = {}
    for path in stdlib.rglob("*"):
        relative = path.relative_to(stdlib).parts
        if (
            path.is_file()
            and not STDLIB_SKIP & set(relative)
            and not relative[0].startswith("config-")
        ):
            files[str(path)] = str(path)
    binaries = [os.path.realpath(PYTHON), "/bin/sh", shutil.which("curl") or "/usr/bin/curl"]
    tools = [f"/usr/bin/{name}" for name in TOOLS]
    dynload = [p for p in files if p.endswith(".so")]
    for path in [*binaries, *tools, *_libraries(*binaries, *tools, *dynload)]:
        files[path] = path
    files[PYTHON] = os.path.realpath(PYTHON)
    files["/usr/bin/curl"] = binaries[2]
    for path in (REPO / "sandboxes" / "inside").iterdir():
        if path.is_file():
            files[f"/opt/arena/inside/{path.name}"] = str(path)
    return files


def probe_tar() -> bytes:
    """The probe image's root file system as a tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        dirs = {
            "/etc",
            "/proc",
            "/sys",
            "/dev",
            "/tmp",
            "/sbin",
            "/run",
            "/run/arena",
            "/work",
            "/home/agent",
        }
        files = _probe_files()
        for path in files:
            parent = os.path.dirname(path)
            while parent != "/":
                dirs.add(parent)
                parent = os.path.dirname(parent)
        for path in sorted(dirs):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if path == "/tmp" else 0o755
            tar.addfile(info)
        for path, source in sorted(files.items()):
            info = tar.gettarinfo(os.path.realpath(source), arcname=path.lstrip("/"))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(os.path.realpath(source), "rb") as stream:
                tar.addfile(info, stream)
        for name, text in (
            ("etc/passwd", "root:x:0:0::/root:/bin/sh\n"),
            ("etc/group", "root:x:0:\n"),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    return buffer.getvalue()


def probe_image(client: docker.DockerClient) -> str:
    """Builds the probe image on ``client``'s engine (once per engine); returns its name."""
    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.get(PROBE_IMAGE)
        return PROBE_IMAGE
    client.api.import_image_from_data(
        probe_tar(),
        repository=PROBE_IMAGE,
        tag="latest",
        changes=["ENV PATH=/usr/bin:/bin LANG=C.UTF-8"],
    )
    return PROBE_IMAGE


def copy_image(source: docker.DockerClient, target: docker.DockerClient, name: str) -> None:
    """Moves image ``name`` from one engine to another, as ``docker save | docker load``
    would, streamed (nothing of it on disk here)."""
    target.images.load(source.images.get(name).save(named=True))


def create_probe_sandbox(
    client: docker.DockerClient,
    secret: bytes,
    *,
    uid: int,
    run_id: int,
    image: str | None = None,
    mounts: tuple[Mount, ...] = (),
) -> Container:
    """A run's agent container on ``client``'s engine, created (not started) from the
    probe image (or ``image``, its entrypoint replaced): the front (``relay.py front
    --egress``, ``secret`` in its environment) before the real supervisor in its
    ``agent`` role, as ``uid``, with tmpfs mounts only (and ``mounts``), no network, no
    capability, a read-only root."""
    spec = SandboxSpec(run_id=run_id, desktop=False, shell_timeout_s=10)
    config = supervisor_config(spec, "agent")
    supervisor = [SANDBOX_PYTHON, "-I", "/opt/arena/inside/supervisor.py", json.dumps(config)]
    owned = f"uid={uid},gid={uid}"
    command = front_argv(supervisor, egress=True)
    return client.containers.create(
        image or probe_image(client),
        command[1:],
        entrypoint=command[:1],
        mounts=list(mounts),
        user=f"{uid}:{uid}",
        environment={
            relay.SECRET_ENV: secret.hex(),
            "HOME": "/home/agent",
            # the supervisor forwards 127.0.0.1:3128 to the egress socket (sv_egress)
            "http_proxy": "http://127.0.0.1:3128",
            "https_proxy": "http://127.0.0.1:3128",
        },
        working_dir="/work",
        tmpfs={
            "/run/arena": f"rw,nosuid,nodev,size=1m,nr_inodes=64,{owned},mode=0700",
            "/work": f"rw,nosuid,nodev,size=64m,{owned},mode=0700",
            "/home/agent": f"rw,nosuid,nodev,size=16m,{owned},mode=0700",
            "/tmp": "rw,nosuid,nodev,size=16m",
        },
        read_only=True,
        network_mode="none",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        init=True,
        mem_limit=256 * 1024**2,
        pids_limit=128,
        labels={"arena.test": "remote-engine"},
    )
