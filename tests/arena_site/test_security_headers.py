"""The headers every response carries (CSP, framing, sniffing, referrer) and a guard that
the templates give the policy nothing to refuse: no inline scripts, no <style> blocks, no
style attributes. tests/e2e/test_csp.py checks the same in a real browser."""

import re
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parent.parent.parent / "templates"
POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'none'; "
    "form-action 'self'"
)


@pytest.mark.parametrize(
    "path",
    ["/", "/accounts/login/", "/accounts/signup/", "/admin/login/", "/api/leaderboard/",
     "/no-such-page/"],
)  # fmt: skip
def test_every_response_carries_the_policy_and_the_safe_headers(client, db, path):
    response = client.get(path)

    assert response["Content-Security-Policy"] == POLICY
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"


def test_signed_in_pages_carry_it_too(client, alice):
    client.force_login(alice)
    for path in ("/submit/", "/judge/", "/accounts/settings/"):
        assert client.get(path)["Content-Security-Policy"] == POLICY, path


def test_the_session_cookie_is_http_only(client, alice):
    response = client.post(
        "/accounts/login/", {"username": "alice", "password": "correct horse battery"}
    )
    assert response.status_code == 302
    assert response.cookies["sessionid"]["httponly"] is True


@pytest.mark.parametrize(
    "template", sorted(TEMPLATES.rglob("*.html")), ids=lambda p: str(p.relative_to(TEMPLATES))
)
def test_no_template_carries_inline_script_or_style(template):
    text = template.read_text()

    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), "inline <script>"
    # The audit report (templates/reports/) is a standalone document, never a page of
    # the site: it must carry its own CSS (issue 17), and it is served as a download or
    # opened under a policy of its own that allows its inline CSS and nothing else
    # (evals.views; tests/evals/test_tournament_pages.py). No script in it either.
    if template.relative_to(TEMPLATES).parts[0] != "reports":
        assert not re.search(r"<style\b", text), "<style> block"
        assert not re.search(r"\sstyle\s*=", text), "style attribute"
    assert not re.search(r"\son[a-z]+\s*=", text), "event handler attribute"
    assert not re.search(r"hx-on|javascript:|\bjs:", text), "htmx evaluation"


def test_htmx_is_configured_to_run_without_eval(client, db):
    page = client.get("/").content.decode()
    assert (
        """<meta name="htmx-config" content='{"allowEval": false, "allowScriptTags": false, """
        """"includeIndicatorStyles": false}'>"""
    ) in page
