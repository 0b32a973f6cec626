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

A socket of a team's data (``TenantSocket``: a battle, an evaluation, a judge's own
notices) closes when its user may no longer hear it: at once on log-out and when a
membership is removed (a control message to the user's group, ``user-<id>``), and
otherwise within ARENA_REALTIME_RECHECK_S, when it checks its session and access again
(docs/security.md, "Live sockets").

``ARENA_REALTIME_FANOUT=socket`` is the old per-socket path (every socket a group member
with its own channel), kept as the same-run reference of tests/bench/bench_push.py; it
has no re-join.
"""

import asyncio
import functools
import hashlib
import logging
import random
import weakref
from collections.abc import Coroutine
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.models import AnonymousUser
from django.db import transaction

from arena_site import strict_json

logger = logging.getLogger(__name__)

# The layer message every frame travels in; its handler on a socket is ``realtime_frame``.
FRAME_TYPE = "realtime.frame"
# A control message to sockets (check your access again, your session ended); its
# handler on a socket is ``realtime_control`` (the hub calls ``on_control``).
CONTROL_TYPE = "realtime.control"
# A channel-layer alias no settings define: a socket of the hub path gets no layer (and no
# layer channel) of its own.
_NO_LAYER = "realtime-socket-has-no-layer"
# After a failed receive, wait this long before the next (Redis is down or restarting).
_RETRY_S = 0.5
_jitter = random.Random()  # noqa: S311 - spreads timers, guards nothing
# Control messages being handled (see ``GroupSocket.on_control``).
_pending: set[asyncio.Future] = set()


def frame_text(message: dict[str, Any]) -> str:
    """The text a socket is sent for ``message``: its ``text``, else its ``html`` (the
    fragments the pages swap in), else the message as JSON without its ``type``."""
    for key in ("text", "html"):
        if isinstance(message.get(key), str):
            return message[key]
    frame = {k: v for k, v in message.items() if k != "type"}
    return strict_json.dumps(frame, separators=(",", ":"))  # a non-finite number is null


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
        if message.get("type") == CONTROL_TYPE:
            for socket in list(sockets):
                socket.on_control(message)
            return
        if not isinstance(text, str) or not sockets:
            return
        frame = _WireFrame(text)
        for socket in list(sockets):
            if not getattr(socket, "relaying", True):
                continue  # its access is being checked, or it is closing
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
    """A websocket that hears its groups' frames, forwarded as they are (the text was
    encoded once by ``group_send``). Subclasses check the user, ``accept()`` and then
    ``group_join``: only accepted sockets get frames. A socket that shows what only some
    users may see is a ``TenantSocket``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._joined: list[str] = []
        # False while the socket's access is being checked again, and once it closes:
        # frames for it are then dropped (``relaying``).
        self._relaying = True

    @property
    def channel_layer_alias(self) -> str:  # read by AsyncConsumer.__call__
        return "default" if _per_socket() else _NO_LAYER

    @property
    def relaying(self) -> bool:
        return self._relaying

    async def group_join(self, group: str) -> None:
        self._joined.append(group)
        if _per_socket():
            await self.channel_layer.group_add(group, self.channel_name)
        else:
            await _hub().join(group, self)

    async def groups_leave(self) -> None:
        joined, self._joined = self._joined, []
        for group in joined:
            if _per_socket():
                await self.channel_layer.group_discard(group, self.channel_name)
            else:
                await _hub().leave(group, self)

    async def disconnect(self, code: int) -> None:
        self._relaying = False
        await self.groups_leave()

    def on_control(self, message: dict) -> None:
        """A control message, from the hub's reader in order with the frames: what must
        hold for the frames after it (holding them back) is set here at once; the rest
        runs as a task, which the reader does not wait for."""
        work = self.control(message)
        if work is not None:
            task = asyncio.ensure_future(self._control_safely(work, message))
            _pending.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(_pending.discard)

    async def _control_safely(self, work: Coroutine, message: dict) -> None:
        try:
            await work
        except Exception:
            logger.exception("a socket failed to handle %s", message.get("action"))

    def control(self, message: dict) -> Coroutine | None:
        """The work a control message asks of this socket, None for none. A public socket
        has no access to lose: none."""
        return None

    async def realtime_frame(self, event: dict) -> None:
        """The per-socket reference path's handler."""
        if self._relaying:
            await self.send(text_data=event["text"])

    async def realtime_control(self, event: dict) -> None:
        """The per-socket reference path's handler of control messages (the consumer
        handles its messages one by one: the frames after it wait for the work)."""
        work = self.control(event)
        if work is not None:
            await self._control_safely(work, event)


# --- sockets that only some users may hear -------------------------------------------


def user_group(user_id: int) -> str:
    """The control group of a user's tenant sockets (no frame is ever sent to it)."""
    return f"user-{user_id}"


def session_digest(session_key: str | None) -> str:
    """How a control message names a session: never the key itself (a credential),
    which would sit in Redis."""
    return hashlib.sha256((session_key or "").encode()).hexdigest()


