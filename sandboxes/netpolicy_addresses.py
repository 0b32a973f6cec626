"""Which addresses a sandbox may reach, and the words for why not.

Pure computation, no Django: the refusal reasons and :class:`EgressRefused`; host
literals parsed the way a browser or ``inet_aton`` would (:func:`parse_host`); every
address classified (:func:`address_refusal`: public, or the class that refuses it); and
the operator's :class:`Allowlist` of internal destinations that only the worker's own
calls may reach. The checks that use these are in :mod:`sandboxes.netpolicy`.
"""

import ipaddress
import re
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

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


# --- Host parsing -----------------------------------------------------------------------

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
DEC_DIGITS = frozenset("0123456789")
_OCT_DIGITS = frozenset("01234567")
# Letters, digits, hyphen and underscore (some real hosts carry one), labels of 1-63.
# ASCII only: the sandbox's browser sends punycode, and Unicode look-alikes (full-width
# digits that IDNA would map to "127.0.0.1") must not slip past as names.
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
HOSTNAME_RE = re.compile(rf"(?:{_LABEL}\.)*{_LABEL}", re.ASCII)


def is_numeric_label(label: str) -> bool:
    """WHATWG's "ends in a number" test for the last label of a host."""
    if label[:2] in ("0x", "0X"):
        return all(c in _HEX_DIGITS for c in label[2:])
    return bool(label) and all(c in DEC_DIGITS for c in label)


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
    if not part or not all(c in DEC_DIGITS for c in part):
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
    if not is_numeric_label(labels[-1]):
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


# --- The operator's allow-list (the worker's own calls only) ----------------------------


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
                not HOSTNAME_RE.fullmatch(name)
                or len(name) > 253
                or is_numeric_label(name.rsplit(".", 1)[-1])
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
