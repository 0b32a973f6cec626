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
"""

import concurrent.futures
import ipaddress
import re
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host name, port) -> every address the name resolves to. Blocking; may raise OSError.
Resolver = Callable[[str, int], list[IPAddress]]

DEFAULT_ALLOWED_PORTS: frozenset[int] = frozenset({80, 443})
DEFAULT_PORTS_BY_SCHEME: dict[str, int] = {"http": 80, "https": 443}

# Refusal reasons. They are logged with the run and shown in the proxy's 403 body, so
# they name the address class, never anything about the host side.
LOOPBACK = "loopback"
PRIVATE = "private"
LINK_LOCAL = "link_local"
SITE_LOCAL = "site_local"
METADATA = "metadata"
CGNAT = "cgnat"
MULTICAST = "multicast"
BROADCAST = "broadcast"
RESERVED = "reserved"
UNSPECIFIED = "unspecified"
DOCUMENTATION = "documentation"
BENCHMARKING = "benchmarking"
# Reasons about the request rather than an address.
SCHEME = "scheme"
PORT = "port"
USERINFO = "userinfo"
INVALID_HOST = "invalid_host"
MALFORMED_URL = "malformed_url"
UNRESOLVABLE = "unresolvable"
# Reasons from the bounds on lookups: too many in flight for this owner, or one that
# did not answer within its timeout.
LOOKUP_LIMIT = "lookup_limit"
LOOKUP_TIMEOUT = "lookup_timeout"


class EgressRefused(Exception):
    """A destination the policy refuses. ``reason`` is one of the constants above."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class InvalidHost(ValueError):
    """A host that looks like an address (ends in a number, or is bracketed) but is not
    a valid one. Browsers reject such URLs outright; resolving them as names would only
    hand a parser differential to whoever wrote the URL."""


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


# --- Host parsing -----------------------------------------------------------------------

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_DEC_DIGITS = frozenset("0123456789")
_OCT_DIGITS = frozenset("01234567")
# Letters, digits, hyphen and underscore (some real hosts carry one), labels of 1-63.
# ASCII only: the sandbox's browser sends punycode, and Unicode look-alikes (full-width
# digits that IDNA would map to "127.0.0.1") must not slip past as names.
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME_RE = re.compile(rf"(?:{_LABEL}\.)*{_LABEL}", re.ASCII)


def _is_numeric_label(label: str) -> bool:
    """WHATWG's "ends in a number" test for the last label of a host."""
    if label[:2] in ("0x", "0X"):
        return all(c in _HEX_DIGITS for c in label[2:])
    return bool(label) and all(c in _DEC_DIGITS for c in label)


def _ipv4_number(part: str) -> int:
    """One part of an inet_aton-style address: 0x hex, leading-zero octal, or decimal."""
    if part[:2] in ("0x", "0X"):
        digits = part[2:]
        if not all(c in _HEX_DIGITS for c in digits):
            raise InvalidHost(part)
        return int(digits, 16) if digits else 0  # WHATWG reads a bare "0x" as 0
    if len(part) > 1 and part[0] == "0":
        if not all(c in _OCT_DIGITS for c in part):
            raise InvalidHost(part)
        return int(part, 8)
    if not part or not all(c in _DEC_DIGITS for c in part):
        raise InvalidHost(part)
    return int(part)


def _parse_ipv4(labels: list[str]) -> ipaddress.IPv4Address:
    """inet_aton's grammar: 1-4 parts, the last one filling the remaining bytes, so
    ``127.1`` is 127.0.0.1 and ``2130706433`` is too."""
    if len(labels) > 4:
        raise InvalidHost(".".join(labels))
    numbers = [_ipv4_number(part) for part in labels]
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        raise InvalidHost(".".join(labels))
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _parse_ipv6(text: str) -> ipaddress.IPv6Address:
    # The zone id ("%eth0", or "%25eth0" as a URL spells it) only selects an interface
    # for link-local and multicast addresses, which are refused anyway; dropping it
    # makes equal addresses compare equal.
    address, percent, zone = text.partition("%")
    if percent and not zone:
        raise InvalidHost(text)
    try:
        return ipaddress.IPv6Address(address)
    except ValueError as exc:
        raise InvalidHost(text) from exc


