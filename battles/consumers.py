"""Live battle page: the panel's HTML, re-rendered by the writer after every change and
relayed here as it is (arena_site/realtime.py); on (re)connect the consumer sends the
current panel, so a page that missed frames re-syncs."""

from channels.db import database_sync_to_async
from django.http import Http404

from arena_site.realtime import GroupSocket
from battles.presenters import render_battle_panel
from battles.selectors import access_battle

CLOSE_NOT_FOUND = 4404


class BattleConsumer(GroupSocket):
    async def connect(self) -> None:
        user = self.scope.get("user")
        battle_id = self.scope["url_route"]["kwargs"]["battle_id"]
        if user is None or not user.is_authenticated or not await self._may_watch(user, battle_id):
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.accept()
        # Joined before the panel is rendered: a change after the render is heard.
        await self.group_join(f"battle-{battle_id}")
        await self.send(text_data=await self._panel(battle_id))

    @database_sync_to_async
    def _may_watch(self, user, battle_id: int) -> bool:
        try:
            access_battle(user, battle_id)
        except Http404:
            return False
        return True

    @database_sync_to_async
    def _panel(self, battle_id: int) -> str:
        return render_battle_panel(battle_id)
