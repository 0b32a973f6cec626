"""The operator page's live desktop (docs/human-baseline.md): the operator of a human
entrant watches their own lane's screen live on /ws/operate/lanes/<run>/live/; nobody
else does, and nothing sent on the socket reaches the lane."""

import json
from contextlib import ExitStack

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings

from agents.human import HumanPolicy
from agents.models import Agent, Arena, BaselineOperator, HumanAction
from arena_site.asgi import application
from battles.live_consumers import CLOSE_NOT_FOUND, CLOSE_RECEIVE_ONLY
from battles.models import Task
from battles.services.creation import battle_create
from battles.services.live_frames import live_desktop_stream
from sandboxes.base import SandboxSpec
from sandboxes.local_backend import LocalBackend
from tests.battles.test_live_stream import PAGE, closed, frames_for, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def communicator(run_id: int, cookie: bytes | None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://127.0.0.1")]
    if cookie is not None:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, f"/ws/operate/lanes/{run_id}/live/", headers=headers)


@pytest.fixture
def human_lane(alice, charlie, roster, sandbox_root):
    """A human entrant of alice's team (alice operates it) drawn against Idle on
    charlie's task; its lane's desktop streams as ``run_lane`` streams it. Yields
    (run id, policy)."""
    human = Agent.objects.create(
        arena=Arena.objects.public(), slug="acme-person", display_name="Acme person",
        kind=Agent.Kind.HUMAN, team=alice.memberships.get().team,
    )  # fmt: skip
    BaselineOperator.objects.create(agent=human, user=alice)
    task = Task.objects.create(
        team=charlie.memberships.get().team, submitter=charlie, instruction="open the page"
    )
    battle = battle_create(
        task=task, agent_a=human, agent_b=Agent.objects.get(slug="idle"), redundancy_target=1
    )
    run = battle.runs.get(agent=human)
    policy = HumanPolicy(agent=human, run_id=run.pk, tools=("click", "type"), take_s=60)
    backend = LocalBackend(sandbox_root, uid_base=settings.ARENA.sandbox_uid_base)
    with ExitStack() as stack:
        box = backend.provision(SandboxSpec(run_id=run.pk, start_url=PAGE, egress=False), slot=8)
        stack.callback(box.destroy)
        stack.enter_context(live_desktop_stream(run.pk, box, fps=5))
        yield run.pk, policy


def test_the_operator_watches_their_lane_live(alice, human_lane):
    run_id, _ = human_lane
    cookie = session_cookie(alice)

    async def scenario():
        socket = communicator(run_id, cookie)
        assert (await socket.connect())[0]
        frames = await frames_for(socket, 3.0)
        await socket.disconnect()
        return frames

    frames = async_to_sync(scenario)()
    assert len(frames) >= 6 and {f["run"] for f in frames} == {run_id}  # ≥ 2 a second


@pytest.mark.parametrize("who", ["other_team_operator", "member_not_operator", "anonymous"])
def test_nobody_else_watches_the_lane(who, bob, charlie, human_lane):
    run_id, _ = human_lane
    theirs = Agent.objects.create(
        arena=Arena.objects.public(), slug="theirs", display_name="Theirs", kind="human",
        team=charlie.memberships.get().team,
    )  # fmt: skip
    BaselineOperator.objects.create(agent=theirs, user=charlie)
    user = {"other_team_operator": charlie, "member_not_operator": bob}.get(who)
    cookie = session_cookie(user) if user is not None else None

    async def scenario():
        socket = communicator(run_id, cookie)
        result = await socket.connect()
        await socket.disconnect()
        return result

    assert async_to_sync(scenario)() == (False, CLOSE_NOT_FOUND)


def test_an_ended_lane_is_not_watched(alice, human_lane):
    run_id, policy = human_lane
    policy.close("delivered")
    cookie = session_cookie(alice)

    async def scenario():
        socket = communicator(run_id, cookie)
        result = await socket.connect()
        await socket.disconnect()
        return result

    assert async_to_sync(scenario)() == (False, CLOSE_NOT_FOUND)


def test_the_operators_socket_is_receive_only(alice, human_lane):
    run_id, _ = human_lane
    cookie = session_cookie(alice)

    async def scenario():
        socket = communicator(run_id, cookie)
        assert (await socket.connect())[0]
        await socket.send_to(text_data=json.dumps({"tool": "click", "args": {"x": 1, "y": 2}}))
        close = await closed(socket)
        await socket.disconnect()
        return close

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": CLOSE_RECEIVE_ONLY}
    assert not HumanAction.objects.exists()  # actions come only from the page's forms
