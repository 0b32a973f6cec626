"""Who is asking and how often: the client address that per-address limits count, and a
fixed-window counter in the shared Redis (every web process counts together).

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

    def _key(self, subject: str, now: float) -> tuple[str, int]:
        window = int(now // self.window_s)
        return cache.make_key(f"rate:{self.name}:{subject}:{window}"), window

    def _retry_after(self, window: int, now: float) -> int:
        return max(1, math.ceil((window + 1) * self.window_s - now))

    def hit(self, subject: str) -> int | None:
        """Counts one event; None while within the limit, else the seconds until the
        window ends (the Retry-After)."""
        now = time.time()
        key, window = self._key(subject, now)
        # INCR and EXPIRE in one round trip
        with redis_client().pipeline() as pipe:
            count, _ = pipe.incr(key).expire(key, self.window_s + 60).execute()
        return self._retry_after(window, now) if count > self.limit else None

    def exhausted(self, subject: str) -> int | None:
        """Counts nothing; the seconds until the window ends when ``limit`` events are
        already in it, else None (one GET)."""
        now = time.time()
        key, window = self._key(subject, now)
        count = int(redis_client().get(key) or 0)
        return self._retry_after(window, now) if count >= self.limit else None


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
