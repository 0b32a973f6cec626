"""Publishing to Channels groups, and the sockets that hear them.

Delivery is at most once and always after the commit that made the state it
describes, so a client that reads the database sees as much.

A frame is encoded once per group, not per socket: ``group_send`` turns the message into
the frame's final text and sends that one text through the channel layer. A process
(Daphne) joins each group its sockets listen to ONCE, with one channel of its own (the
process's ``_Hub``); the hub receives the frame once and hands the same text to every
local socket of the group. So a board push to 500 sockets on one Daphne process costs
one layer message and one receive, not 500 of each (channels-redis serialises and
pushes a message per group member, and the receiving process pops each one
separately).

Redis losing its data (a restart without persistence) loses the group memberships. The
hub re-adds its groups every ``ARENA_REALTIME_REJOIN_S`` seconds and at once after a
receive fails, so sockets resume hearing frames by themselves; a socket never holds a
layer channel of its own, so a Redis outage does not close it.

``ARENA_REALTIME_FANOUT=socket`` is the old per-socket path (every socket a group member
with its own channel), kept as the same-run reference of tests/bench/bench_push.py; it
has no re-join.
"""

import asyncio
import functools
import json
import logging
import weakref
from typing import Any

from asgiref.sync import async_to_sync
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)

# The layer message every frame travels in; its handler on a socket is ``realtime_frame``.
FRAME_TYPE = "realtime.frame"
# A channel-layer alias no settings define: a socket of the hub path gets no layer (and no
# layer channel) of its own.
_NO_LAYER = "realtime-socket-has-no-layer"
# After a failed receive, wait this long before the next (Redis is down or restarting).
_RETRY_S = 0.5


def frame_text(message: dict[str, Any]) -> str:
    """The text a socket is sent for ``message``: its ``text``, else its ``html`` (the
    fragments the pages swap in), else the message as JSON without its ``type``."""
    for key in ("text", "html"):
        if isinstance(message.get(key), str):
            return message[key]
    return json.dumps({k: v for k, v in message.items() if k != "type"}, separators=(",", ":"))


def group_send(group: str, message: dict[str, Any]) -> None:
    """Sends ``message`` to every socket of ``group``, encoded once. Never raises: a
    dropped frame is re-synced over HTTP, and the writer must not fail for it."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        frame = {"type": FRAME_TYPE, "group": group, "text": frame_text(message)}
        async_to_sync(layer.group_send)(group, frame)
    except Exception:
        logger.exception("publishing to %s failed", group)


def publish_after_commit(group: str, message: dict[str, Any]) -> None:
    transaction.on_commit(lambda: group_send(group, message))


def _per_socket() -> bool:
    return settings.ARENA.realtime_fanout == "socket"


class _Hub:
    """One event loop's membership of the layer's groups: one layer channel, joined to
    every group that has a local socket, and a reader handing each frame to the group's
    sockets. Runs while any socket listens."""

    def __init__(self, layer) -> None:
        self.layer = layer
        self.members: dict[str, set[AsyncWebsocketConsumer]] = {}
        self.channel: str | None = None
        self._tasks: list[asyncio.Task] = []

    async def join(self, group: str, socket: AsyncWebsocketConsumer) -> None:
        if self.channel is None:
            self.channel = await self.layer.new_channel(prefix="realtime-hub")
        first = group not in self.members
        self.members.setdefault(group, set()).add(socket)
        if not self._tasks:
            self._tasks = [asyncio.ensure_future(self._read()), asyncio.ensure_future(self._keep())]
        if first:
            await self._add(group)

    async def leave(self, group: str, socket: AsyncWebsocketConsumer) -> None:
        members = self.members.get(group)
        if members is None:
            return
        members.discard(socket)
        if members:
            return
        del self.members[group]
        try:
            await self.layer.group_discard(group, self.channel)
        except Exception:  # the membership expires by itself (group_expiry)
            logger.warning("leaving %s failed", group, exc_info=True)
        if not self.members:
            for task in self._tasks:
                task.cancel()
            self._tasks = []

    async def _add(self, group: str) -> bool:
        try:
            await self.layer.group_add(group, self.channel)
        except Exception:  # Redis down: the keeper adds it again
            logger.warning("joining %s failed; retrying", group, exc_info=True)
            return False
        return True

    async def _add_all(self) -> None:
        for group in list(self.members):
            if not await self._add(group):
                return

    async def _keep(self) -> None:
        """Re-adds every group periodically: a Redis that lost its data (or a membership
        that expired) is repaired within one period."""
        while True:
            await asyncio.sleep(settings.ARENA.realtime_rejoin_s)
            await self._add_all()

    async def _read(self) -> None:
        failed = False
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                if not failed:
                    logger.warning("receiving frames failed; retrying", exc_info=True)
                failed = True
                await asyncio.sleep(_RETRY_S)
                continue
            if failed:  # the layer is back: its memberships may be gone with its data
                failed = False
                await self._add_all()
            await self._deliver(message)

    async def _deliver(self, message: dict) -> None:
        text = message.get("text")
        sockets = self.members.get(message.get("group"), ())
        if not isinstance(text, str) or not sockets:
            return
        frame = _WireFrame(text)
        for socket in list(sockets):
            try:
                if not frame.write(socket):
                    await socket.send(text_data=text)
            except Exception:  # the socket closed meanwhile; its disconnect leaves the group
                logger.debug("dropping a frame for a closed socket", exc_info=True)


class _WireFrame:
    """One frame's bytes on the wire, framed once for all the sockets of a process.

    Under Daphne a socket's ASGI ``send`` ends in its autobahn protocol, which frames the
    text again for every socket (UTF-8 encoding, the header) and passes through three
    coroutine layers on the way. Autobahn's own broadcast API (``prepareMessage`` on the
    factory, ``sendPreparedMessage`` on each protocol) frames once; ``write`` uses it
    when the socket's ``send`` is Daphne's (reached through Channels' session wrapper),
    with Daphne's own checks (the connection still known and not disconnected, the
    socket open), and returns False otherwise: the caller then sends through ASGI."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.prepared: dict[int, Any] = {}  # per autobahn factory

    def write(self, socket: AsyncWebsocketConsumer) -> bool:
        found = _daphne_protocol(socket)
        if found is None:
            return False
        server, protocol = found
        connection = server.connections.get(protocol)
        if connection is None or connection.get("disconnected"):
            return True  # what Daphne does with a frame for a gone connection: drops it
        if protocol.state != protocol.STATE_OPEN:
            return False
        factory = protocol.factory
        prepared = self.prepared.get(id(factory))
        if prepared is None:
            prepared = self.prepared[id(factory)] = factory.prepareMessage(
                self.text.encode("utf-8")
            )
        protocol.sendPreparedMessage(prepared)
        return True


