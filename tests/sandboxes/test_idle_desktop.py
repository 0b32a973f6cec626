"""Chromium makes no requests of its own (issue #12, deliverable 5): a real desktop
sandbox with egress on, left idle on about:blank and then on a page, sends nothing
through the egress proxy but what the page itself asked for, so every egress attempt
recorded with a run is the agent's. Component updates, safe browsing, metrics and the
rest are off by managed policies (sandboxes/inside/chromium-policies.json, bound at
/etc/chromium/policies/managed) and flags (``start_browser``); docs/egress.md.

"Public" hosts are simulated as in test_desktop_egress.py: the resolver (the process
boundary) answers example.test with a public address and records every name it is
asked, and the dialer takes that address to a local server. Any name Chromium looked
up on its own would show in the resolver's calls (and as an ``unresolvable`` refusal).
"""

import asyncio
import http.server
import ipaddress
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings

from sandboxes.base import SandboxSpec
from sandboxes.egress import EgressProxy
from sandboxes.local_backend import LocalBackend

pytestmark = pytest.mark.timeout(180)

PUBLIC = ipaddress.ip_address("93.184.216.34")
RUN_ID = 7707
# How long the desktop sits idle, on about:blank and on a page: `make test` waits half
# as long as the soak variant (`make soak`).
IDLE_S = {"blank": 10.0, "page": 5.0}
IDLE_SOAK_S = {"blank": 20.0, "page": 10.0}


class Page(http.server.BaseHTTPRequestHandler):
    requests: list[tuple[str, str]] = []

    def do_GET(self) -> None:
        Page.requests.append((self.headers.get("Host", ""), self.path))
        body = b"<title>Plain page</title><h1>Nothing to fetch here</h1><p>Just text.</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def idle_desktop():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    names: list[str] = []
    refusals: list[tuple[int, str, str]] = []

    def resolver(host: str, port: int):
        names.append(host)
        return {"example.test": [PUBLIC], "refused.test": [ipaddress.ip_address("10.0.0.1")]}.get(
            host, []
        )

    async def dialer(address, port):
        assert (address, port) == (PUBLIC, 80)  # the proxy dials only what it checked
        return await asyncio.open_connection("127.0.0.1", server.server_address[1])

    proxy = EgressProxy(
        resolver=resolver, dialer=dialer, on_refusal=lambda *r: refusals.append(r)
    ).run_in_thread()
    root = Path(tempfile.mkdtemp(prefix="arena-test-idle-", dir="/var/tmp"))
    root.chmod(0o711)
    box = LocalBackend(root, uid_base=settings.ARENA.sandbox_uid_base, egress=proxy).provision(
        SandboxSpec(run_id=RUN_ID, shell_timeout_s=10), slot=9
    )
    try:
        yield box, proxy, names, refusals
    finally:
        box.destroy()
        proxy.close()
        server.shutdown()
        server.server_close()
        shutil.rmtree(root, ignore_errors=True)


def test_an_idle_desktop_makes_no_egress_attempt(idle_desktop):
    idle_and_check(idle_desktop, IDLE_S)


@pytest.mark.soak
def test_an_idle_desktop_makes_no_egress_attempt_for_longer(idle_desktop):
    idle_and_check(idle_desktop, IDLE_SOAK_S)


def idle_and_check(idle_desktop, seconds: dict[str, float]) -> None:
    box, proxy, names, refusals = idle_desktop

    # Idle on about:blank, straight after start (when Chromium used to call its
    # component updater).
    time.sleep(seconds["blank"])
    blank = proxy.counters(RUN_ID)
    names_blank, refusals_blank = list(names), list(refusals)

    # On a page: only what the page asked for, then nothing while it sits there.
    Page.requests.clear()
    result = box.navigate("http://example.test/")
    time.sleep(1.0)  # a favicon fetch may trail the load event
    loaded = proxy.counters(RUN_ID)
    time.sleep(seconds["page"])
    idle = proxy.counters(RUN_ID)

    assert (blank, names_blank, refusals_blank) == ({}, [], [])
    assert result.ok and result.data["title"] == "Plain page", result
    assert set(names) == {"example.test"}
    assert {host for host, _ in Page.requests} == {"example.test"}
    assert {path for _, path in Page.requests} <= {"/", "/favicon.ico"}
    assert loaded["connections"] == loaded["requests"] == len(Page.requests)
    assert idle == loaded
    assert refusals == []


def test_after_navigating_to_a_refused_host_the_only_refusals_are_that_host(idle_desktop):
    box, _proxy, names, refusals = idle_desktop
    refusals.clear()
    names.clear()

    result = box.navigate("http://refused.test/private")
    time.sleep(3.0)

    assert result.data.get("title") != "Plain page"
    assert refusals, "the navigation was refused"
    assert {(run_id, reason) for run_id, _, reason in refusals} == {(RUN_ID, "private")}
    assert all(target.startswith("http://refused.test/") for _, target, _ in refusals), refusals
    assert set(names) == {"refused.test"}