def control_send(group: str, message: dict[str, Any]) -> None:
    """Sends a control message (``action`` and its fields) to every socket of ``group``.
    Never raises: the periodic check (ARENA_REALTIME_RECHECK_S) covers a lost one."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, {**message, "type": CONTROL_TYPE, "group": group})
    except Exception:
        logger.exception("publishing %s to %s failed", message.get("action"), group)


def sockets_recheck(user_id: int) -> None:
    """The user's open tenant sockets check at once whether they may still hear what
    they hear (``TenantSocket``), and close if not: after a membership was removed."""
    control_send(user_group(user_id), {"action": "recheck"})


def sockets_session_ended(user_id: int, session_key: str | None) -> None:
    """The user's tenant sockets opened with that session close at once: it logged out.
    Their other sessions' sockets stay."""
    control_send(
        user_group(user_id), {"action": "session_ended", "session": session_digest(session_key)}
    )


def session_user(session_key: str | None) -> Any:
    """Who the session ``session_key`` signs in now, as Django decides for a request
    (the session exists, its backend and user are valid, its password hash still
    matches, the user is active), else ``AnonymousUser``. ORM: call from a thread."""
    if not session_key:
        return AnonymousUser()
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    return auth.get_user(SimpleNamespace(session=store))


class TenantSocket(GroupSocket):
    """A socket of what only some signed-in users may see: a team's battle or
    evaluation, a judge's own notices. ``connect`` lets in a signed-in user whom
    ``may_watch`` admits and closes the socket with ``close_code`` for anyone else.
    Afterwards the socket checks again that its session still signs in that user and
    that ``may_watch`` still admits them, and closes with ``close_code`` when not:

    - at once on log-out (``sockets_session_ended``: that session's sockets close
      without a query) and when a membership is removed (``sockets_recheck``); frames
      are held back (dropped) while this check runs, and a socket that passes re-sends
      its current state, so nothing published after the change reaches a socket that
      lost its access;
    - every ARENA_REALTIME_RECHECK_S seconds (a session that expired, a password
      changed, a user deactivated, a team deleted, a control message lost: channels'
      delivery is at most once).

    Subclasses define ``data_group`` and ``may_watch`` (and ``current_state`` to send
    on connect); the last two run in a thread, where the ORM may be used."""

    close_code = 4404

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user_id: int | None = None
        self._session: str = ""
        self._closing = False
        self._holding = 0  # checks running that hold frames back
        self._checker: asyncio.Future | None = None

    def data_group(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def may_watch(self, user: Any) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def current_state(self) -> str | None:
        """The text sent on connect (and after a check held frames back); None: none."""
        return None

    async def connect(self) -> None:
        user = self.scope.get("user")
        allowed = user is not None and user.is_authenticated
        if allowed:
            allowed = await database_sync_to_async(self.may_watch)(user)
        if not allowed:
            await self.close(code=self.close_code)
            return
        self.user_id = user.pk
        session = self.scope.get("session")
        self._session = session_digest(getattr(session, "session_key", None))
        await self.accept()
        await self.group_join(user_group(user.pk))
        # Joined before the state is rendered: a change after the render is heard.
        await self.group_join(self.data_group())
        await self._send_state()
        self._checker = asyncio.ensure_future(self._check_periodically())

    async def _send_state(self) -> None:
        state = await database_sync_to_async(self.current_state)()
        if state is not None and not self._closing:
            await self.send(text_data=state)

    def _still_allowed(self) -> bool:
        user = session_user(getattr(self.scope.get("session"), "session_key", None))
        return user.is_authenticated and user.pk == self.user_id and self.may_watch(user)

    def control(self, message: dict) -> Coroutine | None:
        if self._closing:
            return None
        action = message.get("action")
        if action == "session_ended" and message.get("session") == self._session:
            self._relaying = False
            return self.shut()
        if action == "recheck":
            self._holding += 1
            self._relaying = False
            return self._recheck(held=True)
        return None

    async def _recheck(self, *, held: bool) -> None:
        """Closes the socket unless its session and access still hold. A socket that
        held frames back meanwhile (``held``) and stays relays again and re-sends its
        state, as on connect. A failed check (the database away) closes it too: the page
        reconnects, and is let in again only once its access can be checked."""
        holding = held
        try:
            if self._closing:
                return
            try:
                allowed = await database_sync_to_async(self._still_allowed)()
            except Exception:
                logger.warning("checking a socket's access failed; closing it", exc_info=True)
                allowed = False
            if not allowed:
                await self.shut()
            elif held:
                self._release()
                holding = False
                await self._send_state()  # what was held back
        finally:
            if holding:
                self._release()

    def _release(self) -> None:
        self._holding -= 1
        self._relaying = not self._closing and self._holding == 0

    async def _check_periodically(self) -> None:
        period = settings.ARENA.realtime_recheck_s
        # Spread out: sockets opened together (a page reload) do not check together.
        await asyncio.sleep(period * _jitter.uniform(0.5, 1.0))
        while not self._closing:
            await self._recheck(held=False)
            await asyncio.sleep(period)

    async def shut(self) -> None:
        """Stops relaying, leaves the groups and closes with ``close_code``."""
        if self._closing:
            return
        self._closing = True
        self._relaying = False
        await self.groups_leave()
        await self.close(code=self.close_code)

    async def disconnect(self, code: int) -> None:
        self._closing = True
        checker, self._checker = self._checker, None
        if checker is not None and checker is not asyncio.current_task():
            checker.cancel()
        await super().disconnect(code)
