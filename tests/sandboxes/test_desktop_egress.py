"""A desktop sandbox reaches the web only through the host's egress proxy, and the
proxy refuses the host's loopback, private ranges and metadata. "Public" hosts are
simulated: a resolver says example.test is 93.184.216.34 and a dialer takes that
address to a local test server; nothing leaves 127.0.0.1."""

import asyncio
import http.server
import ipaddress
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from django.conf import settings

from sandboxes.base import SandboxSpec
from sandboxes.egress import EgressProxy
from sandboxes.local_backend import LocalBackend
from sandboxes.rundir import DISPLAY_UID_OFFSET

PUBLIC = ipaddress.ip_address("93.184.216.34")


class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/to-metadata":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.end_headers()
            return
        body = b"<title>Public page</title><h1>It works</h1>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def web():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def desktop(web):
    refusals: list[tuple[int, str, str]] = []

    def resolver(host: str, port: int):
        return {"example.test": [PUBLIC], "sneaky.test": [ipaddress.ip_address("127.0.0.1")]}.get(
            host, []
        )

    async def dialer(address, port):
        assert address == PUBLIC  # the proxy dials only what it checked
        return await asyncio.open_connection("127.0.0.1", web.server_address[1])

    proxy = EgressProxy(
        resolver=resolver, dialer=dialer, on_refusal=lambda *r: refusals.append(r)
    ).run_in_thread()
    root = Path(tempfile.mkdtemp(prefix="arena-test-egress-", dir="/var/tmp"))
    root.chmod(0o711)
    box = LocalBackend(root, uid_base=settings.ARENA.sandbox_uid_base, egress=proxy).provision(
        SandboxSpec(run_id=77, shell_timeout_s=10), slot=8
    )
    box.refusals = refusals
    yield box
    box.destroy()
    proxy.close()
    shutil.rmtree(root, ignore_errors=True)


def test_browser_reaches_a_public_site_through_the_proxy(desktop):
    result = desktop.navigate("http://example.test/")
    assert result.ok, result.error
    assert result.data["title"] == "Public page"


@pytest.mark.parametrize(
    "url",
    [
        "http://sneaky.test/",  # a name that resolves to loopback
        "http://127.0.0.1:6379/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://2130706433/",
        "http://example.test/to-metadata",  # the redirect hop is checked again
    ],
)
def test_browser_cannot_reach_non_public_destinations(desktop, url):
    before = len(desktop.refusals)
    result = desktop.navigate(url)
    assert result.data.get("title") != "Public page"
    assert len(desktop.refusals) > before
    run_id, _target, reason = desktop.refusals[-1]
    assert run_id == 77 and reason


def test_shell_reaches_the_web_only_through_the_proxy(desktop):
    ok = desktop.shell("curl -s -m 5 http://example.test/")
    assert "It works" in ok.stdout
    refused = desktop.shell(
        "curl -s -m 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:5432/; echo;"
        "curl -s -m 5 --noproxy '*' http://93.184.216.34/ ; echo exit=$?"
    )
    lines = refused.stdout.split()
    assert lines[0] == "403"  # the proxy refused the host's loopback
    assert lines[-1] != "exit=0"  # without the proxy there is no route at all


@pytest.mark.skipif(os.geteuid() != 0, reason="socket ownership needs a root worker")
def test_egress_sockets_belong_to_each_sandbox_uid_only(desktop):
    # one for the agent's shell, one for Chromium in the display sandbox; each in a
    # root-owned dir bound read-only, so neither sandbox can swap it for another socket
    base = settings.ARENA.sandbox_uid_base
    for directory, uid in (("agent-ctl", base + 8), ("display-ctl", base + DISPLAY_UID_OFFSET + 8)):
        info = os.stat(desktop.run_dir / directory / "egress.sock")
        assert info.st_uid == uid and oct(info.st_mode & 0o777) == "0o600"
        assert os.stat(desktop.run_dir / directory).st_uid == 0
