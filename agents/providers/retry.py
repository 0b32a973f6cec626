"""The one retry policy every provider client uses.

The SDKs can retry on their own, but each in its own way (different status sets,
different caps, no retry on a reply that fails to parse). The clients build their SDK
clients with ``max_retries=0`` and retry here instead, so every provider retries the
same statuses with the same backoff, and tests drive the waits through an injected
``sleep``.

Retried: 429, every 5xx, connection errors and timeouts, malformed replies. Never
retried: any other 4xx (a bad request or a bad key does not get better by asking
again).
"""

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from agents.providers.base import ProviderError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter.

    The n-th retry (n ≥ 1) waits ``min(cap_s, base_s * factor**(n-1))``, shortened by a
    random fraction of up to ``jitter`` so that clients that failed together do not
    retry together. A server's ``retry-after`` is a floor on the wait (clamped to
    ``retry_after_cap_s``: an hour-long hint must not stall a battle for an hour)."""

    base_s: float = 1.0
    factor: float = 2.0
    cap_s: float = 30.0
    jitter: float = 0.25
    retry_after_cap_s: float = 60.0

    def delay(self, retry_number: int, *, retry_after_s: float | None, rng: random.Random) -> float:
        """Seconds to wait before retry ``retry_number`` (1 for the first retry)."""
        exponential = min(self.cap_s, self.base_s * self.factor ** (retry_number - 1))
        wait = exponential * (1.0 - self.jitter * rng.random())
        if retry_after_s is not None:
            wait = max(wait, min(retry_after_s, self.retry_after_cap_s))
        return wait


class RetryableFailure(Exception):
    """One attempt failed in a way that may pass: raised by an attempt function for
    :func:`call_with_retries`. ``message`` must already be free of secrets."""

    def __init__(
        self, message: str, *, status: int | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after_s = retry_after_s


def is_retryable_status(status: int) -> bool:
    return status == 429 or status >= 500


def retry_after_seconds(
    headers: Mapping[str, str], *, now: Callable[[], datetime] | None = None
) -> float | None:
    """The server's requested wait, from ``retry-after-ms`` (Anthropic and OpenAI send
    it), else ``retry-after`` in seconds or as an HTTP date; None when absent or
    unreadable. ``headers`` lookups must be case-insensitive (httpx headers are)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    current = now() if now else datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())


def call_with_retries[T](
    attempt: Callable[[], T],
    *,
    what: str,
    max_retries: int,
    backoff: Backoff,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> tuple[T, int]:
    """Run ``attempt`` until it returns, at most ``max_retries + 1`` times; return its
    value and the number of attempts taken.

    ``attempt`` signals a transient failure by raising :class:`RetryableFailure` and a
    final one by raising :class:`ProviderError` (passed through with ``attempts`` set).
    When the retries run out, the last failure becomes a ``ProviderError`` carrying its
    status. ``what`` names the call in messages and logs (no secrets in it)."""
    rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
    attempts = 0
    while True:
        attempts += 1
        try:
            return attempt(), attempts
        except ProviderError as error:
            error.attempts = attempts
            raise
        except RetryableFailure as failure:
            if attempts > max_retries:
                raise ProviderError(
                    f"{what}: {failure.message} (gave up after {attempts} attempts)",
                    status=failure.status,
                    attempts=attempts,
                ) from None
            wait = backoff.delay(attempts, retry_after_s=failure.retry_after_s, rng=rng)
            log.warning(
                "%s: %s; retry %d of %d in %.2f s",
                what,
                failure.message,
                attempts,
                max_retries,
                wait,
            )
            sleep(wait)
