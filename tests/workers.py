"""What each pytest-xdist worker has of its own when `make test` runs the suite on several
processes (ARENA_TEST_WORKERS, scripts/test.sh): worker ``gw<i>`` gets

- the test database ``test_<name>_gw<i>`` (pytest-django names it; tests/servers.py
  hands it to the children),
- Redis database ``N + i`` where REDIS_URL names ``N`` (``_clean_redis`` empties it before
  and after every test), and the channel and cache prefixes ``<prefix>-gw<i>``,
- the data dir ``<ARENA_DATA_DIR>-gw<i>``,
- the sandbox uids from ``ARENA_SANDBOX_UID_BASE + i * UID_STRIDE`` (slot and display
  uids, which the tests count processes of and the janitor kills),
- the host id ``<ARENA_HOST_ID or host name>-gw<i>`` (leases, containers' labels),
- cgroups of its own (v1): the worker moves into a child group of its own, so the
  sandbox groups it and its children create sit under it and the janitor, which looks
  for a run's groups under its own group, never sees another worker's run of the same id.

The controller sets the variables on each worker's gateway (``pytest_xdist_setupnodes``
in tests/conftest.py), so they are in place before pytest-django loads the settings.
"""

import contextlib
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from sandboxes import cgroups

# A worker's slot uids and display uids (base + 1000 + slot) stay below the next worker's.
UID_STRIDE = 10000
CGROUP_CONTROLLERS = ("memory", "pids", "cpu")


def redis_url_for(url: str, index: int) -> str:
    """``url`` with its database number raised by ``index`` (no number is database 0)."""
    parts = urlsplit(url)
    number = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{number + index}"))


def worker_environment(index: int, environ, settings) -> dict[str, str]:
    """The variables worker ``index`` runs with, from the controller's ``environ`` and
    its loaded ``settings``."""
    worker = f"gw{index}"
    data_dir = Path(f"{settings.DATA_DIR}-{worker}")
    (data_dir / "staticfiles").mkdir(parents=True, exist_ok=True)  # WhiteNoise wants it
    return {
        "REDIS_URL": redis_url_for(settings.REDIS_URL, index),
        "ARENA_CHANNEL_PREFIX": f"{environ.get('ARENA_CHANNEL_PREFIX', 'arena')}-{worker}",
        "ARENA_CACHE_PREFIX": f"{environ.get('ARENA_CACHE_PREFIX', 'arena')}-{worker}",
        "ARENA_DATA_DIR": str(data_dir),
        "ARENA_SANDBOX_UID_BASE": str(settings.ARENA.sandbox_uid_base + index * UID_STRIDE),
        # a host of its own to the janitors: the Docker one removes this host's containers
        # whose run holds no live lease, and another worker's leases are in another database
        "ARENA_HOST_ID": f"{settings.ARENA.host_id or socket.gethostname()}-{worker}",
    }


def _own_groups(worker: str) -> list[tuple[Path, Path]]:
    """(the group this process is in, the worker's group beneath it) per v1 controller."""
    pairs = []
    for controller in CGROUP_CONTROLLERS:
        path = cgroups._own_path(controller)
        if path is not None:
            parent = cgroups.CGROUP_ROOT / controller / path.lstrip("/")
            pairs.append((parent, parent / f"arena-test-{worker}-{os.getpid()}"))
    return pairs


def enter_own_cgroups(worker: str) -> list[tuple[Path, Path]]:
    """Moves this worker into groups of its own (cgroup v1 only: v2 sandbox groups sit
    under one fixed parent). Returns what ``leave_own_cgroups`` undoes."""
    if cgroups.detect() != "v1":
        return []
    entered = []
    for parent, own in _own_groups(worker):
        if not os.access(parent, os.W_OK):
            continue
        own.mkdir(exist_ok=True)
        (own / "cgroup.procs").write_text(str(os.getpid()))
        entered.append((parent, own))
    return entered


def leave_own_cgroups(entered: list[tuple[Path, Path]]) -> None:
    """Back to the groups this worker came from, with whatever it leaves running on
    purpose (the private Docker daemon stays up for the next session); its own groups
    are removed."""
    for parent, own in entered:
        with contextlib.suppress(OSError):
            for pid in [os.getpid(), *(own / "cgroup.procs").read_text().split()]:
                with contextlib.suppress(OSError):  # (gone meanwhile)
                    (parent / "cgroup.procs").write_text(str(pid))
            own.rmdir()
