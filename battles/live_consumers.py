"""The live desktops' socket (issue 39): ``/ws/battles/<id>/live/`` carries the frames of
both lanes of a running battle (``battles.services.live_frames``) to its page.

Who may watch: the battle's team and staff, the ones who see its page while it runs. A
judge never does, even one the battle page admits: a running battle has not been
screened (the leak scan, exclusion rules 1–5), and what a judge sees is the recorded
steps after screening. Anyone else gets the socket closed with 4404, and it closes
later as the battle page's socket does (``TenantSocket``: log-out, a membership
removed, the periodic check).

Receive-only: nothing a page sends reaches anything. A socket that sends a message is
closed with 4405 and its message dropped unread, so no viewer's input has a path into
a lane.

A page with another audience (a human operator watching their own lane) subclasses
``LiveDesktopSocket``: ``live_run_ids(user)`` answers the runs that user may watch (an
empty list: refused; it runs in a thread, the ORM may be used), e.g.::

    class OperatorLiveConsumer(LiveDesktopSocket):
        def live_run_ids(self, user) -> list[int]:
            run_id = self.scope["url_route"]["kwargs"]["run_id"]
            return [run_id] if <user operates that run> else []

    # arena_site/routing.py
    path("ws/operate/<int:run_id>/live/", OperatorLiveConsumer.as_asgi()),

and the page includes the widget with those runs and that socket::

    {% include "battles/_live_desktop.html" with lanes=runs live_socket=socket_path %}

(``lanes``: runs, each with ``.pk`` and ``.side``; ``socket_path`` such as
"/ws/operate/7/live/"). Frames come from the runs' groups only (``live-run-<id>``): a
socket for one run never carries another's screen. A lane streams whenever its sandbox
has a capturable screen (``battles.services.lanes`` wraps every lane's sandbox in
``live_desktop_stream``); no more is needed for a new page."""

import asyncio
import logging
import secrets

from channels.db import database_sync_to_async
from django.http import Http404

from arena_site.realtime import TenantSocket
from battles.selectors import access_battle, team_ids_of
from battles.services.live_frames import (
    VIEWER_REFRESH_S,
    live_group,
    live_viewer_forget,
    live_viewer_mark,
)

logger = logging.getLogger(__name__)

CLOSE_NOT_FOUND = 4404
CLOSE_RECEIVE_ONLY = 4405


class LiveDesktopSocket(TenantSocket):
    """Frames of the runs ``live_run_ids`` names, while the socket is open; it counts as
    a viewer of each (the grabbers run only while some socket does)."""

    close_code = CLOSE_NOT_FOUND

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.run_ids: list[int] = []
        self.viewer = secrets.token_hex(8)
        self._marker: asyncio.Future | None = None
        self._forgotten = False

    def live_run_ids(self, user) -> list[int]:  # pragma: no cover - abstract
        raise NotImplementedError

    def may_watch(self, user) -> bool:
        run_ids = self.live_run_ids(user)
        if run_ids and not self.run_ids:
            self.run_ids = run_ids
        return bool(run_ids)

    def data_group(self) -> str:
        return live_group(self.run_ids[0])

    async def connect(self) -> None:
        await super().connect()
        if self.user_id is None or self._closing:
            return  # refused
        for run_id in self.run_ids[1:]:
            await self.group_join(live_group(run_id))
        self._marker = asyncio.ensure_future(self._mark_periodically())

    async def _mark_periodically(self) -> None:
        mark = database_sync_to_async(live_viewer_mark)  # (a thread: Redis is blocking here)
        while not self._closing:
            try:
                await mark(run_ids=self.run_ids, viewer=self.viewer)
            except Exception:  # Redis away: no frames meanwhile, the socket stays
                logger.warning("marking a live viewer failed", exc_info=True)
            await asyncio.sleep(VIEWER_REFRESH_S)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """Receive-only: any message closes the socket, unread."""
        self._relaying = False
        if not self._closing:
            self._closing = True
            await self.groups_leave()
            await self._forget()
            await self.close(code=CLOSE_RECEIVE_ONLY)

    async def shut(self) -> None:
        await super().shut()
        await self._forget()  # at once, not when the page's disconnect comes

    async def disconnect(self, code: int) -> None:
        await self._forget()
        await super().disconnect(code)

    async def _forget(self) -> None:
        """This socket watches no more: its marks go (idempotent)."""
        marker, self._marker = self._marker, None
        if marker is not None:
            marker.cancel()
        if not self.run_ids or self.user_id is None or self._forgotten:
            return
        self._forgotten = True
        try:
            await database_sync_to_async(live_viewer_forget)(
                run_ids=self.run_ids, viewer=self.viewer
            )
        except Exception:  # it lapses by itself (VIEWER_TTL_S)
            logger.warning("forgetting a live viewer failed", exc_info=True)


class BattleLiveConsumer(LiveDesktopSocket):
    """Both lanes of a battle, for its team and staff (never its judges)."""

    @property
    def battle_id(self) -> int:
        return self.scope["url_route"]["kwargs"]["battle_id"]

    def live_run_ids(self, user) -> list[int]:
        try:
            battle = access_battle(user, self.battle_id)
        except Http404:
            return []
        if not user.is_staff and battle.team_id not in team_ids_of(user):
            return []  # a judge served it: the recorded, screened steps only
        return list(battle.runs.order_by("side").values_list("pk", flat=True))
