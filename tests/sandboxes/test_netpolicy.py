"""The egress policy, as tables: every address form the issue names, refused with its
reason; a few public ones allowed. No network: names go through fake resolvers."""

import ipaddress
import threading
import time

import pytest

from sandboxes.netpolicy import (
    Allowlist,
    CheckedTarget,
    EgressRefused,
    InvalidHost,
    LookupPool,
    OutboundPolicy,
    address_refusal,
    check_destination,
    check_url,
    parse_host,
    split_authority,
)

ip = ipaddress.ip_address
PUBLIC_V4 = ip("93.184.216.34")
PUBLIC_V6 = ip("2606:4700::1111")


def no_resolver(host: str, port: int) -> list:
    raise AssertionError(f"a literal must not be resolved, got {host!r}")


class FakeResolver:
    """Answers from a table and records every question."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list:
        self.calls.append((host, port))
        if host not in self.table:
            raise OSError(f"no such host {host}")
        return [ip(a) for a in self.table[host]]


# --- parse_host: odd spellings --------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),  # one decimal integer
        ("0x7f000001", "127.0.0.1"),  # one hex integer
        ("0X7F000001", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),  # hex part
        ("0x7f.0x0.0x0.0x1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),  # octal part
        ("0177.0000.0000.0001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),  # one octal integer
        ("127.000.000.001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),  # a.b: b fills three bytes
        ("127.0.1", "127.0.0.1"),  # a.b.c: c fills two bytes
        ("127.0.0.1.", "127.0.0.1"),  # trailing dot
        ("0x7f.1", "127.0.0.1"),
        ("3232235521", "192.168.0.1"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("169.254.43518", "169.254.169.254"),
        ("0", "0.0.0.0"),  # noqa: S104 - an address to classify, not a bind
        ("0x", "0.0.0.0"),  # noqa: S104 - WHATWG reads a bare 0x as zero
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("[0:0:0:0:0:ffff:7f00:1]", "::ffff:7f00:1"),
        ("fe80::1%eth0", "fe80::1"),  # zone id dropped
        ("[fe80::1%25eth0]", "fe80::1"),  # zone as a URL spells it
        ("93.184.216.34", "93.184.216.34"),
    ],
)
def test_parse_host_reads_every_spelling(host, expected):
    assert parse_host(host) == ip(expected)


@pytest.mark.parametrize(
    "host", ["example.com", "example.com.", "EXAMPLE.com", "1e100.net", "x.0x7f.com", "a-1.b_2.org"]
)
def test_parse_host_returns_none_for_names(host):
    assert parse_host(host) is None


@pytest.mark.parametrize(
    "host",
    [
        "256.0.0.1",
        "1.2.3.4.5",
        "127.0.0.256",
        "127.16777216",  # last part overflows the three bytes it fills
        "4294967296",  # 2**32
        "09.0.0.1",  # 9 is no octal digit
        "0x1g.0.0.1",
        "example.123",  # ends in a number, so must be an address
        "1..1",
        "[::1",
        "[example.com]",
        "[::1%]",
        ".",
        "",
    ],
)
def test_parse_host_rejects_almost_addresses(host):
    with pytest.raises(InvalidHost):
        parse_host(host)


# --- address_refusal: the table ------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        # IPv4 ranges
        ("0.0.0.0", "unspecified"),  # noqa: S104 - an address to classify, not a bind
        ("0.1.2.3", "unspecified"),
        ("10.0.0.1", "private"),
        ("10.255.255.255", "private"),
        ("100.64.0.1", "cgnat"),
        ("100.127.255.254", "cgnat"),
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("169.254.0.1", "link_local"),
        ("169.254.169.254", "metadata"),
        ("169.254.170.2", "metadata"),
        ("100.100.100.200", "metadata"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.0.0.1", "reserved"),
        ("192.0.0.9", "reserved"),  # is_global says True
        ("192.0.2.1", "documentation"),
        ("192.88.99.1", "reserved"),  # is_global says True
        ("192.168.1.1", "private"),
        ("198.18.0.1", "benchmarking"),
        ("198.19.255.255", "benchmarking"),
        ("198.51.100.7", "documentation"),
        ("203.0.113.9", "documentation"),
        ("224.0.0.1", "multicast"),  # is_global says True
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        # IPv6 ranges
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("fd00:ec2::254", "metadata"),
        ("fe80::1", "link_local"),
        ("fe80::1%eth0", "link_local"),
        ("febf:ffff::1", "link_local"),
        ("fec0::1", "site_local"),  # is_global says True
        ("ff02::1", "multicast"),  # is_global says True
        ("ff0e::1", "multicast"),
        ("2001:db8::1", "documentation"),
        ("3fff::1", "documentation"),  # is_global says True
        ("2001:2::1", "benchmarking"),
        ("100::1", "reserved"),
        ("5f00::1", "reserved"),  # is_global says True
        ("64:ff9b:1::a00:1", "private"),
        # IPv4-mapped
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:7f00:1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "metadata"),
        ("::ffff:100.64.0.1", "cgnat"),
        ("::ffff:0.0.0.0", "unspecified"),
        # IPv4-compatible (is_global says True for ::127.0.0.1)
        ("::127.0.0.1", "loopback"),
        ("::10.0.0.1", "private"),
        ("::8.8.8.8", "reserved"),  # deprecated form, never routable even when public
        # SIIT ::ffff:0:a.b.c.d
        ("::ffff:0:7f00:1", "loopback"),
        # NAT64 well-known prefix (is_global says True whatever is embedded)
        ("64:ff9b::7f00:1", "loopback"),
        ("64:ff9b::a9fe:a9fe", "metadata"),
        ("64:ff9b::c0a8:101", "private"),
        # 6to4
        ("2002:7f00:1::", "loopback"),
        ("2002:a00:1::1", "private"),
        ("2002:a9fe:a9fe::", "metadata"),
        ("2002:5db8:d822::1", "reserved"),  # public v4 inside, but 6to4 is not global
        # Teredo: server 65.54.227.120, client stored inverted
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "documentation"),  # client 192.0.2.45
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),  # client 127.0.0.1
        ("2001:0:a00:1:8000:63bf:a2ed:27dd", "private"),  # server 10.0.0.1
        ("2001:0:4136:e378:8000:63bf:a247:27dd", "reserved"),  # both public: still Teredo
    ],
)
def test_address_refusal_names_the_class(address, reason):
    assert address_refusal(ip(address)) == reason


@pytest.mark.parametrize(
    "address",
    [
        "93.184.216.34",
        "8.8.8.8",
        "1.1.1.1",
        "100.63.255.255",  # just below CGNAT
        "100.128.0.0",  # just above CGNAT
        "172.15.255.255",
        "172.32.0.0",
        "192.0.1.255",
        "223.255.255.255",
        "2606:4700::1111",
        "2a00:1450:4001:82b::200e",
        "::ffff:8.8.8.8",  # mapped public v4 connects to 8.8.8.8 itself
        "64:ff9b::5db8:d822",  # NAT64 to a public v4
    ],
)
def test_public_addresses_are_allowed(address):
    assert address_refusal(ip(address)) is None


# --- check_destination / check_url ---------------------------------------------------


def test_check_url_resolves_once_and_returns_the_address_to_dial():
    resolver = FakeResolver({"public.example": ["93.184.216.34", "2606:4700::1111"]})

    target = check_url("http://Public.Example./a/b?q=1#frag", resolver)

    assert target == CheckedTarget(
        host="public.example",
        port=80,
        address=PUBLIC_V4,
        addresses=(PUBLIC_V4, PUBLIC_V6),
        scheme="http",
        request_target="/a/b?q=1",
    )
    assert resolver.calls == [("public.example", 80)]
    assert target.authority == "public.example"


def test_check_url_keeps_a_non_default_port_in_the_authority():
    resolver = FakeResolver({"public.example": ["93.184.216.34"]})

    target = check_url("https://public.example:8443/", resolver, allowed_ports=frozenset({8443}))

    assert (target.port, target.authority, target.request_target) == (
        8443,
        "public.example:8443",
        "/",
    )


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://2130706433/", "loopback"),
        ("http://0x7f.1/", "loopback"),
        ("http://0177.0.0.1/", "loopback"),
        ("http://127.0.0.1./", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[::ffff:a9fe:a9fe]/latest/meta-data/", "metadata"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://[fe80::1%25eth0]/", "link_local"),
        ("http://10.0.0.1:443/", "private"),
        ("http://localhost/", "loopback"),
        ("http://app.localhost./", "loopback"),
        ("http://93.184.216.34:22/", "port"),
        ("http://93.184.216.34:8080/", "port"),
        ("ftp://93.184.216.34/", "scheme"),
        ("file:///etc/passwd", "scheme"),
        ("javascript:alert(1)", "scheme"),
        ("http://user:pw@93.184.216.34/", "userinfo"),
        ("http://93.184.216.34@127.0.0.1/", "userinfo"),
        ("http://127.0.0.1\\@93.184.216.34/", "malformed_url"),  # parsers disagree
        ("http://93.184.216.34/ x", "malformed_url"),
        ("http://93.184.216.34:+80/", "malformed_url"),
        ("http://93.184.216.34:８０/", "malformed_url"),  # full-width digits
        ("http://93.184.216.34:0/", "malformed_url"),
        ("http://93.184.216.34:65536/", "malformed_url"),
        ("http:///path", "malformed_url"),
        ("http://[::1/", "malformed_url"),
        ("http://256.0.0.1/", "invalid_host"),
        ("http://example.123/", "invalid_host"),
        ("http://１２７.０.０.１/", "invalid_host"),  # full-width look-alike
        ("http://exa mple.com/", "malformed_url"),
        ("http://%31%32%37.0.0.1/", "invalid_host"),  # percent-encoded digits
        ("http://%6c%6f%63%61%6c%68%6f%73%74/", "invalid_host"),  # "localhost"
        ("http://[::ffff:127.1]/", "malformed_url"),  # no short v4 inside v6
        ("HTTP://[::1]:80/", "loopback"),
        ("http://[64:ff9b::7f00:1]/", "loopback"),
        ("http://[2002:a9fe:a9fe::]/", "metadata"),
    ],
)
def test_check_url_refuses(url, reason):
    with pytest.raises(EgressRefused) as refused:
        check_url(url, no_resolver)
    assert refused.value.reason == reason


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        (["127.0.0.1"], "loopback"),
        (["10.1.2.3"], "private"),
        (["169.254.169.254"], "metadata"),
        (["::ffff:127.0.0.1"], "loopback"),
        (["fd00::1"], "private"),
        (["93.184.216.34", "127.0.0.1"], "loopback"),  # any refused address refuses all
        (["2606:4700::1111", "fe80::1"], "link_local"),
        ([], "unresolvable"),
    ],
)
def test_check_destination_refuses_when_any_resolved_address_is_refused(answers, reason):
    resolver = FakeResolver({"name.example": answers})

    with pytest.raises(EgressRefused) as refused:
        check_destination("name.example", 443, resolver)

    assert refused.value.reason == reason
    assert resolver.calls == [("name.example", 443)]


def test_check_destination_reports_resolver_failure():
    with pytest.raises(EgressRefused) as refused:
        check_destination("nowhere.example", 443, FakeResolver({}))
    assert refused.value.reason == "unresolvable"


def test_check_destination_refuses_the_port_before_resolving():
    resolver = FakeResolver({"public.example": ["93.184.216.34"]})

    with pytest.raises(EgressRefused) as refused:
        check_destination("public.example", 25, resolver)

    assert refused.value.reason == "port"
    assert resolver.calls == []


def test_check_destination_accepts_a_public_literal_without_resolving():
    target = check_destination("[2606:4700::1111]", 443, no_resolver)
    assert (target.host, target.address, target.authority) == (
        "2606:4700::1111",
        PUBLIC_V6,
        "[2606:4700::1111]:443",
    )


def test_check_destination_canonicalises_an_odd_public_literal():
    target = check_destination("0x5db8d822", 80, no_resolver)  # 93.184.216.34
    assert (target.host, target.address) == ("93.184.216.34", PUBLIC_V4)


def test_resolver_text_answers_are_parsed_and_zones_dropped():
    target = check_destination("public.example", 443, lambda h, p: ["93.184.216.34"])
    assert target.address == PUBLIC_V4
    with pytest.raises(EgressRefused) as refused:
        check_destination("public.example", 443, lambda h, p: ["fe80::1%eth0"])
    assert refused.value.reason == "link_local"


@pytest.mark.parametrize(
    ("authority", "expected"),
    [
        ("example.com:443", ("example.com", 443)),
        ("example.com", ("example.com", None)),
        ("[::1]:443", ("[::1]", 443)),
        ("[::1]", ("[::1]", None)),
        ("93.184.216.34:80", ("93.184.216.34", 80)),
    ],
)
def test_split_authority(authority, expected):
    assert split_authority(authority) == expected


@pytest.mark.parametrize(
    "authority", ["::1:443", "example.com:", "example.com:x", ":443", "[::1]x", "[::1", "[]:80"]
)
def test_split_authority_refuses_malformed(authority):
    with pytest.raises(EgressRefused) as refused:
        split_authority(authority)
    assert refused.value.reason == "malformed_url"


# --- the operator's allow-list (the worker's own calls only) ---------------------------


def test_allowlist_parses_addresses_blocks_and_names():
    allowlist = Allowlist.parse(" 10.8.0.0/16, ::1 ,[fd00::5], LLM.Internal., 127.0.0.1,, ")

    assert allowlist.networks == (
        ipaddress.ip_network("10.8.0.0/16"),
        ipaddress.ip_network("::1/128"),
        ipaddress.ip_network("fd00::5/128"),
        ipaddress.ip_network("127.0.0.1/32"),
    )
    assert allowlist.names == frozenset({"llm.internal"})
    assert not Allowlist.parse("") and not Allowlist.parse(" , ")


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "256.1.1.1", "0x7f.1", "a b", "-x-.internal"])
def test_allowlist_refuses_what_is_not_an_address_block_or_name(entry):
    with pytest.raises(ValueError, match="not an address, a CIDR block or a host name"):
        Allowlist.parse(f"10.0.0.1,{entry}")


@pytest.mark.parametrize(
    ("host", "allowlist", "expected"),
    [
        ("10.8.1.2", "10.8.0.0/16", "10.8.1.2"),
        ("[::1]", "::1", "::1"),
        ("[::ffff:10.8.1.2]", "10.8.0.0/16", "::ffff:10.8.1.2"),  # mapped: the v4 is listed
        ("0x0a080102", "10.8.0.0/16", "10.8.1.2"),  # an odd spelling of a listed address
        ("127.0.0.1", "127.0.0.0/8", "127.0.0.1"),
    ],
)
def test_an_allow_listed_literal_passes(host, allowlist, expected):
    target = check_destination(
        host, 8000, no_resolver, allowed_ports=None, allowlist=Allowlist.parse(allowlist)
    )
    assert str(target.address) == expected


@pytest.mark.parametrize(
    ("host", "allowlist", "reason"),
    [
        ("10.9.0.1", "10.8.0.0/16", "private"),  # outside the block
        ("169.254.169.254", "169.254.0.0/16", "metadata"),  # metadata stays refused
        ("169.254.169.254", "0.0.0.0/0", "metadata"),
        ("[fd00:ec2::254]", "fd00::/8", "metadata"),
        ("127.0.0.1", "llm.internal", "loopback"),  # a name entry lets no literal in
    ],
)
def test_what_the_allowlist_does_not_list_stays_refused(host, allowlist, reason):
    with pytest.raises(EgressRefused) as refused:
        check_destination(
            host, 80, no_resolver, allowed_ports=None, allowlist=Allowlist.parse(allowlist)
        )
    assert refused.value.reason == reason


def test_an_allow_listed_name_passes_whatever_it_resolves_to_but_metadata():
    resolver = FakeResolver({"llm.internal": ["10.1.2.3", "127.0.0.1"], "localhost": ["::1"]})
    allowlist = Allowlist.parse("llm.internal,localhost")

    target = check_destination(
        "LLM.internal.", 8000, resolver, allowed_ports=None, allowlist=allowlist
    )
    local = check_destination("localhost", 11434, resolver, allowed_ports=None, allowlist=allowlist)

    assert (target.host, target.addresses) == ("llm.internal", (ip("10.1.2.3"), ip("127.0.0.1")))
    assert local.addresses == (ip("::1"),)
    resolver.table["llm.internal"] = ["10.1.2.3", "169.254.169.254"]
    with pytest.raises(EgressRefused) as refused:
        check_destination("llm.internal", 8000, resolver, allowed_ports=None, allowlist=allowlist)
    assert refused.value.reason == "metadata"


def test_a_name_not_listed_is_refused_if_any_answer_is_outside_the_blocks():
    resolver = FakeResolver({"mixed.example": ["10.8.0.1", "10.9.0.1"]})
    with pytest.raises(EgressRefused) as refused:
        check_destination("mixed.example", 443, resolver, allowlist=Allowlist.parse("10.8.0.0/16"))
    assert refused.value.reason == "private"


def test_any_port_only_when_the_caller_says_so():
    assert check_destination("93.184.216.34", 8443, no_resolver, allowed_ports=None).port == 8443
    with pytest.raises(EgressRefused) as refused:
        check_destination("93.184.216.34", 8443, no_resolver)  # the sandbox default: 80, 443
    assert refused.value.reason == "port"


# --- bounded lookups ----------------------------------------------------------------


def test_a_lookup_pool_refuses_over_its_limit_and_frees_a_slot_when_a_lookup_ends():
    release = threading.Event()
    pool = LookupPool(2)
    hung = [pool.submit(release.wait) for _ in range(2)]

    with pytest.raises(EgressRefused) as refused:
        pool.submit(lambda: "never")
    assert (refused.value.reason, pool.in_flight) == ("lookup_limit", 2)

    release.set()
    assert [future.result(2) for future in hung] == [True, True]
    assert pool.submit(lambda: "answered").result(2) == "answered"
    assert pool.in_flight == 0


def test_a_lookup_that_hangs_times_out_for_its_caller_only():
    release = threading.Event()
    pool = LookupPool(1)
    try:
        started = time.monotonic()
        with pytest.raises(EgressRefused) as refused:
            pool.call(release.wait, timeout_s=0.1)
        waited = time.monotonic() - started
        assert refused.value.reason == "lookup_timeout" and 0.1 <= waited < 1.0
        # The hung lookup still holds its slot: the next one is refused at once.
        with pytest.raises(EgressRefused, match="lookup_limit"):
            pool.call(lambda: [], timeout_s=5)
    finally:
        release.set()


def test_a_lookup_error_reaches_its_caller():
    def broken():
        raise OSError("resolver exploded")

    with pytest.raises(OSError, match="resolver exploded"):
        LookupPool(1).call(broken, timeout_s=2)


# --- the worker's own calls ---------------------------------------------------------


def test_the_outbound_policy_refuses_internal_addresses_on_any_port():
    policy = OutboundPolicy(resolver=FakeResolver({"inside.example": ["10.0.0.5"]}))

    for host, port, reason in [
        ("127.0.0.1", 8000, "loopback"),
        ("10.0.0.5", 443, "private"),
        ("inside.example", 8080, "private"),
        ("localhost", 11434, "loopback"),
        ("169.254.169.254", 80, "metadata"),
    ]:
        with pytest.raises(EgressRefused) as refused:
            policy.check(host, port)
        assert refused.value.reason == reason, host
    assert policy.check("93.184.216.34", 8443).address == PUBLIC_V4


def test_without_dns_the_outbound_policy_dials_literals_only():
    policy = OutboundPolicy(allowlist=Allowlist.parse("127.0.0.0/8"), resolver=None)

    assert policy.check("127.0.0.1", 8000).address == ip("127.0.0.1")
    with pytest.raises(EgressRefused) as refused:
        policy.check("api.example", 443)
    assert refused.value.reason == "unresolvable"


def test_registration_checks_literals_always_and_names_when_it_may_resolve():
    resolver = FakeResolver({"inside.example": ["10.0.0.5"]})
    policy = OutboundPolicy(resolver=resolver)
    no_dns = OutboundPolicy(resolver=None)

    with pytest.raises(EgressRefused, match="private"):
        policy.check_registration("https://inside.example/act")
    assert policy.check_registration("https://inside.example/act", resolve=False) is None
    assert no_dns.check_registration("https://inside.example/act") is None
    assert resolver.calls == [("inside.example", 443)]
    for url in ["http://10.0.0.5:9000/act", "http://0x7f.1/", "http://localhost:8000/v1"]:
        with pytest.raises(EgressRefused):
            no_dns.check_registration(url)


def test_an_outbound_lookup_that_hangs_fails_within_its_timeout():
    release = threading.Event()

    def hanging(host, port):
        release.wait()
        return [PUBLIC_V4]

    policy = OutboundPolicy(resolver=hanging, lookup_timeout_s=0.1, max_lookups=1)
    try:
        started = time.monotonic()
        with pytest.raises(EgressRefused) as refused:
            policy.check("slow.example", 443)
        assert refused.value.reason == "lookup_timeout"
        assert time.monotonic() - started < 1.0
    finally:
        release.set()
