"""One Redis client per process for the arena's own hot-path commands (rate counters,
push coalescing, enqueues from request handlers). ``django_rq.get_connection`` builds
a new client, and so a new TCP connection, on every call; this one keeps a pool."""

import threading
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


class SharedConnectionPool(redis.ConnectionPool):
    """The pool class of the ``default`` cache (CACHES OPTIONS ``pool_class``). Django's
    RedisCache builds a pool per cache object and a cache object per thread; under
    Daphne every request runs in a thread of its own, so each request opened a new TCP
    connection to Redis. ``from_url`` hands every cache object of the process the same
    pool for a URL (redis-py pools are thread-safe and start afresh after a fork)."""

    _shared: dict[str, redis.ConnectionPool] = {}
    _lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **kwargs):
        with cls._lock:
            pool = cls._shared.get(url)
            if pool is None:
                pool = cls._shared[url] = super().from_url(url, **kwargs)
            return pool


# A probe (``/readyz``) or a scrape (``/metrics/prometheus``) must answer in time when
# Redis is away: connects and reads give up after this long.
PROBE_TIMEOUT_S = 1.0


@cache
def probe_client(url: str) -> redis.Redis:
    """A pooled client for ``url`` whose connects and reads time out after
    ``PROBE_TIMEOUT_S`` (thread-safe): for health checks and figures, never for jobs."""
    return redis.Redis.from_url(
        url, socket_timeout=PROBE_TIMEOUT_S, socket_connect_timeout=PROBE_TIMEOUT_S
    )
