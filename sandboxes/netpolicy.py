"""Which network destinations a sandbox may reach: public ones only (SPEC §2, §4).

Pure computation, no Django: the admission check of a start URL and the egress proxy
both call :func:`check_url` / :func:`check_destination`, which parse the host the way a
browser or ``inet_aton`` would, resolve it once through an injectable resolver, refuse
the lot if any resolved address is not a public destination, and hand back the exact
address to dial. Dialing that address (never the name again) is what defeats DNS
rebinding: the check and the connection see the same bytes.

The worker's own outbound calls (remote-agent endpoints, provider base URLs) go through
the same rules with :class:`OutboundPolicy`: any port, and an operator's
:class:`Allowlist` of internal hosts and blocks that sandboxes never get. Lookups are
bounded (:class:`LookupPool`): a few in flight per owner, each with a timeout, so a
resolver that hangs for one sandbox or lane holds up only that one.

Where things are: this module holds the checks (:func:`check_url`,
:func:`check_destination`, :class:`OutboundPolicy`) and is where every other module
imports the policy's names from; :mod:`sandboxes.netpolicy_addresses` has the refusal
reasons, host parsing, the address classes and the :class:`Allowlist`;
:mod:`sandboxes.netpolicy_lookups` the resolver and the bounded lookups;
:mod:`sandboxes.netpolicy_simulated` the worker's simulated hosts.
"""

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from sandboxes.netpolicy_addresses import (
    BENCHMARKING,
    BROADCAST,
    CGNAT,
    DEC_DIGITS,
    DOCUMENTATION,
    HOSTNAME_RE,
    INVALID_HOST,
    LINK_LOCAL,
    LOOKUP_LIMIT,
    LOOKUP_TIMEOUT,
    LOOPBACK,
    MALFORMED_URL,
    METADATA,
    MULTICAST,
    NO_ALLOWLIST,
    PORT,
    PRIVATE,
    RESERVED,
    SCHEME,
    SITE_LOCAL,
    UNRESOLVABLE,
    UNSPECIFIED,
    USERINFO,
    Allowlist,
    EgressRefused,
    InvalidHost,
    IPAddress,
    IPNetwork,
    address_refusal,
    parse_host,
)
from sandboxes.netpolicy_lookups import LookupPool, Resolver, default_resolver
from sandboxes.netpolicy_simulated import SimulatedHost, SimulatedHosts, simulated_hosts

__all__ = [
    "BENCHMARKING",
    "BROADCAST",
    "CGNAT",
    "DEFAULT_ALLOWED_PORTS",
    "DEFAULT_PORTS_BY_SCHEME",
    "DOCUMENTATION",
    "INVALID_HOST",
    "LINK_LOCAL",
    "LOOKUP_LIMIT",
    "LOOKUP_TIMEOUT",
    "LOOPBACK",
    "MALFORMED_URL",
    "METADATA",
    "MULTICAST",
    "NO_ALLOWLIST",
    "PORT",
    "PRIVATE",
    "RESERVED",
    "SCHEME",
    "SITE_LOCAL",
    "UNRESOLVABLE",
    "UNSPECIFIED",
    "USERINFO",
    "Allowlist",
    "CheckedTarget",
    "EgressRefused",
    "IPAddress",
    "IPNetwork",
    "InvalidHost",
    "LookupPool",
    "OutboundPolicy",
    "Resolver",
    "SimulatedHost",
    "SimulatedHosts",
    "address_refusal",
    "check_destination",
    "check_url",
    "default_resolver",
    "parse_host",
    "simulated_hosts",
    "split_authority",
]

DEFAULT_ALLOWED_PORTS: frozenset[int] = frozenset({80, 443})
DEFAULT_PORTS_BY_SCHEME: dict[str, int] = {"http": 80, "https": 443}


