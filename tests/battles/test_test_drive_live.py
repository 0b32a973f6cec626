"""A test drive's page follows the drive over its socket: the agent's team hears the
panel on connect and after every change (running, each step, done); another team's
user and an anonymous visitor get the socket closed with 4404 and hear nothing."""

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async

from battles.services import test_drives as drives  # (its test_* names are not tests)
from tests.battles.test_consumers import session_cookie
from tests.battles.test_test_drive import team_agent

pytestmark = pytest.mark.django_db(transaction=True)


def drive_socket(drive_id: int, cookie: bytes | None):
    from channels.testing import WebsocketCommunicator

    from arena_site.asgi import application

    headers = [(b"origin", b"http://127.0.0.1")]
    if cookie is not None:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, f"/ws/test-drives/{drive_id}/", headers=headers)


def test_the_team_hears_the_drive_move_from_queued_to_done(alice, bob):
    agent = team_agent(alice)
    drive = drives.test_drive_start(user=alice, agent_id=agent.pk)
    cookie = session_cookie(bob)  # a teammate

    async def scenario():
        socket = drive_socket(drive.pk, cookie)
        connected, _ = await socket.connect()
        assert connected
        frames = [await socket.receive_from(timeout=5)]
        await database_sync_to_async(drives.test_drive_run)(drive_id=drive.pk)
        while not await socket.receive_nothing(timeout=0.5):
            frames.append(await socket.receive_from(timeout=5))
        await socket.disconnect()
        return frames

    frames = async_to_sync(scenario)()

    assert 'id="drive-status">queued<' in frames[0]
    assert any('id="drive-status">running<' in f for f in frames[1:])
    assert any('data-step="0"' in f for f in frames[1:])
    assert 'id="drive-status">done<' in frames[-1]
    assert "Acme Rulebook finished and delivered its answer." in frames[-1]


@pytest.mark.parametrize("who", ["outsider", "anonymous"])
def test_another_team_and_visitors_get_a_closed_socket(alice, charlie, who):
    agent = team_agent(alice)
    drive = drives.test_drive_start(user=alice, agent_id=agent.pk)
    cookie = session_cookie(charlie) if who == "outsider" else None

    async def scenario():
        socket = drive_socket(drive.pk, cookie)
        connected, code = await socket.connect()
        await socket.disconnect()
        return connected, code

    assert async_to_sync(scenario)() == (False, 4404)