def _daphne_protocol(socket: AsyncWebsocketConsumer) -> tuple[Any, Any] | None:
    """(Daphne's server, the socket's autobahn protocol) when the socket's ASGI ``send``
    is Daphne's ``partial(server.handle_reply, protocol)``, found under at most a few
    wrappers that keep the inner ``send`` as ``real_send`` (Channels' sessions), and the
    socket's class does not override ``send``."""
    if type(socket).send is not AsyncWebsocketConsumer.send:
        return None  # a socket with a send of its own gets every frame through it
    send = getattr(socket, "base_send", None)
    for _ in range(4):
        if isinstance(send, functools.partial):
            server = getattr(send.func, "__self__", None)
            protocol = send.args[0] if len(send.args) == 1 else None
            if (
                getattr(send.func, "__name__", "") == "handle_reply"
                and hasattr(server, "connections")
                and hasattr(protocol, "sendPreparedMessage")
                and hasattr(protocol, "factory")
            ):
                return server, protocol
            return None
        send = getattr(getattr(send, "__self__", None), "real_send", None)
        if send is None:
            return None
    return None


_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Hub]" = weakref.WeakKeyDictionary()


def _hub() -> _Hub:
    loop = asyncio.get_running_loop()
    layer = get_channel_layer()
    hub = _hubs.get(loop)
    if hub is None or hub.layer is not layer:
        hub = _hubs[loop] = _Hub(layer)
    return hub


class GroupSocket(AsyncWebsocketConsumer):
    """A websocket that hears one group's frames, forwarded as they are (the text was
    encoded once by ``group_send``). Subclasses check the user, ``accept()`` and then
    ``group_join``: only accepted sockets get frames."""

    group: str | None = None

    @property
    def channel_layer_alias(self) -> str:  # read by AsyncConsumer.__call__
        return "default" if _per_socket() else _NO_LAYER

    async def group_join(self, group: str) -> None:
        self.group = group
        if _per_socket():
            await self.channel_layer.group_add(group, self.channel_name)
        else:
            await _hub().join(group, self)

    async def disconnect(self, code: int) -> None:
        if self.group is None:
            return
        if _per_socket():
            await self.channel_layer.group_discard(self.group, self.channel_name)
        else:
            await _hub().leave(self.group, self)

    async def realtime_frame(self, event: dict) -> None:
        """The per-socket reference path's handler."""
        await self.send(text_data=event["text"])
