"""The judge's own socket (/ws/judge/): an anonymous visitor gets a closed socket; a judge
hears about battles decided while they held them, and only their own."""

import datetime as dt

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from arena_site.asgi import application
from judging.models import Assignment
from judging.services import vote_cast
from tests.judging.battle_factories import ended_battle, people

pytestmark = pytest.mark.django_db(transaction=True)  # decisions commit: on_commit sends


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def communicator(cookie: bytes | None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://127.0.0.1")]
    if cookie is not None:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, "/ws/judge/", headers=headers)


def test_an_anonymous_visitor_gets_a_closed_socket(db):
    async def scenario():
        socket = communicator(None)
        connected, code = await socket.connect()
        assert not connected and code == 4401

    async_to_sync(scenario)()


def test_the_holder_is_told_and_nobody_else(alice, roster):
    holder, decider, bystander = people(3)
    battle = ended_battle(alice)
    long_ago = timezone.now() - dt.timedelta(minutes=5)
    for person in (holder, decider):
        Assignment.objects.create(judge=person, battle=battle, served_at=long_ago)

    cookies = session_cookie(holder), session_cookie(bystander)

    async def scenario():
        mine, theirs = communicator(cookies[0]), communicator(cookies[1])
        assert (await mine.connect())[0] and (await theirs.connect())[0]
        await database_sync_to_async(vote_cast)(judge=decider, battle_id=battle.pk, choice="A")
        frame = await mine.receive_from(timeout=5)
        assert f'id="voided-{battle.pk}"' in frame and "decided this battle" in frame
        assert await theirs.receive_nothing(timeout=0.5)
        await mine.disconnect()
        await theirs.disconnect()

    async_to_sync(scenario)()
    assert Assignment.objects.get(judge=holder, battle=battle).voided_at is not None
