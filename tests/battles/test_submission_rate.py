"""One person cannot fill the queue: at most ARENA_SUBMIT_ACCOUNT_RATE_PER_HOUR tasks an
hour per account, whichever of its teams they are for, and at most
ARENA_SUBMIT_ADDRESS_RATE_PER_HOUR per client address, whichever accounts send them.
Over either: 429 rate_limited with Retry-After (the end of the clock hour) and words a
person can act on; a submission that is not admitted costs nothing; a burst admits
the bound and no more; behind a trusted proxy the forwarded client is counted."""

import datetime as dt
import threading

import pytest
import time_machine
from django.db import connection
from django.test import Client

from accounts.models import Membership, Team
from accounts.services import team_create, team_member_remove
from battles.models import Task
from tests.conftest import api_client_for, make_person

T0 = dt.datetime(2030, 3, 4, 10, 20, tzinfo=dt.UTC)  # 40 minutes before the hour ends
HERE, THERE = "203.0.113.7", "198.51.100.9"


@pytest.fixture
def frozen(db):
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def limits(settings, frozen):
    def set_limits(account: int = 1000, address: int = 1000) -> None:
        settings.ARENA = settings.ARENA.replace(
            submit_account_rate_per_hour=account,
            submit_address_rate_per_hour=address,
            team_queue_quota=10_000,
        )

    return set_limits


def submit(user, n: int, address: str = HERE, **headers):
    client = api_client_for(user)
    return client.post(
        "/api/tasks/",
        {"instruction": f"Create a file named report-{n}.txt listing step {n} of the plan"},
        format="json",
        REMOTE_ADDR=address,
        **headers,
    )


def test_the_defaults(settings):
    assert settings.ARENA.submit_account_rate_per_hour == 30
    assert settings.ARENA.submit_address_rate_per_hour == 60


def test_one_account_is_bounded_across_all_its_teams(alice, roster, limits, terms):
    limits(account=4)
    acme = Team.objects.get(name="Acme")
    Membership.objects.create(team=acme, user=make_person("co-owner", None, None), role="owner")
    for name in ("Second", "Third"):
        team = team_create(name=name, owner=make_person(f"owner-{name}", None, None))
        Membership.objects.create(team=team, user=alice)
    for n in range(3):
        assert submit(alice, n).status_code == 201
    # alice leaves Acme: she now submits for her next team, with the same allowance
    team_member_remove(team=acme, member=alice, actor=alice)
    assert submit(alice, 3).status_code == 201

    over = submit(alice, 4)

    assert over.status_code == 429
    error = over.json()["error"]
    assert error == {
        "code": "rate_limited",
        "message": "Your account has submitted 4 tasks this hour, the most one account may, "
        "whichever teams they were for. Try again in 40 min (at 11:00 UTC); nothing was "
        "submitted.",
        "retry_after_s": 2400,
        "limit": 4,
        "per": "account",
    }
    assert over["Retry-After"] == "2400"
    teams = Task.objects.values_list("team__name", flat=True)
    assert sorted(teams) == ["Acme", "Acme", "Acme", "Second"]


def test_many_accounts_from_one_address_are_bounded_together(terms, roster, limits):
    limits(account=10, address=5)
    people = [make_person(f"sock{i}", f"Puppets {i}", terms) for i in range(4)]
    admitted = [submit(people[n % 4], n).status_code for n in range(5)]
    assert admitted == [201] * 5

    over = submit(people[3], 5)

    assert over.status_code == 429 and over["Retry-After"] == "2400"
    assert over.json()["error"]["per"] == "address"
    assert "submitted from your network address this hour" in over.json()["error"]["message"]
    # the same people elsewhere are not refused by this address's count
    assert submit(people[3], 6, address=THERE).status_code == 201
    assert Task.objects.count() == 6


def test_refused_and_conversational_submissions_cost_nothing(alice, roster, limits):
    limits(account=2)
    client = api_client_for(alice)
    for body in ({"instruction": ""}, {"instruction": "hi"}, {"instruction": "x" * 30_000},
                 {"instruction": "Open the page", "start_url": "http://127.0.0.1/"}):  # fmt: skip
        assert client.post("/api/tasks/", body, format="json").status_code in (200, 400, 413)
    assert submit(alice, 0).status_code == 201
    assert submit(alice, 0).status_code == 409  # a near-duplicate: refused, not counted
    assert submit(alice, 1).status_code == 201

    assert submit(alice, 2).status_code == 429


def test_the_next_hour_admits_again(alice, roster, limits, frozen):
    limits(account=1)
    assert submit(alice, 0).status_code == 201
    assert submit(alice, 1)["Retry-After"] == "2400"

    frozen.move_to(dt.datetime(2030, 3, 4, 11, 0, 1, tzinfo=dt.UTC))

    assert submit(alice, 2).status_code == 201


def test_behind_a_trusted_proxy_the_forwarded_client_is_counted(terms, roster, limits, settings):
    from ipaddress import ip_network

    settings.TRUSTED_PROXIES = (ip_network("10.0.0.2/32"),)
    limits(address=1)
    one, two = make_person("one", "One", terms), make_person("two", "Two", terms)
    via_proxy = {"address": "10.0.0.2"}

    assert submit(one, 0, HTTP_X_FORWARDED_FOR=HERE, **via_proxy).status_code == 201
    assert submit(two, 1, HTTP_X_FORWARDED_FOR=HERE, **via_proxy).status_code == 429
    assert submit(two, 2, HTTP_X_FORWARDED_FOR=THERE, **via_proxy).status_code == 201
    # a client that is no proxy cannot buy a fresh count with the header
    assert submit(two, 3, address=HERE, HTTP_X_FORWARDED_FOR="192.0.2.99").status_code == 429


def test_the_submit_page_answers_429_with_when_to_try_again(alice, roster, limits):
    limits(account=1)
    page = Client(REMOTE_ADDR=HERE)
    page.force_login(alice)
    assert page.post("/submit/", {"instruction": "List the files"}).status_code == 302

    over = page.post("/submit/", {"instruction": "Create a file named notes.txt"})

    assert over.status_code == 429 and over["Retry-After"] == "2400"
    text = over.content.decode()
    assert "Your account has submitted 1 tasks this hour, the most one account may" in text
    assert 'Try again in <strong id="retry-after">40 minutes</strong>' in text
    assert Task.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_burst_admits_exactly_the_allowance(alice, roster, settings):
    from tests.servers import ensure_public_arena

    ensure_public_arena()
    settings.ARENA = settings.ARENA.replace(submit_account_rate_per_hour=5, team_queue_quota=10_000)
    barrier = threading.Barrier(12)
    statuses: list[int] = []

    def one(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            statuses.append(submit(alice, n).status_code)
        finally:
            connection.close()

    with time_machine.travel(T0, tick=False):
        threads = [threading.Thread(target=one, args=(n,)) for n in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)

    assert sorted(statuses) == [201] * 5 + [429] * 7
    assert Task.objects.filter(submitter=alice).count() == 5
