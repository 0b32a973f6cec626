"""Throttles on the ways into an account (docs/security.md has the numbers and why):

- log-in (the site's and the admin's): django-axes with this module's handler, one limit
  per rule of ``settings.LOGIN_LOCKOUT_RULES`` (per username and client address, per
  client address), answered by ``lockout_response``;
- sign-up: ``SIGN_UPS`` new accounts per client address and hour;
- task submissions (the submit page and ``POST /api/tasks/``): ``submission_allowance``,
  ARENA_SUBMIT_ACCOUNT_RATE_PER_HOUR admitted tasks per account (whatever team they
  are for) and ARENA_SUBMIT_ADDRESS_RATE_PER_HOUR per client address, each hour;
- bearer tokens: ``BAD_TOKENS`` failed tokens per client address and window, counted by
  ``accounts.authentication``;
- anonymous API calls: ``AnonymousAddressThrottle`` (DRF), per client address.

Every refusal is HTTP 429 with Retry-After; pages say when to try again, the API answers
the error envelope with code ``rate_limited``."""

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_cool_off
from django.conf import settings
from django.core.cache import cache
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from rest_framework.throttling import AnonRateThrottle

from arena_site.ratelimit import FixedWindow, client_address
from arena_site.redis import redis_client

SIGN_UPS = FixedWindow("sign-up", limit=5, window_s=3600)
BAD_TOKENS = FixedWindow("bad-token", limit=20, window_s=900)


class LoginFailureHandler(AxesDatabaseHandler):
    """axes' database handler with a limit per lockout rule. axes compares one number,
    ``get_failures``, with one limit, ``AXES_FAILURE_LIMIT``; here that number is the
    count of the rule nearest its own limit, rescaled to AXES_FAILURE_LIMIT:
    floor(count × AXES_FAILURE_LIMIT / rule limit) reaches AXES_FAILURE_LIMIT exactly
    when count reaches the rule's limit."""

    def get_failures(self, request, credentials: dict | None = None) -> int:
        base = settings.AXES_FAILURE_LIMIT
        counts = [
            attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0
            for attempts in self.get_user_attempts(request, credentials)
        ]
        limits = [limit for _, limit in settings.LOGIN_LOCKOUT_RULES]
        return max(count * base // limit for count, limit in zip(counts, limits, strict=True))

    def lockout_ends(self, request, credentials: dict | None = None) -> datetime:
        """When the failures of every rule at its limit have aged out far enough for a
        log-in to be tried again (a failure counts for the cool-off after its record's
        latest attempt)."""
        cool_off = get_cool_off(request)
        ends = timezone.now()
        rules = zip(
            self.get_user_attempts(request, credentials),
            settings.LOGIN_LOCKOUT_RULES,
            strict=True,
        )
        for attempts, (_, limit) in rules:
            total = 0
            for attempt_time, failures in attempts.order_by("-attempt_time").values_list(
                "attempt_time", "failures_since_start"
            ):
                total += failures
                if total >= limit:  # locked until this record leaves the window
                    ends = max(ends, attempt_time + cool_off)
                    break
        return ends


def too_many(request: HttpRequest, *, what: str, retry_after_s: int) -> HttpResponse:
    """The 429 page: what was refused and when to try again."""
    retry_after_s = max(1, retry_after_s)
    response = render(
        request,
        "accounts/throttled.html",
        {
            "what": what,
            "retry_after_s": retry_after_s,
            "retry_after_min": math.ceil(retry_after_s / 60),
            "retry_at": timezone.now() + timedelta(seconds=retry_after_s),
        },
        status=429,
    )
    response["Retry-After"] = str(retry_after_s)
    return response


def lockout_response(request: HttpRequest, original_response, credentials) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: the log-in refused for too many failures."""
    ends = LoginFailureHandler().lockout_ends(request, credentials)
    retry = math.ceil((ends - timezone.now()).total_seconds())
    return too_many(
        request,
        what="Too many failed log-ins from your address. Each further try before then "
        "starts the wait again.",
        retry_after_s=retry,
    )


class AnonymousAddressThrottle(AnonRateThrottle):
    """DRF's anonymous-call throttle, counted per ``client_address`` (DRF's own guess
    would believe any X-Forwarded-For)."""

    def get_ident(self, request) -> str:
        return client_address(request)


SUBMISSION_WINDOW_S = 3600


@contextmanager
def submission_allowance(*, user_id: int, address: str) -> Iterator[None]:
    """Takes one task from the hour's allowance of the account and of the client
    address (an atomic increment of each, in the shared Redis), before the request's
    body is read; raises ``ApplicationError`` 429 ``rate_limited`` with Retry-After
    (the end of the clock hour) when either is spent. A submission that does not end
    in a task (refused, failed, or conversation: the block raises) gives its share
    back: no more tasks than a bound are admitted, however many arrive at once, and a
    submission still in flight holds its share until it is answered.

    The account's bound holds across all its teams: one person signing up teams
    cannot multiply it. The address's bound holds across accounts: one person signing
    up accounts cannot either (sign-up itself is bounded per address, ``SIGN_UPS``)."""
    arena = settings.ARENA
    now = time.time()
    window = int(now // SUBMISSION_WINDOW_S)
    bounds = (
        ("account", f"account:{user_id}", arena.submit_account_rate_per_hour),
        ("address", f"address:{address}", arena.submit_address_rate_per_hour),
    )
    keys = [cache.make_key(f"rate:submit-{subject}:{window}") for _, subject, _ in bounds]
    with redis_client().pipeline() as pipe:
        for key in keys:
            pipe.incr(key).expire(key, SUBMISSION_WINDOW_S + 60)
        counts = pipe.execute()[::2]
    spent = [(per, limit) for (per, _, limit), count in zip(bounds, counts, strict=True)
             if count > limit]  # fmt: skip
    if spent:
        _give_back(keys)
        retry = max(1, math.ceil((window + 1) * SUBMISSION_WINDOW_S - now))
        raise _submissions_refused(*spent[0], retry_after_s=retry)
    try:
        yield
    except BaseException:
        _give_back(keys)
        raise


def _give_back(keys: list[str]) -> None:
    with redis_client().pipeline() as pipe:
        for key in keys:
            pipe.decr(key)
        pipe.execute()


def submissions_spent_words(per: str, limit: int) -> str:
    """What was refused, in words: the account's or the address's hourly bound."""
    if per == "account":
        return (
            f"Your account has submitted {limit} tasks this hour, the most one account may, "
            "whichever teams they were for."
        )
    return (
        f"{limit} tasks were submitted from your network address this hour, the most one "
        "address may (all accounts together)."
    )


def _submissions_refused(per: str, limit: int, *, retry_after_s: int) -> Exception:
    # Imported here: DRF's settings load this module (AnonymousAddressThrottle) while
    # arena_site.exceptions, which imports DRF, may still be initialising.
    from arena_site.exceptions import ApplicationError

    minutes = math.ceil(retry_after_s / 60)
    at = (timezone.now() + timedelta(seconds=retry_after_s)).strftime("%H:%M UTC")
    return ApplicationError(
        f"{submissions_spent_words(per, limit)} Try again in {minutes} min (at {at}); "
        "nothing was submitted.",
        code="rate_limited",
        status=429,
        headers={"Retry-After": str(retry_after_s)},
        extra={"retry_after_s": retry_after_s, "limit": limit, "per": per},
    )
