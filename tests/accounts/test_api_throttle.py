"""Anonymous API calls: 120 a minute per client address (DRF), then 429 with Retry-After
and the error envelope; signed-in calls and other addresses are not affected, and the
leaderboard stays public."""

import datetime as dt

import pytest
import time_machine
from django.conf import settings
from rest_framework.test import APIClient

from accounts.throttling import AnonymousAddressThrottle
from tests.conftest import api_client_for

T0 = dt.datetime(2030, 3, 4, 10, 0, tzinfo=dt.UTC)
HERE, THERE = "203.0.113.7", "198.51.100.9"


@pytest.fixture
def frozen(db):
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def test_the_anonymous_rate_is_120_a_minute():
    assert settings.REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"] == [
        "accounts.throttling.AnonymousAddressThrottle"
    ]
    assert AnonymousAddressThrottle().parse_rate(AnonymousAddressThrottle().get_rate()) == (120, 60)


def test_the_leaderboard_is_public(db):
    assert APIClient().get("/api/leaderboard/").status_code == 200


def test_anonymous_calls_over_the_rate_get_429_with_the_envelope(frozen):
    anonymous = APIClient(REMOTE_ADDR=HERE)
    assert {anonymous.get("/api/agent-protocol/").status_code for _ in range(120)} == {200}

    response = anonymous.get("/api/leaderboard/")

    assert response.status_code == 429
    assert response["Retry-After"] == "60"
    assert response.json() == {
        "error": {
            "code": "rate_limited",
            "message": "Request was throttled. Expected available in 60 seconds.",
        }
    }
    assert APIClient(REMOTE_ADDR=THERE).get("/api/leaderboard/").status_code == 200


def test_signed_in_calls_are_not_throttled_as_anonymous(frozen, alice):
    anonymous = APIClient(REMOTE_ADDR=HERE)
    for _ in range(121):
        anonymous.get("/api/agent-protocol/")
    signed_in = api_client_for(alice)

    assert signed_in.get("/api/leaderboard/", REMOTE_ADDR=HERE).status_code == 200


def test_the_rate_frees_up_a_minute_later(frozen):
    anonymous = APIClient(REMOTE_ADDR=HERE)
    for _ in range(121):
        anonymous.get("/api/agent-protocol/")

    frozen.shift(dt.timedelta(seconds=61))

    assert anonymous.get("/api/leaderboard/").status_code == 200


def test_a_forged_forwarded_header_does_not_buy_a_new_allowance(frozen):
    for index in range(120):
        APIClient(REMOTE_ADDR=HERE, HTTP_X_FORWARDED_FOR=f"192.0.2.{index}").get(
            "/api/agent-protocol/"
        )

    response = APIClient(REMOTE_ADDR=HERE, HTTP_X_FORWARDED_FOR="192.0.2.250").get(
        "/api/agent-protocol/"
    )

    assert response.status_code == 429