def parse_host(host: str) -> IPAddress | None:
    """The address a host literal denotes, however it is spelled, or None for a name.

    Accepts what browsers and ``inet_aton`` accept: dotted quads, decimal integers
    (``2130706433``), hex and octal parts (``0x7f.0.0.1``, ``0177.0.0.1``), short forms
    (``127.1``), one trailing dot, bracketed or bare IPv6 with an optional zone id.
    Raises :class:`InvalidHost` when the host ends in a number (or is bracketed / has a
    colon) but is not a valid address, e.g. ``256.0.0.1`` or ``1.2.3.4.5``.
    """
    if host.startswith("["):
        if not host.endswith("]"):
            raise InvalidHost(host)
        return _parse_ipv6(host[1:-1])
    if ":" in host:
        return _parse_ipv6(host)
    text = host[:-1] if host.endswith(".") else host  # "127.0.0.1." is 127.0.0.1
    if not text:
        raise InvalidHost(host)
    labels = text.split(".")
    if not _is_numeric_label(labels[-1]):
        return None
    return _parse_ipv4(labels)


# --- Address classes --------------------------------------------------------------------


def _v4(cidr: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(cidr)


def _v6(cidr: str) -> ipaddress.IPv6Network:
    return ipaddress.IPv6Network(cidr)


# Cloud instance-metadata endpoints. Each already falls in a refused range; naming them
# makes the log say what the sandbox was after.
_METADATA: frozenset[IPAddress] = frozenset(
    {
        ipaddress.IPv4Address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack...
        ipaddress.IPv4Address("169.254.170.2"),  # AWS ECS task metadata
        ipaddress.IPv4Address("100.100.100.200"),  # Alibaba Cloud
        ipaddress.IPv6Address("fd00:ec2::254"),  # AWS IMDS over IPv6
    }
)

# Explicit ranges, checked before the stdlib's is_global. They exist for two reasons:
# a precise reason in the log, and ranges where is_global (Python 3.13) says True but
# no sandbox has business going: multicast, 192.0.0.9/.10, the 6to4 relay anycast.
_V4_RANGES: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    # "This network": Linux connects 0.0.0.0 to the local host.
    (_v4("0.0.0.0/8"), UNSPECIFIED),
    (_v4("10.0.0.0/8"), PRIVATE),
    (_v4("100.64.0.0/10"), CGNAT),
    (_v4("127.0.0.0/8"), LOOPBACK),
    (_v4("169.254.0.0/16"), LINK_LOCAL),
    (_v4("172.16.0.0/12"), PRIVATE),
    (_v4("192.0.0.0/24"), RESERVED),  # IETF protocol assignments (is_global: .9, .10)
    (_v4("192.0.2.0/24"), DOCUMENTATION),
    (_v4("192.88.99.0/24"), RESERVED),  # deprecated 6to4 relay anycast (is_global: True)
    (_v4("192.168.0.0/16"), PRIVATE),
    (_v4("198.18.0.0/15"), BENCHMARKING),
    (_v4("198.51.100.0/24"), DOCUMENTATION),
    (_v4("203.0.113.0/24"), DOCUMENTATION),
    (_v4("224.0.0.0/4"), MULTICAST),  # is_global: True
    (_v4("255.255.255.255/32"), BROADCAST),  # before 240/4, which contains it
    (_v4("240.0.0.0/4"), RESERVED),
)

