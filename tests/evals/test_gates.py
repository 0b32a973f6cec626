"""The arena-wide bound on calls in flight per endpoint (evals.gates), on real Redis:
places are counted across holders, a dead holder's place comes free when its lease
runs out, a live holder's lease is renewed, and a cancel stops the wait."""

import threading
import time

from arena_site.redis import redis_client
from evals.gates import _TAKE, Gates, gate_key


def foreign_take(endpoint: str, *, limit: int, lease_ms: int) -> bool:
    """Another host takes a place and never renews it (a worker killed mid-call)."""
    take = redis_client().register_script(_TAKE)
    return bool(take(keys=[gate_key(endpoint)], args=[limit, "dead-holder", lease_ms]))


def test_places_are_counted_across_holders():
    gates = Gates()
    with gates.hold("ep", limit=2) as first, gates.hold("ep", limit=2) as second:
        assert (first, second) == (True, True)
        assert redis_client().zcard(gate_key("ep")) == 2
        assert not foreign_take("ep", limit=2, lease_ms=60_000)  # a third is refused
    assert redis_client().zcard(gate_key("ep")) == 0  # both released
    assert foreign_take("ep", limit=2, lease_ms=60_000)


def test_a_dead_holders_place_comes_free_when_its_lease_runs_out():
    assert foreign_take("ep", limit=1, lease_ms=400)
    gates = Gates()
    started = time.monotonic()
    with gates.hold("ep", limit=1) as held:
        waited = time.monotonic() - started
        assert held is True
        assert redis_client().zrange(gate_key("ep"), 0, -1) != [b"dead-holder"]
    assert waited >= 0.3  # it had to wait for the lease, not take a second place


def test_a_live_holders_lease_is_renewed():
    gates = Gates(lease_s=0.3)
    with gates.hold("ep", limit=1):
        time.sleep(1.0)  # more than three leases long
        assert not foreign_take("ep", limit=1, lease_ms=60_000)
    assert foreign_take("ep", limit=1, lease_ms=60_000)


def test_a_cancel_stops_the_wait_holding_nothing():
    assert foreign_take("ep", limit=1, lease_ms=60_000)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    with Gates().hold("ep", limit=1, cancelled=cancel.is_set) as held:
        assert held is False
    assert redis_client().zrange(gate_key("ep"), 0, -1) == [b"dead-holder"]


def test_endpoints_are_counted_apart():
    assert foreign_take("busy", limit=1, lease_ms=60_000)
    with Gates().hold("idle", limit=1) as held:
        assert held is True
