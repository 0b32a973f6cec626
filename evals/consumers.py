"""The live run page's socket: the evaluation's progress fragment, as the job publishes
it (evals.jobs, throttled) and once on every (re)connect, so a page that missed frames
re-syncs; the page then re-reads its results over HTTP (static/evals/evaluation.js)."""

from channels.db import database_sync_to_async
from django.http import Http404

from arena_site.realtime import GroupSocket
from evals.presenters import access_evaluation, progress_group, render_progress

CLOSE_NOT_FOUND = 4404  # as the battle socket: another team's evaluation does not exist


class EvaluationConsumer(GroupSocket):
    async def connect(self) -> None:
        user = self.scope.get("user")
        evaluation_id = self.scope["url_route"]["kwargs"]["evaluation_id"]
        if (
            user is None
            or not user.is_authenticated
            or not await self._may_watch(user, evaluation_id)
        ):
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.accept()
        # Joined before the fragment is rendered: a change after the render is heard.
        await self.group_join(progress_group(evaluation_id))
        await self.send(text_data=await self._progress(evaluation_id))

    @database_sync_to_async
    def _may_watch(self, user, evaluation_id: int) -> bool:
        try:
            access_evaluation(user, evaluation_id)
        except Http404:
            return False
        return True

    @database_sync_to_async
    def _progress(self, evaluation_id: int) -> str:
        return render_progress(evaluation_id)
