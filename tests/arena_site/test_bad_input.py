"""Every bad input gets a 4xx in the one envelope, never a 500 and never Django's HTML:
malformed JSON and multipart bodies, bodies over the limits, ids past bigint, bad query
parameters, malformed start URLs, unknown /api/ paths, wrong methods, a bad Host header
and an uncaught exception. Pages keep their HTML error pages.

This module is also the URLconf of the tests marked ``urls(__name__)``: the arena's
patterns plus views that fail on purpose."""

import json
import logging

import pytest
from django.core.exceptions import SuspiciousFileOperation
from django.test import Client
from django.urls import path
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from arena_site.parsers import MAX_DEPTH, InvalidJson, json_loads_strict
from arena_site.urls import handler400, handler403, handler404, handler500  # noqa: F401
from arena_site.urls import urlpatterns as arena_urlpatterns
from battles.models import Attachment, Battle, Task
from battles.services import task_submit

BOUNDARY = "arena-test-boundary"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"


class BoomApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    def get(self, request):
        raise RuntimeError("boom in an API view")

    def post(self, request):
        return Response({"bytes": len(request.body)})  # Django's own body limit applies

    def put(self, request):
        raise SuspiciousFileOperation("a path outside the storage root")


def boom_page(request):
    raise RuntimeError("boom in a page")


urlpatterns = [
    path("api/boom/", BoomApi.as_view()),
    path("boom/", boom_page),
    *arena_urlpatterns,
]


def envelope(response, status: int, code: str) -> str:
    """Asserts the envelope and returns its message."""
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert set(body) == {"error"}
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]["message"]


def assert_nothing_created():
    assert Task.objects.count() == 0
    assert Battle.objects.count() == 0
    assert Attachment.objects.count() == 0


# --- JSON -------------------------------------------------------------------------------

