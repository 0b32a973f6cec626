"""What a bearer token's request needs from Redis, in one round trip (docs/security.md
"API tokens").

The token's entry lives in the shared Redis, keyed by the token's SHA-256 digest (never
the plain token): a hash of what ``request.user`` is built from (``FIELDS``), for at
most ``ENTRY_TTL_S``. Redis, not each process's memory, because a revocation must reach
every web process at once: ``forget`` replaces the entries of revoked tokens (and of
deactivated, changed or deleted users) with a tombstone, which no request can fill
again while it lasts; a request that finds no entry (or a tombstone) reads the database.

One script call per request (``look_up``) does everything the request needs before its
view runs: the client address's failed-token count (``accounts.throttling.BAD_TOKENS``:
once spent, nothing else is done), the token's entry, its last-used time (``HSET`` into
one hash that ``api_tokens_last_used_flush`` writes to the database in one statement a
minute) and the per-user rate counters the view names (``arena_site.ratelimit
.UserWindow``). The script builds those counters' keys from the user id it read, so the
arena's Redis must be one server (not a cluster), as it is."""

import time
from dataclasses import dataclass, field

from django.core.cache import cache

from arena_site.ratelimit import FixedWindow, UserWindow
from arena_site.redis import redis_client

ENTRY_TTL_S = 60  # the backstop: an entry no revocation reached is gone after this
TOMBSTONE_TTL_S = 2 * ENTRY_TTL_S
# The entry's fields: token id, user id, username, is_staff, is_superuser (an entry
# exists only for a live token of an active user).
FIELDS = ("t", "u", "n", "s", "S")

_LOOK_UP = """
local bad = tonumber(redis.call('GET', KEYS[1]) or '0')
local windows = tonumber(ARGV[3])
local at = 4 + 3 * windows
local entry, user, token
if ARGV[at] == '' then
    if bad >= tonumber(ARGV[1]) then
        return {bad}
    end
    entry = redis.call('HGETALL', KEYS[2])
else
    -- the database said yes: the entry, unless a tombstone holds the place
    entry = {}
    for i = at + 1, #ARGV do entry[#entry + 1] = ARGV[i] end
    if redis.call('EXISTS', KEYS[2]) == 0 then
        redis.call('HSET', KEYS[2], unpack(entry))
        redis.call('EXPIRE', KEYS[2], tonumber(ARGV[at]))
    end
end
for i = 1, #entry, 2 do
    if entry[i] == 'u' then user = entry[i + 1] elseif entry[i] == 't' then token = entry[i + 1] end
end
if not user then
    return {bad, {}}
end
redis.call('HSET', KEYS[3], token, ARGV[2])
local counts = {}
for i = 0, windows - 1 do
    local key = ARGV[4 + 3 * i] .. user .. ARGV[5 + 3 * i]
    counts[#counts + 1] = redis.call('INCR', key)
    redis.call('EXPIRE', key, tonumber(ARGV[6 + 3 * i]))
end
return {bad, entry, counts}
"""

# Drops the last-used times just written to the database, unless a request wrote a
# newer one meanwhile. ARGV: token id, time, token id, time, …
_LAST_USED_DROP = """
local dropped = 0
for i = 1, #ARGV, 2 do
    if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
        dropped = dropped + redis.call('HDEL', KEYS[1], ARGV[i])
    end
end
return dropped
"""


def entry_key(digest: str) -> str:
    return cache.make_key(f"api-token:{digest}")


def last_used_key() -> str:
    return cache.make_key("api-token-last-used")


@dataclass(frozen=True)
class LookUp:
    """What one round trip found: the Retry-After when the client address has spent its
    failed tokens (else None); the entry (None when there is none: read the database);
    what each named window counted."""

    refused_for: int | None
    entry: dict[str, str] | None = None
    counted: dict[str, int] = field(default_factory=dict)


def entry_for(*, token_id: int, user) -> dict[str, str]:
    """The entry of a live token of an active user (``FIELDS``)."""
    return {
        "t": str(token_id),
        "u": str(user.pk),
        "n": user.get_username(),
        "s": "1" if user.is_staff else "0",
        "S": "1" if user.is_superuser else "0",
    }


def look_up(
    *,
    digest: str,
    address: str,
    bad_tokens: FixedWindow,
    windows: tuple[UserWindow, ...] = (),
    fill: dict[str, str] | None = None,
) -> LookUp:
    """The round trip of a bearer request (the module docstring). With ``fill`` (the
    entry just read from the database) it is stored unless a tombstone holds its place,
    and the request is counted as its user's whatever the tombstone says (the
    database's answer stands for this request). Without ``fill``, nothing is counted
    once the address has spent its failed tokens (``bad_tokens >= bad_tokens.limit``)."""
    now = time.time()
    bad_key, bad_window = bad_tokens.key(address, now)
    args: list[str | int] = [bad_tokens.limit, int(now), len(windows)]
    for window in windows:
        args.extend((*window.key_parts(now), window.ttl_s))
    if fill is None:
        args.append("")
    else:
        args.append(ENTRY_TTL_S)
        for name in FIELDS:
            args.extend((name, fill[name]))
    reply = _script(_LOOK_UP)(keys=[bad_key, entry_key(digest), last_used_key()], args=args)
    refused_for = (
        bad_tokens.retry_after(int(reply[0]), bad_window, now) if len(reply) == 1 else None
    )
    if len(reply) == 1 or not reply[1]:
        return LookUp(refused_for=refused_for)
    flat = [value.decode() for value in reply[1]]
    entry = dict(zip(flat[::2], flat[1::2], strict=True))
    counted = {window.name: int(n) for window, n in zip(windows, reply[2], strict=True)}
    return LookUp(refused_for=None, entry=entry, counted=counted)


def forget(digests: list[str]) -> None:
    """Tombstones in place of these tokens' entries, for ``TOMBSTONE_TTL_S``: every web
    process reads the database for them from the next request on. Raises when Redis is
    unreachable (the caller's change must not go ahead as if it had worked)."""
    if not digests:
        return
    with redis_client().pipeline() as pipe:
        for digest in digests:
            key = entry_key(digest)
            pipe.delete(key).hset(key, "gone", "1").expire(key, TOMBSTONE_TTL_S)
        pipe.execute()


def last_used_taken() -> dict[int, int]:
    """The last-used times written since the last flush: token id → epoch seconds."""
    stored = redis_client().hgetall(last_used_key())
    return {int(token): int(at) for token, at in stored.items()}


def last_used_drop(taken: dict[int, int]) -> None:
    """Drops what ``last_used_taken`` returned, except times written since."""
    if taken:
        args = [str(value) for pair in taken.items() for value in pair]
        _script(_LAST_USED_DROP)(keys=[last_used_key()], args=args)


_scripts: dict[str, object] = {}


def _script(source: str):
    """The registered script (EVALSHA; redis-py loads it again after a Redis restart)."""
    script = _scripts.get(source)
    if script is None:
        script = _scripts[source] = redis_client().register_script(source)
    return script
