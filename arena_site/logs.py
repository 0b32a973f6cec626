"""Log lines of every process (web, workers, management commands): one line per record,
through structlog's stdlib integration, so every ``logging.getLogger(__name__)`` call
(the arena's, Django's, rq's) comes out the same way.

``ARENA_LOG_FORMAT=json`` (the default): one JSON object per line, keys in this order —
``timestamp`` (ISO 8601, UTC), ``level``, ``logger``, ``event`` (the message), then the
context that applies: ``request_id``, ``user_id``, ``battle_id``, ``evaluation_id``,
``host_id``, and ``exception`` (the whole traceback, as one string) when there is one.
``plain``: the same fields as text, a traceback on the lines after (``make run``).

The context comes from structlog's contextvars: :class:`RequestIdMiddleware` binds the
request id (and :func:`add_user_id` reads the request's user once something resolved it),
jobs bind the battle or evaluation they work on (``bound_contextvars``). Provider keys
never reach a line: the handler's filter redacts the record, and :func:`redact_values`
redacts every value of the event once more after the traceback is formatted (the
formatter formats the traceback itself, from the exception, not from the record's text).
"""

import logging
import re
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import structlog
from django.http import HttpRequest, HttpResponse
from django.utils.functional import LazyObject, empty
from django.utils.log import log_response
from structlog.typing import EventDict, Processor, WrappedLogger

from agents.providers.redaction import RedactingFilter as _RecordRedactingFilter
from agents.providers.redaction import redact
from arena_site.hosts import host_id

REQUEST_ID_HEADER = "X-Request-ID"
# A request id a client or proxy sent is kept when it is a plain token (a UUID, hex, a
# proxy's id); anything else (too long, spaces, quotes, control characters) is replaced.
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{8,64}")
# The order of the JSON keys: these first, the rest of the context after.
_LEADING = ("timestamp", "level", "logger", "event")
_CONTEXT = ("request_id", "user_id", "battle_id", "evaluation_id", "host_id")

_request: ContextVar[HttpRequest | None] = ContextVar("arena_log_request", default=None)


def request_id_from(header: str | None) -> str:
    """The request's id: the client's ``X-Request-ID`` when it is a plain token, else a
    new one."""
    if header is not None and REQUEST_ID.fullmatch(header):
        return header
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Binds ``request_id`` to every line logged while the request is handled, and
    echoes it in the response's ``X-Request-ID``. Right after the ops endpoints: the
    probes and the scrape are not logged, and a shed request carries its id too."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        request.request_id = request_id  # type: ignore[attr-defined]
        token = _request.set(request)
        try:
            with structlog.contextvars.bound_contextvars(request_id=request_id):
                response = self.get_response(request)
                if response.status_code >= 400:
                    # Django's own "Not Found: /path" line, logged here (it marks the
                    # response logged) rather than by the handler, outside this context.
                    log_response(
                        "%s: %s",
                        response.reason_phrase,
                        request.path,
                        response=response,
                        request=request,
                    )
        finally:
            _request.reset(token)
        response[REQUEST_ID_HEADER] = request_id
        return response


def add_user_id(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """The signed-in user of the request being handled, once something resolved it (the
    session's lazy user, or DRF's token authentication). A log line never resolves it
    itself: that would query the database, from whatever thread or event loop logs."""
    request = _request.get()
    if request is None or "user_id" in event_dict:
        return event_dict
    user = request.__dict__.get("user")
    if isinstance(user, LazyObject):
        user = user.__dict__.get("_wrapped", empty)
        user = None if user is empty else user
    if user is not None and getattr(user, "is_authenticated", False):
        event_dict["user_id"] = user.pk
    return event_dict


def add_host_id(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    event_dict.setdefault("host_id", host_id())
    return event_dict


def add_timestamp(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """When the record was made (not when it was formatted), ISO 8601 in UTC."""
    record = event_dict.get("_record")
    created = record.created if record is not None else datetime.now(UTC).timestamp()
    moment = datetime.fromtimestamp(created, UTC)
    event_dict["timestamp"] = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return event_dict


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {str(key): _redacted(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_redacted(item) for item in value]
    return redact(repr(value))  # what the renderer would print, redacted first


def redact_values(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """Every value of the event through :func:`redact`, the traceback among them."""
    return {key: _redacted(value) for key, value in event_dict.items()}


def in_order(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    ordered = {key: event_dict.pop(key) for key in (*_LEADING, *_CONTEXT) if key in event_dict}
    exception = event_dict.pop("exception", None)
    ordered.update(event_dict)
    if exception is not None:
        ordered["exception"] = exception
    return ordered


def render_plain(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> str:
    """``<timestamp> <LEVEL> <logger>: <event> key=value …``, the traceback below."""
    fields = dict(event_dict)
    line = (
        f"{fields.pop('timestamp', '')} {str(fields.pop('level', '')).upper()} "
        f"{fields.pop('logger', '')}: {fields.pop('event', '')}"
    )
    fields.pop("host_id", None)  # one machine's terminal: the same on every line
    exception = fields.pop("exception", None)
    if fields:
        line += " " + " ".join(f"{key}={value}" for key, value in fields.items())
    return f"{line}\n{exception}" if exception else line


# Run for every record (a stdlib one in the formatter, a structlog one when logged).
_CONTEXT_PROCESSORS: list[Processor] = [
    structlog.contextvars.merge_contextvars,
    add_user_id,
    add_host_id,
]


def formatter(log_format: str = "json") -> structlog.stdlib.ProcessorFormatter:
    """The console handler's formatter (``LOGGING["formatters"]``); also routes
    ``structlog.get_logger()`` through the standard library, so both kinds of logger
    reach the same handlers and come out the same way."""
    if log_format not in ("json", "plain"):
        raise ValueError(f"log_format must be json or plain, got {log_format!r}")
    structlog.configure(
        processors=[
            *_CONTEXT_PROCESSORS,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    # ASCII JSON: no raw U+2028 or U+0085, which some readers take for a line break.
    renderer: Processor = (
        structlog.processors.JSONRenderer() if log_format == "json" else render_plain
    )
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            *_CONTEXT_PROCESSORS,
            structlog.stdlib.ExtraAdder(allow=["status_code"]),
        ],
        processors=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            add_timestamp,
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            redact_values,
            in_order,
            renderer,
        ],
    )


class RedactingFilter(_RecordRedactingFilter):
    """The provider-key filter of agents/providers/redaction.py for this formatter: a
    record from ``structlog.get_logger()`` carries its event as a dict, which the
    formatter's :func:`redact_values` redacts (flattening it to text here would lose it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, dict):
            return True
        return super().filter(record)
