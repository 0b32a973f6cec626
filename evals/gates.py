"""How many of an evaluation's calls may be in flight at once against one provider
endpoint, counted across every evaluation worker of the arena (every process, every
host that shares its Redis), not per job: two evaluations on two workers together stay
within ``ARENA_EVAL_PROVIDER_CONCURRENCY`` per endpoint.

A counting semaphore in Redis: one sorted set per endpoint whose members are the
holders' tokens, scored by when their lease runs out (Redis's own clock, so hosts need
not agree on the time). Taking a place is one script: drop the expired leases, then add
this token if fewer than ``limit`` remain. A holder's lease is renewed by a keeper
thread while it holds it; a worker that dies (SIGKILL, a lost host) stops renewing, and
its places come free within ``LEASE_S``. Written here because no maintained library on
the registry offers a Redis counting semaphore with expiring leases (python-redis-lock
and pottery's Redlock are mutexes; portalocker's semaphore is files on one host)."""

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.core.cache import cache

from arena_site.perprocess import PerProcess
from arena_site.redis import redis_client

LEASE_S = 30.0  # a dead holder's place comes free within this long
RENEW_EVERY_S = LEASE_S / 3
POLL_S = (0.01, 0.2)  # waiting for a place: first and longest pause between tries

_TAKE = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[3]), ARGV[2])
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) * 2)
    return 1
end
return 0
"""
_RENEW = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
for i = 1, #ARGV - 1 do
    redis.call('ZADD', KEYS[1], 'XX', now_ms + tonumber(ARGV[#ARGV]), ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[#ARGV]) * 2)
return 1
"""


def gate_key(endpoint: str) -> str:
    return cache.make_key(f"eval-gate:{endpoint}")


class Gates:
    """The places held by this process, renewed by one keeper thread while any is held."""

    def __init__(self, lease_s: float = LEASE_S) -> None:
        self.lease_ms = int(lease_s * 1000)
        self.renew_every_s = lease_s / 3
        self._held: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._keeper: threading.Thread | None = None
        redis = redis_client()
        self._take = redis.register_script(_TAKE)
        self._renew = redis.register_script(_RENEW)

    @contextmanager
    def hold(
        self, endpoint: str, *, limit: int, cancelled: Callable[[], bool] = lambda: False
    ) -> Iterator[bool]:
        """Waits for a place at ``endpoint`` (at most ``limit`` holders arena-wide) and
        holds it for the block. Yields False, holding nothing, when ``cancelled`` turned
        true while waiting."""
        key, token = gate_key(endpoint), secrets.token_hex(8)
        pause = POLL_S[0]
        while not self._take(keys=[key], args=[limit, token, self.lease_ms]):
            if cancelled():
                yield False
                return
            time.sleep(pause)  # a place frees when a call ends: poll, backing off
            pause = min(pause * 2, POLL_S[1])
        with self._lock:
            self._held.setdefault(key, set()).add(token)
            if self._keeper is None or not self._keeper.is_alive():
                self._keeper = threading.Thread(target=self._keep, name="eval-gates", daemon=True)
                self._keeper.start()
        try:
            yield True
        finally:
            with self._lock:
                self._held[key].discard(token)
                if not self._held[key]:
                    del self._held[key]
            redis_client().zrem(key, token)

    def _keep(self) -> None:
        """Renews every held lease until nothing is held."""
        while True:
            time.sleep(self.renew_every_s)
            with self._lock:
                held = {key: sorted(tokens) for key, tokens in self._held.items()}
                if not held:
                    self._keeper = None
                    return
            for key, tokens in held.items():
                self._renew(keys=[key], args=[*tokens, self.lease_ms])


# A forked child holds none of its parent's places and has no keeper thread: it
# makes its own gates on first use.
_gates: PerProcess[Gates] = PerProcess(Gates)


def gates() -> Gates:
    """This process's gates (one keeper thread per process)."""
    return _gates.get()
