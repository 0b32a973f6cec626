"""The operator page's live desktop (docs/human-baseline.md): the socket that streams the
operator's own lane (``battles.live_consumers.LiveDesktopSocket``), for the person who
may drive it and nobody else. The page itself is ``agents.operator_views``; this lives
in battles because the live frames do."""

from agents.human import lane_for_operator
from arena_site.exceptions import ApplicationError
from battles.live_consumers import LiveDesktopSocket


class OperatorLiveConsumer(LiveDesktopSocket):
    """``/ws/operate/lanes/<run_id>/live/``: the lane's frames for an operator of its
    human entrant while the lane has not ended (untaken, or taken by them). Anyone else
    (another team's operator, a member who is no operator, a judge, staff) gets the
    socket closed with 4404, as for a lane that does not exist; receive-only like every
    live desktop."""

    @property
    def run_id(self) -> int:
        return self.scope["url_route"]["kwargs"]["run_id"]

    def live_run_ids(self, user) -> list[int]:
        try:
            lane, _ = lane_for_operator(user=user, run_id=self.run_id)
        except ApplicationError:
            return []
        return [lane.run_id] if lane.ended_at is None else []
