"""A judge's own socket: the judge page hears here that a battle it shows was decided by
other judges (its result is public now, so a vote from this judge would not count).
Only the signed-in judge's own group, and only while that session is signed in (it
closes on log-out: ``TenantSocket``); nothing is sent on connect (a page that missed a
frame learns the same from its vote's answer)."""

from arena_site.realtime import TenantSocket
from judging.services.decisions import judge_group

CLOSE_NOT_AUTHENTICATED = 4401


class JudgeConsumer(TenantSocket):
    close_code = CLOSE_NOT_AUTHENTICATED

    def data_group(self) -> str:
        return judge_group(self.user_id)

    def may_watch(self, user) -> bool:
        return True  # the judge's own notices: any signed-in user has theirs
