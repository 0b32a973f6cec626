"""Benchmark: a desktop's ready and destroy time on both sandbox backends, in turns,
cold and from a warm pool. Prints one JSON document.

Each round provisions one desktop on the local backend and one on the docker backend
(the checkout's private engine, ``scripts/docker.sh``; the order alternates round by
round), and for each measures ready (provision to the first screenshot), ten click +
screenshot steps, destroy (until ``destroy`` returns: nothing of the run runs any more)
and reclaimed (from the same start until the slot is free again: a Docker sandbox's
containers, run dir and group removed in the background, ``sandboxes.reclaim``; the
same as destroy for bubblewrap's, which removes everything before it returns). No
egress (nothing to count on an idle page). Issue 33 (docs/sandboxes.md) compares these
figures before and after the display moved out of the agent's reach: run this same
script from an export of each commit, in turns.

``local-pool`` and ``docker-pool`` take each desktop from a warm pool of one
(``sandboxes.pool.DesktopPool``, filled again before each round, as a worker's pool is
between runs): ready is then the claim (the run's egress identity and start page) to
the first screenshot. Issue 34's goal: Docker ready from its pool within 2x bwrap's.

``docker-remote`` is the Docker backend's remote mode (``sandboxes.docker_remote``) on a
second engine reached only over TLS (``tests/docker_remote.py``, started and stopped
here, vfs storage), with the image that binds the host's /usr moved there (the
self-contained image on vfs costs seconds per container): everything over the
sandboxes' channels, the screenshot as the display's framebuffer op.

Run: .venv/bin/python tests/bench/bench_desktop_backends.py [--rounds N] [--only NAME]
(NAME: local, docker, local-pool, docker-pool, docker-remote; slots 80-86 of
ARENA_SANDBOX_UID_BASE, default 61000; root, with dockerd installed)
"""

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import docker

from sandboxes.base import SandboxSpec
from sandboxes.docker_backend import DEFAULT_IMAGE, DockerBackend, janitor
from sandboxes.docker_remote import RemoteDockerBackend
from sandboxes.docker_volumes import janitor_volumes
from sandboxes.local_backend import LocalBackend
from sandboxes.pool import DesktopPool, FixedSlots
from sandboxes.reclaim import after_reclaim
from tests.docker_engine import HOST_USR_IMAGE, engine_session
from tests.docker_remote import copy_image, remote_engine, tls_client

UID_BASE = int(os.environ.get("ARENA_SANDBOX_UID_BASE") or 61000)
PAGE = "data:text/html,<title>bench</title><h1>Benchmark</h1><input autofocus>"
STEPS = 10


def ms(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50": round(1000 * statistics.median(ordered), 1),
        "min": round(1000 * ordered[0], 1),
        "max": round(1000 * ordered[-1], 1),
        "n": len(ordered),
    }


NAMES = ("local", "docker", "local-pool", "docker-pool", "docker-remote")
SLOTS = {"local": 80, "docker": 81, "local-pool": 82, "docker-pool": 84, "docker-remote": 86}


def one(backend, slot: int, run_id: int, out: dict) -> None:
    spec = SandboxSpec(run_id=run_id, start_url=PAGE, egress=False)
    claimed = None
    if isinstance(backend, DesktopPool):
        assert backend.wait_full(180), "the pool did not fill"
        t = time.monotonic()
        claimed = backend.claim(spec)
        assert claimed is not None, "the pool served no desktop"
        box = claimed.sandbox
    else:
        t = time.monotonic()
        box = backend.provision(spec, slot=slot)
    try:
        assert box.screenshot().ok
        out.setdefault("ready", []).append(time.monotonic() - t)
        for i in range(STEPS):
            t = time.monotonic()
            assert box.click(200 + i, 300).ok
            assert box.screenshot().ok
            out.setdefault("step", []).append(time.monotonic() - t)
    finally:
        t = time.monotonic()
        (claimed.finish if claimed is not None else box.destroy)()
        out.setdefault("destroy", []).append(time.monotonic() - t)
        # Until the slot is free: the background reclaim done (a Docker sandbox's), its
        # callbacks (the pool's slot release) run; at once for bubblewrap's.
        freed = threading.Event()
        after_reclaim(box, freed.set)
        assert freed.wait(60), "the sandbox was not reclaimed within 60 s"
        out.setdefault("reclaimed", []).append(time.monotonic() - t)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--only", choices=NAMES)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arena-bench-backends-", dir="/var/tmp"))
    root.chmod(0o711)
    names = [args.only] if args.only else list(NAMES)
    results: dict[str, dict] = {name: {} for name in names}
    loads = [round(x, 2) for x in os.getloadavg()]
    with engine_session() as docker_host, contextlib.ExitStack() as stack:
        client = docker.DockerClient(base_url=docker_host)
        backends = {
            "local": LocalBackend(root, UID_BASE),
            "docker": DockerBackend(
                DEFAULT_IMAGE,
                root,
                UID_BASE,
                client_factory=lambda: docker.DockerClient(base_url=docker_host),
                host=f"bench-{os.getpid()}",
            ),
        }
        remote = None
        if "docker-remote" in names:
            remote = stack.enter_context(remote_engine())
            copy_image(client, remote.client, HOST_USR_IMAGE)
            backends["docker-remote"] = RemoteDockerBackend(
                HOST_USR_IMAGE,
                root,
                UID_BASE,
                client_factory=lambda: tls_client(remote.url, remote.tls),
                host=f"bench-{os.getpid()}",
            )
        template = SandboxSpec(run_id=0, egress=False)
        for name in ("local", "docker"):
            if f"{name}-pool" in names:
                slots = FixedSlots([SLOTS[f"{name}-pool"], SLOTS[f"{name}-pool"] + 1])
                backends[f"{name}-pool"] = DesktopPool(backends[name], template, 1, slots).start()
        try:
            for r in range(args.rounds):
                for name in names if r % 2 == 0 else names[::-1]:
                    one(backends[name], SLOTS[name], 9000 + r, results[name])
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            for name in ("local-pool", "docker-pool"):
                if name in backends:
                    backends[name].close()
            janitor(client, f"bench-{os.getpid()}", lambda run_id: False, root=root)
            if remote is not None:
                janitor(remote.client, f"bench-{os.getpid()}", lambda run_id: False, root=root)
                janitor_volumes(remote.client, f"bench-{os.getpid()}", lambda run_id: False)
                backends["docker-remote"].close()
            backends["docker"].close()
            client.close()
            shutil.rmtree(root, ignore_errors=True)
    report = {
        "cpus": os.cpu_count(),
        "load_avg": {"start": loads, "end": [round(x, 2) for x in os.getloadavg()]},
        **{
            name: {f"{key}_ms": ms(values) for key, values in found.items()}
            for name, found in results.items()
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
