"""Live frames (arena_site/realtime.py): a frame is encoded once and reaches every socket
of its group through one group membership per process; the per-socket reference path
still works; after Redis loses its data the sockets hear frames again by themselves;
publishing never raises into the writer."""

import asyncio
import time

import pytest
import redis
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from arena_site.asgi import application
from arena_site.realtime import group_send
from ratings.services import LEADERBOARD_GROUP
from tests.throwaway import throwaway_redis

pytestmark = pytest.mark.django_db(transaction=True)

SOCKETS = 5


def board_socket() -> WebsocketCommunicator:
    return WebsocketCommunicator(
        application, "/ws/leaderboard/", headers=[(b"origin", b"http://127.0.0.1")]
    )


async def connected_sockets(n: int) -> list[WebsocketCommunicator]:
    sockets = []
    for _ in range(n):
        socket = board_socket()
        connected, _ = await socket.connect(timeout=10)
        assert connected
        await socket.receive_from(timeout=10)  # the board sent on connect
        sockets.append(socket)
    return sockets


def members(group: str) -> list[bytes]:
    """The group's members as the channel layer stores them in Redis."""
    layer = get_channel_layer()
    host = layer.hosts[0]
    client = redis.Redis.from_url(host["address"])
    try:
        return client.zrange(layer._group_key(group), 0, -1)
    finally:
        client.close()


@pytest.mark.parametrize(("fanout", "expected_members"), [("process", 1), ("socket", SOCKETS)])
def test_a_frame_reaches_every_socket_of_the_group(settings, fanout, expected_members):
    settings.ARENA = settings.ARENA.replace(realtime_fanout=fanout)

    async def scenario():
        sockets = await connected_sockets(SOCKETS)
        joined = await sync_to_async(members)(LEADERBOARD_GROUP)
        await sync_to_async(group_send)(
            LEADERBOARD_GROUP, {"type": "leaderboard.update", "html": "<p>frame one</p>"}
        )
        frames = [await socket.receive_from(timeout=5) for socket in sockets]
        for socket in sockets:
            assert await socket.receive_nothing(timeout=0.2)  # exactly one frame each
            await socket.disconnect()
        left = await sync_to_async(members)(LEADERBOARD_GROUP)
        return joined, frames, left

    joined, frames, left = async_to_sync(scenario)()
    assert len(joined) == expected_members  # the hub: one membership for all sockets
    assert frames == ["<p>frame one</p>"] * SOCKETS  # the text as published
    assert left == []  # the last socket gone, the process left the group


def test_frames_of_other_groups_are_not_delivered(settings):
    async def scenario():
        (socket,) = await connected_sockets(1)
        await sync_to_async(group_send)("battle-999999", {"type": "battle.update", "html": "x"})
        quiet = await socket.receive_nothing(timeout=0.5)
        await socket.disconnect()
        return quiet

    assert async_to_sync(scenario)()


def test_a_message_without_html_goes_out_as_json(settings):
    async def scenario():
        (socket,) = await connected_sockets(1)
        await sync_to_async(group_send)(LEADERBOARD_GROUP, {"type": "x.y", "n": 3})
        frame = await socket.receive_from(timeout=5)
        await socket.disconnect()
        return frame

    assert async_to_sync(scenario)() == '{"n":3}'


def test_publishing_with_redis_unreachable_does_not_raise(settings):
    with throwaway_redis() as server:
        url = server.url
    # The server is gone: nothing listens on its port any more.
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": url, "socket_connect_timeout": 1}]},
        }
    }
    assert group_send(LEADERBOARD_GROUP, {"type": "leaderboard.update", "html": "x"}) is None


