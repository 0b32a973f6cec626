"""A remote run's volumes (docs/sandboxes.md, "Remote engines"), named volumes of the
run on the engine (driver ``local``, type ``tmpfs``, bounded in bytes and files),
labelled as the run's containers are, removed at destroy and by the janitor: the
downloads (the display writes them, the agent reads them; the display's uid owns them)
and, for a sandbox that seals, its /work (``sandboxes.docker_seal``; the agent's)."""

import logging
from collections.abc import Callable
from typing import Any

import docker
import requests
from docker.errors import DockerException, NotFound

from sandboxes.base import SandboxSpec
from sandboxes.docker_backend import LABEL_HOST, LABEL_RUN, LABEL_SANDBOX, _label_run_id

logger = logging.getLogger(__name__)


def run_volume(
    client: docker.DockerClient, name: str, spec: SandboxSpec, owner: int, labels: dict[str, str]
) -> Any:
    """Makes a volume of the run: the agent's disk size and file count, owned by
    ``owner``, mode 0755."""
    return client.volumes.create(
        name=name,
        driver="local",
        driver_opts={
            "type": "tmpfs",
            "device": "tmpfs",
            "o": f"size={spec.disk_bytes},nr_inodes={spec.disk_inodes},"
            f"uid={owner},gid={owner},mode=0755",
        },
        labels=labels,
    )


def remove_volume(volume: Any) -> bool:
    """Removes a run's volume; whether it did. One the engine cannot remove now (a
    container still holding it) is left to the janitor."""
    try:
        volume.remove(force=True)
    except NotFound:
        return False
    except (DockerException, requests.RequestException):
        logger.warning("could not remove sandbox volume %s", volume.name, exc_info=True)
        return False
    return True


def janitor_volumes(
    client: docker.DockerClient, host: str, is_live: Callable[[int | None], bool]
) -> int:
    """Removes this host's runs' volumes whose run no live lease holds (after
    :func:`sandboxes.docker_backend.janitor` removed their containers). Returns how
    many it removed."""
    wanted = {LABEL_SANDBOX: "1", LABEL_HOST: host}
    volumes = client.volumes.list(
        filters={"label": [f"{key}={value}" for key, value in wanted.items()]}
    )
    removed = 0
    for volume in volumes:
        labels = volume.attrs.get("Labels") or {}
        if any(labels.get(key) != value for key, value in wanted.items()):
            continue
        if is_live(_label_run_id(labels.get(LABEL_RUN))):
            continue
        if remove_volume(volume):
            removed += 1
            logger.info("janitor removed sandbox volume %s", volume.name)
    return removed
