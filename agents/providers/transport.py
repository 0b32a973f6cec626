"""The worker's own HTTP calls (provider SDKs, remote entrants) dial only addresses the
address policy passed (``sandboxes.netpolicy.OutboundPolicy``).

The check sits where the connection is made: an httpcore network backend that, for
every new TCP connection, resolves the host once (bounded, timed), checks every answer
and connects to exactly the checked address. So it holds for the first request, for
every retry, for every redirect hop a client follows and for every reconnect of a
pooled connection, and a name that answers differently the second time gains nothing.
TLS still runs against the name (SNI and certificate checks are httpcore's, on top of
the checked socket).

The real SDK clients use it through their ``http_client`` argument
(:func:`checked_http_client`): an ``httpx2.Client`` of the SDK's default class on a
:class:`CheckedTransport`, not following redirects and ignoring the environment's
proxies (``trust_env=False``: a proxy would be a second dialler the policy never sees).
"""

import ssl
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httpcore2
import httpx2

from sandboxes.netpolicy import EgressRefused, OutboundPolicy

SocketOption = Any  # httpcore's SOCKET_OPTION tuples


class OutboundRefused(Exception):
    """The address policy refused the destination of one of the worker's own calls.

    Not an ``OSError`` nor an httpx transport error on purpose: the clients must not
    retry it as a connection failure. ``reason`` names the address class (``private``,
    ``loopback``, …) or the lookup bound (``lookup_timeout``, ``unresolvable``)."""

    def __init__(self, host: str, refused: EgressRefused) -> None:
        super().__init__(describe_refusal(host, refused))
        self.host = host
        self.reason = refused.reason


_LOOKUP_REASONS = frozenset({"unresolvable", "lookup_timeout", "lookup_limit"})
_FORM_REASONS = frozenset({"scheme", "userinfo", "invalid_host", "malformed_url", "port"})


def url_host(url: str) -> str:
    """The host of ``url`` for a message (the URL itself, cut, when it has none)."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        host = None
    return host or url[:100]


def describe_refusal(host: str, refused: EgressRefused) -> str:
    """One line for an operator: which host, which class, how to let it through."""
    if refused.reason in _LOOKUP_REASONS:
        return f"{host} could not be resolved ({refused.reason})"
    if refused.reason in _FORM_REASONS:
        return f"{host} is not a valid destination ({refused.reason})"
    return (
        f"{host} is refused by the address policy ({refused.reason}): the arena calls "
        "only public addresses unless an operator lists the host or its block in "
        "ARENA_INTERNAL_ALLOWLIST"
    )


class CheckedNetworkBackend(httpcore2.NetworkBackend):
    """httpcore's sync backend, dialling only what ``policy`` passed."""

    def __init__(self, policy: OutboundPolicy) -> None:
        self.policy = policy
        self._inner = httpcore2.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore2.NetworkStream:
        try:
            target = self.policy.check(host, port)
        except EgressRefused as refused:
            raise OutboundRefused(host, refused) from None
        last_error: Exception | None = None
        for address in target.addresses:
            try:
                # An address literal: getaddrinfo parses it, no lookup leaves the host.
                return self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                last_error = exc
        assert last_error is not None  # a checked target has at least one address
        raise last_error

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore2.NetworkStream:
        raise OutboundRefused(path, EgressRefused("scheme", "unix socket"))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class CheckedTransport(httpx2.HTTPTransport):
    """An ``httpx2.HTTPTransport`` whose connection pool dials through
    :class:`CheckedNetworkBackend`. No proxy, no unix socket: the pool connects to the
    request's own host, checked."""

    def __init__(
        self,
        policy: OutboundPolicy,
        *,
        verify: ssl.SSLContext | bool = True,
        limits: httpx2.Limits | None = None,
    ) -> None:
        limits = limits or httpx2.Limits(max_connections=100, max_keepalive_connections=20)
        super().__init__(verify=verify, trust_env=False, limits=limits)
        ssl_context = verify if isinstance(verify, ssl.SSLContext) else httpx2.create_ssl_context()
        # HTTPTransport builds its pool with httpcore's default backend and takes no
        # backend argument; the same pool, with ours. tests/agents/test_outbound.py
        # proves every connection goes through it.
        self._pool = httpcore2.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=CheckedNetworkBackend(policy),
        )


def checked_http_client[C: httpx2.Client](
    client_class: type[C], policy: OutboundPolicy, *, verify: ssl.SSLContext | bool = True
) -> C:
    """A ``client_class`` (an SDK's ``DefaultHttpxClient`` subclass, or ``httpx2.Client``)
    on a :class:`CheckedTransport`: redirects are not followed (a 3xx is an answer; the
    key headers must not travel to wherever it points) and the environment's proxies
    and netrc are ignored."""
    return client_class(
        transport=CheckedTransport(policy, verify=verify),
        follow_redirects=False,
        trust_env=False,
    )
