"""Live desktops in Chromium against the real servers (uvicorn and a worker running real
bubblewrap desktops): the submitter's battle page shows both lanes' screens while the
battle runs, each updated at 2 frames a second or more (the grabber's 4 asked), counted
by the page itself (each lane's ``data-frames``); the page never sends on the live
socket; and the recorded steps still arrive as before.

Both sides are remote entrants served from this test (a loopback endpoint the worker is
allowed to call), which take half a second to answer each step and type into the demo
contact form: a battle of the built-ins is over about a second after its desktops are
up, too short to count frames over."""

import contextlib
import json
import random
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.sync_api import expect

from agents.models import Agent, Arena
from agents.services import roster_install_builtins
from battles.models import Battle, Run
from battles.services import task_submit
from sandboxes.demoweb import DEMO_TASKS
from tests.e2e.test_arena_loop import new_context
from tests.e2e.test_live_pages import log_in, person
from tests.servers import ensure_public_arena

pytestmark = pytest.mark.e2e

THINK_S = 0.5
STEPS = 14


class Entrant(BaseHTTPRequestHandler):
    """A remote entrant that thinks ``THINK_S`` per step: Tab into the form, type a
    letter a step, and give up after ``STEPS`` steps."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        step = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["step"]
        time.sleep(THINK_S)
        if step == 0:
            reply = {"action": {"tool": "key", "args": {"combo": "Tab"}}}
        elif step < STEPS:
            reply = {"action": {"tool": "type", "args": {"text": "ab"[step % 2]}}}
        else:
            reply = {"give_up": {"message": "I typed what I could."}}
        body = json.dumps(reply).encode()
        with contextlib.suppress(OSError):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, format, *args) -> None:
        pass


@pytest.fixture
def entrant_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Entrant)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/act"
    server.shutdown()
    server.server_close()


@pytest.fixture
def servers(transactional_db, monkeypatch, request):
    """The arena's servers, whose worker may call loopback endpoints (the entrant's)."""
    monkeypatch.setenv("ARENA_INTERNAL_ALLOWLIST", "127.0.0.0/8")
    return request.getfixturevalue("arena_servers")


def remote_pair(battle: Battle, url: str) -> None:
    for side in "AB":
        agent = Agent.objects.create(
            arena=Arena.objects.public(), slug=f"typist-{side.lower()}",
            display_name=f"Typist {side}", kind="remote", remote_secret="a-secret",
            params={"endpoint": url, "timeout_s": 10},
        )  # fmt: skip
        Battle.objects.filter(pk=battle.pk).update(**{f"agent_{side.lower()}": agent})
        Run.objects.filter(battle=battle, side=side).update(agent=agent)


# Every message the page sends on a websocket whose URL is the live socket's, and every
# Content-Security-Policy violation (the frames are data: images, the script a static file).
PROBE = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__violations.push(`${e.effectiveDirective} blocked ${e.blockedURI || "inline"}`);
});
window.__liveSent = 0;
const send = WebSocket.prototype.send;
WebSocket.prototype.send = function (data) {
  if (String(this.url).includes("/live/")) window.__liveSent += 1;
  return send.call(this, data);
};
"""
SAMPLE_S = 0.25


def frames(page) -> dict[str, int]:
    return page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('#live-desktops [data-side]')]
             .map((lane) => [lane.dataset.side, Number(lane.dataset.frames)]))"""
    )


def test_both_live_desktops_update_at_two_frames_a_second_or_more(servers, entrant_url, browser):
    # Given a submitter whose battle on the demo contact form waits in the queue
    erin = person("erin", "Acme")
    roster_install_builtins(arena=ensure_public_arena())
    task = next(t for t in DEMO_TASKS if "contact" in t["instruction"])
    battle = task_submit(
        user=erin, instruction=task["instruction"], start_url=task["start_url"],
        rng=random.Random(5),
    )  # fmt: skip
    remote_pair(battle, entrant_url)
    context = new_context(browser, servers.base_url)
    context.add_init_script(PROBE)
    page = context.new_page()
    log_in(page, "erin")
    page.goto(f"/battles/{battle.pk}/")
    expect(page.locator("#live-desktops")).to_be_visible()
    expect(page.locator("#live-desktops [data-live-status]")).to_have_text(
        "Waiting for the first frame…", timeout=15_000
    )

    # When the worker runs it, the page counting each lane's frames as they come
    servers.resume_workers()
    samples: list[tuple[float, dict[str, int], str]] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        status = Battle.objects.values_list("status", flat=True).get(pk=battle.pk)
        samples.append((time.monotonic(), frames(page), status))
        if status not in ("queued", "running"):
            break
        time.sleep(SAMPLE_S)

    # Then each lane's image was updated at 2 frames/s or more, over 5 s or more of the
    # battle (from its first frame to its last)
    for side in "AB":
        moving = [(t, f[side]) for t, f, _ in samples if f[side] > 0]
        assert moving, f"side {side} showed no frame: {samples[-1]}"
        last = next(i for i, (_, n) in enumerate(moving) if n == moving[-1][1])
        seconds = moving[last][0] - moving[0][0]
        count = moving[last][1] - moving[0][1]
        print(f"side {side}: {count} frames in {seconds:.2f} s = {count / seconds:.2f}/s")
        assert seconds >= 5.0, f"side {side} streamed {seconds:.1f} s: {samples}"
        assert count / seconds >= 2.0, f"side {side}: {count} frames in {seconds:.1f} s"
    expect(page.locator("#live-desktops img").first).to_have_attribute(
        "src", re.compile(r"^data:image/jpeg;base64,/9j/")
    )
    # the page never sent anything on the live socket, broke no CSP rule, and the steps
    # are recorded as before
    assert page.evaluate("window.__liveSent") == 0
    assert page.evaluate("window.__violations") == []
    battle.refresh_from_db()
    assert battle.status in ("screening", "judging")
    for run in battle.runs.all():
        side = page.locator(f'#battle-panel section.side[data-side="{run.side}"]')
        expect(side.locator("ol.steps > li")).to_have_count(run.steps.count(), timeout=15_000)
    context.close()
