"""A real Docker engine for the tests: the checkout's private daemon (``scripts/docker.sh``)
with the desktop images, shared by every pytest process that runs at once.

``docker_engine`` (a session fixture) starts the daemon unless one answers, builds the
images when their inputs changed (the self-contained one, ``DEFAULT_IMAGE``, the coding
image on it, ``DEFAULT_CODING_IMAGE``, and the one that binds the host's /usr,
``HOST_USR_IMAGE``), and yields the ``DOCKER_HOST`` it
serves; the last session out stops the daemon, if a test session started it (one
started by hand is left running). Two lock files under ``var/docker/`` make that safe
across processes: ``sessions.lock`` (held while a session starts or stops the daemon)
and ``sessions`` (held shared by every session using it: whoever can take it
exclusively is the last).
It skips only where ``dockerd`` is not installed (``scripts/setup.sh test`` installs it)
or the tests do not run as root (dockerd needs it).
"""

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "docker.sh"
# (ARENA_DOCKER_STATE: another engine's state dir, as scripts/docker.sh reads it)
STATE = Path(os.environ.get("ARENA_DOCKER_STATE") or REPO / "var" / "docker")
# Written when a test session started the daemon: the last session out stops it then.
STARTED_BY_TESTS = STATE / "started-by-tests"
# scripts/docker.sh image --host-usr: the small image that runs the host's /usr
HOST_USR_IMAGE = "agent-arena-desktop-host-usr"
SCRIPT_TIMEOUT_S = 120
# A first build downloads and installs the image's Debian packages (about 2 minutes
# here); later ones reuse the base, or the whole image while its inputs are unchanged.
IMAGE_TIMEOUT_S = 1800


def docker_sh(*command: str, timeout: float = SCRIPT_TIMEOUT_S) -> str:
    """Runs ``scripts/docker.sh COMMAND…`` and returns its output; raises on failure."""
    result = subprocess.run(
        ["bash", str(SCRIPT), *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"scripts/docker.sh {' '.join(command)} failed: {result.stderr.strip()}")
    return result.stdout


@contextmanager
def _locked(path: Path, operation: int) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, operation)
        yield fd
    finally:
        os.close(fd)


@contextmanager
def engine_session() -> Iterator[str]:
    """The private daemon for as long as the block runs; yields its DOCKER_HOST."""
    STATE.mkdir(parents=True, exist_ok=True)
    users = os.open(STATE / "sessions", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with _locked(STATE / "sessions.lock", fcntl.LOCK_EX):
            running = subprocess.run(["bash", str(SCRIPT), "status"], check=False).returncode == 0
            output = docker_sh("start")
            if not running:
                STARTED_BY_TESTS.touch()
            # the desktop image, then the coding image on it (50–65 s when the
            # toolchain changed: a 1.5 GB layer)
            docker_sh("image", "--coding", timeout=IMAGE_TIMEOUT_S)
            docker_sh("image", "--host-usr")
            fcntl.flock(users, fcntl.LOCK_SH)
        [docker_host] = [
            line.split("=", 1)[1] for line in output.splitlines() if line.startswith("DOCKER_HOST=")
        ]
        yield docker_host
    finally:
        with _locked(STATE / "sessions.lock", fcntl.LOCK_EX):
            fcntl.flock(users, fcntl.LOCK_UN)
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                last = True
            except BlockingIOError:
                last = False  # another session still uses it
            if last and STARTED_BY_TESTS.exists():
                docker_sh("stop", "--force")  # (we hold the sessions lock ourselves)
                STARTED_BY_TESTS.unlink()
        os.close(users)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[str]:
    """The DOCKER_HOST of a running private engine with the desktop images built."""
    if shutil.which("dockerd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") is None:
        pytest.skip("dockerd is not installed (scripts/docker.sh install)")
    if os.geteuid() != 0:
        pytest.skip("the private Docker engine needs root (as the slot uids do)")
    with engine_session() as docker_host:
        yield docker_host