BAD_JSON = [
    (b'{"instruction": "a", "instruction": "b"}', "the key 'instruction' appears twice"),
    (b'{"instruction": "x", "n": NaN}', "NaN is not a JSON number"),
    (b'{"instruction": "x", "n": Infinity}', "Infinity is not a JSON number"),
    (b'{"instruction": "x", "n": -Infinity}', "-Infinity is not a JSON number"),
    (b'{"instruction": "x", "n": 1e999}', "the number 1e999 is out of range"),
    (b'{"instruction": "x", "n": -1e999}', "the number -1e999 is out of range"),
    (b'{"instruction": "x", "n": 1' + b"0" * 5000 + b"}", "a number has 5001 digits"),
    (b'{"n": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", f"deeper than {MAX_DEPTH} levels"),
    (b"[" * 100_000, f"deeper than {MAX_DEPTH} levels"),
    (b'{"instruction": "caf\xe9"}', "not valid UTF-8 (byte 20)"),
    (b'{"instruction": "\\ud800"}', "lone surrogate"),
    (b"instruction=list+the+files", "not valid JSON: Expecting value (line 1, column 1)"),
    (b'{"instruction": "x",}', "not valid JSON: Illegal trailing comma"),
    (b'{"instruction": "x"', "not valid JSON"),
    (b"\xef\xbb\xbf{}", "not valid JSON: Unexpected UTF-8 BOM"),
]


@pytest.mark.parametrize(("body", "named"), BAD_JSON)
@pytest.mark.parametrize("url", ["/api/tasks/", "/api/battles/1/votes/"])
def test_malformed_json_is_400_naming_the_problem(api, alice, roster, url, body, named):
    response = api(alice).generic("POST", url, body, content_type="application/json")

    assert named in envelope(response, 400, "invalid_json")
    assert_nothing_created()


@pytest.mark.parametrize("depth", [1, MAX_DEPTH])
def test_nesting_up_to_the_bound_is_json(depth):
    assert json_loads_strict(b"[" * depth + b"]" * depth) == json.loads("[" * depth + "]" * depth)


def test_nesting_past_the_bound_is_refused_before_decoding():
    with pytest.raises(InvalidJson, match=f"deeper than {MAX_DEPTH}"):
        json_loads_strict(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    with pytest.raises(InvalidJson, match=f"deeper than {MAX_DEPTH}"):
        json_loads_strict(b'{"a": ' * 10**6)


def test_brackets_inside_strings_do_not_nest():
    text = json.dumps({"a": "[" * 100 + '\\"{' * 50, "b": ["]]]"]})
    assert json_loads_strict(text.encode()) == json.loads(text)


def test_strict_json_still_reads_ordinary_json():
    raw = '{"a": [1, -2.5, 1e300, true, null, "\\u00e9\\ud83d\\ude00"], "b": {}}'
    assert json_loads_strict(raw.encode()) == {
        "a": [1, -2.5, 1e300, True, None, "é😀"],
        "b": {},
    }


def test_a_json_body_over_the_memory_limit_is_413(api, alice, roster, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = json.dumps({"instruction": "list the files " * 100}).encode()

    response = api(alice).generic("POST", "/api/tasks/", body, content_type="application/json")

    assert "larger than 1000 bytes" in envelope(response, 413, "request_too_large")
    assert_nothing_created()


def test_a_body_in_a_type_the_operation_does_not_read_is_415(api, alice, roster):
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/xml"):
        response = api(alice).generic(
            "POST", "/api/tasks/", b"instruction=x", content_type=content_type
        )
        envelope(response, 415, "unsupported_media_type")
    # the vote endpoint reads JSON only: no multipart there
    response = api(alice).post("/api/battles/1/votes/", {"choice": "A"}, format="multipart")
    envelope(response, 415, "unsupported_media_type")
    assert_nothing_created()


# --- multipart --------------------------------------------------------------------------


def part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    head = f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n"
    if filename:
        head += "Content-Type: text/plain\r\n"
    return head.encode() + b"\r\n" + value + b"\r\n"


CLOSE = f"--{BOUNDARY}--\r\n".encode()
GOOD = part("instruction", b"Summarise the notes") + part("attachments", b"hi\n" * 50, "n.txt")


@pytest.mark.parametrize(
    ("body", "content_type", "named"),
    [
        (GOOD, MULTIPART, "ends before its closing boundary"),  # no closing boundary
        (GOOD[:-40], MULTIPART, "ends before its closing boundary"),  # cut mid-part
        (GOOD[:30], MULTIPART, "ends before its closing boundary"),  # cut in a header
        (GOOD + f"--{BOUNDARY}\r\n".encode(), MULTIPART, "ends before its closing boundary"),
        (GOOD + CLOSE, "multipart/form-data; boundary=other", "ends before its closing"),
        (GOOD + CLOSE, "multipart/form-data", "Invalid boundary in multipart: None"),
        (GOOD + CLOSE, "multipart/form-data; boundary=", "Invalid boundary in multipart"),
        (GOOD + CLOSE, 'multipart/form-data; boundary="ends in a space "', "Invalid boundary"),
        (b"not multipart at all", MULTIPART, "ends before its closing boundary"),
    ],
)
def test_malformed_multipart_is_400_and_creates_nothing(
    api, alice, roster, settings, body, content_type, named
):
    response = api(alice).generic("POST", "/api/tasks/", body, content_type=content_type)

    assert named in envelope(response, 400, "invalid_multipart")
    assert_nothing_created()


def test_a_well_formed_multipart_body_is_admitted(api, alice, roster):
    response = api(alice).generic("POST", "/api/tasks/", GOOD + CLOSE, content_type=MULTIPART)

    assert response.status_code == 201
    assert Attachment.objects.get().name == "n.txt"


def test_a_multipart_form_field_over_the_memory_limit_is_413(api, alice, roster, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = part("instruction", b"x" * 2000) + CLOSE

    response = api(alice).generic("POST", "/api/tasks/", body, content_type=MULTIPART)

    envelope(response, 413, "request_too_large")
    assert_nothing_created()


def test_more_files_than_django_parses_is_413(api, alice, roster, settings):
    body = b"".join(part("attachments", b"x", f"{n}.txt") for n in range(21)) + CLOSE
    body = part("instruction", b"Summarise them") + body

    response = api(alice).generic("POST", "/api/tasks/", body, content_type=MULTIPART)

    assert "more than 20 files" in envelope(response, 413, "request_too_large")
    assert_nothing_created()


def test_a_multipart_body_over_the_attachment_limits_is_413_before_parsing(
    api, alice, roster, settings
):
    settings.ARENA = settings.ARENA.replace(attachments_max_total_bytes=1000)
    body = part("instruction", b"Summarise") + part("attachments", b"x" * 1_100_000, "a.txt")

    response = api(alice).generic("POST", "/api/tasks/", body + CLOSE, content_type=MULTIPART)

    assert "at most" in envelope(response, 413, "request_too_large")
    assert_nothing_created()


# --- ids, query parameters ---------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/api/battles/99999999999999999999/",
        "/api/battles/9223372036854775808/",  # bigint's maximum + 1
        "/api/battles/9223372036854775807/",  # bigint's maximum: a valid id, no row
        "/api/battles/0/",
        "/api/battles/-1/",
        "/api/battles/1e3/",
        "/api/battles/%EF%BC%91/",  # full-width 1
        "/api/tasks/99999999999999999999/",
        "/api/battles/99999999999999999999/votes/",
        "/api/battles/99999999999999999999/votes/mine/",
    ],
)
def test_ids_past_bigint_or_not_ids_are_404(api, alice, url):
    client = api(alice)
    envelope(client.get(url), 404, "not_found")
    if url.endswith("votes/"):
        envelope(client.post(url, {"choice": "A"}, format="json"), 404, "not_found")


@pytest.mark.parametrize("url", ["/api/tasks/", "/api/battles/"])
@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("limit=abc", "limit must be an integer from 1 to 100; got 'abc'"),
        ("limit=-1", "limit must be an integer from 1 to 100; got '-1'"),
        ("limit=0", "limit must be an integer from 1 to 100; got '0'"),
        ("limit=101", "limit must be an integer from 1 to 100; got '101'"),
        ("limit=1.5", "limit must be an integer from 1 to 100"),
        ("limit=", "limit must be an integer from 1 to 100; got ''"),
        ("limit=%EF%BC%95", "limit must be an integer from 1 to 100"),  # full-width 5
        ("offset=-1", "offset must be an integer from 0 to 1000000; got '-1'"),
        ("offset=1000001", "offset must be an integer from 0 to 1000000"),
        ("offset=" + "9" * 30, "offset must be an integer from 0 to 1000000; got '99999999999"),
        ("offset=" + "9" * 5000, "offset must be an integer from 0 to 1000000"),
        ("offset=1e9", "offset must be an integer from 0 to 1000000"),
    ],
)
def test_bad_pagination_parameters_are_400_with_the_bound(api, alice, url, query, named):
    response = api(alice).get(f"{url}?{query}")

    assert named in envelope(response, 400, "invalid_parameter")


