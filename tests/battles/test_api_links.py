"""Every URL an API response contains works with the bearer token the API was called
with (a lab's script has no session). Screenshots and attachments here; delivered files
and run pages go through the same door (``accounts.views.consent_required_or_token``).
The API shows a team its battles blind, as judges see them: the same screenshot URLs.
A bad token, an outsider's token and a token without current consent are refused as
the API refuses them; a browser without a session is sent to log in as before."""

import pytest
from django.test import Client
from django.utils import timezone

from accounts.services import api_token_create, consent_terms_publish
from battles.services import battle_run
from judging.models import Assignment
from judging.services import battle_screen
from tests.battles.test_battle_run import submit_between

pytestmark = pytest.mark.django_db(transaction=True)  # lanes run in threads with own connections


def bearer(user) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {api_token_create(user=user, name='lab')[1]}"}


def links(value) -> set[str]:
    """Every site path in a JSON document (the strings that are URLs of this site)."""
    if isinstance(value, dict):
        return set().union(*map(links, value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*map(links, value)) if value else set()
    if isinstance(value, str) and value.startswith("/") and not value.startswith("/api/"):
        return {value}
    return set()


@pytest.fixture
def ran(alice, roster):
    battle = submit_between(alice, "what is 6*7", "rulebook", "surveyor")
    battle_run(battle_id=battle.pk)
    battle.refresh_from_db()
    return battle


def test_the_teams_links_work_with_its_token(ran, alice, bob, charlie):
    client = Client()
    token = bearer(bob)  # a teammate of the submitter, by the API alone
    body = client.get(f"/api/battles/{ran.pk}/", **token).json()
    urls = links(body)
    screens = {u for u in urls if u.endswith("/screenshot")}
    assert len(screens) >= 4  # every step's screenshot
    for url in sorted(urls):
        response = client.get(url, **token)
        assert response.status_code == 200, (url, response.status_code)
    shot = client.get(sorted(screens)[0], **token)
    assert shot["Content-Type"] == "image/png"
    assert b"".join(shot.streaming_content).startswith(b"\x89PNG")

    outsider = bearer(charlie)
    for url in sorted(screens):
        assert client.get(url, **outsider).status_code == 404  # not theirs to see
    refused = client.get(sorted(screens)[0], HTTP_AUTHORIZATION="Bearer arena_not-a-token")
    assert refused.status_code == 401
    assert refused["Content-Type"] == "application/json"
    assert refused.json()["error"]["code"] == "not_authenticated"
    browser = client.get(sorted(screens)[0])  # no session, no token: log in first
    assert browser.status_code == 302 and "/login" in browser["Location"]


def test_a_judges_links_work_with_their_token_once_served(ran, judge, alice):
    battle_screen(battle_id=ran.pk)
    ran.refresh_from_db()
    if ran.status != "judging":
        pytest.skip(f"the battle was {ran.status} after screening")
    client = Client()
    token = bearer(judge)
    body = client.get("/api/judge/next/", **token).json()
    assert body["id"] == ran.pk
    screens = {u for u in links(body) if u.endswith("/screenshot")}
    assert screens
    for url in sorted(screens):
        assert client.get(url, **token).status_code == 200, url
    Assignment.objects.filter(judge=judge).update(voided_at=timezone.now())


def test_a_token_without_current_consent_is_a_403_in_the_envelope(ran, bob):
    token = bearer(bob)
    url = next(u for u in links(Client().get(f"/api/battles/{ran.pk}/", **token).json())
               if u.endswith("/screenshot"))  # fmt: skip
    consent_terms_publish(text="New terms.")  # bob has not accepted these
    response = Client().get(url, **token)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "consent_required"


def test_an_attachments_url_works_with_the_token_that_listed_it(alice, bob, charlie, roster):
    from tests.battles.test_attachments import CSV, upload

    client = Client()
    token = bearer(alice)
    response = client.post(
        "/api/tasks/",
        {"instruction": "Summarise the temperatures in the CSV", "start_url": "",
         "attachments": [upload("temps.csv", CSV, "text/csv")]},
        **token,
    )  # fmt: skip
    assert response.status_code == 201, response.content
    listed = client.get(f"/api/tasks/{response.json()['task']}/", **bearer(bob)).json()
    (url,) = links(listed["attachments"])
    download = client.get(url, **bearer(bob))  # a teammate, by the API alone
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == CSV
    assert client.get(url, **bearer(charlie)).status_code == 404
