"""The live desktops' socket (``/ws/battles/<id>/live/``, ``battles.live_consumers``)
with a real bubblewrap desktop streaming as a lane's does (``live_desktop_stream``):

- the battle's team gets both lanes' frames while its socket is open, and counts as a
  viewer only then (the grabber idles before and after);
- an outsider, an anonymous visitor and a judge served the battle get a closed socket,
  and count as no viewer (no frame is grabbed for them);
- a member removed from the team loses the view at once (``TenantSocket``);
- the socket is receive-only: a viewer who sends what looks like a click or keys is
  closed, and the desktop saw no input (its page turns red and says so on any event)."""

import json
import random
import time
import urllib.parse
from contextlib import ExitStack

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client
from django.utils import timezone

from accounts.models import Team
from accounts.services import team_member_remove
from arena_site.asgi import application
from battles.live_consumers import CLOSE_NOT_FOUND, CLOSE_RECEIVE_ONLY
from battles.models import Step
from battles.services import task_submit
from battles.services.live_frames import (
    LINGER_S,
    live_desktop_stream,
    live_viewer_forget,
    live_viewer_mark,
    live_viewers,
)
from judging.models import Assignment
from sandboxes.base import SandboxSpec
from sandboxes.local_backend import LocalBackend

pytestmark = pytest.mark.django_db(transaction=True)

# Any input event that reaches the page turns it red and names itself in the title.
PAGE = "data:text/html," + urllib.parse.quote(
    "<title>untouched</title><body style='margin:0;background:rgb(0,160,0)'>"
    "<script>for (const kind of ['mousedown', 'keydown', 'wheel', 'input']) {"
    " addEventListener(kind, () => { document.title = 'touched:' + kind;"
    " document.body.style.background = 'rgb(200,0,0)'; }); }</script></body>"
)


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def communicator(battle_id: int, cookie: bytes | None = None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://127.0.0.1")]
    if cookie is not None:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, f"/ws/battles/{battle_id}/live/", headers=headers)


@pytest.fixture
def streaming(alice, roster, sandbox_root):
    """A battle of alice's team whose two lanes each stream a real desktop, as
    ``run_lane`` streams them; yields (battle, {run id: sandbox}, {run id: stream})."""
    battle = task_submit(user=alice, instruction="open the page", rng=random.Random(2))
    runs = list(battle.runs.order_by("side"))
    backend = LocalBackend(sandbox_root, uid_base=settings.ARENA.sandbox_uid_base)
    with ExitStack() as stack:
        boxes, streams = {}, {}
        for slot, run in enumerate(runs, start=8):
            box = backend.provision(
                SandboxSpec(run_id=run.pk, start_url=PAGE, egress=False), slot=slot
            )
            stack.callback(box.destroy)
            streams[run.pk] = stack.enter_context(live_desktop_stream(run.pk, box, fps=5))
            boxes[run.pk] = box
        yield battle, boxes, streams


def frames_for(socket: WebsocketCommunicator, seconds: float, *, until=None):
    """The frames received within ``seconds`` (each with its arrival time, ``"at"``), or
    until ``until(frames)`` holds."""

    async def collect() -> list[dict]:
        frames: list[dict] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until and until(frames)):
            # (a receive that times out would cancel the socket: ask first)
            if not await socket.receive_nothing(timeout=0.05, interval=0.01):
                frame = json.loads(await socket.receive_from())
                frames.append(frame | {"at": time.monotonic()})
        return frames

    return collect()


