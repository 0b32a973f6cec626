"""The live battle socket: team members get the panel; outsiders get a closed socket."""

import random

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from arena_site.asgi import application
from battles.services import battle_publish, task_submit

pytestmark = pytest.mark.django_db(transaction=True)


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def communicator(battle_id: int, cookie: bytes | None = None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://127.0.0.1")]
    if cookie is not None:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, f"/ws/battles/{battle_id}/", headers=headers)


def test_team_member_gets_the_panel_and_live_updates(alice, bob, roster):
    battle = task_submit(user=alice, instruction="list the files", rng=random.Random(2))
    cookie = session_cookie(bob)

    async def scenario():
        socket = communicator(battle.pk, cookie)
        connected, _ = await socket.connect()
        assert connected
        first = await socket.receive_from(timeout=5)
        from channels.db import database_sync_to_async
        from django.db import transaction

        def change():
            with transaction.atomic():
                type(battle).objects.filter(pk=battle.pk).update(status="running")
                battle_publish(battle_id=battle.pk)

        await database_sync_to_async(change)()
        second = await socket.receive_from(timeout=5)
        await socket.disconnect()
        return first, second

    first, second = async_to_sync(scenario)()
    assert 'id="battle-status">queued<' in first
    assert 'id="battle-status">running<' in second
    for agent in (battle.agent_a, battle.agent_b):
        assert agent.display_name not in first + second


@pytest.mark.parametrize("who", ["outsider", "anonymous"])
def test_outsider_and_anonymous_get_a_closed_socket(alice, charlie, roster, who):
    battle = task_submit(user=alice, instruction="list the files", rng=random.Random(2))
    cookie = session_cookie(charlie) if who == "outsider" else None

    async def scenario():
        socket = communicator(battle.pk, cookie)
        connected, code = await socket.connect()
        await socket.disconnect()
        return connected, code

    connected, code = async_to_sync(scenario)()
    assert connected is False
    assert code == 4404


def test_socket_for_a_missing_battle_is_closed(alice):
    cookie = session_cookie(alice)

    async def scenario():
        socket = communicator(999999, cookie)
        connected, code = await socket.connect()
        await socket.disconnect()
        return connected, code

    assert async_to_sync(scenario)() == (False, 4404)
