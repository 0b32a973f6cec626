"""The leaderboard socket: public, read-only, relays re-rendered rows as they are
(arena_site/realtime.py)."""

from channels.db import database_sync_to_async

from agents.models import Arena
from arena_site.realtime import GroupSocket
from ratings.services import LEADERBOARD_GROUP, leaderboard_html, leaderboard_served


class LeaderboardConsumer(GroupSocket):
    async def connect(self) -> None:
        await self.accept()
        await self.group_join(LEADERBOARD_GROUP)
        await self.send(text_data=await self._rows())

    @database_sync_to_async
    def _rows(self) -> str:
        arena_id = Arena.objects.public().pk
        leaderboard_served(arena_id=arena_id)
        return leaderboard_html(arena_id=arena_id)
