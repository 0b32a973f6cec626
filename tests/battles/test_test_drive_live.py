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


def test_a_member_removed_from_the_team_stops_hearing_the_drive_at_once(alice, bob):
    from django.db import transaction

    from accounts.services import team_member_remove
    from battles.models import TestDrive
    from battles.services.live import test_drive_publish

    agent = team_agent(alice)
    drive = drives.test_drive_start(user=alice, agent_id=agent.pk)
    team = agent.team

    def remove_and_change() -> None:
        with transaction.atomic():  # the frame is published after the removal's commit
            team_member_remove(team=team, member=bob, actor=alice)
            TestDrive.objects.filter(pk=drive.pk).update(status=TestDrive.Status.RUNNING)
            test_drive_publish(drive_id=drive.pk)

    cookies = session_cookie(bob), session_cookie(alice)

    async def scenario():
        bobs, alices = (drive_socket(drive.pk, cookie) for cookie in cookies)
        for socket in (bobs, alices):
            assert (await socket.connect())[0]
            await socket.receive_from(timeout=5)  # the panel on connect
        await database_sync_to_async(remove_and_change)()
        bob_heard = await bobs.receive_output(timeout=5)
        alice_heard = await alices.receive_from(timeout=5)
        await alices.disconnect()
        await bobs.disconnect()
        return bob_heard, alice_heard

    bob_heard, alice_heard = async_to_sync(scenario)()

    assert bob_heard == {"type": "websocket.close", "code": 4404}  # no "running" frame first
    assert 'id="drive-status">running<' in alice_heard
