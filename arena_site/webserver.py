"""The arena's web server: pages, API and websockets, served by uvicorn with its C HTTP
parser (httptools) and libuv's event loop (uvloop), one process per core.

One door: ``make run`` (scripts/run_arena.py), the image's ``web`` role
(deploy/image/arena) and the Kubernetes web Deployment all start
``python -m arena_site.webserver``, and the benchmarks take the same flags
(``uvicorn_flags``). Why uvicorn and not Daphne, and the figures: docs/performance.md.

``ARENA_WEB_SERVER=daphne`` starts Daphne instead (one process; the server before, kept
for comparison and as a fallback). ``ARENA_WEB_PROCESSES`` (default: the number of
cores this process may run on) sets uvicorn's processes; uvicorn's supervisor restarts
one that dies.

    python -m arena_site.webserver [--host 127.0.0.1] [--port 8000] [--processes N]

(the image and the manifests pass ``--host 0.0.0.0``: the container's own interface)
"""

import argparse
import os
import sys
from pathlib import Path

APP = "arena_site.asgi:application"


def uvicorn_flags() -> list[str]:
    """uvicorn's options for the arena, whatever starts it.

    - ``--no-proxy-headers``: the client's address is the arena's business
      (``arena_site.ratelimit.client_address`` trusts ``ARENA_TRUSTED_PROXIES`` only);
      uvicorn would otherwise rewrite it from X-Forwarded-For for any loopback peer.
    - ``--lifespan off``: Channels' router has no lifespan protocol.
    - ``--no-access-log``: the arena logs its own requests (arena_site/logs.py), and
      ``--log-config`` (arena_site/uvicorn_logging.json) hands uvicorn's own lines to the
      arena's handlers (JSON by default) instead of uvicorn's plain text.
    - keep-alive 5 s as Daphne's clients saw; shedding stays the arena's own
      (``ARENA_MAX_INFLIGHT``, arena_site/shedding.py)."""
    return [
        "--http", "httptools", "--loop", "uvloop", "--ws", "websockets-sansio",
        "--lifespan", "off", "--no-proxy-headers", "--no-access-log",
        "--no-server-header", "--timeout-keep-alive", "5", "--log-level", "warning",
        "--log-config", str(Path(__file__).with_name("uvicorn_logging.json")),
    ]  # fmt: skip


def processes_default() -> int:
    return len(os.sched_getaffinity(0)) or 1


def command(*, host: str, port: int, processes: int, server: str) -> list[str]:
    """The argv that serves the arena on ``host:port``."""
    if server == "daphne":
        return [sys.executable, "-m", "daphne", "-b", host, "-p", str(port), APP]
    if server != "uvicorn":
        raise SystemExit(f"ARENA_WEB_SERVER must be uvicorn or daphne, not {server!r}")
    argv = [sys.executable, "-m", "uvicorn", "--host", host, "--port", str(port)]
    if processes > 1:
        argv += ["--workers", str(processes)]
    return [*argv, *uvicorn_flags(), APP]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the arena over HTTP and websockets.")
    parser.add_argument("--host", default=os.environ.get("ARENA_WEB_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("ARENA_WEB_PORT", "8000")))
    parser.add_argument(
        "--processes",
        type=int,
        default=int(os.environ.get("ARENA_WEB_PROCESSES") or processes_default()),
    )
    args = parser.parse_args(argv)
    server = os.environ.get("ARENA_WEB_SERVER", "uvicorn")
    if args.processes < 1:
        raise SystemExit("--processes (ARENA_WEB_PROCESSES) must be at least 1")
    run = command(host=args.host, port=args.port, processes=args.processes, server=server)
    os.execv(run[0], run)  # noqa: S606 (argv built above, no shell)


if __name__ == "__main__":
    main()
