"""Name resolution for the address policy: the resolver's shape, the system resolver,
and the bound on lookups (:class:`LookupPool`): a few in flight per owner, each with a
timeout, so a resolver that hangs for one sandbox or lane holds up only that one."""

import concurrent.futures
import ipaddress
import socket
import threading
from collections.abc import Callable

from sandboxes.netpolicy_addresses import LOOKUP_LIMIT, LOOKUP_TIMEOUT, EgressRefused, IPAddress

# (host name, port) -> every address the name resolves to. Blocking; may raise OSError.
Resolver = Callable[[str, int], list[IPAddress]]


def default_resolver(host: str, port: int) -> list[IPAddress]:
    """Resolve through the system resolver (blocking). Raises OSError on failure."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    # sockaddr[0] is text, with "%zone" for scoped v6; drop the zone like parse_host.
    return [ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in infos]


class LookupPool:
    """At most ``limit`` lookups in flight for one owner (a sandbox, a lane), each on
    a daemon thread of its own.

    A lookup that hangs keeps its slot until the resolver returns; its caller stops
    waiting at its own timeout. Over the limit, :meth:`submit` refuses at once
    (``lookup_limit``) instead of queueing, so hung lookups never pile up behind each
    other and never take threads from anyone else. Daemon threads: a getaddrinfo that
    never returns cannot hold up the process's exit. Thread-safe.
    """

    def __init__(self, limit: int, *, name: str = "lookup") -> None:
        if limit < 1:
            raise ValueError("a lookup pool needs at least one slot")
        self.limit = limit
        self.name = name
        self._lock = threading.Lock()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def submit[T](self, fn: Callable[[], T]) -> "concurrent.futures.Future[T]":
        """Run ``fn`` on a thread of its own; its future. Raises :class:`EgressRefused`
        (``lookup_limit``) when ``limit`` lookups are already in flight."""
        with self._lock:
            if self._in_flight >= self.limit:
                raise EgressRefused(LOOKUP_LIMIT, f"{self.limit} lookups in flight")
            self._in_flight += 1
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                if not future.set_running_or_notify_cancel():
                    return
                try:
                    result = fn()
                except BaseException as exc:  # handed to the waiter, whatever it is
                    error: BaseException | None = exc
                else:
                    error = None
            finally:
                # The slot is free before the waiter wakes: it may submit again at once.
                with self._lock:
                    self._in_flight -= 1
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        try:
            threading.Thread(target=run, name=self.name, daemon=True).start()
        except BaseException:
            with self._lock:
                self._in_flight -= 1
            raise
        return future

    def call[T](self, fn: Callable[[], T], timeout_s: float) -> T:
        """``fn()`` from a sync caller, waiting at most ``timeout_s``. Raises
        :class:`EgressRefused` (``lookup_limit`` or ``lookup_timeout``)."""
        future = self.submit(fn)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            raise EgressRefused(LOOKUP_TIMEOUT, f"no answer within {timeout_s:g} s") from None
