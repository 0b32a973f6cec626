"""RQ jobs for sandboxes."""

import logging

from sandboxes.services import sandbox_janitor as _sandbox_janitor

logger = logging.getLogger(__name__)


def sandbox_janitor() -> int:
    reaped = _sandbox_janitor()
    if reaped:
        logger.warning("janitor reaped %d sandboxes left by dead workers", reaped)
    return reaped
