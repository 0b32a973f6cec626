"""Passwords need at least 12 characters (ASVS 2.1.1) wherever one is set: the sign-up
page, the admin (a new user, a changed password), and the demo passwords seed_demo
takes from the environment or generates. An 11-character password is refused with
Django's message and changes nothing; 12 characters pass."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import Client

User = get_user_model()
ELEVEN = "vq8-rk2-ZtX"  # no common password, nothing like any username
TWELVE = ELEVEN + "m"
TOO_SHORT = "This password is too short. It must contain at least 12 characters."


def test_the_validators_hold_a_password_to_12_characters():
    with pytest.raises(ValidationError) as refused:
        validate_password(ELEVEN)
    assert refused.value.messages == [TOO_SHORT]
    validate_password(TWELVE)


@pytest.mark.parametrize(("password", "made"), [(ELEVEN, False), (TWELVE, True)])
def test_sign_up(db, password, made):
    response = Client().post(
        "/accounts/signup/",
        {"username": "dana", "password1": password, "password2": password},
    )
    assert User.objects.filter(username="dana").exists() is made
    if not made:
        assert response.status_code == 200 and TOO_SHORT in response.content.decode()


@pytest.fixture
def operator(db) -> Client:
    admin = User.objects.create_superuser("root", password="an operator's passphrase")
    client = Client()
    client.force_login(admin)
    return client


@pytest.mark.parametrize(("password", "made"), [(ELEVEN, False), (TWELVE, True)])
def test_the_admin_adds_users_with_12_characters_or_more(operator, password, made):
    response = operator.post(
        "/admin/auth/user/add/",
        {"username": "dana", "usable_password": "true", "password1": password,
         "password2": password},
    )  # fmt: skip
    assert User.objects.filter(username="dana").exists() is made
    if not made:
        assert response.status_code == 200 and TOO_SHORT in response.content.decode()


@pytest.mark.parametrize(("password", "changed"), [(ELEVEN, False), (TWELVE, True)])
def test_the_admin_changes_a_password_to_12_characters_or_more(alice, operator, password, changed):
    response = operator.post(
        f"/admin/auth/user/{alice.pk}/password/",
        {"usable_password": "true", "password1": password, "password2": password},
    )
    alice.refresh_from_db()
    assert alice.check_password(password) is changed
    assert alice.check_password("correct horse battery") is not changed
    if not changed:
        assert response.status_code == 200 and TOO_SHORT in response.content.decode()


@pytest.fixture
def seeding(db, settings, tmp_path, monkeypatch):
    settings.DATA_DIR = tmp_path  # where demo-logins.txt goes
    for variable in ("ARENA_DEMO_PASSWORD", "ARENA_ADMIN_PASSWORD"):
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


@pytest.mark.parametrize("variable", ["ARENA_DEMO_PASSWORD", "ARENA_ADMIN_PASSWORD"])
def test_seed_demo_refuses_a_short_password_from_the_environment(seeding, variable):
    seeding.setenv(variable, ELEVEN)

    with pytest.raises(CommandError) as refused:
        call_command("seed_demo", "--no-battles")

    assert str(refused.value) == f"{variable} is refused: {TOO_SHORT}"
    assert not User.objects.exists()  # one transaction: nobody was created


def test_seed_demo_takes_a_long_enough_password_and_generates_valid_ones(seeding, tmp_path):
    seeding.setenv("ARENA_DEMO_PASSWORD", TWELVE)

    call_command("seed_demo", "--no-battles")

    assert User.objects.get(username="demo").check_password(TWELVE)
    admin = User.objects.get(username="admin")
    (line,) = (tmp_path / "demo-logins.txt").read_text().splitlines()
    name, generated = line.split(" ", 1)
    assert name == "admin" and admin.check_password(generated)
    validate_password(generated, admin)
