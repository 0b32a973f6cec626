"""The demo web (docs/demo-web.md): its pages and forms over real HTTP, the demo tasks'
expected answers read back from the running site, the simulated host
``demo.arena.test`` through a real egress proxy's unix socket (it answers; nothing
else on loopback becomes reachable through it), and a real sandbox whose Chromium and
shell browse it. Everything stays on 127.0.0.1; no name is ever resolved."""

import asyncio
import csv
import io
import ipaddress
import re
import shutil
import socket
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from battles.classify import classify
from battles.similarity import jaccard, trigrams
from judging.management.commands import seed_demo
from sandboxes import services
from sandboxes.base import SandboxSpec
from sandboxes.demoweb import DEMO_TASKS, HOST, ORIGIN, answer_matches, data
from sandboxes.demoweb.server import BODY_MAX_BYTES, DemoWebServer
from sandboxes.egress import EgressProxy
from sandboxes.egress_wire import dial_checked, dial_simulated
from sandboxes.local_backend import LocalBackend
from sandboxes.netpolicy import (
    EgressRefused,
    OutboundPolicy,
    SimulatedHost,
    check_url,
    simulated_hosts,
)

pytestmark = pytest.mark.timeout(60)

RUN_ID = 5151
SECTIONS = ["/", "/news/", "/directory/", "/contact/", "/downloads/"]
ADA = {
    "name": "Ada Lovelace",
    "email": "ada@example.org",
    "topic": "Technical",
    "message": "The map page is broken",
}


@pytest.fixture(scope="module")
def site():
    server = DemoWebServer().start()
    yield server
    server.close()


class Answer:
    def __init__(self, status: int, headers, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body
        self.text = body.decode("utf-8", "replace")


def fetch(site: DemoWebServer, path: str, form: dict | None = None, **kwargs) -> Answer:
    encoded = urllib.parse.urlencode(form).encode() if form is not None else kwargs.get("data")
    request = urllib.request.Request(  # noqa: S310 - http://127.0.0.1 only
        site.url + path,
        data=encoded,
        method=kwargs.get("method"),
        headers=kwargs.get("headers", {}),
    )
    opener = urllib.request.build_opener(NoRedirects)
    try:
        with opener.open(request, timeout=5) as response:
            return Answer(response.status, response.headers, response.read())
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.headers, error.read())


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def titles(text: str) -> list[str]:
    return re.findall(r"<title>(.*?)</title>", text)


def headings(text: str) -> list[str]:
    return re.findall(r"<h1>(.*?)</h1>", text)


def nav_links(text: str) -> list[tuple[str, str]]:
    nav = re.search(r"<nav[^>]*>(.*?)</nav>", text).group(1)
    return re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', nav)


def table_rows(text: str) -> list[list[str]]:
    body = re.search(r"<tbody>(.*?)</tbody>", text)
    if body is None:
        return []
    return [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body[1])]


# --- the site over HTTP -------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", [*SECTIONS, data.ARTICLES[0].path, data.ARTICLES[-1].path, "/directory/?q=x", "/nope"]
)
def test_every_page_has_one_title_one_heading_and_the_nav_bar(site, path):
    page = fetch(site, path)

    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert len(titles(page.text)) == 1 and titles(page.text)[0]
    assert len(headings(page.text)) == 1
    assert nav_links(page.text) == [
        ("/", "Home"),
        ("/news/", "News"),
        ("/directory/", "Directory"),
        ("/contact/", "Contact"),
        ("/downloads/", "Downloads"),
    ]
    assert "<script" not in page.text


def test_home_is_the_demo_town_portal_linking_every_section(site):
    page = fetch(site, "/")

    assert page.status == 200
    assert titles(page.text) == ["Demo Town Portal"] and headings(page.text) == ["Demo Town Portal"]
    for section in SECTIONS[1:]:
        assert page.text.count(f'href="{section}"') == 2  # the nav, and the page's own card


