"""Shedding load instead of failing: a bounded number of requests in flight per web
process, and 503 with ``Retry-After`` (never a 500) when a part is beyond capacity or
away.

``CapacityMiddleware`` goes first in ``MIDDLEWARE``. It admits at most
``ARENA_MAX_INFLIGHT`` requests at once in this process, static files not counted (no
more than the database pool's size, checked at start-up: an admitted request gets a
connection at once unless websocket consumers hold some, and never waits past
``ARENA_DB_POOL_TIMEOUT_S``); the next one is answered 503 at once, before any other
middleware runs. Every request's sync code runs on a thread of its own while it runs
(one of the handler's kept threads, or a new one in a burst: arena_site/handlers.py),
so this bound is also the bound on request threads doing work, whatever
``ASGI_THREADS`` says (that executor only runs Django's error handling).

Its ``process_exception`` turns what ``arena_site.exceptions.capacity_error`` names (a
pool timeout, PostgreSQL or Redis down) raised by a page view into a small plain 503
page; API views answer the JSON envelope through the DRF exception handler, and a
non-DRF view under /api/ gets the same envelope here. It works under ASGI and WSGI."""

import logging
import threading

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.html import escape

from arena_site.exceptions import OVERLOADED, CapacityError, capacity_error

logger = logging.getLogger(__name__)


def _is_api(request: HttpRequest) -> bool:
    return request.path_info == "/api" or request.path_info.startswith("/api/")


def capacity_response(request: HttpRequest, error: CapacityError) -> HttpResponse:
    """503 with Retry-After: the JSON envelope under /api/, a small plain page elsewhere."""
    if _is_api(request):
        response: HttpResponse = JsonResponse(error.body(), status=503)
    else:
        seconds = error.retry_after_s
        response = HttpResponse(
            "<!doctype html><html lang=en><meta charset=utf-8><title>Busy: try again</title>"
            f"<h1>Try again in {seconds} s</h1><p>{escape(error.message)}</p></html>",
            status=503,
            content_type="text/html; charset=utf-8",
        )
    for name, value in error.headers().items():
        response[name] = value
    response["Cache-Control"] = "no-store"
    # Not Django's "ERROR Service Unavailable" line per refusal: under overload that
    # would be thousands a second. Outages are logged once per request by the caller.
    response._has_been_logged = True
    return response


class CapacityMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self.limit = settings.ARENA.max_inflight
        # Static files (WhiteNoise: memory or disk, no query) are not counted: a page's
        # assets load in parallel and must not be refused for its own weight.
        self.static_prefix = "/" + settings.STATIC_URL.lstrip("/")
        self.inflight = 0
        self._lock = threading.Lock()
        self._async = iscoroutinefunction(get_response)
        if self._async:
            markcoroutinefunction(self)

    def _admit(self, request: HttpRequest) -> bool:
        if request.path_info.startswith(self.static_prefix):
            request._inflight_exempt = True
            return True
        with self._lock:
            if self.inflight >= self.limit:
                return False
            self.inflight += 1
            return True

    def _release(self, request: HttpRequest) -> None:
        if getattr(request, "_inflight_exempt", False):
            return
        with self._lock:
            self.inflight -= 1

    def __call__(self, request: HttpRequest):
        if self._async:
            return self.__acall__(request)
        if not self._admit(request):
            return capacity_response(request, OVERLOADED)
        try:
            return self.get_response(request)
        finally:
            self._release(request)

    async def __acall__(self, request: HttpRequest):
        if not self._admit(request):
            return capacity_response(request, OVERLOADED)
        try:
            return await self.get_response(request)
        finally:
            self._release(request)

    def process_exception(self, request: HttpRequest, exception: Exception):
        error = capacity_error(exception)
        if error is None:
            return None  # a bug: Django's 500 (logged)
        logger.warning(
            "%s %s answered 503 %s: %s: %s",
            request.method, request.path, error.code, type(exception).__name__, exception,
        )  # fmt: skip
        return capacity_response(request, error)
