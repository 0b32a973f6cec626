"""Publishing to Channels groups. Delivery is at most once and always after the commit
that made the state it describes, so a client that reads the database sees as much."""

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)


def group_send(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # a dropped frame is re-synced over HTTP; never fail the writer
        logger.exception("publishing to %s failed", group)


def publish_after_commit(group: str, message: dict[str, Any]) -> None:
    transaction.on_commit(lambda: group_send(group, message))