def test_news_lists_dated_articles_newest_first_and_each_opens(site):
    page = fetch(site, "/news/")
    items = re.findall(
        r'<li><time datetime="([^"]+)">\1</time> <a href="([^"]+)">([^<]+)</a>', page.text
    )

    assert len(items) >= 8 and len(items) == len(data.ARTICLES)
    dates = [date for date, _, _ in items]
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", d) for d in dates)
    assert dates == sorted(dates, reverse=True) and len(set(dates)) == len(dates)
    for date, href, title in items:
        article = fetch(site, href)
        assert article.status == 200
        assert headings(article.text) == [title]
        assert f'<time datetime="{date}">{date}</time>' in article.text
        assert re.search(r'by <span class="author">[A-Z][a-z]+ [A-Z][a-z]+</span>', article.text)
        paragraphs = re.findall(r"<p>(?!<a )(.*?)</p>", article.text.split("</p>", 1)[1])
        assert 2 <= len(paragraphs) <= 4


def test_a_section_without_its_slash_redirects_and_an_unknown_page_is_404(site):
    moved = fetch(site, "/directory?q=Old")
    missing = fetch(site, "/news/no-such-article/")

    assert (moved.status, moved.headers["Location"]) == (301, "/directory/?q=Old")
    assert missing.status == 404 and headings(missing.text) == ["Page not found"]
    assert "/news/no-such-article/" in missing.text


def test_the_directory_lists_everyone_with_its_search_form(site):
    page = fetch(site, "/directory/")

    rows = table_rows(page.text)
    assert len(rows) >= 20 and len(rows) == len(data.DIRECTORY)
    assert all(len(row) == 4 for row in rows)
    assert re.search(
        r"<th>Name</th><th>District</th><th>Phone</th><th>Opening hours</th>", page.text
    )
    form = re.search(r'<form class="search" method="get" action="/directory/".*?</form>', page.text)
    assert form is not None
    assert '<label for="q">Search</label>' in form[0] and 'name="q"' in form[0]
    assert '<button type="submit">Search</button>' in form[0]
    assert "results for" not in page.text


@pytest.mark.parametrize(
    ("query", "names"),
    [
        # a name or a district, any case, spaces around it ignored
        ("Riverside Library", ["Riverside Library"]),
        (
            "  RIVERSIDE ",
            ["Riverside Library", "Riverside Pool", "Riverside Bakery", "Riverside Medical Centre"],
        ),
        ("old town", ["Old Town Library", "Town Museum", "Old Town Books", "Lantern Cafe"]),
        ("pool", ["Northgate Pool", "Riverside Pool"]),
    ],
)
def test_a_search_shows_only_matching_rows_and_says_how_many(site, query, names):
    page = fetch(site, "/directory/?" + urllib.parse.urlencode({"q": query}))

    assert page.status == 200
    assert [row[0] for row in table_rows(page.text)] == names
    assert f"{len(names)} results for \u201c{query.strip()}\u201d" in page.text
    assert f'value="{query}"' in page.text  # the box keeps what was typed


def test_a_search_without_match_says_so_and_escapes_what_was_typed(site):
    page = fetch(site, "/directory/?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E")

    assert page.status == 200 and table_rows(page.text) == []
    assert "No results for \u201c&lt;script&gt;alert(1)&lt;/script&gt;\u201d" in page.text
    assert "<script>" not in page.text


def test_an_overlong_search_is_refused_in_words(site):
    page = fetch(site, "/directory/?q=" + "a" * 201)

    assert page.status == 400
    assert "The search text is too long: use at most 200 characters." in page.text


def test_the_contact_form_has_the_fields_the_contract_names(site):
    page = fetch(site, "/contact/")

    form = re.search(
        r'<form class="contact" method="post" action="/contact/".*?</form>', page.text
    )[0]
    assert '<input id="name" name="name"' in form
    assert re.search(r'<input id="email" name="email" type="email"', form)
    assert re.findall(r"<option>(\w+)</option>", form) == ["General", "Billing", "Technical"]
    assert '<textarea id="message" name="message"' in form
    assert '<button type="submit">Send</button>' in form
    for label in ("Name", "Email", "Topic", "Message"):
        assert f'for="{label.lower()}">{label}</label>' in form


