"""RQ jobs for ratings: primitive ids in, one service call."""

import logging

from agents.models import Arena
from ratings.category_boards import category_boards_refresh
from ratings.refit import arena_refit
from ratings.services import leaderboard_push as _leaderboard_push
from ratings.services import leaderboard_push_pending_clear

logger = logging.getLogger(__name__)


def ratings_refit(arena_id: int | None = None) -> list[int]:
    """The periodic refit (SPEC §7.2): one arena, or every arena that has battles, then
    its boards per task category. Returns the ids of the snapshots written."""
    if arena_id is not None:
        arena_ids = [arena_id]
    else:
        arenas = Arena.objects.filter(battles__isnull=False).distinct()
        arena_ids = list(arenas.values_list("pk", flat=True))
    written = []
    for pk in arena_ids:
        result = arena_refit(arena_id=pk)
        if result.snapshot is not None:
            written.append(result.snapshot.pk)
        try:  # the published board stands whatever happens to the category boards
            category_boards_refresh(arena_id=pk)
        except Exception:
            logger.exception("category boards of arena %s not refreshed", pk)
    return written


def leaderboard_push(arena_id: int) -> None:
    """The full board after a streaming change (the small frame went out already)."""
    leaderboard_push_pending_clear(arena_id=arena_id)
    _leaderboard_push(arena_id=arena_id)
