"""Log-in lockouts (django-axes, accounts/throttling.py): 5 failures per (username,
client address) and 20 per client address within the 15-minute cool-off lock out with
429 and Retry-After; a username alone is never locked (no one can lock alice out from
their own address); a success does not wipe the count; the cool-off ends it."""

import datetime as dt

import pytest
import time_machine
from axes.models import AccessAttempt
from django.contrib.auth import SESSION_KEY
from django.test import Client

from tests.conftest import make_person

RIGHT = "correct horse battery"
T0 = dt.datetime(2030, 3, 4, 10, 0, tzinfo=dt.UTC)
HERE, THERE = "203.0.113.7", "198.51.100.9"


def log_in(username: str, password: str, address: str, path: str = "/accounts/login/"):
    client = Client(REMOTE_ADDR=address)
    response = client.post(path, {"username": username, "password": password})
    return response, client


def signed_in(client: Client) -> bool:
    return SESSION_KEY in client.session


@pytest.fixture
def frozen():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def test_the_fifth_wrong_password_for_an_account_locks_it_from_that_address(alice, frozen):
    for _ in range(4):
        response, _ = log_in("alice", "wrong", HERE)
        assert response.status_code == 200  # the form again, with its error
        assert "Please enter a correct username and password" in response.content.decode()

    response, _ = log_in("alice", "wrong", HERE)

    assert response.status_code == 429
    assert response["Retry-After"] == "900"
    page = response.content.decode()
    assert "Too many failed log-ins from your address." in page
    assert 'Try again in <strong id="retry-after">15 minutes</strong>' in page
    assert "10:15&nbsp;UTC" in page
    # the right password does not get in from there either
    response, client = log_in("alice", RIGHT, HERE)
    assert response.status_code == 429
    assert not signed_in(client)


def test_a_locked_account_still_logs_in_from_another_address(alice, frozen):
    for _ in range(5):
        log_in("alice", "wrong", HERE)

    response, client = log_in("alice", RIGHT, THERE)

    assert response.status_code == 302
    assert signed_in(client)


def test_another_account_from_the_locked_address_is_not_locked(alice, charlie, frozen):
    for _ in range(5):
        log_in("alice", "wrong", HERE)

    response, client = log_in("charlie", RIGHT, HERE)

    assert response.status_code == 302
    assert signed_in(client)


def test_twenty_failures_from_one_address_lock_it_whatever_the_usernames(alice, frozen):
    for index in range(19):
        response, _ = log_in(f"guess{index}", "wrong", HERE)
        assert response.status_code == 200

    response, _ = log_in("guess19", "wrong", HERE)

    assert response.status_code == 429
    assert response["Retry-After"] == "900"
    response, client = log_in("alice", RIGHT, HERE)
    assert response.status_code == 429
    assert not signed_in(client)
    response, client = log_in("alice", RIGHT, THERE)
    assert response.status_code == 302


def test_the_same_username_from_many_addresses_never_locks_the_account(alice, frozen):
    # 4 failures from each of 10 addresses: 40 for alice, none at a limit
    for host in range(10):
        for _ in range(4):
            response, _ = log_in("alice", "wrong", f"192.0.2.{host}")
            assert response.status_code == 200

    response, client = log_in("alice", RIGHT, "192.0.2.200")

    assert response.status_code == 302
    assert signed_in(client)


def test_an_attackers_own_successful_log_in_does_not_reset_the_address_count(
    alice, charlie, frozen
):
    for index in range(19):
        log_in(f"victim{index}", "wrong", HERE)
    response, _ = log_in("charlie", RIGHT, HERE)  # the attacker's own account
    assert response.status_code == 302

    response, _ = log_in("victim19", "wrong", HERE)

    assert response.status_code == 429


def test_the_lockout_ends_after_the_cool_off(alice, frozen):
    for _ in range(5):
        log_in("alice", "wrong", HERE)

    frozen.shift(dt.timedelta(minutes=15, seconds=1))
    response, client = log_in("alice", RIGHT, HERE)

    assert response.status_code == 302
    assert signed_in(client)


def test_a_try_during_the_lockout_starts_the_wait_again(alice, frozen):
    for _ in range(5):
        log_in("alice", "wrong", HERE)

    frozen.shift(dt.timedelta(minutes=14))
    response, _ = log_in("alice", RIGHT, HERE)
    assert response.status_code == 429
    assert response["Retry-After"] == "900"

    frozen.shift(dt.timedelta(minutes=14))
    response, _ = log_in("alice", RIGHT, HERE)
    assert response.status_code == 429
    frozen.shift(dt.timedelta(minutes=15, seconds=1))
    response, _ = log_in("alice", RIGHT, HERE)
    assert response.status_code == 302


def test_retry_after_is_when_enough_failures_have_aged_out(alice, frozen):
    # 19 failures at 10:00, the 20th at 10:10: the address is locked until the 10:00
    # ones leave the window at 10:15 (the last one alone is under the limit)
    for index in range(19):
        log_in(f"guess{index}", "wrong", HERE)
    frozen.shift(dt.timedelta(minutes=10))

    response, _ = log_in("guess19", "wrong", HERE)

    assert response.status_code == 429
    assert response["Retry-After"] == "300"
    assert 'Try again in <strong id="retry-after">5 minutes</strong>' in response.content.decode()


def test_the_admin_log_in_is_locked_out_the_same_way(terms, frozen):
    admin = make_person("root", None, terms)
    admin.is_staff = admin.is_superuser = True
    admin.save(update_fields=["is_staff", "is_superuser"])
    for _ in range(4):
        response, _ = log_in("root", "wrong", HERE, path="/admin/login/")
        assert response.status_code == 200

    response, _ = log_in("root", "wrong", HERE, path="/admin/login/")

    assert response.status_code == 429
    assert response["Retry-After"] == "900"
    response, client = log_in("root", RIGHT, HERE, path="/admin/login/")
    assert response.status_code == 429
    assert not signed_in(client)
    # the admins see who was locked out
    assert AccessAttempt.objects.get(username="root", ip_address=HERE).failures_since_start == 6


def test_failures_behind_a_trusted_proxy_count_per_forwarded_address(alice, frozen, settings):
    from ipaddress import ip_network

    settings.TRUSTED_PROXIES = (ip_network("10.0.0.2/32"),)
    proxied = {"REMOTE_ADDR": "10.0.0.2"}
    for _ in range(5):
        Client(**proxied, HTTP_X_FORWARDED_FOR=HERE).post(
            "/accounts/login/", {"username": "alice", "password": "wrong"}
        )

    locked = Client(**proxied, HTTP_X_FORWARDED_FOR=HERE).post(
        "/accounts/login/", {"username": "alice", "password": RIGHT}
    )
    elsewhere = Client(**proxied, HTTP_X_FORWARDED_FOR=THERE).post(
        "/accounts/login/", {"username": "alice", "password": RIGHT}
    )

    assert locked.status_code == 429
    assert elsewhere.status_code == 302


def test_a_forged_forwarded_header_from_an_untrusted_peer_is_ignored(alice, frozen):
    for index in range(5):
        Client(REMOTE_ADDR=HERE, HTTP_X_FORWARDED_FOR=f"192.0.2.{index}").post(
            "/accounts/login/", {"username": "alice", "password": "wrong"}
        )

    response = Client(REMOTE_ADDR=HERE, HTTP_X_FORWARDED_FOR="192.0.2.99").post(
        "/accounts/login/", {"username": "alice", "password": RIGHT}
    )

    assert response.status_code == 429
