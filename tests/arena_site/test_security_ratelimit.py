"""The client address per-address limits count, and the fixed-window counter."""

import datetime as dt
from ipaddress import ip_network

import pytest
import time_machine
from django.test import RequestFactory

from arena_site.ratelimit import FixedWindow, client_address

PROXIES = (ip_network("10.0.0.0/8"), ip_network("::1/128"))


@pytest.mark.parametrize(
    ("remote", "forwarded", "trusted", "expected"),
    [
        # no trusted proxy: the peer, whatever the header says
        ("203.0.113.7", None, (), "203.0.113.7"),
        ("203.0.113.7", "198.51.100.1", (), "203.0.113.7"),
        ("10.0.0.2", "198.51.100.1", (), "10.0.0.2"),
        # a peer that is not a trusted proxy: its header is ignored
        ("203.0.113.7", "198.51.100.1", PROXIES, "203.0.113.7"),
        # behind the proxy: the nearest hop that is not a proxy
        ("10.0.0.2", "198.51.100.1", PROXIES, "198.51.100.1"),
        ("10.0.0.2", "198.51.100.1, 10.1.1.1", PROXIES, "198.51.100.1"),
        # what the client prepended is not believed
        ("10.0.0.2", "1.2.3.4, 198.51.100.1", PROXIES, "198.51.100.1"),
        # a garbled hop ends the walk at the last trusted one
        ("10.0.0.2", "198.51.100.1, garbage", PROXIES, "10.0.0.2"),
        ("10.0.0.2", "", PROXIES, "10.0.0.2"),
        ("10.0.0.2", "10.3.3.3", PROXIES, "10.0.0.2"),
        # IPv6 per /64; IPv4-mapped IPv6 is IPv4
        ("2001:db8:1:2:aaaa::1", None, (), "2001:db8:1:2::"),
        ("2001:db8:1:2:bbbb::9", None, (), "2001:db8:1:2::"),
        ("::ffff:203.0.113.7", None, (), "203.0.113.7"),
        ("::1", "2001:db8:5:6::7", PROXIES, "2001:db8:5:6::"),
        # not an IP address (a Unix-socket peer): as given
        ("", None, PROXIES, ""),
    ],
)
def test_client_address(settings, remote, forwarded, trusted, expected):
    settings.TRUSTED_PROXIES = trusted
    extra = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    request = RequestFactory().get("/", **extra)

    assert client_address(request) == expected


def test_a_fixed_window_counts_per_subject_and_resets_with_the_window():
    window = FixedWindow("test", limit=3, window_s=60)
    with time_machine.travel(dt.datetime(2030, 1, 1, 12, 0, 20, tzinfo=dt.UTC), tick=False) as t:
        assert window.exhausted("a") is None
        assert [window.hit("a") for _ in range(3)] == [None, None, None]
        assert window.exhausted("a") == 40
        assert window.hit("a") == 40
        assert window.hit("b") is None  # another subject counts apart

        t.move_to(dt.datetime(2030, 1, 1, 12, 0, 59, 500_000, tzinfo=dt.UTC))
        assert window.hit("a") == 1  # never 0: Retry-After is at least a second

        t.move_to(dt.datetime(2030, 1, 1, 12, 1, 0, tzinfo=dt.UTC))
        assert window.exhausted("a") is None
        assert window.hit("a") is None


def test_windows_of_different_names_do_not_share_counts():
    one, two = FixedWindow("one", limit=1, window_s=60), FixedWindow("two", limit=1, window_s=60)
    one.hit("a")
    assert one.exhausted("a") is not None
    assert two.exhausted("a") is None
