"""A judge's own socket: the judge page hears here that a battle it shows was decided by
other judges (its result is public now, so a vote from this judge would not count).
Only the signed-in judge's own group; nothing is sent on connect (a page that missed
a frame learns the same from its vote's answer)."""

from channels.generic.websocket import AsyncWebsocketConsumer

from judging.services.decisions import judge_group

CLOSE_NOT_AUTHENTICATED = 4401


class JudgeConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_NOT_AUTHENTICATED)
            return
        self.group = judge_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def judge_voided(self, event: dict) -> None:
        await self.send(text_data=event["html"])
