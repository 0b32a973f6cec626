"""Shared fixtures. Real PostgreSQL and Redis (scripts/test.sh points at them); the
people in every test: alice and bob on team Acme, charlie the outsider on team Umbrella,
and judge the crowd judge on a team of his own."""

import os
import random
import shutil
import tempfile
from pathlib import Path

import django_rq
import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from accounts.services import consent_accept, consent_terms_publish, team_create
from agents.models import Arena
from agents.services import roster_install_builtins
from tests import workers

User = get_user_model()
# The cgroups an xdist worker moved into (tests/workers.py), left at its end.
_CGROUPS = pytest.StashKey[list]()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config, specs):
    """Each xdist worker gets its own Redis database, prefixes, data dir and sandbox uids
    (tests/workers.py), set on its gateway before it loads the settings."""
    for index, spec in enumerate(specs):
        spec.env.update(workers.worker_environment(index, os.environ, django_settings))


BARE_PYTEST = (
    "run the tests with `make test` or `bash scripts/test.sh [pytest arguments]`: they "
    "point the suite at a PostgreSQL database and Redis databases of its own (14 and up), "
    "which it empties; a bare `pytest` would run on SQLite and empty Redis database 0"
)


def pytest_configure(config):
    if os.environ.get("ARENA_TEST_SUITE") != "scripts/test.sh":
        pytest.exit(BARE_PYTEST, returncode=4)  # before any database or Redis is touched
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker:
        config.stash[_CGROUPS] = workers.enter_own_cgroups(worker)


def pytest_unconfigure(config):
    workers.leave_own_cgroups(config.stash.get(_CGROUPS, []))


@pytest.fixture
def sandbox_root():
    """A sandbox root the slot uids can traverse (pytest's own tmp dirs are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="arena-test-sandboxes-", dir="/var/tmp"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _private_dirs(settings, tmp_path, sandbox_root):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed only
    settings.PRIVATE_MEDIA_ROOT = tmp_path / "private"
    # Votes final at once (no undo window to wait out): the undo window has tests of its
    # own that set it.
    settings.ARENA = settings.ARENA.replace(sandbox_root=sandbox_root, vote_undo_window_s=0)


@pytest.fixture(autouse=True)
def _clean_redis():
    """Each test starts with empty queues in the test Redis database."""
    connection = django_rq.get_connection("default")
    connection.flushdb()
    yield
    connection.flushdb()


@pytest.fixture
def terms(db):
    return consent_terms_publish(text="You agree to publication.")


def make_person(username: str, team_name: str | None, terms) -> User:
    user = User.objects.create_user(username=username, password="correct horse battery")
    if team_name:
        from accounts.models import Membership, Team

        team = Team.objects.filter(name=team_name).first()
        if team is None:
            team_create(name=team_name, owner=user)
        else:
            Membership.objects.create(team=team, user=user)
    if terms is not None:
        consent_accept(user=user, terms=terms)
    return user


@pytest.fixture
def alice(terms):
    return make_person("alice", "Acme", terms)


@pytest.fixture
def bob(terms, alice):
    return make_person("bob", "Acme", terms)


@pytest.fixture
def charlie(terms):
    return make_person("charlie", "Umbrella", terms)


@pytest.fixture
def judge(terms):
    return make_person("judge", "judge-team", terms)


@pytest.fixture
def roster(db):
    return roster_install_builtins(arena=Arena.objects.public())


@pytest.fixture
def rng():
    return random.Random(7)


def api_client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def api():
    return api_client_for
