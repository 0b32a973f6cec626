"""The docker backend's self-contained desktop image (``scripts/image.sh``), on this
checkout's private engine: what it carries, its labels, and a worker refusing an image
of a version it does not run."""

import io
import os
import secrets
import subprocess
import tarfile

import docker
import pytest
from django.conf import settings as django_settings

from sandboxes.base import SandboxSpec
from sandboxes.docker_backend import DEFAULT_IMAGE, DockerBackend
from sandboxes.docker_images import DEFAULT_CODING_IMAGE, unsupported_image
from tests.docker_engine import REPO, docker_engine  # noqa: F401 - the session fixture


@pytest.fixture(scope="module")
def client(docker_engine):  # noqa: F811
    client = docker.DockerClient(base_url=docker_engine)
    yield client
    client.close()


def test_the_image_is_labelled_with_its_version_and_inputs(client):
    labels = client.images.get(DEFAULT_IMAGE).labels

    inputs = subprocess.run(
        ["bash", str(REPO / "scripts" / "image.sh"), "--hash"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert labels["arena.image-version"] == "1"
    assert labels["arena.inputs"] == inputs
    assert "arena.binds-host-usr" not in labels  # it runs its own /usr


def test_the_coding_image_is_the_desktop_image_and_a_layer_with_the_toolchain(client):
    coding, desktop = client.images.get(DEFAULT_CODING_IMAGE), client.images.get(DEFAULT_IMAGE)

    labels = coding.labels
    assert (labels["arena.image-version"], labels["arena.toolchain"]) == ("1", "1")
    assert labels["arena.inputs"] not in ("", desktop.labels["arena.inputs"])
    assert coding.attrs["RootFS"]["Layers"][:-1] == desktop.attrs["RootFS"]["Layers"]
    assert len(coding.attrs["RootFS"]["Layers"]) == len(desktop.attrs["RootFS"]["Layers"]) + 1


def test_the_coding_image_is_refused_on_a_desktop_image_whose_python_differs(
    client,
    docker_engine,  # noqa: F811
):
    """The toolchain is this host's build: on a desktop image whose Python or C library
    differs, its venv and binaries would not run, so the build refuses and says why."""
    desktop = f"arena-test-other-python-{secrets.token_hex(3)}"
    script = b"#!/bin/sh\necho python 3.9 glibc 2.31\n"
    dockerfile = f"FROM {DEFAULT_IMAGE}\nCOPY python3 /usr/bin/python3\nLABEL arena.inputs=other\n"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data, mode in (
            ("Dockerfile", dockerfile.encode(), 0o644),
            ("python3", script, 0o755),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=desktop, rm=True)
    coding = f"{desktop}-coding"
    try:
        built = subprocess.run(
            ["bash", str(REPO / "scripts" / "image.sh"), "--coding", coding, desktop],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "DOCKER_HOST": docker_engine},
            cwd=REPO,
        )
        assert built.returncode == 1, built
        assert "'python 3.9 glibc 2.31': build the coding image on a host" in built.stderr
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(coding)
    finally:
        client.images.remove(desktop, force=True)


def test_the_image_carries_the_desktop_and_the_judges_tools(client):
    script = (
        "for tool in python3 Xvfb xdotool git patch pytest-3 ps unshare curl; do "
        "command -v $tool >/dev/null || echo missing $tool; done; "
        "test -x /usr/lib/chromium/chromium || echo missing chromium; "
        "fc-list | grep -q DejaVuSans || echo missing dejavu; "
        "test -s /etc/ssl/certs/ca-certificates.crt || echo missing certificates; "
        "test -x /opt/arena/chromium && test -r /opt/arena/inside/supervisor.py "
        "|| echo missing arena; "
        "cmp -s /etc/chromium/policies/managed/arena.json "
        "/opt/arena/inside/chromium-policies.json || echo missing policies; "
        "touch /opt/arena/inside/x 2>/dev/null && echo arena-writable; "
        'python3 -I -c \'import sys; sys.path.insert(0, "/opt/arena/pylib"); '
        "from Xlib.ext import xtest' || echo missing xlib; id -u; echo done"
    )

    output = client.containers.run(
        DEFAULT_IMAGE, ["-c", script], entrypoint=["/bin/sh"], network_mode="none", remove=True
    )

    assert output.decode().splitlines() == ["1000", "done"]


@pytest.mark.parametrize(
    ("labels", "refused"),
    [
        ({"arena.image-version": "1"}, None),
        ({"arena.image-version": "1", "arena.binds-host-usr": "1"}, None),
        (
            {"arena.image-version": "2"},
            "the sandbox image 'x' is of version 2; this worker runs version 1: "
            "rebuild it (scripts/docker.sh image)",
        ),
        (
            {},
            "the sandbox image 'x' has no label arena.image-version; this worker runs "
            "version 1: rebuild it (scripts/docker.sh image)",
        ),
    ],
)
def test_which_images_a_worker_runs(labels, refused):
    assert unsupported_image("x", {"Config": {"Labels": labels}}) == refused


def test_a_worker_refuses_an_image_of_another_version(client, docker_engine, sandbox_root):  # noqa: F811
    tag = f"agent-arena-test-version:{secrets.token_hex(4)}"
    dockerfile = f"FROM {DEFAULT_IMAGE}\nLABEL arena.image-version=999\n"
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    try:
        backend = DockerBackend(
            tag,
            sandbox_root,
            django_settings.ARENA.sandbox_uid_base,
            client_factory=lambda: docker.DockerClient(base_url=docker_engine),
            host=f"test-version-{secrets.token_hex(4)}",
        )

        with pytest.raises(RuntimeError, match=r"is of version 999; this worker runs version 1"):
            backend.provision(SandboxSpec(run_id=7))
        health = backend.health()

        assert health["ok"] is False and "is of version 999" in health["error"]
        assert list(sandbox_root.iterdir()) == []  # nothing left of the refused run
        assert client.containers.list(all=True, filters={"ancestor": tag}) == []
    finally:
        client.images.remove(tag)
