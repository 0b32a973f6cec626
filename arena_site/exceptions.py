"""One domain error type and one handler that renders every API error the same way:
``{"error": {"code": str, "message": str}}`` with a fitting HTTP status.

A part beyond capacity or away (every pooled database connection busy, PostgreSQL or
Redis down) is not a bug: ``capacity_error`` names it and the API answers 503 with
``Retry-After`` and ``retry_after`` in the envelope (pages: arena_site/shedding.py)."""

import logging
from dataclasses import dataclass
from typing import Any

import redis.exceptions
from django.core.exceptions import (
    PermissionDenied,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.db import Error as DatabaseError
from django.db import InterfaceError, OperationalError
from django.http import Http404
from psycopg_pool import PoolTimeout
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from arena_site.parsers import MalformedRequest, RequestTooLarge


class ApplicationError(Exception):
    """A domain rule said no. ``status`` is the HTTP status the API answers with."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int = 400,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.headers = headers or {}
        self.extra = extra or {}


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


# How long a client is asked to wait: a busy pool frees a connection within moments; an
# outage lasts longer, and clients hammering a restarting server only slow it down.
BUSY_RETRY_AFTER_S = 1
OUTAGE_RETRY_AFTER_S = 5

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CapacityError:
    """What the client is told: 503, this code and message, retry after this long."""

    code: str
    message: str
    retry_after_s: int

    def body(self) -> dict[str, Any]:
        return error_body(self.code, self.message, retry_after=self.retry_after_s)

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


OVERLOADED = CapacityError(
    "overloaded",
    "The server is handling as many requests as it can; try again shortly.",
    BUSY_RETRY_AFTER_S,
)
DATABASE_BUSY = CapacityError(
    "overloaded",
    "No database connection came free in time (busy, or the database is away); try again shortly.",
    BUSY_RETRY_AFTER_S,
)
DATABASE_AWAY = CapacityError(
    "unavailable",
    "The database cannot be reached right now; try again shortly.",
    OUTAGE_RETRY_AFTER_S,
)
REDIS_AWAY = CapacityError(
    "unavailable",
    "A service the arena needs (Redis) cannot be reached right now; try again shortly.",
    OUTAGE_RETRY_AFTER_S,
)


def capacity_error(exc: BaseException) -> CapacityError | None:
    """The answer for an exception that means a part is beyond capacity or away, else
    None. Django wraps the driver's errors (``django.db.Error`` with the psycopg one as
    its cause), so the cause chain is looked at too."""
    chain: list[BaseException] = [exc]
    while isinstance(chain[-1], DatabaseError) and chain[-1].__cause__ and len(chain) < 8:
        chain.append(chain[-1].__cause__)
    if any(isinstance(e, PoolTimeout) for e in chain):
        return DATABASE_BUSY  # (an OperationalError too: checked first)
    if any(isinstance(e, OperationalError | InterfaceError) for e in chain):
        return DATABASE_AWAY
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return REDIS_AWAY
    return None


def _flatten_detail(detail: Any) -> str:
    if isinstance(detail, dict):
        parts = []
        for field, value in detail.items():
            text = _flatten_detail(value)
            parts.append(text if field == "non_field_errors" else f"{field}: {text}")
        return "; ".join(parts)
    if isinstance(detail, list):
        return " ".join(_flatten_detail(item) for item in detail)
    return str(detail)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        return Response(
            error_body(exc.code, exc.message, **exc.extra), status=exc.status, headers=exc.headers
        )
    capacity = capacity_error(exc)
    if capacity is not None:
        logger.warning("answered 503 %s: %s: %s", capacity.code, type(exc).__name__, exc)
        response = Response(capacity.body(), status=503, headers=capacity.headers())
        response._has_been_logged = True  # just above, once; not again as an ERROR
        return response
    if isinstance(exc, Http404):
        exc = exceptions.NotFound("Not found.")
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig | TooManyFieldsSent | TooManyFilesSent):
        # Django's own body limits (DATA_UPLOAD_*), met when a view reads request.body
        exc = RequestTooLarge(f"The request is too large: {exc}")
    elif isinstance(exc, SuspiciousOperation):
        # as Django would: logged for the operator, a plain 400 for the client
        logging.getLogger(f"django.security.{type(exc).__name__}").error(str(exc))
        exc = MalformedRequest()
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        code = "invalid"
        message = _flatten_detail(exc.detail)
    elif isinstance(exc, exceptions.Throttled):
        # one code for every 429, as the judge limits answer; DRF set Retry-After
        code = "rate_limited"
        message = _flatten_detail(exc.detail)
    elif isinstance(exc, exceptions.APIException):
        code = exc.default_code if isinstance(exc.default_code, str) else "error"
        message = _flatten_detail(exc.detail)
    else:  # pragma: no cover - exception_handler only handles APIException subclasses
        code, message = "error", str(exc)
    if response.status_code == status.HTTP_401_UNAUTHORIZED:
        code = "not_authenticated"
    response.data = error_body(code, message)
    return response