def test_sockets_hear_frames_again_after_redis_restarts_empty(settings):
    """Redis killed and started again without its data: the group memberships are gone.
    The sockets stay open and, within the re-join period, hear frames again."""
    settings.ARENA = settings.ARENA.replace(realtime_rejoin_s=0.5)
    with throwaway_redis() as server:
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {
                    "hosts": [
                        {"address": server.url, "socket_timeout": 30, "socket_connect_timeout": 2}
                    ],
                    "prefix": "realtime-test",
                },
            }
        }

        async def scenario():
            sockets = await connected_sockets(2)
            await sync_to_async(group_send)(LEADERBOARD_GROUP, {"type": "t", "html": "before"})
            before = [await s.receive_from(timeout=5) for s in sockets]

            await sync_to_async(server.restart)()
            assert await sync_to_async(members)(LEADERBOARD_GROUP) == []  # lost with the data

            async def publish_until_stopped():
                while True:  # a frame published before the re-join is lost (at most once)
                    await sync_to_async(group_send)(
                        LEADERBOARD_GROUP, {"type": "t", "html": "after"}
                    )
                    await asyncio.sleep(0.2)

            publisher = asyncio.ensure_future(publish_until_stopped())
            started = time.monotonic()
            try:
                # A timeout here cancels the socket's application: one long wait each.
                after = [await s.receive_from(timeout=20) for s in sockets]
            finally:
                publisher.cancel()
            resumed_s = time.monotonic() - started
            assert resumed_s < 20
            for s in sockets:
                await s.disconnect()
            return before, after

        before, after = async_to_sync(scenario)()
    assert before == ["before", "before"]
    assert after == ["after", "after"]


# --- the frame framed once (autobahn's prepared message) ---------------------------------


def _daphne_socket(server=None):
    """A real Daphne server object and autobahn protocol on twisted's in-memory transport,
    open, and a socket whose ASGI send is Daphne's (as Daphne builds it)."""
    from functools import partial

    from daphne.server import Server
    from daphne.ws_protocol import WebSocketFactory
    from twisted.internet.testing import StringTransport

    from arena_site.realtime import GroupSocket

    server = server or Server(
        application=None, endpoints=["tcp:port=0:interface=127.0.0.1"], signal_handlers=False
    )
    if not hasattr(server, "connections"):
        server.connections = {}
    server.ws_factory = getattr(server, "ws_factory", None) or WebSocketFactory(server)
    protocol = server.ws_factory.buildProtocol(("127.0.0.1", 50000))
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.client_addr = ("127.0.0.1", 50000)
    protocol.state = protocol.STATE_OPEN  # (the handshake is not what is tested)
    server.connections[protocol] = {}
    socket = GroupSocket()
    socket.base_send = partial(server.handle_reply, protocol)
    return server, protocol, transport, socket


def test_a_frame_is_framed_once_and_written_as_daphne_would():
    from arena_site.realtime import _WireFrame

    server, protocol, transport, socket = _daphne_socket()
    _, _, other_transport, other = _daphne_socket(server)
    frame = _WireFrame("<tr id='r'>é ✓</tr>")
    assert frame.write(socket) and frame.write(other)
    assert len(frame.prepared) == 1  # one factory: framed once for both
    written = transport.value()
    assert written == other_transport.value()
    transport.clear()
    # Daphne's own path for the same text (the ASGI send): the very same bytes
    asyncio.run(server.handle_reply(protocol, {"type": "websocket.send", "text": frame.text}))
    assert transport.value() == written


def test_the_frame_finds_daphne_under_channels_session_wrapper():
    from channels.sessions import InstanceSessionWrapper

    from arena_site.realtime import _WireFrame

    _, _, transport, socket = _daphne_socket()
    wrapper = InstanceSessionWrapper({"type": "websocket", "session": object()}, socket.base_send)
    socket.base_send = wrapper.send
    assert _WireFrame("x").write(socket)
    assert transport.value()


def test_a_gone_or_closing_connection_gets_nothing_or_the_asgi_path():
    from arena_site.realtime import _WireFrame

    server, protocol, transport, socket = _daphne_socket()
    server.connections[protocol]["disconnected"] = True
    assert _WireFrame("x").write(socket)  # dropped, as Daphne drops it
    assert transport.value() == b""
    server.connections[protocol].pop("disconnected")
    protocol.state = protocol.STATE_CLOSING
    assert not _WireFrame("x").write(socket)  # left to the ASGI send (which refuses it)
    other = type(socket)()
    other.base_send = lambda message: None  # not Daphne's: the ASGI path
    assert not _WireFrame("x").write(other)


def test_a_socket_with_a_send_of_its_own_gets_the_frame_through_it():
    from arena_site.realtime import GroupSocket, _WireFrame

    class Filtering(GroupSocket):
        async def send(self, text_data=None, bytes_data=None, close=False):
            await super().send(text_data=text_data, bytes_data=bytes_data, close=close)

    _, _, transport, plain = _daphne_socket()
    own = Filtering()
    own.base_send = plain.base_send
    assert not _WireFrame("x").write(own)  # left to its own send
    assert transport.value() == b""
