"""One domain error type and one handler that renders every API error the same way:
``{"error": {"code": str, "message": str}}`` with a fitting HTTP status."""

import logging
from typing import Any

from django.core.exceptions import (
    PermissionDenied,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.http import Http404
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