def test_the_team_sees_both_lanes_live_while_it_watches(bob, streaming):
    battle, boxes, streams = streaming
    run_ids = sorted(boxes)
    cookie = session_cookie(bob)

    def twelve_each(frames: list[dict]) -> bool:
        return all(sum(f["run"] == r for f in frames) >= 12 for r in run_ids)

    async def scenario():
        socket = communicator(battle.pk, cookie)
        connected, _ = await socket.connect()
        assert connected
        frames = await frames_for(socket, 30.0, until=twelve_each)
        watching = [await database_sync_to_async(live_viewers)(r) for r in run_ids]
        await socket.disconnect()
        return frames, watching

    # Given nobody watched: no viewer, no grabber process
    time.sleep(1.5)
    assert [live_viewers(r) for r in run_ids] == [0, 0]
    assert [streams[r].started_children for r in run_ids] == [0, 0]

    # When a team member opens the live socket (until 12 frames of each lane came)
    frames, watching = async_to_sync(scenario)()

    # Then both lanes' frames arrive, several a second each once the grabbers run (they
    # start within ~2 s: a check, then the process), as JPEGs, from one process each
    assert watching == [1, 1]
    assert [streams[r].started_children for r in run_ids] == [1, 1]
    per_run = {r: [f for f in frames if f["run"] == r] for r in run_ids}
    for run_id, received in per_run.items():
        assert len(received) >= 12, (run_id, len(received))
        rate = (len(received) - 1) / (received[-1]["at"] - received[0]["at"])
        assert rate >= 2.0, (run_id, rate)  # (5/s asked)
        seqs = [f["seq"] for f in received]
        assert seqs == sorted(seqs)
        assert received[0]["jpeg"].startswith("/9j/")  # base64 of a JPEG's FF D8 FF
    # and once the socket closed, nobody watches, and the grabbers end soon after
    assert [live_viewers(r) for r in run_ids] == [0, 0]
    deadline = time.monotonic() + LINGER_S + 5
    while any(s.child is not None for s in streams.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [s.child for s in streams.values()] == [None, None]


def test_the_grabber_process_ends_with_the_lane(alice, roster, sandbox_root, bob):
    battle = task_submit(user=alice, instruction="open the page", rng=random.Random(4))
    run = battle.runs.get(side="A")
    box = LocalBackend(sandbox_root, uid_base=settings.ARENA.sandbox_uid_base).provision(
        SandboxSpec(run_id=run.pk, start_url=PAGE, egress=False), slot=10
    )
    try:
        live_viewer_mark(run_ids=[run.pk], viewer="a-page")
        with live_desktop_stream(run.pk, box) as stream:
            deadline = time.monotonic() + 10
            while stream.child is None and time.monotonic() < deadline:
                time.sleep(0.1)
            child = stream.child
            assert child is not None and child.poll() is None
        # the lane ended (the block): the process is gone, though a viewer is still marked
        assert child.poll() is not None
        assert not stream.is_alive()
    finally:
        live_viewer_forget(run_ids=[run.pk], viewer="a-page")
        box.destroy()


@pytest.mark.parametrize("who", ["outsider", "anonymous", "judge"])
def test_others_get_a_closed_socket_and_no_frame_is_grabbed(who, charlie, judge, streaming):
    battle, boxes, _ = streaming
    cookie = None
    if who == "outsider":
        cookie = session_cookie(charlie)
    elif who == "judge":
        # served the battle: the battle page admits them, the live view never does
        Assignment.objects.create(judge=judge, battle=battle, served_at=timezone.now())
        cookie = session_cookie(judge)

    async def scenario():
        socket = communicator(battle.pk, cookie)
        connected, code = await socket.connect()
        await socket.disconnect()
        return connected, code

    assert async_to_sync(scenario)() == (False, CLOSE_NOT_FOUND)
    assert [live_viewers(r) for r in sorted(boxes)] == [0, 0]


def test_another_teams_battle_number_gets_no_frame(alice, charlie, roster, streaming):
    # charlie's own battle is open to him; alice's stays closed whatever he asks
    own = task_submit(user=charlie, instruction="list the files", rng=random.Random(3))
    battle, boxes, _ = streaming
    cookie = session_cookie(charlie)

    async def scenario():
        mine = communicator(own.pk, cookie)
        assert (await mine.connect())[0]
        frames = await frames_for(mine, 1.5)
        await mine.disconnect()
        theirs = communicator(battle.pk, cookie)
        result = await theirs.connect()
        await theirs.disconnect()
        return frames, result

    frames, result = async_to_sync(scenario)()
    assert result == (False, CLOSE_NOT_FOUND)
    assert {f["run"] for f in frames}.isdisjoint(boxes)


async def closed(socket: WebsocketCommunicator) -> dict:
    """The socket's close, past any frame sent before it."""
    while True:
        output = await socket.receive_output(timeout=5)
        if output["type"] == "websocket.close":
            return output


def test_the_socket_is_receive_only(bob, streaming):
    battle, boxes, _ = streaming
    steps_before = Step.objects.filter(run__battle=battle).count()
    attempts = [
        json.dumps({"tool": "click", "args": {"x": 640, "y": 400}}),
        json.dumps({"type": "input", "argv": ["key", "Return"]}),
        "type hello",
    ]
    cookie = session_cookie(bob)

    async def scenario():
        closes = []
        for text in attempts:
            socket = communicator(battle.pk, cookie)
            assert (await socket.connect())[0]
            await socket.send_to(text_data=text)
            closes.append(await closed(socket))
            await socket.disconnect()
        socket = communicator(battle.pk, cookie)
        assert (await socket.connect())[0]
        await socket.send_to(bytes_data=b"\x00\x01 click 640 400")
        closes.append(await closed(socket))
        await socket.disconnect()
        return closes

    closes = async_to_sync(scenario)()

    # Every socket that sent something was closed as receive-only
    assert all(c == {"type": "websocket.close", "code": CLOSE_RECEIVE_ONLY} for c in closes), closes
    # and no desktop saw an input event, no step was recorded, nobody counts as watching
    time.sleep(0.5)
    for box in boxes.values():
        assert box.page_state()["title"] == "untouched"
    assert Step.objects.filter(run__battle=battle).count() == steps_before
    assert [live_viewers(r) for r in sorted(boxes)] == [0, 0]


def test_a_member_removed_from_the_team_loses_the_live_view_at_once(alice, bob, streaming):
    battle, boxes, _ = streaming
    cookie = session_cookie(bob)
    acme = Team.objects.get(name="Acme")

    async def scenario():
        socket = communicator(battle.pk, cookie)
        assert (await socket.connect())[0]
        assert (await frames_for(socket, 3.0)) != []  # watching
        await database_sync_to_async(team_member_remove)(team=acme, member=bob, actor=alice)
        close = await closed(socket)
        again = communicator(battle.pk, cookie)
        refused = await again.connect()
        await again.disconnect()
        return close, refused

    close, refused = async_to_sync(scenario)()

    assert close == {"type": "websocket.close", "code": CLOSE_NOT_FOUND}
    assert refused == (False, CLOSE_NOT_FOUND)
    assert [live_viewers(r) for r in sorted(boxes)] == [0, 0]