def test_sending_the_form_confirms_every_value_with_a_deterministic_reference(site):
    first = fetch(site, "/contact/", ADA)
    again = fetch(site, "/contact/", {**ADA, "name": "  Ada Lovelace "})
    other = fetch(site, "/contact/", {**ADA, "topic": "Billing"})

    assert first.status == 200
    assert headings(first.text) == ["Thank you, Ada Lovelace"]
    for value in ADA.values():
        assert f"<dd>{value}</dd>" in first.text
    reference = re.search(r'<strong class="reference">(REF-[0-9A-F]{6})</strong>', first.text)[1]
    assert reference == data.reference_number(**ADA)
    assert re.search(r"REF-[0-9A-F]{6}", again.text)[0] == reference  # spaces do not count
    assert re.search(r"REF-[0-9A-F]{6}", other.text)[0] != reference


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"name": ""}, "Please enter your name."),
        ({"email": "   "}, "Please enter your email address."),
        ({"email": "ada.example.org"}, "is not an email address: write it like name@example.org."),
        ({"topic": "Gossip"}, "Please choose a topic: General, Billing or Technical."),
        ({"name": "A" * 101}, "Your name is too long: use at most 100 characters."),
    ],
)
def test_a_form_with_a_missing_or_bad_value_comes_back_with_the_error_in_words(site, change, error):
    page = fetch(site, "/contact/", {**ADA, **change})

    assert page.status == 400
    assert headings(page.text) == ["Contact"] and "Thank you" not in page.text
    assert error in page.text and "Your message was not sent" in page.text
    assert "The map page is broken</textarea>" in page.text  # what was typed is kept


def test_the_form_refuses_other_encodings_oversized_bodies_and_methods(site):
    as_json = fetch(
        site, "/contact/", data=b'{"name": "x"}', headers={"Content-Type": "application/json"}
    )
    oversized = fetch(site, "/contact/", {**ADA, "message": "x" * BODY_MAX_BYTES})
    put = fetch(site, "/contact/", method="PUT", data=b"")
    post_news = fetch(site, "/news/", ADA)

    assert as_json.status == 415 and "application/x-www-form-urlencoded" in as_json.text
    assert oversized.status == 413
    assert (put.status, put.headers["Allow"]) == (405, "GET, HEAD, POST")
    assert (post_news.status, post_news.headers["Allow"]) == (405, "GET, HEAD")


def test_the_downloads_page_links_a_csv_attachment_and_a_text_file(site):
    page = fetch(site, "/downloads/")
    links = re.findall(r'<li><a href="(/downloads/[^"]+)">', page.text)
    csv_file = fetch(site, "/downloads/opening-hours.csv")
    text_file = fetch(site, "/downloads/bin-collection.txt")

    assert links == ["/downloads/opening-hours.csv", "/downloads/bin-collection.txt"]
    assert csv_file.status == 200
    assert csv_file.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert csv_file.headers["Content-Disposition"] == 'attachment; filename="opening-hours.csv"'
    rows = list(csv.reader(io.StringIO(csv_file.text)))
    assert rows[0] == ["Place", "District", "Weekdays", "Saturday", "Sunday"]
    assert len(rows) - 1 == len(data.OPENING_HOURS) >= 10
    assert f"(CSV, {len(csv_file.body)} bytes)" in page.text
    assert text_file.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert text_file.headers["Content-Disposition"] == 'inline; filename="bin-collection.txt"'
    assert "Riverside    Tuesday         Thursday" in text_file.text


def test_head_answers_the_headers_without_a_body(site):
    answer = fetch(site, "/downloads/opening-hours.csv", method="HEAD")

    assert answer.status == 200 and answer.body == b""
    assert int(answer.headers["Content-Length"]) == len(data.opening_hours_csv().encode())


def test_the_server_binds_loopback_only():
    with pytest.raises(ValueError, match="loopback only"):
        DemoWebServer("0.0.0.0")  # noqa: S104 - the refusal is the point


# --- the demo tasks -----------------------------------------------------------------------


def test_the_demo_tasks_are_well_formed():
    assert len(DEMO_TASKS) >= 5
    for task in DEMO_TASKS:
        assert set(task) == {"instruction", "start_url", "category", "expected"}
        assert task["category"] in ("browsing", "files_and_data")
        assert task["start_url"] == "" or task["start_url"].startswith(f"{ORIGIN}/")
        assert ORIGIN in task["instruction"]
        assert task["expected"] and all(isinstance(e, str) and e for e in task["expected"])
        assert classify(task["instruction"]).is_task
    assert {t["category"] for t in DEMO_TASKS} == {"browsing", "files_and_data"}


