"""The environments' pages in plain words and live: statuses and grader checks as labels
(the API keeps the codes), an empty list that says when environments appear and how
many are on the way, and both pages re-reading themselves (htmx polling)."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from battles.models import Battle
from environments.models import Environment
from environments.selectors import environments_on_the_way
from tests.environments.environment_factories import environment, source_battle
from tests.ratings.factories import judges

pytestmark = pytest.mark.django_db


@pytest.fixture
def seven_days(settings):
    settings.ARENA = settings.ARENA.replace(export_delay_days=7, export_rate_per_hour=10)


def staff_client() -> Client:
    from django.contrib.auth import get_user_model

    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", password="x"))
    return client


def test_a_visitor_s_empty_list_says_when_environments_appear(alice, roster, seven_days):
    judge = judges(1)[0]
    recent = source_battle(alice, roster, judge, days=2)  # validated, not published yet
    environment(recent)
    environment(source_battle(alice, roster, judge, days=30), status="graded")
    environment(source_battle(alice, roster, judge, days=30), status="rejected")

    html = Client().get("/environments/").content.decode()

    assert "No environment is published yet." in html
    assert "7 days after the battle was decided" in html
    first = recent.decided_at + timedelta(days=7)
    assert re.search(
        r'id="environments-on-the-way">On the way: 1 being built or checked, 1 ready and '
        rf"waiting for its battle's publication \(the first from <time [^>]+>"
        rf"{first:%Y-%m-%d %H:%M}</time>",
        html,
    )
    assert "data-environment" not in html  # nothing of them is listed


def test_on_the_way_counts_and_no_date_when_none_is_due(alice, roster, seven_days):
    judge = judges(1)[0]
    assert environments_on_the_way() == {"building": 0, "waiting": 0, "next_at": None}
    waiting = source_battle(alice, roster, judge, days=2)
    environment(waiting)
    environment(source_battle(alice, roster, judge, days=30), status="candidate")
    environment(source_battle(alice, roster, judge, days=30), status="needs_grader")
    environment(source_battle(alice, roster, judge, days=30), status="invalid")
    environment(source_battle(alice, roster, judge, days=30))  # published: not on the way
    outlook = environments_on_the_way()
    assert (outlook["building"], outlook["waiting"]) == (2, 1)
    assert outlook["next_at"] == waiting.decided_at + timedelta(days=7)
    # its decision's publication date already past (no consent): no date is promised
    Battle.objects.filter(pk=waiting.pk).update(decided_at=timezone.now() - timedelta(days=8))
    from accounts.models import Consent

    Consent.objects.filter(user=alice).delete()
    assert environments_on_the_way()["next_at"] is None


def test_staff_s_empty_list_says_no_failed_run_yet(db):
    html = staff_client().get("/environments/").content.decode()
    assert "No environment yet: no battle so far has a run that failed" in html
    assert "environments-on-the-way" not in html


def test_statuses_and_checks_are_words_on_the_pages_and_codes_in_the_api(alice, roster, seven_days):
    env = environment(source_battle(alice, roster, judges(1)[0], days=30))
    graded = environment(source_battle(alice, roster, judges(1, "b")[0], days=30), status="graded")
    staff = staff_client()

    listing = staff.get("/environments/").content.decode()
    assert re.search(
        rf'data-environment="{env.pk}">.*?data-status="validated"[^>]*>ready<', listing, re.S
    )
    assert re.search(rf'data-environment="{graded.pk}">.*?>validating<', listing, re.S)
    assert ">needs_grader<" not in listing and ">validated<" not in listing
    page = Client().get(f"/environments/{env.pk}/").content.decode()
    assert 'id="environment-status" data-status="validated">ready<' in page
    assert (
        "Validated: both replays agreed with the grader, and it refused the reference made "
        "wrong." in page
    )
    assert (
        '<li data-check="csv_shape"><strong>The table has the right columns and rows</strong>'
        in page
    )
    assert '<li data-check="message_contains"><strong>The final message says</strong>' in page
    assert ">message_contains<" not in page and ">file_exists<" not in page
    api = APIClient().get("/api/environments/").json()
    assert api["results"][0]["status"] == "validated"  # the API keeps the code


def test_both_pages_re_read_themselves(alice, roster, seven_days):
    env = environment(source_battle(alice, roster, judges(1)[0], days=30))
    listing = Client().get("/environments/").content.decode()
    assert re.search(
        r'id="environments-live"\s+hx-get="/environments/" hx-trigger="every 5s" '
        r'hx-select="#environments-live" hx-swap="outerHTML"',
        listing,
    )
    page = Client().get(f"/environments/{env.pk}/").content.decode()
    assert (
        f'id="environment-live" hx-get="/environments/{env.pk}/" hx-trigger="every 5s" '
        'hx-select="#environment-live"'
    ) in page


def test_the_latency_block_is_in_words_and_explains_an_empty_one(db):
    html = Client().get("/environments/latency").content.decode()
    assert "SPEC" not in html and "§" not in html and "2 ×" not in html
    assert "No environment has been validated yet" in html
    assert "twice its run's duration, plus five minutes" in html


def test_a_rejected_environment_leaves_the_list_and_says_so_to_staff(alice, roster, seven_days):
    env = environment(source_battle(alice, roster, judges(1)[0], days=30), status="rejected")
    assert env.status == Environment.Status.REJECTED
    html = staff_client().get(f"/environments/{env.pk}/").content.decode()
    assert 'data-status="rejected">rejected<' in html and "Rejected by an operator." in html
    assert Client().get(f"/environments/{env.pk}/").status_code == 404
