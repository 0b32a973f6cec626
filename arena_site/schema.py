"""The OpenAPI schema's shared parts: the error envelope, the error responses every
operation documents, path ids, and input limits that a service (not the serializer)
enforces.

``ArenaAutoSchema`` (REST_FRAMEWORK's DEFAULT_SCHEMA_CLASS) adds to every operation
the error responses it can give, unless the view documents that status itself with a
more specific description:

- 400 when it reads a body or query parameters;
- 401 and 403 unless it is public (``AllowAny``);
- 404 when its path names an object;
- 405 always (other methods of the path);
- 413 and 415 when it reads a body;
- 429 always (anonymous calls per address, failed tokens per address), with
  ``Retry-After``.
"""

import re
from collections.abc import Callable
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import permissions, serializers

from arena_site.parsers import ID_MAX, MAX_DEPTH


class ErrorDetailOutput(serializers.Serializer):
    code = serializers.CharField(
        help_text="Stable and machine-readable, e.g. invalid, invalid_json, not_found, "
        "rate_limited; docs/api.md lists them."
    )
    message = serializers.CharField(help_text="What went wrong, for a person to read.")


class ErrorOutput(serializers.Serializer):
    """The one shape of every API error. Some errors add keys beside code and message
    (e.g. consent_url, earlier_task)."""

    error = ErrorDetailOutput()


def _integer_header(description: str) -> dict[str, Any]:
    return {"schema": {"type": "integer", "minimum": 0}, "description": description}


def _string_header(description: str) -> dict[str, Any]:
    return {"schema": {"type": "string"}, "description": description}


# status -> (description, response headers)
ERRORS: dict[str, tuple[str, dict[str, Any]]] = {
    "400": (
        "Bad input. invalid_json (the body is not strict JSON: syntax, duplicate keys, "
        f"NaN/Infinity, out-of-range numbers, nesting deeper than {MAX_DEPTH}, not UTF-8), "
        "invalid_multipart (a malformed multipart body), invalid_parameter (a query "
        "parameter outside its bounds), invalid (a field; the message names it), or a "
        "rule of this operation named in its description.",
        {},
    ),
    "401": (
        "not_authenticated: no credentials, or an invalid or revoked API token. Send "
        "Authorization: Bearer <token>.",
        {"WWW-Authenticate": _string_header('Bearer realm="api"')},
    ),
    "403": (
        "Authenticated but not allowed: consent_required (accept the current terms), "
        "no_team, or permission_denied.",
        {},
    ),
    "404": (
        "not_found: no such object, or not yours. Another team's objects are answered "
        "exactly as missing ones.",
        {},
    ),
    "405": (
        "method_not_allowed, for the methods this path does not offer; Allow lists those it does.",
        {"Allow": _string_header("The methods this path offers.")},
    ),
    "413": (
        "request_too_large: the body is over the limit (DATA_UPLOAD_MAX_MEMORY_SIZE for "
        "JSON and form fields, the attachment limits for uploads), or a field is over "
        "its documented maximum.",
        {},
    ),
    "415": (
        "unsupported_media_type: the body's Content-Type is not one this operation reads.",
        {},
    ),
    "429": (
        "rate_limited: too many requests (anonymous calls per client address, failed "
        "tokens per client address, or a limit of this operation). Retry-After says when "
        "to try again.",
        {"Retry-After": _integer_header("Seconds to wait before trying again.")},
    ),
}


def error_response(status: int | str, description: str | None = None) -> OpenApiResponse:
    """The envelope as an ``@extend_schema`` response, for a view that describes a
    status in its own words."""
    return OpenApiResponse(ErrorOutput, description=description or ERRORS[str(status)][0])


ID_SCHEMA = {"type": "integer", "format": "int64", "minimum": 1, "maximum": ID_MAX}
_ID_CONVERTER = re.compile(r"<id:(\w+)>")


class ArenaAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema with the error responses and path ids above."""

    def _resolve_path_parameters(self, variables):
        parameters = super()._resolve_path_parameters(variables)
        ids = set(_ID_CONVERTER.findall(self.path_regex))
        if "pk" in ids:
            ids.add("id")  # SCHEMA_COERCE_PATH_PK names <id:pk> "id"
        for parameter in parameters:
            if parameter["name"] in ids:
                parameter["schema"] = dict(ID_SCHEMA)
                parameter.setdefault("description", "A database id.")
        return parameters

    def _error_statuses(self, operation: dict[str, Any]) -> list[str]:
        where = {p["in"] for p in operation.get("parameters", [])}
        body = "requestBody" in operation
        public = permissions.AllowAny in [p.__class__ for p in self.view.get_permissions()]
        statuses = []
        if body or "query" in where:
            statuses.append("400")
        if not public:
            statuses += ["401", "403"]
        if "path" in where:
            statuses.append("404")
        statuses.append("405")
        if body:
            statuses += ["413", "415"]
        statuses.append("429")
        return statuses

    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        responses = operation["responses"]
        for status in self._error_statuses(operation):
            description, headers = ERRORS[status]
            if status not in responses:
                responses[status] = self._get_response_for_code(
                    error_response(status, description), status
                )
            if headers:
                responses[status].setdefault("headers", {}).update(headers)
        operation["responses"] = dict(sorted(responses.items()))
        return operation


class ServiceLimits:
    """For input fields whose limits a service enforces with its own error code and
    status (e.g. 413 instruction_too_long): the schema documents them, read from
    settings when it is built; the field does not check them itself.

    ``schema_limits`` returns the schema keywords, e.g. ``{"maxLength": 20000}``."""

    def __init__(self, *args, schema_limits: Callable[[], dict[str, Any]], **kwargs) -> None:
        self.schema_limits = schema_limits
        super().__init__(*args, **kwargs)


class StrictCharField(serializers.CharField):
    """Text only: unlike DRF's CharField, a JSON number is refused, not read as its
    digits."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class LimitedCharField(ServiceLimits, StrictCharField):
    pass


class LimitedListField(ServiceLimits, serializers.ListField):
    pass


class ServiceLimitsExtension(OpenApiSerializerFieldExtension):
    target_class = ServiceLimits
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        return {**schema, **self.target.schema_limits()}