def test_the_seed_submits_every_demo_task_and_none_is_a_near_duplicate():
    # Admission refuses a submitter's task too similar to an earlier one (SPEC §2): the
    # seed submits all of these as one user.
    seeded = [
        *(instruction for instruction, _ in seed_demo.JUDGED_TASKS),
        seed_demo.ABSTAINED_TASK,
        seed_demo.ENDED_EARLY_TASK,
        seed_demo.NAMING_TASK,
        *seed_demo.OPEN_TASKS,
    ]
    assert {t["instruction"] for t in DEMO_TASKS} <= set(seeded)
    assert {t["instruction"]: t["category"] for t in DEMO_TASKS} == seed_demo.WEB_CATEGORIES
    grams = [trigrams(text) for text in seeded]
    theta = settings.ARENA.dup_theta
    for i, a in enumerate(grams):
        for j in range(i + 1, len(grams)):
            assert jaccard(a, grams[j]) < theta, (seeded[i], seeded[j])


def test_each_expected_answer_is_what_the_running_site_shows(site):
    newest, phone, contact, count = DEMO_TASKS[:4]
    news = fetch(site, "/news/").text
    first = re.search(
        r'<li><time datetime="([^"]+)">[^<]+</time> <a href="[^"]+">([^<]+)</a>', news
    )
    search = fetch(site, "/directory/?q=Riverside+Library").text
    sent = fetch(site, "/contact/", ADA).text
    rows = list(csv.reader(io.StringIO(fetch(site, "/downloads/opening-hours.csv").text)))
    footbridge = fetch(site, "/news/millbrook-footbridge-opens/").text
    closed = [row[0] for row in rows[1:] if row[4] == "closed"]
    bins = fetch(site, "/downloads/bin-collection.txt").text

    assert newest["expected"] == [first[2], first[1]]
    assert phone["expected"] == [table_rows(search)[0][2]]
    assert contact["expected"] == re.findall(r'class="reference">(REF-\w+)<', sent)
    assert count["expected"] == [str(len(rows) - 1)]
    assert "footbridge" in headings(footbridge)[0].lower()
    assert DEMO_TASKS[5]["expected"] == closed
    assert re.search(r"^Riverside +\w+ +(\w+)$", bins, re.M)[1] == DEMO_TASKS[6]["expected"][0]


@pytest.mark.parametrize(
    ("answer", "ok"),
    [
        ("The newest is “Spring Market Returns to Market Hall”, dated 2026-03-18.", True),
        ("spring market returns to market hall (2026-03-18)", True),
        ("Spring Market Returns to Market Hall", False),  # no date
        ("Spring Market Returns to Market Hall, 2026-03-180", False),  # not that date
        ("Millbrook Footbridge Opens to Walkers and Cyclists, 2026-03-11", False),
    ],
)
def test_answer_matches_needs_every_expected_string_as_a_whole(answer, ok):
    assert answer_matches(DEMO_TASKS[0], answer) is ok


# --- demo.arena.test through the egress proxy ---------------------------------------------


class Dials:
    """The production dialers, recording what they were asked to dial."""

    def __init__(self) -> None:
        self.checked: list[tuple] = []
        self.simulated: list[tuple] = []

    async def dial_checked(self, address, port):
        self.checked.append((address, port))
        return await dial_checked(address, port)

    async def dial_simulated(self, address, port):
        self.simulated.append((address, port))
        return await dial_simulated(address, port)


class Egress:
    """A real EgressProxy on its own thread serving RUN_ID on a unix socket, with
    ``demo.arena.test`` mapped to ``upstream`` and a resolver that records every name
    it is asked and resolves none (ARENA_EGRESS_RESOLVE=false)."""

    def __init__(self, upstream_port: int, path: Path, **kwargs) -> None:
        self.names: list[str] = []
        self.refusals: list[tuple[int, str, str]] = []
        self.dials = Dials()
        served = SimulatedHost(HOST, ipaddress.ip_address("127.0.0.1"), upstream_port)

        def resolver(host, port):
            self.names.append(host)
            return []

        self.proxy = EgressProxy(
            resolver=resolver,
            dialer=self.dials.dial_checked,
            simulated_dialer=self.dials.dial_simulated,
            simulated=simulated_hosts(served),
            on_refusal=lambda *refusal: self.refusals.append(refusal),
            **kwargs,
        ).run_in_thread()
        self.path = self.proxy.serve_unix(path, RUN_ID)

    def send(self, raw: bytes) -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(5)
            client.connect(self.path)
            client.sendall(raw)
            chunks = []
            while chunk := client.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.proxy.close()


