"""Strict reading of what an API request sends: the body (JSON or multipart) and the
query string. Whatever a client sends, the answer is a 4xx in the error envelope that
names the problem, never a 500.

- JSON (``StrictJSONParser``): UTF-8 only; no duplicate object keys, no ``NaN`` or
  ``Infinity``, no number that overflows a float (``1e999``) or has more digits than
  Python converts (4300), no lone surrogate escape
  (``"\\ud800"``, which no UTF-8 response could carry back), at most ``MAX_DEPTH``
  levels of nested arrays and objects (checked before decoding, so deep input never
  reaches the recursive decoder), at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes.
  400 ``invalid_json``; 413 ``request_too_large``.
- multipart (``BoundedMultiPartParser``): Django's parser, whose refusals become 400
  ``invalid_multipart`` (bad boundary, cut mid-part, missing closing boundary) or 413
  ``request_too_large`` (a field over DATA_UPLOAD_MAX_MEMORY_SIZE, more parts than
  DATA_UPLOAD_MAX_NUMBER_FIELDS / _FILES). The attachment limits are checked before
  the body is read (``battles.attachments.attachments_check_request_size``).
- query parameters (``query_int``, ``StrictLimitOffsetPagination``): an integer within
  its documented bounds, else 400 ``invalid_parameter`` naming the bounds.
- responses (``FallbackNegotiation``): JSON when ``Accept`` asks for nothing the view
  renders (RFC 9110 §12.5.1 lets a server disregard it rather than answer 406), so
  every answer has the one shape.
"""

import json
import math
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import Http404
from django.http.multipartparser import MultiPartParser as DjangoMultiPartParser
from django.http.multipartparser import MultiPartParserError
from django.utils.http import parse_header_parameters
from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import BaseParser, DataAndFiles
from rest_framework.request import Request

MAX_DEPTH = 32
# What PostgreSQL's bigint (every id column) holds; a larger id cannot name a row.
ID_MAX = 2**63 - 1


class InvalidJson(exceptions.ParseError):
    default_code = "invalid_json"


class InvalidMultipart(exceptions.ParseError):
    default_code = "invalid_multipart"


class MalformedRequest(exceptions.ParseError):
    """What Django calls a SuspiciousOperation, met inside an API view."""

    default_code = "bad_request"
    default_detail = "The request was refused as malformed."


class InvalidParameter(exceptions.APIException):
    status_code = 400
    default_code = "invalid_parameter"


class RequestTooLarge(exceptions.APIException):
    status_code = 413
    default_code = "request_too_large"
    default_detail = "The request body is too large."


def body_limit_bytes() -> int | None:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def too_large(what: str = "The request body") -> RequestTooLarge:
    limit = body_limit_bytes()
    return RequestTooLarge(f"{what} is larger than {limit} bytes, the limit.")


# --- JSON -------------------------------------------------------------------------------

# A whole string literal (skipped: brackets inside strings do not nest) or one bracket.
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Refused(Exception):
    """Raised from the decoder's hooks; the message names the problem."""


def _check_depth(text: str) -> None:
    depth = 0
    for match in _STRUCTURE.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > MAX_DEPTH:
                raise InvalidJson(
                    f"The JSON body nests arrays and objects deeper than {MAX_DEPTH} levels."
                )
        elif token in ("]", "}"):
            depth -= 1


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"the key {key[:50]!r} appears twice in one object")
            seen.add(key)
    return result


def _constant(name: str) -> None:
    raise _Refused(f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:50]} is out of range")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # Python's guard against quadratic conversion (4300 digits)
        raise _Refused(f"a number has {len(text)} digits") from None


def _check_strings(value: Any) -> None:
    """No lone surrogate (``"\\ud800"`` decodes to one) in any key or string. Depth is
    bounded by ``MAX_DEPTH`` already."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise InvalidJson(
                "The JSON body contains a lone surrogate escape (\\ud800-\\udfff), "
                "which is not a Unicode character."
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)


def json_loads_strict(raw: bytes) -> Any:
    """The value of a JSON body, or ``InvalidJson`` naming what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidJson(f"The JSON body is not valid UTF-8 (byte {exc.start}).") from None
    _check_depth(text)
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object,
            parse_constant=_constant,
            parse_float=_float,
            parse_int=_int,
        )
    except _Refused as exc:
        raise InvalidJson(f"The JSON body is refused: {exc}.") from None
    except json.JSONDecodeError as exc:
        raise InvalidJson(
            f"The body is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
        ) from None
    except RecursionError:  # pragma: no cover - _check_depth bounds the nesting first
        raise InvalidJson(f"The JSON body nests deeper than {MAX_DEPTH} levels.") from None
    _check_strings(value)
    return value


def read_bounded(stream: Any) -> bytes:
    """The whole body, refusing one over DATA_UPLOAD_MAX_MEMORY_SIZE (DRF hands parsers
    the raw stream, past Django's own check on ``request.body``)."""
    limit = body_limit_bytes()
    raw = stream.read() if limit is None else stream.read(limit + 1)
    if limit is not None and len(raw) > limit:
        raise too_large()
    return raw


