"""What the docker backend reads from an image's labels: the version of its contract
with the backend (``unsupported_image``), whether it runs the host's ``/usr``
(``binds_host_usr``) and whether it carries the coding toolchain (``carries_toolchain``).

The images: ``scripts/image.sh``'s self-contained desktop image, its coding image
(``scripts/image.sh --coding``: the desktop image and the toolchain at
``/opt/arena/toolchain``) and ``scripts/docker.sh image --host-usr``'s small image.
"""

from typing import Any

# scripts/docker.sh image --coding (ARENA_DOCKER_CODING_IMAGE)
DEFAULT_CODING_IMAGE = "agent-arena-coding"

# The versions of the image's contract with the backend (entrypoint, paths, labels) that
# it runs: scripts/image.sh and scripts/docker.sh image write the label
# ``arena.image-version``; raise it there, and add it here, when that contract changes.
LABEL_IMAGE_VERSION = "arena.image-version"
IMAGE_VERSIONS = ("1",)
# An image's own declaration that it carries no programs and runs the host's: each
# container then binds the host's /usr and HOST_ETC read-only (sandboxes/docker/rootfs.sh).
LABEL_BINDS_HOST_USR = "arena.binds-host-usr"
# The coding image's declaration that it carries the toolchain at SANDBOX_TOOLCHAIN (no
# bind of the worker's var/toolchain then).
LABEL_TOOLCHAIN = "arena.toolchain"


def _labels(image_attrs: dict[str, Any]) -> dict[str, str]:
    return (image_attrs.get("Config") or {}).get("Labels") or {}


def unsupported_image(image: str, image_attrs: dict[str, Any]) -> str | None:
    """Why this worker refuses ``image`` (its inspect attributes), or None: an image
    without the version label, or of a version this worker does not run."""
    version = _labels(image_attrs).get(LABEL_IMAGE_VERSION)
    if version in IMAGE_VERSIONS:
        return None
    made = f"is of version {version}" if version else f"has no label {LABEL_IMAGE_VERSION}"
    return (
        f"the sandbox image {image!r} {made}; this worker runs version "
        f"{', '.join(IMAGE_VERSIONS)}: rebuild it (scripts/docker.sh image)"
    )


def binds_host_usr(image_attrs: dict[str, Any]) -> bool:
    """Whether an image (its inspect attributes) declares that it runs the host's /usr
    (``LABEL_BINDS_HOST_USR``, set by ``scripts/docker.sh image --host-usr``)."""
    return _labels(image_attrs).get(LABEL_BINDS_HOST_USR) == "1"


def carries_toolchain(image_attrs: dict[str, Any]) -> bool:
    """Whether an image (its inspect attributes) declares that it carries the coding
    toolchain (``LABEL_TOOLCHAIN``, set by ``scripts/image.sh --coding``)."""
    return _labels(image_attrs).get(LABEL_TOOLCHAIN) == "1"
