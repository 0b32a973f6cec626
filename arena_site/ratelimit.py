"""Who is asking and how often: the client address that per-address limits count, and
fixed-window counters in the shared Redis (every web process counts together): per
subject (``FixedWindow``) and per user (``UserWindow``, which a bearer token's
authentication counts in its own round trip when the view names it).

The address is ``REMOTE_ADDR``. Behind reverse proxies listed in
``settings.TRUSTED_PROXIES`` it is the nearest ``X-Forwarded-For`` hop that is not one
of them (a client can prepend anything to that header; only what our proxies appended
is believed). IPv6 clients are counted per /64, the block one host usually holds."""

import math
import time
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

from arena_site.redis import redis_client


def _parse(text: str) -> IPv4Address | IPv6Address | None:
    try:
        address = ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _trusted(address: IPv4Address | IPv6Address) -> bool:
    return any(address in network for network in settings.TRUSTED_PROXIES)


def _subject(address: IPv4Address | IPv6Address) -> str:
    if isinstance(address, IPv6Address):
        return str(ip_network(f"{address}/64", strict=False).network_address)
    return str(address)


def client_address(request: HttpRequest) -> str:
    """The address a request is counted under (see the module docstring); the raw
    ``REMOTE_ADDR`` when it is not an IP address (a Unix-socket peer)."""
    remote = request.META.get("REMOTE_ADDR", "")
    peer = _parse(remote)
    if peer is None:
        return remote
    if _trusted(peer):
        hops = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        for hop in reversed(hops):
            address = _parse(hop)
            if address is None:
                break  # a garbled hop: believe nothing further left
            if not _trusted(address):
                return _subject(address)
    return _subject(peer)


@dataclass(frozen=True)
class FixedWindow:
    """At most ``limit`` events per subject in each ``window_s``-second window (windows
    are aligned to the epoch, so a burst across a boundary can reach twice the limit)."""

    name: str
    limit: int
    window_s: int

    def key(self, subject: str, now: float) -> tuple[str, int]:
        """The counter's Redis key for ``subject`` at ``now``, and the window's number."""
        window = int(now // self.window_s)
        return cache.make_key(f"rate:{self.name}:{subject}:{window}"), window

    def retry_after(self, count: int, window: int, now: float) -> int | None:
        """None while ``count`` events leave room for another, else the seconds until
        the window ends (the Retry-After)."""
        if count < self.limit:
            return None
        return max(1, math.ceil((window + 1) * self.window_s - now))

    def hit(self, subject: str) -> int | None:
        """Counts one event; None while within the limit, else the seconds until the
        window ends (the Retry-After)."""
        now = time.time()
        key, window = self.key(subject, now)
        # INCR and EXPIRE in one round trip
        with redis_client().pipeline() as pipe:
            count, _ = pipe.incr(key).expire(key, self.window_s + 60).execute()
        return self.retry_after(count - 1, window, now)

    def exhausted(self, subject: str) -> int | None:
        """Counts nothing; the seconds until the window ends when ``limit`` events are
        already in it, else None (one GET)."""
        now = time.time()
        key, window = self.key(subject, now)
        return self.retry_after(int(redis_client().get(key) or 0), window, now)


@dataclass(frozen=True)
class UserWindow:
    """A per-user count of requests in each ``window_s``-second window (aligned to the
    epoch); the limit is the caller's (it may be a setting read per request).

    A view lists the windows its requests count in ``rate_windows`` (by HTTP method):
    a bearer token's authentication then counts them in the same Redis round trip as
    the token itself (``accounts.token_cache``), and the view hands the count on
    (``counted_in_request``). A request authenticated otherwise (a session) is counted
    by ``count``."""

    name: str  # the counter's key is <cache prefix>:<name>:<user id>:<window>
    window_s: int = 60

    def key_parts(self, now: float) -> tuple[str, str]:
        """The key around the user id, for a script that knows only the id."""
        window = int(now // self.window_s)
        return cache.make_key(f"{self.name}:"), f":{window}"

    @property
    def ttl_s(self) -> int:
        return self.window_s * 2

    def count(self, user_id: int) -> int:
        """Counts one request of the user; the count in the window so far."""
        prefix, suffix = self.key_parts(time.time())
        key = f"{prefix}{user_id}{suffix}"
        # INCR and EXPIRE in one round trip
        with redis_client().pipeline() as pipe:
            count, _ = pipe.incr(key).expire(key, self.ttl_s).execute()
        return count

    def retry_after(self, now: float) -> int:
        """The seconds until the current window ends."""
        return max(1, math.ceil((int(now // self.window_s) + 1) * self.window_s - now))


def counted_in_request(request, window: UserWindow) -> int | None:
    """What the request's authentication counted in ``window`` (None: nothing, count it
    now)."""
    return getattr(getattr(request, "auth", None), "counted", {}).get(window.name)


def downloads_count(request: HttpRequest, *, name: str, what: str, instead: str = "") -> None:
    """Counts one download of ``name`` (open data, environment packages) against the
    client address's hourly ARENA_EXPORT_RATE_PER_HOUR; raises 429 ``rate_limited``
    with Retry-After when over it. ``what`` names the downloads in the message,
    ``instead`` says what else to do."""
    # Imported here: DRF's settings load the authentication classes, which load this
    # module, while arena_site.exceptions (which imports DRF) is still initialising.
    from arena_site.exceptions import ApplicationError

    limit = settings.ARENA.export_rate_per_hour
    retry = FixedWindow(name, limit, 3600).hit(client_address(request))
    if retry is not None:
        raise ApplicationError(
            f"At most {limit} {what} an hour per address; try again in {retry} s{instead}.",
            code="rate_limited",
            status=429,
            headers={"Retry-After": str(retry)},
            extra={"retry_after_s": retry},
        )
