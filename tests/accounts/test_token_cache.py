"""The bearer token's cached entry (accounts.token_cache), tried the ways it could go
wrong: every path that ends a token or changes its user ends the entry for the very
next request, a request racing a revocation cannot put the entry back, the user built
from it never makes a field up, and the last-used time still reaches the database."""

import datetime as dt

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from accounts import token_cache
from accounts.authentication import ApiTokenAuthentication
from accounts.jobs import api_tokens_last_used_flush
from accounts.models import ApiToken
from accounts.services import api_token_create, api_token_revoke, user_tokens_forget
from accounts.throttling import BAD_TOKENS
from arena_site.redis import redis_client

User = get_user_model()
T0 = dt.datetime(2030, 3, 4, 10, 5, tzinfo=dt.UTC)


def bearer(plain: str) -> APIClient:
    client = APIClient(REMOTE_ADDR="203.0.113.7")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


def bearer_request(plain: str):
    return RequestFactory().get(
        "/", HTTP_AUTHORIZATION=f"Bearer {plain}", REMOTE_ADDR="203.0.113.7"
    )


def statements(call) -> tuple[object, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        result = call()
    return result, [q["sql"] for q in queries.captured_queries]


def token_selects(sql: list[str]) -> list[str]:
    return [s for s in sql if "accounts_apitoken" in s]


@pytest.fixture
def alices(alice):
    return api_token_create(user=alice)


def test_a_cached_token_reads_nothing_from_the_database(alices):
    token, plain = alices
    client = bearer(plain)
    first, cold = statements(lambda: client.get("/api/tasks/"))
    second, warm = statements(lambda: client.get("/api/tasks/"))
    assert first.status_code == second.status_code == 200
    assert len(token_selects(cold)) == 1
    assert token_selects(warm) == []
    assert not any("auth_user" in s and "FROM" in s and "WHERE" in s and '"id" =' in s
                   for s in warm)  # fmt: skip
    # keyed by the digest, never the plain token, with the backstop's TTL
    key = token_cache.entry_key(token.digest)
    assert 0 < redis_client().ttl(key) <= token_cache.ENTRY_TTL_S
    assert not list(redis_client().scan_iter(f"*{plain}*"))


def test_revoking_ends_a_warm_entry_on_the_next_request(alices):
    token, plain = alices
    client = bearer(plain)
    assert client.get("/api/tasks/").status_code == 200  # the entry is cached

    api_token_revoke(token=token)

    refused = client.get("/api/tasks/")
    assert refused.status_code == 401
    assert "revoked" in refused.json()["error"]["message"]


def test_the_settings_page_revocation_ends_it_too(client, alice, alices):
    token, plain = alices
    assert bearer(plain).get("/api/tasks/").status_code == 200
    client.force_login(alice)
    client.post("/accounts/settings/", {"action": "revoke", "token": token.pk})
    assert bearer(plain).get("/api/tasks/").status_code == 401


def test_a_request_that_read_the_token_before_the_revocation_cannot_cache_it_again(alices):
    """The race: a request reads the token (still live), the revocation commits and
    tells Redis, then that request stores what it read. The tombstone wins."""
    token, plain = alices
    read_before = token_cache.entry_for(token_id=token.pk, user=token.user)

    api_token_revoke(token=token)
    late = token_cache.look_up(
        digest=token.digest, address="198.51.100.1", bad_tokens=BAD_TOKENS, fill=read_before
    )

    assert late.entry is not None  # that request itself went ahead, as the database said
    assert redis_client().hget(token_cache.entry_key(token.digest), "u") is None
    assert bearer(plain).get("/api/tasks/").status_code == 401


def test_a_revocation_that_cannot_reach_redis_does_not_happen(alices, monkeypatch):
    token, _ = alices

    def unreachable(digests):
        raise ConnectionError("Redis is away")

    monkeypatch.setattr(token_cache, "forget", unreachable)
    with pytest.raises(ConnectionError):
        api_token_revoke(token=token)
    token.refresh_from_db()
    assert token.revoked_at is None  # not revoked in the database while still cached


@pytest.fixture
def operator(admin_client):
    return admin_client


def user_form(user, **changes) -> dict:
    """The admin's change form for ``user`` as a person would send it back."""
    data = {
        "username": user.username,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "email": user.email,
        "is_active": "on" if user.is_active else "",
        "is_staff": "on" if user.is_staff else "",
        "is_superuser": "on" if user.is_superuser else "",
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "last_login_0": "",
        "last_login_1": "",
        "_save": "Save",
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v != ""}


def test_deactivating_the_user_in_the_admin_ends_the_entry(operator, alice, alices):
    _, plain = alices
    assert bearer(plain).get("/api/tasks/").status_code == 200

    saved = operator.post(f"/admin/auth/user/{alice.pk}/change/", user_form(alice, is_active=""))

    assert saved.status_code == 302, saved.content.decode()[:2000]
    alice.refresh_from_db()
    assert not alice.is_active
    assert bearer(plain).get("/api/tasks/").status_code == 401


def test_a_staff_change_in_the_admin_reaches_the_next_request(operator, alice, alices):
    _, plain = alices
    assert bearer(plain).get("/api/tasks/").status_code == 200
    seen = []

    class Probe(ApiTokenAuthentication):
        def authenticate(self, request):
            found = super().authenticate(request)
            seen.append(found[0].is_staff)
            return found

    operator.post(f"/admin/auth/user/{alice.pk}/change/", user_form(alice, is_staff="on"))

    Probe().authenticate(bearer_request(plain))
    assert seen == [True]


def test_deleting_the_user_in_the_admin_ends_the_entry(operator, alice, alices):
    _token, plain = alices
    assert bearer(plain).get("/api/tasks/").status_code == 200

    operator.post(f"/admin/auth/user/{alice.pk}/delete/", {"post": "yes"})

    assert not User.objects.filter(pk=alice.pk).exists()
    assert bearer(plain).get("/api/tasks/").status_code == 401


def test_revoking_or_deleting_tokens_in_the_admin_ends_their_entries(operator, alice):
    revoked, revoked_plain = api_token_create(user=alice, name="one")
    deleted, deleted_plain = api_token_create(user=alice, name="two")
    bulk, bulk_plain = api_token_create(user=alice, name="three")
    for plain in (revoked_plain, deleted_plain, bulk_plain):
        assert bearer(plain).get("/api/tasks/").status_code == 200

    operator.post(
        f"/admin/accounts/apitoken/{revoked.pk}/change/",
        {"user": alice.pk, "name": "one", "revoked_at_0": "2030-01-01",
         "revoked_at_1": "10:00:00", "_save": "Save"},
    )  # fmt: skip
    operator.post(f"/admin/accounts/apitoken/{deleted.pk}/delete/", {"post": "yes"})
    operator.post(
        "/admin/accounts/apitoken/",
        {"action": "delete_selected", "_selected_action": [bulk.pk], "post": "yes"},
    )

    revoked.refresh_from_db()
    assert revoked.revoked_at is not None
    assert not ApiToken.objects.filter(pk__in=[deleted.pk, bulk.pk]).exists()
    for plain in (revoked_plain, deleted_plain, bulk_plain):
        assert bearer(plain).get("/api/tasks/").status_code == 401


def test_a_change_behind_the_services_back_lasts_at_most_the_ttl(alices, alice):
    """The backstop: ``User.objects.update`` tells nobody; the entry says yes until it
    expires (simulated: the key's TTL is the bound), then the database says no."""
    token, plain = alices
    assert bearer(plain).get("/api/tasks/").status_code == 200
    User.objects.filter(pk=alice.pk).update(is_active=False)
    assert bearer(plain).get("/api/tasks/").status_code == 200  # what the TTL is for
    assert redis_client().ttl(token_cache.entry_key(token.digest)) <= token_cache.ENTRY_TTL_S
    redis_client().delete(token_cache.entry_key(token.digest))  # the TTL ran out
    assert bearer(plain).get("/api/tasks/").status_code == 401


def test_user_tokens_forget_covers_every_token_of_the_user(alice, bob):
    tokens = [api_token_create(user=alice)[1], api_token_create(user=alice)[1]]
    bobs = api_token_create(user=bob)[1]
    for plain in [*tokens, bobs]:
        assert bearer(plain).get("/api/tasks/").status_code == 200

    user_tokens_forget(user_ids=[alice.pk])
    User.objects.filter(pk=alice.pk).update(is_active=False)

    assert [bearer(plain).get("/api/tasks/").status_code for plain in tokens] == [401, 401]
    assert bearer(bobs).get("/api/tasks/").status_code == 200


def test_the_cached_user_reads_other_fields_instead_of_making_them_up(alices, alice):
    User.objects.filter(pk=alice.pk).update(email="alice@example.org", first_name="Alice")
    _, plain = alices
    bearer(plain).get("/api/tasks/")  # cached
    request = bearer_request(plain)

    (user, _auth), sql = statements(lambda: ApiTokenAuthentication().authenticate(request))

    assert sql == []
    assert (user.pk, user.username, user.is_active, user.is_staff) == (
        alice.pk,
        "alice",
        True,
        False,
    )
    assert user.get_deferred_fields() >= {"email", "first_name", "password"}
    email, sql = statements(lambda: user.email)
    assert email == "alice@example.org" and len(sql) == 1


def test_the_last_used_time_reaches_the_database_in_one_statement(alice):
    tokens = [api_token_create(user=alice, name=f"t{i}") for i in range(3)]
    with time_machine.travel(T0, tick=False):
        for _, plain in tokens:
            _, sql = statements(lambda plain=plain: bearer(plain).get("/api/tasks/"))
            assert not [s for s in sql if s.startswith("UPDATE") and "accounts_apitoken" in s]
    assert ApiToken.objects.filter(last_used_at__isnull=False).count() == 0  # not yet

    written, sql = statements(api_tokens_last_used_flush)

    assert written == 3
    assert len([s for s in sql if s.startswith("UPDATE")]) == 1
    assert set(ApiToken.objects.values_list("last_used_at", flat=True)) == {T0}
    assert api_tokens_last_used_flush() == 0  # nothing twice


def test_a_use_recorded_during_the_flush_is_kept_for_the_next(alice):
    token, plain = api_token_create(user=alice)
    with time_machine.travel(T0, tick=False):
        bearer(plain).get("/api/tasks/")
    taken = token_cache.last_used_taken()
    later = T0 + dt.timedelta(seconds=30)
    with time_machine.travel(later, tick=False):
        bearer(plain).get("/api/tasks/")  # between the flush's read and its drop
    token_cache.last_used_drop(taken)

    assert api_tokens_last_used_flush() == 1
    token.refresh_from_db()
    assert token.last_used_at == later


def test_the_flush_is_a_periodic_job_on_the_default_queue(db):
    import django_rq
    from rq.cron import CronScheduler

    scheduler = CronScheduler(connection=django_rq.get_connection("default"))
    scheduler.load_config_from_file("arena_site.cron")
    (job,) = [j for j in scheduler.get_jobs() if j.func is api_tokens_last_used_flush]
    assert (job.queue_name, job.interval) == ("default", 60)
