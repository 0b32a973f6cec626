"""No lane can starve the other (issue #12, deliverable 4): two sandboxes' unix sockets
on one egress proxy, run as the worker runs it (its own thread and event loop, the
production bounds). Lane B makes steady requests to a fake public upstream and records
their latency; then lane A, from a process of its own as a sandbox would be, floods its
socket (a hundred connections cycling as fast as they can, tens of thousands of
connects a second, heads that never finish, requests it is refused) and asks for names
whose lookup hangs. Lane B's median latency during the attack must stay
within max(3 x before, before + 50 ms), and none of its requests may fail.

"Public" is simulated as in test_egress.py: the resolver is the process boundary we
stand in for (``public.example`` answers a public address at once, ``hang-*.example``
never answers until the test ends) and the dialer takes the public address to a local
server. Nothing leaves 127.0.0.1 and no DNS query is made.

:func:`measure` is also what tests/bench/bench_egress_fairness.py runs (longer).
"""

import asyncio
import ipaddress
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sandboxes.egress import (
    ACCEPT_BURST,
    ACCEPT_RATE_PER_S,
    MAX_LOOKUPS,
    RESOLVE_TIMEOUT_S,
    EgressProxy,
)

pytestmark = pytest.mark.timeout(90)

RUN_A, RUN_B = 5101, 5102
PUBLIC = ipaddress.ip_address("93.184.216.34")
REPO = Path(__file__).resolve().parents[2]


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<title>public</title>ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Resolver:
    """public.example at once; hang-*.example blocks until ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.hung = 0

    def __call__(self, host: str, port: int) -> list:
        if host.startswith("hang-"):
            self.hung += 1
            self.release.wait(60)
            return []
        if host == "public.example":
            return [PUBLIC]
        return []


def _lane_b_request(path: str, timeout: float = 10.0) -> tuple[int, float]:
    """One plain-HTTP request through lane B's socket: (status, seconds)."""
    started = time.perf_counter()
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(timeout)
        client.connect(path)
        client.sendall(b"GET http://public.example/ HTTP/1.1\r\nHost: public.example\r\n\r\n")
        chunks = []
        while chunk := client.recv(65536):
            chunks.append(chunk)
    elapsed = time.perf_counter() - started
    response = b"".join(chunks)
    status = int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.") else 0
    return status, elapsed


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(samples: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p95_ms": round(_percentile(ms, 0.95), 2),
        "max_ms": round(max(ms), 2),
    }


def measure(
    *,
    before_s: float = 2.0,
    during_s: float = 4.0,
    interval_s: float = 0.08,
    slow_connections: int = 24,
    flood_concurrency: int = 100,
    hanging_concurrency: int = 20,
) -> dict[str, Any]:
    """Run the attack once and return the figures (JSON-ready).

    Lane B stays within its own request rate (one request every ``interval_s``; the
    bucket refills 10 a second after a burst of 50). Lane A, in a child process, holds
    ``slow_connections`` connections that trickle a head forever, keeps
    ``flood_concurrency`` connections cycling with requests it is refused (or limited),
    and ``hanging_concurrency`` requests for names whose lookup hangs."""
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, args=(0.05,), daemon=True).start()
    resolver = _Resolver()
    refusals: Counter[tuple[int, str]] = Counter()

    async def dialer(address, port):
        if (address, port) != (PUBLIC, 80):
            raise ConnectionRefusedError(f"no route to {address}:{port} in this test")
        return await asyncio.open_connection("127.0.0.1", upstream.server_address[1])

    proxy = EgressProxy(
        resolver=resolver,
        dialer=dialer,
        on_refusal=lambda run_id, target, reason: refusals.update([(run_id, reason)]),
    )
    workdir = Path(tempfile.mkdtemp(prefix="arena-egress-fairness-"))
    attacker: subprocess.Popen[str] | None = None
    try:
        with proxy.run_in_thread() as handle:
            path_a = handle.serve_unix(workdir / "a.sock", RUN_A)
            path_b = handle.serve_unix(workdir / "b.sock", RUN_B)
            _lane_b_request(path_b)  # warm up: first thread, first connection

            def lane_b(seconds: float) -> tuple[list[float], list[str]]:
                latencies, failures = [], []
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    tick = time.monotonic()
                    try:
                        code, took = _lane_b_request(path_b)
                    except OSError as exc:
                        failures.append(f"{type(exc).__name__}: {exc}")
                    else:
                        latencies.append(took)
                        if code != 200:
                            failures.append(f"HTTP {code}")
                    time.sleep(max(0.0, interval_s - (time.monotonic() - tick)))
                return latencies, failures

            before, failures_before = lane_b(before_s)
            config = {
                "path": path_a,
                "seconds": during_s + 1.0,
                "slow": slow_connections,
                "flood": flood_concurrency,
                "hanging": hanging_concurrency,
            }
            attack_started = time.monotonic()
            attacker = subprocess.Popen(
                [sys.executable, "-c", ATTACKER, json.dumps(config)],
                stdout=subprocess.PIPE,
                text=True,
                cwd=REPO,
            )
            time.sleep(0.5)  # the flood is up
            during, failures_during = lane_b(during_s)
            out, _ = attacker.communicate(timeout=30)
            attack_window_s = time.monotonic() - attack_started
            attack = json.loads(out.strip().splitlines()[-1])
            # Each hung lookup times out RESOLVE_TIMEOUT_S after it began, whether its
            # client is still there or not.
            give_up = time.monotonic() + RESOLVE_TIMEOUT_S + 2.0
            while (
                handle.counters(RUN_A).get("refused:lookup_timeout", 0) < resolver.hung
                and time.monotonic() < give_up
            ):
                time.sleep(0.05)
            counters_a = handle.counters(RUN_A)
            counters_b = handle.counters(RUN_B)
    finally:
        if attacker is not None and attacker.poll() is None:
            attacker.kill()
            attacker.wait(5)
        resolver.release.set()
        upstream.shutdown()
        upstream.server_close()
        shutil.rmtree(workdir, ignore_errors=True)

    return {
        "lane_b": {
            "before": _summary(before),
            "during": _summary(during),
            "failures": failures_before + failures_during,
        },
        "lane_a": {
            "attack": attack,
            "refusals_by_reason": dict(
                sorted((reason, n) for (run, reason), n in refusals.items() if run == RUN_A)
            ),
            "proxy_counters": dict(sorted(counters_a.items())),
            "lookups_hung": resolver.hung,
        },
        "attack_window_s": round(attack_window_s, 2),
        "lane_b_refusals": sum(n for (run, _), n in refusals.items() if run == RUN_B),
        "lane_b_counters": dict(sorted(counters_b.items())),
        "cpu_count": os.cpu_count(),
    }