_V6_RANGES: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_v6("::/128"), UNSPECIFIED),
    (_v6("::1/128"), LOOPBACK),
    (_v6("64:ff9b:1::/48"), PRIVATE),  # RFC 8215 local-use NAT64
    (_v6("100::/64"), RESERVED),  # discard-only
    (_v6("2001:2::/48"), BENCHMARKING),
    (_v6("2001:db8::/32"), DOCUMENTATION),
    (_v6("3fff::/20"), DOCUMENTATION),  # RFC 9637; is_global: True
    (_v6("5f00::/16"), RESERVED),  # SRv6 SIDs; is_global: True
    (_v6("fc00::/7"), PRIVATE),  # unique local
    (_v6("fe80::/10"), LINK_LOCAL),
    (_v6("fec0::/10"), SITE_LOCAL),  # deprecated, still routed by some stacks; is_global: True
    (_v6("ff00::/8"), MULTICAST),  # is_global: True
    (_v6("::/8"), RESERVED),  # everything else under ::/8, e.g. IPv4-compatible
)

_IPV4_COMPATIBLE = _v6("::/96")
_SIIT_TRANSLATED = _v6("::ffff:0:0:0/96")  # RFC 2765 ::ffff:0:a.b.c.d
_NAT64_WELL_KNOWN = _v6("64:ff9b::/96")


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address an IPv6 address carries in a form some stack or relay would
    deliver to. Each form is here because a v4 destination can hide inside it:

    - IPv4-mapped ``::ffff:a.b.c.d``: a dual-stack socket connects to a.b.c.d itself.
    - IPv4-compatible ``::a.b.c.d`` and SIIT ``::ffff:0:a.b.c.d``: deprecated, but
      older stacks and translators still honour them; is_global calls the former public.
    - NAT64 ``64:ff9b::a.b.c.d``: the site's NAT64 gateway connects to a.b.c.d, and
      is_global says True whatever a.b.c.d is.
    - 6to4 ``2002:AABB:CCDD::``: the relay tunnels to the embedded v4.
    - Teredo ``2001:0:SSSS:SSSS:flags:port:CCCC:CCCC``: the server, and the client
      stored bit-inverted (the stdlib's ``teredo`` undoes the obfuscation).
    """
    if addr.ipv4_mapped is not None:
        return [addr.ipv4_mapped]
    if addr in _IPV4_COMPATIBLE or addr in _SIIT_TRANSLATED or addr in _NAT64_WELL_KNOWN:
        return [ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)]
    if addr.sixtofour is not None:
        return [addr.sixtofour]
    if addr.teredo is not None:
        server, client = addr.teredo
        return [server, client]
    return []


def address_refusal(addr: IPAddress) -> str | None:
    """Why ``addr`` is not a public destination, or None when a sandbox may dial it.

    Precondition: ``addr`` is an ``ipaddress`` object, not text (use :func:`parse_host`).
    Order matters only for the reason given: metadata first, then any embedded IPv4's
    own reason, then the explicit ranges, then the stdlib's is_global as the backstop
    for everything IANA lists as not globally reachable.
    """
    if isinstance(addr, ipaddress.IPv6Address) and addr.scope_id is not None:
        addr = ipaddress.IPv6Address(int(addr))  # a zone never makes an address public
    if addr in _METADATA:
        return METADATA
    if isinstance(addr, ipaddress.IPv6Address):
        # ::/128 and ::1 fall inside ::/96; their own names beat "embedded 0.0.0.x".
        if int(addr) > 1:
            for embedded in _embedded_ipv4(addr):
                reason = address_refusal(embedded)
                if reason is not None:
                    return reason
            # These two deliver to the embedded IPv4 and nowhere else (a dual-stack
            # socket; a DNS64/NAT64 network's gateway), so its verdict is theirs. The
            # ::/8 catch-all below would otherwise refuse them and break NAT64 hosts.
            if addr.ipv4_mapped is not None or addr in _NAT64_WELL_KNOWN:
                return None
        for network, reason in _V6_RANGES:
            if addr in network:
                return reason
    else:
        for network, reason in _V4_RANGES:
            if addr in network:
                return reason
    if not addr.is_global:
        return RESERVED
    return None


# --- Destinations -----------------------------------------------------------------------


def default_resolver(host: str, port: int) -> list[IPAddress]:
    """Resolve through the system resolver (blocking). Raises OSError on failure."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    # sockaddr[0] is text, with "%zone" for scoped v6; drop the zone like parse_host.
    return [ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in infos]


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


@dataclass(frozen=True)
class SimulatedHost:
    """A public-looking host name the worker serves itself (the demo web,
    docs/demo-web.md), e.g. ``demo.arena.test``.

    A plain-HTTP request for exactly ``name`` on ``port`` is dialled to ``address`` at
    ``upstream_port``, a server of the worker's that the address policy would refuse
    (it is on loopback), without asking any resolver. Nothing else about the name is
    reachable: another port, a CONNECT tunnel or https to it is refused; a subdomain or
    a look-alike spelling is just another name; the upstream is fixed here, so no
    request can pick another loopback port. Only the egress proxy passes these to the
    checks; the worker's own calls (:class:`OutboundPolicy`) never see them.
    """

    name: str  # canonical: lower case, no trailing dot
    address: IPAddress
    upstream_port: int
    port: int = 80

    def __post_init__(self) -> None:
        if (
            self.name != self.name.lower().removesuffix(".")
            or not _HOSTNAME_RE.fullmatch(self.name)
            or _is_numeric_label(self.name.rsplit(".", 1)[-1])
            or self.name == "localhost"
            or self.name.endswith(".localhost")
        ):
            raise ValueError(f"{self.name!r} is not a canonical host name")
        if not (1 <= self.port <= 65535 and 1 <= self.upstream_port <= 65535):
            raise ValueError("ports must be 1-65535")


# Canonical name -> the simulated host of that name.
SimulatedHosts = Mapping[str, SimulatedHost]


def simulated_hosts(*hosts: SimulatedHost) -> dict[str, SimulatedHost]:
    """The mapping the checks take, keyed by each host's canonical name."""
    return {host.name: host for host in hosts}


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
    if not _HOSTNAME_RE.fullmatch(name) or len(name) > 253:
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
    if not (1 <= len(port_text) <= 5 and all(c in _DEC_DIGITS for c in port_text)):
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


# --- The worker's own calls: the operator's allow-list, bounded lookups ----------------


@dataclass(frozen=True)
class Allowlist:
    """Internal destinations an operator lets the worker's own calls reach
    (``ARENA_INTERNAL_ALLOWLIST``): address blocks, and host names whose every answer
    passes. Never consulted for a sandbox's egress. Metadata endpoints stay refused
    whatever it lists: no deployment needs the worker to post observations there."""

    networks: tuple[IPNetwork, ...] = ()
    names: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str) -> "Allowlist":
        """From comma-separated entries: an address (``10.0.0.5``, ``::1``), a CIDR
        block (``10.8.0.0/16``) or a host name (``llm.internal``). Raises ValueError
        naming the first entry that is none of these."""
        networks: list[IPNetwork] = []
        names: set[str] = set()
        for raw in text.split(","):
            entry = raw.strip()
            if not entry:
                continue
            try:
                networks.append(
                    ipaddress.ip_network(entry.removeprefix("[").removesuffix("]"), strict=False)
                )
                continue
            except ValueError:
                pass
            name = entry.lower().removesuffix(".")
            if (
                not _HOSTNAME_RE.fullmatch(name)
                or len(name) > 253
                or _is_numeric_label(name.rsplit(".", 1)[-1])
            ):
                raise ValueError(f"{entry!r} is not an address, a CIDR block or a host name")
            names.add(name)
        return cls(tuple(networks), frozenset(names))

    def __bool__(self) -> bool:
        return bool(self.networks or self.names)

    def names_host(self, name: str) -> bool:
        """Whether the canonical host name ``name`` is listed by name."""
        return name in self.names

    def allows(self, address: IPAddress, reason: str, name: str | None = None) -> bool:
        """Whether ``address`` (refused for ``reason``, reached as ``name`` if a name)
        may be dialled anyway."""
        if reason == METADATA:
            return False
        if name is not None and name in self.names:
            return True
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # ::ffff:10.0.0.5 is 10.0.0.5 on a dual-stack socket
        return any(address in network for network in self.networks)


NO_ALLOWLIST = Allowlist()


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