@dataclass(frozen=True)
class CheckedTarget:
    """A destination that passed the policy. ``addresses`` are every address the host
    resolved to, all checked; ``address`` is the first, the one to dial first. Dial
    only these: resolving ``host`` again would reopen the rebinding window."""

    host: str  # canonical: lower-case name without trailing dot, or the address text
    port: int
    address: IPAddress
    addresses: tuple[IPAddress, ...]
    scheme: str | None = None  # set by check_url; None for a CONNECT authority
    request_target: str = "/"  # origin-form path and query (check_url only)
    # Set when ``host`` is one of the worker's simulated hosts: ``address`` is then its
    # server on the worker (loopback), dialled at ``simulated.upstream_port`` by the
    # proxy's own door for them, never by the policy-checking dialer (it refuses it).
    simulated: "SimulatedHost | None" = None

    @property
    def authority(self) -> str:
        """The Host header value: the port only when it is not the scheme's default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.scheme and DEFAULT_PORTS_BY_SCHEME.get(self.scheme) == self.port:
            return host
        return f"{host}:{self.port}"


# --- Destinations -----------------------------------------------------------------------


def _as_address(value: object) -> IPAddress:
    """Resolver results, normalised: text is parsed strictly, zones dropped."""
    if isinstance(value, ipaddress.IPv6Address) and value.scope_id is not None:
        return ipaddress.IPv6Address(int(value))
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return value
    if isinstance(value, str):
        return ipaddress.ip_address(value.partition("%")[0])
    raise TypeError(f"resolver returned {value!r}, not an IP address")


def _dedupe(addresses: Iterable[IPAddress]) -> tuple[IPAddress, ...]:
    return tuple(dict.fromkeys(addresses))


def _simulated_target(served: SimulatedHost, port: int, scheme: str | None) -> CheckedTarget:
    if port != served.port:
        raise EgressRefused(PORT, f"{served.name}:{port}")
    if scheme != "http":  # a CONNECT (None) or https: the simulated hosts speak plain HTTP
        raise EgressRefused(SCHEME, f"{scheme or 'CONNECT'} to {served.name}")
    return CheckedTarget(
        host=served.name,
        port=port,
        address=served.address,
        addresses=(served.address,),
        simulated=served,
    )


def check_destination(
    host: str,
    port: int,
    resolver: Resolver = default_resolver,
    *,
    allowed_ports: frozenset[int] | None = DEFAULT_ALLOWED_PORTS,
    allowlist: "Allowlist | None" = None,
    simulated: SimulatedHosts | None = None,
    scheme: str | None = None,
) -> CheckedTarget:
    """Check ``host:port`` (a CONNECT authority, or a URL's host) and return what to dial.

    Preconditions: ``host`` is a bare or bracketed host with no port; ``resolver`` is
    called at most once, and only for names (never for address literals). Raises
    :class:`EgressRefused` when the port is not allowed, the host is malformed or does
    not resolve, or ANY resolved address is refused: a name that answers both a public
    and a private address is refused whole, so no later choice among them can pick the
    private one. ``allowed_ports`` None allows any port; ``allowlist`` (the worker's own
    calls only, never a sandbox's) lets the operator's internal hosts and blocks through.
    A resolver may raise :class:`EgressRefused` itself (a bounded lookup that timed out).
    A name in ``simulated`` (the proxy's own, :class:`SimulatedHost`) is never resolved:
    it passes only for ``scheme`` "http" (check_url's; None is a CONNECT) on its port.
    """
    if allowed_ports is not None and port not in allowed_ports:
        raise EgressRefused(PORT, str(port))
    if not 1 <= port <= 65535:
        raise EgressRefused(PORT, str(port))
    try:
        literal = parse_host(host)
    except InvalidHost as exc:
        raise EgressRefused(INVALID_HOST, host[:100]) from exc
    if literal is not None:
        reason = address_refusal(literal)
        if reason is not None and not (allowlist and allowlist.allows(literal, reason)):
            raise EgressRefused(reason, str(literal))
        return CheckedTarget(host=str(literal), port=port, address=literal, addresses=(literal,))

    name = host.lower().removesuffix(".")
    if not HOSTNAME_RE.fullmatch(name) or len(name) > 253:
        raise EgressRefused(INVALID_HOST, host[:100])
    if simulated and (served := simulated.get(name)) is not None:
        return _simulated_target(served, port, scheme)
    named = allowlist is not None and allowlist.names_host(name)
    # RFC 6761: "localhost" and "*.localhost" are loopback whatever DNS or /etc/hosts
    # say, and browsers resolve them without asking; refuse before resolving.
    if (name == "localhost" or name.endswith(".localhost")) and not named:
        raise EgressRefused(LOOPBACK, name)
    try:
        addresses = _dedupe(_as_address(a) for a in resolver(name, port))
    except (OSError, UnicodeError, ValueError) as exc:
        raise EgressRefused(UNRESOLVABLE, name) from exc
    if not addresses:
        raise EgressRefused(UNRESOLVABLE, name)
    for address in addresses:
        reason = address_refusal(address)
        if reason is not None and not (allowlist and allowlist.allows(address, reason, name)):
            raise EgressRefused(reason, f"{name} -> {address}")
    return CheckedTarget(host=name, port=port, address=addresses[0], addresses=addresses)


def split_authority(authority: str) -> tuple[str, int | None]:
    """``host[:port]`` -> (host, port or None). IPv6 literals must be bracketed.

    Raises :class:`EgressRefused` (``malformed_url``) on anything else: an unbracketed
    colon, a port that is not 1-65535 in ASCII digits (``int`` would accept "+80" or
    full-width digits), an empty host.
    """
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise EgressRefused(MALFORMED_URL, authority[:100])
        host, rest = authority[: close + 1], authority[close + 1 :]
        if rest and not rest.startswith(":"):
            raise EgressRefused(MALFORMED_URL, authority[:100])
        port_text = rest[1:] if rest else None
    else:
        host, colon, port_text_or_empty = authority.partition(":")
        if ":" in port_text_or_empty:
            raise EgressRefused(MALFORMED_URL, authority[:100])
        port_text = port_text_or_empty if colon else None
    if not host or host == "[]":
        raise EgressRefused(MALFORMED_URL, authority[:100])
    if port_text is None:
        return host, None
    if not (1 <= len(port_text) <= 5 and all(c in DEC_DIGITS for c in port_text)):
        raise EgressRefused(MALFORMED_URL, authority[:100])
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise EgressRefused(MALFORMED_URL, authority[:100])
    return host, port


def check_url(
    url: str,
    resolver: Resolver = default_resolver,
    *,
    allowed_ports: frozenset[int] | None = DEFAULT_ALLOWED_PORTS,
    allowlist: "Allowlist | None" = None,
    simulated: SimulatedHosts | None = None,
) -> CheckedTarget:
    """Check an absolute http(s) URL and return what to dial (see check_destination).

    Refuses, before any resolution: other schemes; user info (``a@b``) and backslashes,
    where parsers disagree on which part is the host (urlsplit reads ``http://a\\@b/``
    as host ``b``, a browser as ``a``); whitespace and control characters.
    """
    if any(c <= " " or c == "\x7f" or c == "\\" for c in url):
        raise EgressRefused(MALFORMED_URL, "whitespace, control character or backslash")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise EgressRefused(MALFORMED_URL, url[:100]) from exc
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS_BY_SCHEME:
        raise EgressRefused(SCHEME, scheme[:20])
    if "@" in parts.netloc:
        raise EgressRefused(USERINFO)
    if not parts.netloc:
        raise EgressRefused(MALFORMED_URL, url[:100])
    host, port = split_authority(parts.netloc)
    checked = check_destination(
        host,
        DEFAULT_PORTS_BY_SCHEME[scheme] if port is None else port,
        resolver,
        allowed_ports=allowed_ports,
        allowlist=allowlist,
        simulated=simulated,
        scheme=scheme,
    )
    request_target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return CheckedTarget(
        host=checked.host,
        port=checked.port,
        address=checked.address,
        addresses=checked.addresses,
        scheme=scheme,
        request_target=request_target,
        simulated=checked.simulated,
    )


# --- The worker's own calls -------------------------------------------------------------


class _NotResolved(Exception):
    """A name met at registration with no resolver to ask (DNS is off)."""


def _refuse_names(host: str, port: int) -> list[IPAddress]:
    raise _NotResolved(host)


class OutboundPolicy:
    """The address policy of the worker's own outbound calls: remote-agent endpoints
    and provider base URLs.

    The sandbox rules (every non-public address and odd spelling refused, a name
    resolved once and refused whole if any answer is refused, only the checked
    addresses dialled), on any port, plus the operator's ``allowlist``. ``resolver``
    None means no DNS (``ARENA_EGRESS_RESOLVE=false``): only literal addresses can be
    dialled. Lookups go through a :class:`LookupPool` of this instance (``max_lookups``
    in flight, ``lookup_timeout_s`` each): build one policy per lane, so an entrant
    whose name hangs holds up only its own lane. Thread-safe.
    """

    def __init__(
        self,
        *,
        allowlist: Allowlist = NO_ALLOWLIST,
        resolver: Resolver | None = default_resolver,
        lookup_timeout_s: float = 5.0,
        max_lookups: int = 2,
    ) -> None:
        if lookup_timeout_s <= 0:
            raise ValueError("lookup_timeout_s must be positive")
        self.allowlist = allowlist
        self.resolver = resolver
        self.lookup_timeout_s = lookup_timeout_s
        self._lookups = LookupPool(max_lookups, name="outbound-lookup")

    def __repr__(self) -> str:
        return f"OutboundPolicy(allowlist={self.allowlist!r}, resolves={self.resolver is not None})"

    def _resolve(self, host: str, port: int) -> list[IPAddress]:
        resolver = self.resolver
        if resolver is None:
            return []  # unresolvable: names cannot be dialled without DNS
        return self._lookups.call(lambda: resolver(host, port), self.lookup_timeout_s)

    def check(self, host: str, port: int) -> CheckedTarget:
        """What to dial for ``host:port`` (dial time: resolves names). Raises
        :class:`EgressRefused`."""
        return check_destination(
            host, port, self._resolve, allowed_ports=None, allowlist=self.allowlist
        )

    def check_registration(self, url: str, *, resolve: bool = True) -> CheckedTarget | None:
        """Check a URL an operator enters (an endpoint, a base URL): its form, and its
        host's address class. A name is resolved when DNS is on and ``resolve`` is set;
        otherwise it passes unresolved (None) and is checked when dialled. Literal
        addresses, odd spellings and ``localhost`` are checked either way. Raises
        :class:`EgressRefused`."""
        resolver = self._resolve if resolve and self.resolver is not None else _refuse_names
        try:
            return check_url(url, resolver, allowed_ports=None, allowlist=self.allowlist)
        except _NotResolved:
            return None