@pytest.fixture
def egress(site, tmp_path):
    proxy = Egress(site.port, tmp_path / "egress.sock")
    yield proxy
    proxy.close()


def get(url: str, host: str = HOST, extra: str = "") -> bytes:
    return f"GET {url} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


@pytest.mark.parametrize(
    "url", [f"{ORIGIN}/news/", "http://DEMO.Arena.TEST./news/", f"{ORIGIN}:80/news/"]
)
def test_the_simulated_host_answers_plain_http_on_port_80_without_any_lookup(egress, site, url):
    response = egress.send(get(url))

    assert status_of(response) == 200
    assert b"<title>News - Demo Town Portal</title>" in response
    assert egress.names == [] and egress.refusals == []
    assert egress.dials.checked == []  # never the policy's dialer
    assert egress.dials.simulated == [(ipaddress.ip_address("127.0.0.1"), site.port)]
    assert egress.proxy.counters(RUN_ID)["requests"] == 1


def test_a_form_post_travels_through_the_proxy(egress):
    form = urllib.parse.urlencode(ADA)
    response = egress.send(
        f"POST {ORIGIN}/contact/ HTTP/1.1\r\nHost: {HOST}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(form)}\r\n\r\n{form}".encode()
    )

    assert status_of(response) == 200
    assert data.reference_number(**ADA).encode() in response


