"""Sealing a tree of a remote engine's sandbox (docs/sandboxes.md, "Sealing on a remote
engine"): the coding judge makes the repository read-only for the sandbox before any
code of the patch runs (``Sandbox.seal_tree``). A local engine's or bubblewrap's
sandbox has its /work in a dir of the worker's, which a root worker seals itself; a
remote engine's /work is out of the worker's reach, and a root process run in the
sandbox's own container would hold none of the capabilities it needs (an exec gets the
container's process's, empty for its non-root uid, and no-new-privileges keeps it so;
a privileged exec asks for every capability, which an engine inside a restricted host
cannot grant).

So a sandbox that ``seals`` (``SandboxSpec.seals``) has its /work on a volume of the
run (tmpfs, bounded as the container's own tmpfs would be), and each seal is a short
container of its own on that volume: root, only ``SEAL_CAPS``, no network, a read-only
image, the run's labels (the janitor removes one a dead worker left), running the fixed
``sandboxes.inside.seal`` with the one path as its argument. The sandbox's container
never holds a capability.
"""

import contextlib
import logging
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import DockerException, NotFound
from docker.types import Mount

from sandboxes.channel import PYTHON as SANDBOX_PYTHON
from sandboxes.inside import seal

logger = logging.getLogger(__name__)

SEAL_SOURCE = Path(seal.__file__).read_text()  # run as ``python3 -I -S -c``
# What sealing needs of root: changing owners (and the mode the kernel changes with the
# owner of a set-id file), and reading a dir of the sandbox's uid before it is root's.
SEAL_CAPS = ["CHOWN", "FOWNER", "DAC_READ_SEARCH"]
SEAL_TIMEOUT_S = 120
SEAL_MEMORY = 256 * 1024**2
SEAL_PIDS = 16


@dataclass
class Sealer:
    """How to start a seal container for one run: its engine, image and container
    settings (``sealer_kwargs``)."""

    client: docker.DockerClient
    image: str
    kwargs: dict[str, Any]

    def seal(self, path: str) -> bool:
        """Seals ``path`` (under /work) on the run's volume; whether it did. Raises
        what the engine raised, for the caller to tell a lost engine."""
        name = f"{self.kwargs['name']}-{secrets.token_hex(2)}"
        argv = [SANDBOX_PYTHON, "-I", "-S", "-c", SEAL_SOURCE, path]
        container = self.client.containers.create(
            self.image, argv[1:], entrypoint=argv[:1], **{**self.kwargs, "name": name}
        )
        try:
            container.start()
            code = container.wait(timeout=SEAL_TIMEOUT_S).get("StatusCode")
            if code != 0:
                said = container.logs(tail=8).decode(errors="replace")[-800:]
                logger.warning("sealing %s in %s exited %s: %s", path, name, code, said)
            return code == 0
        finally:
            with contextlib.suppress(NotFound, DockerException, requests.RequestException):
                container.remove(force=True)


def sealer_kwargs(agent: dict[str, Any], work_volume: str) -> dict[str, Any]:
    """A seal container's settings from the run's agent container's
    (``DockerBackend._create_kwargs``): the same image binds, profile and labels, the
    run's /work volume, root with ``SEAL_CAPS`` alone, small limits, no tmpfs but
    /tmp."""
    mounts = [m for m in agent["mounts"] if m.get("Target") != "/work"]
    labels = {**agent["labels"], "arena.role": "seal"}
    return {
        "name": f"{agent['name']}-seal",
        "user": "0:0",
        "working_dir": "/",
        "environment": {"LANG": "C.UTF-8"},
        "labels": labels,
        "mounts": [*mounts, Mount("/work", work_volume, type="volume")],
        "tmpfs": {"/tmp": "rw,nosuid,nodev,noexec,size=1m"},  # noqa: S108 - its own
        "read_only": True,
        "privileged": False,
        "cap_drop": ["ALL"],
        "cap_add": SEAL_CAPS,
        "security_opt": agent["security_opt"],
        "network_mode": "none",
        "ipc_mode": "private",
        "mem_limit": SEAL_MEMORY,
        "memswap_limit": SEAL_MEMORY,
        "pids_limit": SEAL_PIDS,
        "auto_remove": False,
        "log_config": agent["log_config"],
    }
