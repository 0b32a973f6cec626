"""RQ jobs of offline evaluations: primitive ids in, one service call."""

import logging
import threading
import time
from collections.abc import Callable

from structlog.contextvars import bound_contextvars

from arena_site.realtime import group_send
from evals.presenters import progress_group, render_progress
from evals.services import evaluation_execute

# At most this many live frames a second per evaluation (plus one at the end): the page
# re-reads its results over HTTP when a frame arrives, so more would only cost queries.
FRAME_INTERVAL_S = 0.25

logger = logging.getLogger(__name__)


def evaluation_publish(evaluation_id: int) -> None:
    """Tells the evaluation's live pages where it stands: the progress fragment, which
    they swap in, and on which they re-read the results. Delivery is at most once; a
    page that missed a frame catches up with the next, or on reconnecting. Never
    raises: a frame that cannot be made must not stop the evaluation."""
    try:
        html = render_progress(evaluation_id)
    except Exception:
        logger.exception("rendering the progress of evaluation %s failed", evaluation_id)
        return
    group_send(progress_group(evaluation_id), {"type": "evaluation.progress", "html": html})


class Throttled:
    """Calls ``publish`` on the first tick and then at most once per ``interval``;
    ticks in between are dropped (the next frame carries their counts). Thread-safe:
    the execution's pool ticks from its threads."""

    def __init__(
        self,
        publish: Callable[[], None],
        *,
        interval: float = FRAME_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.publish, self.interval, self.clock = publish, interval, clock
        self._last: float | None = None
        self._lock = threading.Lock()

    def __call__(self, _label: str = "") -> None:
        with self._lock:
            now = self.clock()
            if self._last is not None and now - self._last < self.interval:
                return
            self._last = now
        self.publish()


def evaluation_run(evaluation_id: int) -> None:
    """Enqueued on the ``evals`` queue when an evaluation is created (and again to
    resume one): runs what it is missing, publishing its progress to the live page.
    Idempotent: a second job finds nothing left."""
    publish = Throttled(lambda: evaluation_publish(evaluation_id))
    # its log lines carry evaluation_id (arena_site/logs.py)
    with bound_contextvars(evaluation_id=evaluation_id):
        try:
            evaluation_execute(evaluation_id=evaluation_id, progress=publish)
        finally:
            evaluation_publish(evaluation_id)  # the last word: done, cancelled or stopped
