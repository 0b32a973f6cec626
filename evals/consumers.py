"""The live run page's socket: the evaluation's progress fragment, as the job publishes
it (evals.jobs, throttled) and once on every (re)connect, so a page that missed frames
re-syncs; the page then re-reads its results over HTTP (static/evals/evaluation.js).
Only the evaluation's team hears it, and only while its user may see it
(``TenantSocket``: closed on log-out, on leaving the team, at the periodic check)."""

from django.http import Http404

from arena_site.realtime import TenantSocket
from evals.presenters import access_evaluation, progress_group, render_progress

CLOSE_NOT_FOUND = 4404  # as the battle socket: another team's evaluation does not exist


class EvaluationConsumer(TenantSocket):
    close_code = CLOSE_NOT_FOUND

    @property
    def evaluation_id(self) -> int:
        return self.scope["url_route"]["kwargs"]["evaluation_id"]

    def data_group(self) -> str:
        return progress_group(self.evaluation_id)

    def may_watch(self, user) -> bool:
        try:
            access_evaluation(user, self.evaluation_id)
        except Http404:
            return False
        return True

    def current_state(self) -> str:
        return render_progress(self.evaluation_id)
