"""Sign-up tells nobody whether a username or a team name exists: a taken name and a
free one get the same answer, byte for byte (the CSRF token aside), and cost the same
work (the password is hashed either way); a taken name still creates nothing, not even
under a race. Passwords need 12 characters."""

import datetime as dt
import re
import threading

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import MD5PasswordHasher
from django.db import connection
from django.test import Client

from accounts.models import Membership, Team
from accounts.services import user_sign_up

User = get_user_model()
PASSWORD = "a long passphrase 42"
# The CSRF token, in the form and in htmx's headers (random at each answer).
_CSRF = re.compile(rb'(name="csrfmiddlewaretoken" value="|"X-CSRFToken": ")[A-Za-z0-9]+')


def sign_up(username: str, team_name: str = "", password: str = PASSWORD, **extra):
    client = Client(REMOTE_ADDR=extra.pop("address", "203.0.113.7"))
    body = {"username": username, "password1": password, "password2": password}
    body["team_name"] = team_name
    body.update(extra)
    return client.post("/accounts/signup/", body)


def answer(response, echoed: tuple[str, str] | None = None) -> tuple:
    """Everything a client receives, the CSRF token masked out; with ``echoed``, the
    name the form echoes back read as the other one."""
    content = _CSRF.sub(rb"\1-", response.content)
    if echoed is not None:
        content = content.replace(echoed[0].encode(), echoed[1].encode())
    # (a never-cached page's Expires is the clock's; the CSRF cookie and the request id
    # of X-Request-ID are random)
    headers = {
        k: v for k, v in response.headers.items() if k not in ("Expires", "Date", "X-Request-ID")
    }
    cookies = {k: "-" if k == "csrftoken" else v.value for k, v in response.cookies.items()}
    return response.status_code, sorted(headers.items()), sorted(cookies.items()), content


def accounts() -> list[tuple[str, str]]:
    return sorted(User.objects.values_list("username", "password"))


@pytest.mark.parametrize(
    ("taken", "free"),
    [
        ({"username": "alice"}, {"username": "dana"}),
        ({"username": "ALICE"}, {"username": "DANA"}),  # names compare without case
        ({"username": "dana", "team_name": "acme"}, {"username": "dana", "team_name": "Zeta"}),
        ({"username": "umbrella"}, {"username": "zeta"}),  # a team's name by default
        ({"username": "eve", "team_name": " Umbrella "}, {"username": "eve", "team_name": "x"}),
    ],
)
def test_a_taken_name_is_answered_exactly_like_a_free_one(alice, charlie, taken, free):
    before = accounts()

    refused = sign_up(**taken)
    assert accounts() == before  # nothing was made, nothing changed
    assert Team.objects.count() == 2

    made = sign_up(**free)

    assert answer(refused) == answer(made)
    assert refused.status_code == 302 and refused["Location"] == "/accounts/login/?signed_up=1"
    assert len(accounts()) == len(before) + 1


def test_the_page_after_sign_up_is_the_same_for_both_and_says_what_to_do(alice):
    refused, made = sign_up("alice"), sign_up("dana")
    pages = [Client().get(r["Location"]) for r in (refused, made)]
    assert answer(pages[0]) == answer(pages[1])
    text = pages[0].content.decode()
    assert "Now log in with the username and password you just chose." in text
    assert "one of the two names" in text and "was already taken" in text


@pytest.mark.parametrize("field", ["username", "team_name"])
def test_a_form_with_mistakes_is_answered_alike_for_taken_and_free_names(alice, field):
    taken, free = ("alice", "dolly") if field == "username" else ("Acme", "Zeta")
    names = {"username": "eve", "team_name": ""}
    bad = {"password": "too short"}  # 9 characters

    refused = sign_up(**{**names, field: taken}, **bad)
    other = sign_up(**{**names, field: free}, **bad)

    assert refused.status_code == 200
    assert "This password is too short. It must contain at least 12 characters." in (
        refused.content.decode()
    )
    assert f'value="{taken}"'.encode() in refused.content  # the form echoes its input
    assert answer(refused, echoed=(taken, free)) == answer(other)


def test_a_taken_username_keeps_its_owners_password_and_gets_no_second_team(alice):
    sign_up("alice", team_name="Alices", password="an impostor's passphrase")

    assert User.objects.filter(username__iexact="alice").count() == 1
    assert not Team.objects.filter(name="Alices").exists()
    owner = User.objects.get(username="alice")
    assert owner.check_password("correct horse battery")
    assert not owner.check_password("an impostor's passphrase")


def test_the_password_is_hashed_whether_the_name_is_taken_or_free(alice, monkeypatch, settings):
    # A taken name must not answer faster: the hashing, the costly part, runs in both.
    encoded = []
    real = MD5PasswordHasher.encode

    def counting(self, password, salt):
        encoded.append(password)
        return real(self, password, salt)

    monkeypatch.setattr(MD5PasswordHasher, "encode", counting)

    assert user_sign_up(username="alice", password=PASSWORD) is None
    assert user_sign_up(username="dana", password=PASSWORD) is not None
    assert user_sign_up(username="erin", password=PASSWORD, team_name="acme") is None

    assert encoded == [PASSWORD] * 3


def test_probing_names_spends_the_addresss_sign_up_allowance(alice):
    with time_machine.travel(dt.datetime(2030, 3, 4, 10, 20, tzinfo=dt.UTC), tick=False):
        _probe_six_names()


def _probe_six_names() -> None:
    for name in ("alice", "bob", "carol", "dave", "erin"):
        assert sign_up(name, address="198.51.100.20").status_code == 302

    over = sign_up("frank", address="198.51.100.20")

    assert over.status_code == 429 and over["Retry-After"]
    assert not User.objects.filter(username="frank").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("first", "second"), [("ann", "ann"), ("ann", "ANN")])
def test_two_sign_ups_racing_for_one_name_make_one_account(first, second):
    barrier = threading.Barrier(2)
    results: list[object] = []

    def attempt(username: str, team: str) -> None:
        try:
            barrier.wait(timeout=10)
            results.append(user_sign_up(username=username, password=PASSWORD, team_name=team))
        finally:
            connection.close()

    threads = [
        threading.Thread(target=attempt, args=(first, "Team one")),
        threading.Thread(target=attempt, args=(second, "Team two")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(r is None for r in results) == [False, True]
    assert User.objects.filter(username__iexact="ann").count() == 1
    assert Team.objects.count() == 1 and Membership.objects.count() == 1