def test_pagination_within_bounds(api, alice, roster):
    for n in range(3):
        task_submit(user=alice, instruction=f"Create a file named f{n}.txt containing {n}")
    client = api(alice)

    page = client.get("/api/tasks/?limit=2&offset=1").json()
    assert page["count"] == 3 and len(page["results"]) == 2
    assert client.get("/api/tasks/?offset=1000000").json()["results"] == []
    assert len(client.get("/api/battles/?limit=100").json()["results"]) == 3


# --- start URLs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "start_url",
    [
        "http://[::1",
        "http://[::1]:99999/",
        "http://example.com:99999/",
        "http://example.com:0/",
        "http://example.com:+80/",
        "http://example.com:８０/",
        "http://example.com:abc/",
        "http://exa mple.com/",
        "http://example.com/a b",
        "http://exa\tmple.com/",
        "http://example.com/\x7f",
        "http://exa\u0085mple.com/",
        "http://user:pass@example.com/",
        "http://user@example.com/",
        "http://example.com\\@evil.example/",
        "http://[::1]x/",
        "http://[fe80::1%]/",
        "http://[not-an-address]/",
        "http://256.0.0.1/",
        "http://1.2.3.4.5/",
        "http://exämple.com/",
        "http://-bad-.example.com/",
        "http://:80/",
        "http:///path",
        "https://",
        "http:example.com",
        "//example.com/",
        "example.com",
        "javascript:alert(1)",
    ],
)
def test_malformed_start_urls_are_400_invalid_start_url(api, alice, roster, start_url):
    response = api(alice).post(
        "/api/tasks/", {"instruction": "Open the page", "start_url": start_url}, format="json"
    )

    envelope(response, 400, "invalid_start_url")
    assert_nothing_created()


@pytest.mark.parametrize(
    ("start_url", "code"),
    [
        ("http://example.com/\x00", "invalid"),  # the serializer refuses NUL first
        (["http://example.com/"], "invalid"),
        ({"u": 1}, "invalid"),
        (5, "invalid"),  # a number is no text (DRF alone would read "5")
    ],
)
def test_start_urls_that_are_no_text_are_400(api, alice, roster, start_url, code):
    response = api(alice).post(
        "/api/tasks/", {"instruction": "Open the page", "start_url": start_url}, format="json"
    )

    assert "start_url" in envelope(response, 400, code)
    assert_nothing_created()


