"""Keep provider keys out of logs, exceptions and anything recorded.

Two layers, because neither alone is enough:

- exact values: every client registers the key it was built with
  (:func:`register_secret`), so a key of any shape is caught, even one that matches no
  pattern (a vLLM token, say);
- shapes: ``sk-…``, ``sk-ant-…``, ``Bearer …`` and ``x-api-key: …`` are redacted even
  when nobody registered them (a key pasted into a task, an error body echoing a key).

:func:`redact` does both on a string. :class:`RedactingFilter` does it on log records;
attach it to *handlers* (:func:`install_log_redaction`, or ``LOGGING["filters"]``),
not to loggers: a logger's filters never see records that propagate from its children
(``anthropic._base_client`` → ``anthropic``), a handler's filters see them all.
"""

import logging
import re
import threading
from collections.abc import Iterable

REDACTED = "[REDACTED]"

# Shorter values would redact ordinary words ("test", "none") all over the logs; no
# real key is this short.
_MIN_SECRET_LEN = 8

_SHAPES = re.compile(
    r"""
    \bsk-[A-Za-z0-9_\-]{6,}                              # sk-…, sk-ant-…, sk-proj-…
    | (?<=Bearer\ )[A-Za-z0-9_\-\.=:+/~]{6,}             # Authorization: Bearer …
    | (?<=\bx-api-key[\"']:\ [\"'])[^\"']{6,}            # repr of a header dict
    | (?<=\bx-api-key:\ )\S{6,}                          # a raw header line
    | (?<=\bapi-key[\"']:\ [\"'])[^\"']{6,}
    | (?<=\bapi-key:\ )\S{6,}
    """,
    re.VERBOSE | re.IGNORECASE,
)

_registry_lock = threading.Lock()
_registered: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember ``value`` so every :class:`RedactingFilter` redacts it from now on.

    Values shorter than 8 characters are ignored (they would redact ordinary words);
    ``None`` and ``""`` are ignored. Thread-safe; registration is process-wide and
    permanent, which is what a key loaded from the environment is."""
    if value and len(value) >= _MIN_SECRET_LEN:
        with _registry_lock:
            _registered.add(value)


def registered_secrets() -> frozenset[str]:
    with _registry_lock:
        return frozenset(_registered)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every value of ``secrets`` (and of the registry) and every
    key-shaped substring replaced by ``[REDACTED]``.

    Longer secrets are replaced first, so a key that contains another is not left
    half-visible."""
    values = {s for s in secrets if s and len(s) >= _MIN_SECRET_LEN} | registered_secrets()
    for value in sorted(values, key=len, reverse=True):
        if value in text:
            text = text.replace(value, REDACTED)
    return _SHAPES.sub(REDACTED, text)


class RedactingFilter(logging.Filter):
    """Rewrites each record's message (and its formatted traceback) with :func:`redact`;
    never drops a record.

    Attach to handlers. In ``LOGGING``: ``"filters": {"redact": {"()":
    "agents.providers.redaction.RedactingFilter"}}`` and ``"filters": ["redact"]`` on
    each handler."""

    def __init__(self, secrets: Iterable[str] = (), name: str = "") -> None:
        super().__init__(name)
        self._secrets = tuple(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        # Format once with the record's own args, then freeze the redacted result:
        # a key can hide in an argument as well as in the format string.
        message = record.getMessage()
        record.msg = redact(message, self._secrets)
        record.args = None
        if record.exc_info and not record.exc_text:
            # Formatters reuse exc_text when it is set, so the traceback every handler
            # prints is this redacted one.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self._secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self._secrets)
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> RedactingFilter:
    """Attach one :class:`RedactingFilter` to every handler of ``logger`` (the root
    logger by default) that does not have one yet. Handlers added later are not
    covered: call again, or configure the filter in ``LOGGING``."""
    target = logger or logging.getLogger()
    redacting = RedactingFilter()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(redacting)
    return redacting
