"""Bearer tokens: 20 failed tokens per client address in each 15-minute window; then the
address's bearer requests get 429 with Retry-After and the error envelope, without the
token being looked up; good tokens count nothing and write nothing."""

import datetime as dt

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.services import api_token_create
from accounts.throttling import BAD_TOKENS
from arena_site.redis import redis_client

T0 = dt.datetime(2030, 3, 4, 10, 5, tzinfo=dt.UTC)
HERE, THERE = "203.0.113.7", "198.51.100.9"


def call(token: str, address: str):
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.get("/api/tasks/")


@pytest.fixture
def frozen(db):
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def good(alice):
    _, plain = api_token_create(user=alice)
    return plain


def flood(address: str, count: int = 20) -> list[int]:
    return [call(f"arena_forged-{index}", address).status_code for index in range(count)]


def test_twenty_bad_tokens_then_429_with_the_envelope(frozen):
    assert BAD_TOKENS.limit == 20

    assert flood(HERE) == [401] * 20
    response = call("arena_forged-21", HERE)

    assert response.status_code == 429
    assert response["Retry-After"] == "600"  # the window ends at 10:15
    assert response.json() == {
        "error": {
            "code": "rate_limited",
            "message": "Too many invalid API tokens from your address: at most 20 in 15 "
            "minutes. Expected available in 600 seconds.",
        }
    }


def test_over_the_limit_even_a_good_token_is_refused_without_a_lookup(frozen, good):
    flood(HERE)

    with CaptureQueriesContext(connection) as queries:
        response = call(good, HERE)

    assert response.status_code == 429
    assert queries.captured_queries == []


def test_a_good_token_from_another_address_still_works(frozen, good):
    flood(HERE, 25)

    assert call(good, THERE).status_code == 200


def test_the_next_window_lets_the_address_in_again(frozen, good):
    flood(HERE, 21)

    frozen.move_to(dt.datetime(2030, 3, 4, 10, 15, tzinfo=dt.UTC))

    assert call(good, HERE).status_code == 200
    assert call("arena_forged", HERE).status_code == 401


def test_good_tokens_count_nothing_and_write_nothing(frozen, good):
    ApiToken.objects.update(last_used_at=timezone.now())  # "last used" is fresh
    for _ in range(30):
        assert call(good, HERE).status_code == 200

    with CaptureQueriesContext(connection) as queries:
        assert call(good, HERE).status_code == 200

    writes = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith("SELECT")]
    assert writes == []
    assert list(redis_client().scan_iter("*bad-token*")) == []
    # and 30 good calls left the whole allowance for mistakes
    assert flood(HERE) == [401] * 20


def test_a_revoked_token_counts_as_a_failure(frozen, alice):
    from accounts.services import api_token_revoke

    token, plain = api_token_create(user=alice)
    api_token_revoke(token=token)

    assert [call(plain, HERE).status_code for _ in range(21)] == [401] * 20 + [429]
