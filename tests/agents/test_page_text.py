"""The page as text (``Sandbox.page_text``), read for real from Chromium in a bubblewrap
sandbox: the URL, title, visible text and interactive elements, whose reported screen
coordinates a ``click`` really hits (the browser's toolbar accounted for); bounded and
storable when the page (or the sandbox) answers nonsense."""

import asyncio
import http.server
import ipaddress
import shutil
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings

from sandboxes.base import SandboxSpec
from sandboxes.docker_backend import DockerBackend
from sandboxes.egress import EgressProxy
from sandboxes.local_backend import LocalBackend
from sandboxes.pagetext import ELEMENTS_MAX, TEXT_MAX_CHARS, page_text_bounded
from sandboxes.tools import tool_call
from tests.sandboxes.fake_engine import FakeEngine, FakeSupervisor

FORM = """<!doctype html><title>Before</title>
<style>body{margin:0;font:16px sans-serif} #far{display:block;margin-top:2000px}</style>
<h1>Library search</h1>
<p>Opening hours are 9 to 5.</p>
<p style="display:none">a hidden secret</p>
<form onsubmit="event.preventDefault(); document.title = 'Searched ' + q.value">
  <label for="q">Search</label> <input id="q" name="q" placeholder="Name or district">
  <select name="topic"><option>General</option><option>Technical</option></select>
  <button type="submit">Go</button>
</form>
<button style="position:absolute;left:600px;top:400px;width:120px;height:40px"
  onclick="document.title = 'Clicked'">Press me</button>
<a href="https://example.test/news/" id="far">Far link</a>
"""


def data_url(html: str) -> str:
    return "data:text/html," + quote(html)


def show(box, url: str) -> bool:
    """Opens ``url`` as the host does for a start page (the navigate tool takes http(s)
    only; these pages need no web)."""
    request = {"op": "navigate", "url": url}
    return bool(box._call("navigate", request, client=box.display_client).get("ok"))


PUBLIC = ipaddress.ip_address("93.184.216.34")


class SlowSite(http.server.BaseHTTPRequestHandler):
    """``/first``: a link to ``/second``, which answers only after 400 ms."""

    def do_GET(self):
        if self.path == "/second":
            time.sleep(0.4)
            body = b"<title>Second page</title><h1>Arrived</h1>"
        else:
            body = b'<title>First</title><a href="/second" style="font-size:40px">Onward</a>'
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def desktop():
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowSite)
    threading.Thread(target=web.serve_forever, daemon=True).start()

    async def dialer(address, port):
        return await asyncio.open_connection("127.0.0.1", web.server_address[1])

    proxy = EgressProxy(
        resolver=lambda host, port: [PUBLIC] if host == "site.test" else [], dialer=dialer
    ).run_in_thread()
    root = Path(tempfile.mkdtemp(prefix="arena-test-pagetext-", dir="/var/tmp"))
    root.chmod(0o711)
    backend = LocalBackend(root, uid_base=settings.ARENA.sandbox_uid_base, egress=proxy)
    box = backend.provision(SandboxSpec(run_id=31, shell_timeout_s=5), slot=7)
    yield box
    box.destroy()
    proxy.close()
    web.shutdown()
    shutil.rmtree(root, ignore_errors=True)


def element(page: dict, name: str) -> dict:
    return next(e for e in page["elements"] if e["name"] == name)


def test_the_page_as_text_has_url_title_visible_text_and_elements(desktop):
    url = data_url(FORM)
    assert show(desktop, url)

    page = desktop.page_text()

    assert (page["url"], page["title"]) == (url, "Before")
    assert page["text"].startswith("Library search\nOpening hours are 9 to 5.")
    assert "hidden secret" not in page["text"]
    assert [(e["role"], e["name"]) for e in page["elements"]] == [
        ("textbox", "Search"),
        ("combobox", ""),
        ("button", "Go"),
        ("button", "Press me"),
        ("link", "Far link"),
    ]
    search = element(page, "Search")
    assert (search["field"], search["placeholder"], search["value"]) == (
        "q",
        "Name or district",
        "",
    )
    assert page["elements"][1]["options"] == ["General", "Technical"]
    assert page["elements"][1]["value"] == "General"
    far = element(page, "Far link")
    assert far["href"] == "https://example.test/news/" and far["offscreen"] == "below"
    assert "x" not in far
    assert page["viewport"]["top"] > 0  # the toolbar is above the page


def test_clicking_at_a_reported_centre_hits_the_element(desktop):
    assert show(desktop, data_url(FORM))
    button = element(desktop.page_text(), "Press me")

    assert tool_call(desktop, "click", {"x": button["x"], "y": button["y"]}, deliver_dir=Path())

    assert desktop.page_text()["title"] == "Clicked"


