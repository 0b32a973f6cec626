"""Throttles on the ways into an account (docs/security.md has the numbers and why):

- log-in (the site's and the admin's): django-axes with this module's handler, one limit
  per rule of ``settings.LOGIN_LOCKOUT_RULES`` (per username and client address, per
  client address), answered by ``lockout_response``;
- sign-up: ``SIGN_UPS`` new accounts per client address and hour;
- bearer tokens: ``BAD_TOKENS`` failed tokens per client address and window, counted by
  ``accounts.authentication``;
- anonymous API calls: ``AnonymousAddressThrottle`` (DRF), per client address.

Every refusal is HTTP 429 with Retry-After; pages say when to try again, the API answers
the error envelope with code ``rate_limited``."""

import math
from datetime import datetime, timedelta

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_cool_off
from django.conf import settings
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from rest_framework.throttling import AnonRateThrottle

from arena_site.ratelimit import FixedWindow, client_address

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