@pytest.mark.parametrize(
    ("raw", "status", "reason"),
    [
        # other ports of the simulated name, CONNECT to it, https to it
        (get(f"http://{HOST}:6379/"), 403, "port"),
        (get(f"http://{HOST}:8000/"), 403, "port"),
        (f"CONNECT {HOST}:6379 HTTP/1.1\r\nHost: {HOST}:6379\r\n\r\n".encode(), 403, "port"),
        (f"CONNECT {HOST}:443 HTTP/1.1\r\nHost: {HOST}:443\r\n\r\n".encode(), 403, "port"),
        (f"CONNECT {HOST}:80 HTTP/1.1\r\nHost: {HOST}:80\r\n\r\n".encode(), 403, "scheme"),
        (get(f"https://{HOST}/"), 400, "malformed"),
        # the worker's own loopback and private addresses, whatever Host says
        (get("http://127.0.0.1/"), 403, "loopback"),
        (get("http://127.0.0.1:6379/"), 403, "port"),
        (get("http://localhost/"), 403, "loopback"),
        (get("http://[::1]/"), 403, "loopback"),
        (get("http://2130706433/"), 403, "loopback"),
        (get("http://10.0.0.1/"), 403, "private"),
        (b"CONNECT 127.0.0.1:6379 HTTP/1.1\r\nHost: demo.arena.test\r\n\r\n", 403, "port"),
        (b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: demo.arena.test\r\n\r\n", 403, "loopback"),
        # the name as user info, in origin form, or as part of another name
        (get(f"http://{HOST}@127.0.0.1/"), 403, "userinfo"),
        (get(f"http://127.0.0.1@{HOST}/"), 403, "userinfo"),
        (f"GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode(), 400, "malformed"),
        (get(f"http://sub.{HOST}/"), 502, "unresolvable"),
        (get(f"http://{HOST}.localhost/"), 403, "loopback"),
        (get("http://demo-arena.test/"), 502, "unresolvable"),
    ],
)
def test_nothing_else_becomes_reachable_through_the_mapping(egress, raw, status, reason):
    response = egress.send(raw)

    assert status_of(response) == status, response
    assert [r[2] for r in egress.refusals] == [reason]
    assert egress.dials.checked == [] and egress.dials.simulated == []
    assert HOST not in egress.names  # the simulated name is never looked up


async def _echo_head(reader, writer) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(head) + head)
    await writer.drain()
    writer.close()


def test_the_upstream_is_fixed_and_sees_the_urls_host_not_the_sandboxs(tmp_path):
    # An echo server stands in for the demo web, so the forwarded head can be read.
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(_echo_head, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    egress = Egress(port, tmp_path / "egress.sock")
    try:
        response = egress.send(get(f"{ORIGIN}:80/x?q=1", host="127.0.0.1:6379"))
    finally:
        egress.close()
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)

    forwarded = response.partition(b"\r\n\r\n")[2]
    # The proxy adds the run's stamp (docs/egress.md, the model gateway) to every request
    # to a simulated host; nothing else of the sandbox's head but the path goes on.
    assert re.fullmatch(
        rb"GET /x\?q=1 HTTP/1.1\r\nHost: demo.arena.test\r\n"
        rb"X-Arena-Run: " + str(RUN_ID).encode() + rb"\.[0-9a-f]{64}\r\nConnection: close\r\n\r\n",
        forwarded,
    ), forwarded
    assert egress.dials.simulated == [(ipaddress.ip_address("127.0.0.1"), port)]


def test_the_sandboxs_request_rate_bounds_the_simulated_host_too(site, tmp_path):
    egress = Egress(site.port, tmp_path / "egress.sock", rate_per_s=0.001, burst=2)
    try:
        answers = [status_of(egress.send(get(f"{ORIGIN}/"))) for _ in range(3)]
    finally:
        egress.close()

    assert answers == [200, 200, 429]
    assert egress.refusals == [(RUN_ID, f"{ORIGIN}/", "rate_limit")]


def test_a_stopped_demo_server_is_a_502_not_a_fallback(tmp_path):
    stopped = DemoWebServer().start()
    port = stopped.port
    stopped.close()
    egress = Egress(port, tmp_path / "egress.sock")
    try:
        response = egress.send(get(f"{ORIGIN}/"))
    finally:
        egress.close()

    assert status_of(response) == 502
    assert egress.dials.checked == [] and egress.names == []


MAPPED = simulated_hosts(SimulatedHost(HOST, ipaddress.ip_address("127.0.0.1"), 8123))


def no_lookups(host, port):
    raise AssertionError(f"looked up {host}")


@pytest.mark.parametrize(
    ("url", "target"),
    [
        (f"{ORIGIN}/news/?q=1", "/news/?q=1"),
        ("http://Demo.Arena.Test.:80", "/"),
    ],
)
def test_check_url_maps_the_simulated_host_without_a_lookup(url, target):
    checked = check_url(url, no_lookups, simulated=MAPPED)

    assert checked.simulated is MAPPED[HOST]
    assert (checked.host, checked.port, checked.authority) == (HOST, 80, HOST)
    assert checked.request_target == target
    assert checked.addresses == (ipaddress.ip_address("127.0.0.1"),)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (f"https://{HOST}/", "port"),
        (f"https://{HOST}:80/", "scheme"),
        (f"http://{HOST}:8123/", "port"),  # the upstream's own port is not a way in
        (f"http://{HOST}:443/", "port"),
        ("http://127.0.0.1:8123/", "loopback"),  # the upstream itself, by address
        ("http://127.0.0.1/", "loopback"),
    ],
)
def test_check_url_refuses_the_rest_of_the_simulated_host(url, reason):
    with pytest.raises(EgressRefused) as refused:
        check_url(url, no_lookups, simulated=MAPPED, allowed_ports=frozenset({80, 443, 8123}))

    assert refused.value.reason == reason


def test_the_worker_s_own_calls_and_unmapped_checks_never_get_the_simulated_host():
    policy = OutboundPolicy(resolver=None)

    with pytest.raises(EgressRefused) as outbound:
        policy.check(HOST, 80)
    with pytest.raises(EgressRefused) as unmapped:
        check_url(f"{ORIGIN}/", lambda host, port: [])

    assert outbound.value.reason == unmapped.value.reason == "unresolvable"


def test_a_simulated_host_must_be_a_plain_canonical_name():
    loopback = ipaddress.ip_address("127.0.0.1")
    for name in (
        "Demo.Arena.Test",
        "demo.arena.test.",
        "127.0.0.1",
        "localhost",
        "a.localhost",
        "a b",
    ):
        with pytest.raises(ValueError):
            SimulatedHost(name, loopback, 8000)
    with pytest.raises(ValueError):
        SimulatedHost(HOST, loopback, 0)


