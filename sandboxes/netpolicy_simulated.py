"""The worker's simulated hosts (the demo web, docs/demo-web.md): public-looking names
the worker serves itself, which the egress proxy's checks pass to a fixed upstream."""

from collections.abc import Mapping
from dataclasses import dataclass

from sandboxes.netpolicy_addresses import HOSTNAME_RE, IPAddress, is_numeric_label


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
            or not HOSTNAME_RE.fullmatch(self.name)
            or is_numeric_label(self.name.rsplit(".", 1)[-1])
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
