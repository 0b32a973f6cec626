"""A judge's own socket: the judge page hears here that a battle it shows was decided by
other judges (its result is public now, so a vote from this judge would not count).
Only the signed-in judge's own group; nothing is sent on connect (a page that missed
a frame learns the same from its vote's answer)."""

from arena_site.realtime import GroupSocket
from judging.services.decisions import judge_group

CLOSE_NOT_AUTHENTICATED = 4401


class JudgeConsumer(GroupSocket):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_NOT_AUTHENTICATED)
            return
        await self.accept()
        await self.group_join(judge_group(user.pk))