def test_arena_demo_web_switches_the_mapping_off(settings):
    settings.ARENA = settings.ARENA.replace(demo_web=False)
    assert services.simulated_hosts() == {}

    settings.ARENA = settings.ARENA.replace(demo_web=True)
    served = services.simulated_hosts()[HOST]
    assert (served.name, served.port, str(served.address)) == (HOST, 80, "127.0.0.1")
    with urllib.request.urlopen(f"http://127.0.0.1:{served.upstream_port}/", timeout=5) as page:
        assert b"<h1>Demo Town Portal</h1>" in page.read()


# --- a real sandbox -----------------------------------------------------------------------


def test_a_sandbox_browses_the_demo_web_in_chromium_and_from_its_shell(settings):
    """The production wiring: the worker's egress proxy (services.egress_proxy, with
    ARENA_DEMO_WEB on and no DNS) and a real desktop sandbox."""
    settings.ARENA = settings.ARENA.replace(demo_web=True)
    proxy = services.egress_proxy()
    if HOST not in proxy.proxy.simulated:
        pytest.fail("this process's egress proxy was started with ARENA_DEMO_WEB off")
    root = Path(tempfile.mkdtemp(prefix="arena-test-demoweb-", dir="/var/tmp"))
    root.chmod(0o711)
    box = LocalBackend(root, uid_base=settings.ARENA.sandbox_uid_base, egress=proxy).provision(
        SandboxSpec(run_id=RUN_ID, shell_timeout_s=10), slot=12
    )
    try:
        news = box.navigate(f"{ORIGIN}/news/")
        state = box.page_state()
        shell = box.shell(
            f"curl -s -m 5 {ORIGIN}/downloads/opening-hours.csv | wc -l;"
            f"curl -s -m 5 -o /dev/null -w '%{{http_code}}\\n' http://{HOST}:6379/;"
            'python3 -c "import urllib.request as u; '
            f"print(u.urlopen('{ORIGIN}/directory/?q=Riverside+Library').read().count(b'555-0142'))\""
        )
        counters = proxy.counters(RUN_ID)
    finally:
        box.destroy()
        shutil.rmtree(root, ignore_errors=True)
    refusals = services.egress_refusals_take(RUN_ID)

    assert news.ok, news.error
    assert news.data["title"] == "News - Demo Town Portal"
    assert state == {"url": f"{ORIGIN}/news/", "title": "News - Demo Town Portal"}
    assert shell.stdout.split() == [str(len(data.OPENING_HOURS) + 1), "403", "1"], shell
    # No https:// detour before the page (an upgrade would be a refused CONNECT to :443):
    # the only refusal is the shell's own request for port 6379.
    assert refusals == [{"target": f"http://{HOST}:6379/", "reason": "port", "count": 1}]
    assert counters.get("upstream_failures", 0) == 0


def test_typing_into_a_form_makes_chromium_ask_for_nothing_of_its_own(settings):
    """Each field of the contact form clicked and typed into, as an agent would: the
    proxy sees the page's own requests only. (Chromium fetched its spell-check dictionary
    from redirector.gvt1.com on the first text typed, until the profile's preferences
    turned spell checking off: sandboxes/inside/sv_display.py PROFILE_PREFERENCES.)"""
    settings.ARENA = settings.ARENA.replace(demo_web=True)
    proxy = services.egress_proxy()
    run_id = RUN_ID + 1
    root = Path(tempfile.mkdtemp(prefix="arena-test-demoweb-", dir="/var/tmp"))
    root.chmod(0o711)
    box = LocalBackend(root, uid_base=settings.ARENA.sandbox_uid_base, egress=proxy).provision(
        SandboxSpec(run_id=run_id, shell_timeout_s=10), slot=13
    )
    try:
        assert box.navigate(f"{ORIGIN}/contact/").ok
        fields = [e for e in box.page_text()["elements"] if e.get("role") == "textbox"]
        for field in fields:
            box.click(field["x"], field["y"])
            box.type("hello there, spelled rihgt")
        sent = box.key("Return")  # the form is sent: a request of the page's own
        state = box.page_state()
        box.shell("sleep 2")  # what Chromium would fetch on its own has time to ask
        refusals = services.egress_refusals_take(run_id)
        counters = proxy.counters(run_id)
    finally:
        box.destroy()
        shutil.rmtree(root, ignore_errors=True)

    assert len(fields) >= 3 and sent.ok
    assert state["url"].startswith(f"{ORIGIN}/contact/")
    assert refusals == []
    assert counters.get("requests", 0) >= 2  # the form page and its answer