@pytest.mark.parametrize(
    "start_url",
    ["http://[::1]/", "http://127.1/", "http://0x7f000001/", "http://example.com:8080/"],
)
def test_well_formed_non_public_start_urls_stay_start_url_not_public(api, alice, roster, start_url):
    response = api(alice).post(
        "/api/tasks/", {"instruction": "Open the page", "start_url": start_url}, format="json"
    )

    envelope(response, 400, "start_url_not_public")


def test_a_public_start_url_is_admitted_stripped(api, alice, roster):
    response = api(alice).post(
        "/api/tasks/",
        {"instruction": "Open the page", "start_url": "  https://Example.com/a?b=c#d "},
        format="json",
    )

    assert response.status_code == 201
    assert Task.objects.get().start_url == "https://Example.com/a?b=c#d"


# --- the envelope everywhere under /api/ ------------------------------------------------


@pytest.mark.parametrize(
    "url", ["/api", "/api/", "/api/nope/", "/api/nope", "/api/tasks/1/extra/", "/api/x.php"]
)
def test_unknown_api_paths_are_404_in_the_envelope(client, db, url):
    envelope(client.get(url), 404, "not_found")
    envelope(client.post(url, b"{}", content_type="application/json"), 404, "not_found")


def test_unknown_pages_keep_the_html_404(client, db):
    response = client.get("/no-such-page/")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_a_method_the_path_does_not_offer_is_405_with_allow(api, alice):
    client = api(alice)
    for method, url in [
        ("put", "/api/tasks/"),
        ("delete", "/api/tasks/"),
        ("patch", "/api/battles/1/"),
        ("post", "/api/leaderboard/"),
        ("put", "/api/battles/1/votes/mine/"),
    ]:
        response = getattr(client, method)(url, {}, format="json")
        envelope(response, 405, "method_not_allowed")
        assert method.upper() not in response["Allow"]


def test_any_accept_header_gets_json(api, alice):
    client = api(alice)
    for accept in ("text/html", "application/xml", "image/png;q=1, */*;q=0"):
        response = client.get("/api/tasks/", HTTP_ACCEPT=accept)
        assert response.status_code == 200
        assert response["Content-Type"] == "application/json"
    envelope(client.get("/api/nope/", HTTP_ACCEPT="text/html"), 404, "not_found")
    assert client.get("/api/tasks/?format=api").status_code == 200


def test_the_schema_still_negotiates_its_format(client, db):
    assert client.get("/api/schema/")["Content-Type"].startswith("application/vnd.oai.openapi")
    response = client.get("/api/schema/?format=json")
    assert response["Content-Type"].startswith("application/vnd.oai.openapi+json")


def test_a_bad_host_header_is_400_not_500(client, db, caplog):
    with caplog.at_level(logging.ERROR, logger="django.security.DisallowedHost"):
        response = client.get("/api/leaderboard/", HTTP_HOST="evil.example")
    envelope(response, 400, "disallowed_host")
    assert "Invalid HTTP_HOST header: 'evil.example'" in caplog.text

    response = client.get("/", HTTP_HOST="evil.example:99999")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    envelope(client.get("/api/tasks/", HTTP_HOST="[::1"), 400, "disallowed_host")


@pytest.mark.urls(__name__)
def test_a_view_reading_a_body_over_djangos_limit_is_413(client, db, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100

    response = client.post("/api/boom/", b"{}" * 100, content_type="application/json")

    envelope(response, 413, "request_too_large")
    assert client.post("/api/boom/", b"{}", content_type="application/json").json() == {"bytes": 2}


@pytest.mark.urls(__name__)
def test_a_suspicious_operation_in_an_api_view_is_400_and_logged(client, db, caplog):
    with caplog.at_level(logging.ERROR, logger="django.security"):
        response = client.put("/api/boom/")

    message = envelope(response, 400, "bad_request")
    assert "storage root" not in message
    assert [r.getMessage() for r in caplog.records if r.name.startswith("django.security")] == [
        "a path outside the storage root"
    ]


def test_a_page_form_over_djangos_limit_is_a_400_page(client, db, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100

    response = client.post("/accounts/login/", {"username": "x" * 500, "password": "y"})

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.urls(__name__)
def test_an_uncaught_exception_is_500_server_error_and_logged(db, caplog):
    client = Client(raise_request_exception=False)
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = client.get("/api/boom/")
    message = envelope(response, 500, "server_error")
    assert "boom" not in message  # nothing of the exception reaches the client
    record = next(r for r in caplog.records if r.name == "django.request")
    assert record.exc_info is not None and "boom in an API view" in str(record.exc_info[1])

    response = client.get("/boom/")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
