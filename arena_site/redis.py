"""One Redis client per process for the arena's own hot-path commands (rate counters,
push coalescing, enqueues from request handlers). ``django_rq.get_connection`` builds
a new client, and so a new TCP connection, on every call; this one keeps a pool."""

from functools import cache

import django_rq
import redis
from django.conf import settings
from rq import Queue


@cache
def redis_client() -> redis.Redis:
    """The pooled client for ``settings.REDIS_URL`` (thread-safe)."""
    return redis.Redis.from_url(settings.REDIS_URL)


def queue(name: str) -> Queue:
    """The django-rq queue ``name`` on the pooled client."""
    return django_rq.get_queue(name, connection=redis_client())