def _declared_length(parser_context: dict | None) -> int:
    request = (parser_context or {}).get("request")
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0) if request is not None else 0
    except ValueError:
        return 0


class StrictJSONParser(BaseParser):
    """``application/json`` bodies, strictly (see the module docstring)."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = body_limit_bytes()
        if limit is not None and _declared_length(parser_context) > limit:
            raise too_large()
        return json_loads_strict(read_bounded(stream))


# --- multipart --------------------------------------------------------------------------


class _CloseDelimiterWatch:
    """Passes a multipart body through to Django's parser and notes whether its close
    delimiter (CRLF ``--boundary--``) went by. Django's parser accepts a body cut short
    (the last part ends where the bytes do); this lets such a body be refused."""

    def __init__(self, stream: Any, boundary: str) -> None:
        self._stream = stream
        self._delimiter = b"\r\n--" + boundary.encode("ascii", "replace") + b"--"
        self._tail = b"\r\n"  # a body may open with its close delimiter (no parts)
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        chunk = self._stream.read(size)
        if chunk and not self.closed:
            window = self._tail + chunk
            self.closed = self._delimiter in window
            self._tail = window[-(len(self._delimiter) - 1) :]
        return chunk


class BoundedMultiPartParser(BaseParser):
    """``multipart/form-data`` through Django's parser (as DRF's MultiPartParser does),
    its refusals answered in the envelope, and a body without its closing boundary
    refused (see the module docstring)."""

    media_type = "multipart/form-data"

    def parse(self, stream, media_type=None, parser_context=None) -> DataAndFiles:
        request = (parser_context or {})["request"]
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        meta = request.META.copy()
        meta["CONTENT_TYPE"] = media_type
        _, params = parse_header_parameters(media_type or "")
        watch = _CloseDelimiterWatch(stream, params.get("boundary") or "")
        try:
            parser = DjangoMultiPartParser(meta, watch, request.upload_handlers, encoding)
            data, files = parser.parse()
        except RequestDataTooBig:
            raise too_large("The form fields of the multipart body are") from None
        except TooManyFieldsSent:
            raise RequestTooLarge(
                f"The multipart body has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} "
                "fields, the limit."
            ) from None
        except TooManyFilesSent:
            raise RequestTooLarge(
                f"The multipart body has more than {settings.DATA_UPLOAD_MAX_NUMBER_FILES} "
                "files, the limit."
            ) from None
        except (MultiPartParserError, UnicodeError, LookupError) as exc:
            # UnicodeError / LookupError: a charset parameter Python cannot decode with
            raise InvalidMultipart(f"The multipart body is malformed: {exc}") from None
        if not watch.closed:
            raise InvalidMultipart(
                "The multipart body ends before its closing boundary (--<boundary>--): "
                "it is cut short or malformed."
            )
        return DataAndFiles(data, files)


# --- query parameters -------------------------------------------------------------------


def query_int(request: Request, name: str, *, default: int, minimum: int, maximum: int) -> int:
    """The integer query parameter ``name`` (the last one given), ``default`` when
    absent. Anything but ASCII digits in ``[minimum, maximum]`` is a 400 naming the
    bounds (an unbounded number would reach the database as an out-of-range OFFSET)."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    digits = len(str(maximum))
    if re.fullmatch(rf"[0-9]{{1,{digits}}}", raw):
        value = int(raw)
        if minimum <= value <= maximum:
            return value
    shown = raw if len(raw) <= 20 else raw[:20] + "…"
    raise InvalidParameter(f"{name} must be an integer from {minimum} to {maximum}; got {shown!r}.")


class StrictLimitOffsetPagination(LimitOffsetPagination):
    """``?limit=&offset=`` validated, never silently replaced by the default."""

    max_limit = 100
    max_offset = 1_000_000

    def get_limit(self, request: Request) -> int:
        return query_int(
            request, self.limit_query_param, default=self.default_limit,
            minimum=1, maximum=self.max_limit,
        )  # fmt: skip

    def get_offset(self, request: Request) -> int:
        return query_int(
            request, self.offset_query_param, default=0, minimum=0, maximum=self.max_offset
        )

    def get_schema_operation_parameters(self, view) -> list[dict[str, Any]]:
        bounds = {
            self.limit_query_param: (1, self.max_limit, self.default_limit),
            self.offset_query_param: (0, self.max_offset, 0),
        }
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            minimum, maximum, default = bounds[parameter["name"]]
            parameter["schema"] = {
                "type": "integer",
                "minimum": minimum,
                "maximum": maximum,
                "default": default,
            }
        return parameters


# --- responses --------------------------------------------------------------------------


class FallbackNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, except that an ``Accept`` or ``?format=`` no renderer offers
    gets the view's first renderer (JSON for every API view) instead of a 406 or 404."""

    def select_renderer(self, request, renderers, format_suffix=None):
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except (exceptions.NotAcceptable, Http404):
            return renderers[0], renderers[0].media_type