# Lane A, as a sandbox's processes would be: stdlib asyncio only, in a child process
# (its own interpreter and CPU time, like a real sandbox), printing its tallies as JSON.
ATTACKER = r"""
import asyncio, collections, json, sys, time

config = json.loads(sys.argv[1])
path, deadline = config["path"], time.monotonic() + config["seconds"]
statuses = collections.Counter()

async def answer(reader, writer, request):
    try:
        writer.write(request)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 3)
        statuses[data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "closed"] += 1
    except (OSError, asyncio.TimeoutError) as exc:
        statuses[type(exc).__name__] += 1
    finally:
        writer.close()

async def slowloris():
    # Never finishes its head: one header byte every half second.
    try:
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(b"GET http://public.example/ HTTP/1.1\r\n")
        while time.monotonic() < deadline:
            writer.write(b"X")
            await writer.drain()
            await asyncio.sleep(0.5)
        writer.close()
    except OSError:
        statuses["slowloris_cut"] += 1

async def flood(n):
    targets = [b"http://10.0.0.1/", b"http://127.0.0.1:6379/", b"http://public.example/"]
    i = n
    while time.monotonic() < deadline:
        i += 1
        try:
            reader, writer = await asyncio.open_unix_connection(path)
        except OSError:
            statuses["connect_failed"] += 1
            await asyncio.sleep(0.01)
            continue
        target = targets[i % len(targets)]
        await answer(reader, writer, b"GET " + target + b" HTTP/1.1\r\n\r\n")

async def hanging(n):
    i = 0
    while time.monotonic() < deadline:
        i += 1
        try:
            reader, writer = await asyncio.open_unix_connection(path)
        except OSError:
            statuses["connect_failed"] += 1
            await asyncio.sleep(0.01)
            continue
        name = f"hang-{n}-{i}.example".encode()
        await answer(reader, writer, b"GET http://" + name + b"/ HTTP/1.1\r\n\r\n")

async def main():
    # Hanging lookups first (they need admitted connections), then heads that never
    # finish, then the flood.
    tasks = [asyncio.create_task(hanging(n)) for n in range(config["hanging"])]
    await asyncio.sleep(0.2)
    tasks += [asyncio.create_task(slowloris()) for _ in range(config["slow"])]
    tasks += [asyncio.create_task(flood(n)) for n in range(config["flood"])]
    await asyncio.gather(*tasks)

started = time.monotonic()
asyncio.run(main())
print(json.dumps({"seconds": round(time.monotonic() - started, 2), "answers": dict(statuses)}))
"""


def test_a_flooding_lane_with_hanging_lookups_does_not_slow_the_other_lane(record_property):
    figures = measure()
    print(json.dumps(figures, indent=2))  # the note's figures come from the benchmark
    record_property("egress_fairness", json.dumps(figures))
    before = figures["lane_b"]["before"]["p50_ms"]
    during = figures["lane_b"]["during"]["p50_ms"]
    lane_a = figures["lane_a"]

    assert figures["lane_b"]["failures"] == []
    assert figures["lane_b_refusals"] == 0
    assert during <= max(3 * before, before + 50), figures["lane_b"]
    # The attack really happened: thousands of connects, lookups that hung; lane A got
    # refusals of its own for it, and the proxy accepted only what its bounds allow.
    assert sum(lane_a["attack"]["answers"].values()) >= 1000
    assert lane_a["lookups_hung"] == MAX_LOOKUPS
    refused = lane_a["refusals_by_reason"]
    assert refused["lookup_limit"] > 0 and refused["lookup_timeout"] == MAX_LOOKUPS
    assert refused["rate_limit"] > 0 and refused["private"] > 0
    accepted = lane_a["proxy_counters"]["connections"]
    assert accepted <= ACCEPT_BURST + ACCEPT_RATE_PER_S * figures["attack_window_s"]
