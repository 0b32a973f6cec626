"""Benchmark: what the network contract costs. Prints one JSON document.

One sandbox (the probe image's front and real supervisor, tmpfs mounts only) on a
second engine reached over TLS on loopback (tests/docker_remote.py). The same
supervisor is reached four ways, each timed over ``--requests`` small requests
(``ping``) on one open channel:

- ``direct_lines``: its control socket, JSON lines, no front (how the worker speaks to
  a supervisor today, through the run dir), here through ``/proc/<pid>/root``;
- ``unix_channel``: the front's socket, authenticated frames (the contract on a local
  transport);
- ``exec_tls_channel``: the contract over the engine's exec stream, TLS (a remote engine);
- and the cost of opening one exec channel (exec create and start, the handshake,
  first reply), over ``--opens`` opens.

Egress, one request refused with 403 (a private address) per round: straight to the
proxy's listener vs through the front's egress socket and the tunnel over exec.

Run (root, dockerd installed): .venv/bin/python tests/bench/bench_channel.py
"""

import argparse
import json
import logging
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sandboxes.channel import (
    PYTHON,
    RELAY,
    ChannelClient,
    exec_connector,
    new_secret,
    unix_connector,
)
from sandboxes.egress import EgressProxy, EgressProxyThread
from sandboxes.egress_tunnel import TunnelLoop, open_egress_tunnel
from tests.docker_remote import create_probe_sandbox, remote_engine

RUN_ID = 99001
UID = 4322
REFUSED = b"GET http://10.1.2.3/ HTTP/1.1\r\nHost: 10.1.2.3\r\n\r\n"


def summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(1000 * s for s in samples)
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 3),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


def timed(action: Callable[[], Any], n: int) -> dict[str, float]:
    action()  # warm
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return summary(samples)


def line_client(path: str) -> Callable[[], Any]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    stream = sock.makefile("rwb")

    def ping() -> Any:
        stream.write(b'{"op": "ping"}\n')
        stream.flush()
        return json.loads(stream.readline())

    return ping


def refused_through(path: str) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(REFUSED)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    if not answer.startswith(b"HTTP/1.1 403"):
        raise RuntimeError(f"expected a 403, got {answer[:80]!r}")
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--opens", type=int, default=20)
    args = parser.parse_args()
    logging.getLogger("sandboxes.egress").setLevel(logging.ERROR)  # a refusal a request
    figures: dict[str, Any] = {"requests": args.requests}
    with remote_engine() as engine:
        api, secret = engine.client.api, new_secret()
        started = time.perf_counter()
        container = create_probe_sandbox(engine.client, secret, uid=UID, run_id=RUN_ID)
        container.start()
        client = ChannelClient(exec_connector(api, container.id), secret)
        while client.call({"op": "ping"}, timeout_s=10)["ok"] is not True:
            time.sleep(0.02)
        figures["sandbox_ready_s"] = round(time.perf_counter() - started, 3)
        top = api.top(container.id, ps_args="-eo pid,args")["Processes"]
        [front] = [int(p) for p, line in top if line.startswith(f"{PYTHON} -I {RELAY} front")]
        inside = f"/proc/{front}/root/run/arena"

        figures["direct_lines"] = timed(line_client(f"{inside}/ctl.sock"), args.requests)
        unix = ChannelClient(unix_connector(f"{inside}/channel.sock"), secret)
        figures["unix_channel"] = timed(lambda: unix.call({"op": "ping"}, 10), args.requests)
        figures["exec_tls_channel"] = timed(lambda: client.call({"op": "ping"}, 10), args.requests)

        def open_once() -> None:
            fresh = ChannelClient(exec_connector(api, container.id), secret)
            fresh.call({"op": "ping"}, 10)
            fresh.close()

        figures["exec_tls_open"] = timed(open_once, args.opens)

        loop = TunnelLoop()
        # Bounds far above the bench's rate: it measures the path, not the limits.
        fast = {"rate_per_s": 1e4, "burst": 10**4, "accept_rate_per_s": 1e4, "accept_burst": 10**4}
        with EgressProxyThread(EgressProxy(**fast)) as egress:
            direct = egress.serve_unix(f"/tmp/bench-channel-{os.getpid()}.sock", RUN_ID + 1)
            figures["egress_403_direct"] = timed(lambda: refused_through(direct), 50)
            socket_dir = Path(f"/tmp/bench-channel-{os.getpid()}")
            tunnel = open_egress_tunnel(
                loop, egress, RUN_ID, exec_connector(api, container.id)(10), secret,
                socket_dir=socket_dir,
            )  # fmt: skip
            figures["egress_403_exec_tunnel"] = timed(
                lambda: refused_through(f"{inside}/egress.sock"), 50
            )
            figures["egress_counted_for_run"] = egress.counters(RUN_ID).get("refused:private")
            tunnel.close()
        loop.close()
        socket_dir.rmdir()
        container.remove(force=True)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
