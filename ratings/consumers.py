"""The leaderboard socket: public, read-only, relays re-rendered rows."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from agents.models import Arena
from ratings.services import LEADERBOARD_GROUP, leaderboard_html, leaderboard_served


class LeaderboardConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        await self.channel_layer.group_add(LEADERBOARD_GROUP, self.channel_name)
        await self.accept()
        await self.send(text_data=await self._rows())

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(LEADERBOARD_GROUP, self.channel_name)

    async def leaderboard_update(self, event: dict) -> None:
        await self.send(text_data=event["html"])

    @database_sync_to_async
    def _rows(self) -> str:
        arena_id = Arena.objects.public().pk
        leaderboard_served(arena_id=arena_id)
        return leaderboard_html(arena_id=arena_id)
