"""The error pages of the site (400, 403, 404, 500) are pages of the site: its header
and navigation, the problem in plain words, a way back; the API keeps its JSON envelope.
None shows what went wrong inside (no exception text, no path of the server)."""

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.http import Http404
from django.test import RequestFactory

from arena_site.urls import bad_request, page_not_found, permission_denied, server_error

pytestmark = pytest.mark.django_db

SECRET = "internal detail /srv/arena/secret.py line 42"


def _is_site_page(html: str) -> bool:
    return '<header class="top">' in html and "Back to the leaderboard" in html


def test_a_missing_page_is_a_page_of_the_site(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert _is_site_page(html) and "Page not found" in html


def test_a_missing_api_path_keeps_the_envelope(client):
    response = client.get("/api/no-such-thing/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("handler", "args", "status", "title"),
    [
        (bad_request, (SuspiciousOperation(SECRET),), 400, "Bad request"),
        (permission_denied, (PermissionDenied(SECRET),), 403, "Not allowed"),
        (page_not_found, (Http404(SECRET),), 404, "Page not found"),
        (server_error, (), 500, "Something went wrong"),
    ],
)
def test_each_error_page_uses_the_layout_and_hides_the_detail(handler, args, status, title):
    request = RequestFactory().get("/battles/1/")
    request.user = AnonymousUser()
    response = handler(request, *args)
    assert response.status_code == status
    html = response.content.decode()
    assert _is_site_page(html) and title in html
    assert SECRET not in html