def test_clicking_a_field_and_typing_fills_it_and_the_form_submits(desktop):
    assert show(desktop, data_url(FORM))
    search = element(desktop.page_text(), "Search")

    tool_call(desktop, "click", {"x": search["x"], "y": search["y"]}, deliver_dir=Path())
    tool_call(desktop, "type", {"text": "Riverside"}, deliver_dir=Path())
    filled = desktop.page_text()
    tool_call(desktop, "key", {"combo": "Return"}, deliver_dir=Path())

    field = element(filled, "Search")
    assert (field["value"], field.get("focused")) == ("Riverside", True)
    assert desktop.page_text()["title"] == "Searched Riverside"


def test_a_click_that_navigates_is_waited_for(desktop):
    assert desktop.navigate("http://site.test/first").ok
    onward = element(desktop.page_text(), "Onward")

    tool_call(desktop, "click", {"x": onward["x"], "y": onward["y"]}, deliver_dir=Path())
    page = desktop.page_text()

    assert (page["title"], page["text"]) == ("Second page", "Arrived")


def test_a_long_page_is_bounded(desktop):
    many = "".join(f'<p><a href="#{n}">link {n}</a> {"word " * 4}</p>' for n in range(400))
    assert show(desktop, data_url(f"<title>Long</title>{many}"))

    page = desktop.page_text()

    assert len(page["text"]) == TEXT_MAX_CHARS and page["text_truncated"]
    assert len(page["elements"]) == ELEMENTS_MAX and page["elements_total"] == 400
    # The ones in view come first when not all fit: every visible link is there.
    assert page["elements"][0]["name"] == "link 0" and "x" in page["elements"][0]


def test_the_per_step_cost_is_small(desktop):
    assert show(desktop, data_url(FORM))
    timings = []
    for _ in range(10):
        t0 = time.monotonic()
        assert desktop.page_text() is not None
        timings.append(1000 * (time.monotonic() - t0))
    timings.sort()
    print(f"page_text: median {timings[5]:.0f} ms, max {timings[-1]:.0f} ms")
    assert timings[5] < 500


def test_a_shell_only_sandbox_has_no_page_text(sandbox_root):
    spec = SandboxSpec(run_id=32, desktop=False, memory_mb=256, pids=64)
    box = LocalBackend(sandbox_root, uid_base=settings.ARENA.sandbox_uid_base).provision(spec)
    try:
        assert box.page_text() is None
    finally:
        box.destroy()


def test_nonsense_from_the_sandbox_is_bounded_and_storable():
    reply = {
        "url": ["no"],
        "title": "T\x00" * 1000,
        "text": "x" * 100_000,
        "elements": [
            {"role": "<script>", "name": "n" * 5000, "x": 5000, "y": 3, "options": ["a"] * 99},
            "not an element",
            {"role": "link", "name": "ok", "x": 10, "y": 20, "href": 7, "focused": "yes"},
        ]
        * 100,
        "elements_total": -3,
        "viewport": {"top": "high", "left": 0},
    }

    page = page_text_bounded(reply, width=1280, height=800)

    assert page["url"] == "" and page["escaped"] and "\x00" not in page["title"]
    assert len(page["text"]) == TEXT_MAX_CHARS and page["text_truncated"]
    assert len(page["elements"]) == ELEMENTS_MAX and page["elements_total"] == ELEMENTS_MAX
    first, second, third = page["elements"][:3]
    assert first["role"] == "generic" and len(first["name"]) == 200
    assert first["offscreen"] == "beside" and "x" not in first and len(first["options"]) == 30
    assert second == {"i": 1, "role": "generic", "name": "", "offscreen": "beside"}
    assert third == {"i": 2, "role": "link", "name": "ok", "href": "", "x": 10, "y": 20}
    assert page["viewport"] == {"left": 0}


class HostilePageText(FakeSupervisor):
    """A Docker container's supervisor answering ``page_text`` as a hostile sandbox
    might: off-screen coordinates, a wrong type, far too many elements."""

    def answer(self, request):
        if request.get("op") == "page_text":
            element = {"role": "button", "name": "Pay", "x": 10**6, "y": -4}
            return {"ok": True, "url": 7, "title": "Shop", "text": "x", "elements": [element] * 999}
        return super().answer(request)


def test_the_docker_backend_serves_and_bounds_page_text(sandbox_root):
    registry: dict = {}
    image = "agent-arena-desktop:test"
    with FakeEngine(
        sandbox_root / "engine.sock", images={image}, on_start=HostilePageText.on_start(registry)
    ) as engine:
        backend = DockerBackend(
            image, sandbox_root, settings.ARENA.sandbox_uid_base, client_factory=engine.client
        )
        box = backend.provision(SandboxSpec(run_id=33, width=64, height=48), slot=1)
        try:
            page = box.page_text()
        finally:
            box.destroy()
            backend.close()

    assert (page["url"], page["title"], page["text"]) == ("", "Shop", "x")
    assert len(page["elements"]) == ELEMENTS_MAX
    assert page["elements"][0] == {"i": 0, "role": "button", "name": "Pay", "offscreen": "beside"}
