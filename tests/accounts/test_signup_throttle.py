"""Sign-up: at most 5 new accounts per client address in each clock hour; the sixth
gets 429 with Retry-After and a page that says when, and no account."""

import datetime as dt

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.throttling import SIGN_UPS

User = get_user_model()
T0 = dt.datetime(2030, 3, 4, 10, 20, tzinfo=dt.UTC)
HERE, THERE = "203.0.113.7", "198.51.100.9"
PASSPHRASE = "a long enough passphrase 9"


def sign_up(username: str, address: str, password: str = PASSPHRASE):
    return Client(REMOTE_ADDR=address).post(
        "/accounts/signup/",
        {"username": username, "password1": password, "password2": password},
    )


@pytest.fixture
def frozen(db):
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def test_five_accounts_an_hour_from_one_address_and_no_sixth(frozen):
    assert SIGN_UPS.limit == 5
    for index in range(5):
        assert sign_up(f"new{index}", HERE).status_code == 302

    response = sign_up("new5", HERE)

    assert response.status_code == 429
    assert response["Retry-After"] == "2400"  # the hour ends at 11:00
    page = response.content.decode()
    assert "Too many new accounts from your address: at most 5 an hour." in page
    assert 'Try again in <strong id="retry-after">40 minutes</strong>' in page
    assert not User.objects.filter(username="new5").exists()
    assert User.objects.filter(username__startswith="new").count() == 5


def test_another_address_may_still_sign_up(frozen):
    for index in range(5):
        sign_up(f"new{index}", HERE)

    assert sign_up("elsewhere", THERE).status_code == 302
    assert User.objects.filter(username="elsewhere").exists()


def test_the_next_hour_allows_new_accounts_again(frozen):
    for index in range(6):
        sign_up(f"new{index}", HERE)

    frozen.move_to(dt.datetime(2030, 3, 4, 11, 0, 1, tzinfo=dt.UTC))

    assert sign_up("later", HERE).status_code == 302


def test_a_burst_of_refused_sign_ups_creates_nothing(frozen):
    for index in range(5):
        sign_up(f"new{index}", HERE)

    statuses = {sign_up(f"burst{index}", HERE).status_code for index in range(20)}

    assert statuses == {429}
    assert not User.objects.filter(username__startswith="burst").exists()


def test_forms_with_mistakes_do_not_use_up_the_allowance(frozen):
    for _ in range(8):
        response = sign_up("typo", HERE, password="short")
        assert response.status_code == 200  # the form with its errors

    for index in range(5):
        assert sign_up(f"new{index}", HERE).status_code == 302
