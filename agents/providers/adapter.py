"""The one adapter base every provider client is built on: what a model call does the
same way whatever the provider, so that each client keeps only what its wire format
needs.

:meth:`ProviderAdapter.complete` is the whole call:

1. ``_request(call)`` (the client's): the wire request for the neutral conversation;
2. ``_send(request, call)`` (the client's): one attempt, the reply read into a
   :class:`~agents.providers.common.ParsedReply`, and its request id. It is retried per
   :mod:`agents.providers.retry`, the only retry layer; the exceptions the client names
   in ``answer_errors`` (its SDK's and the address policy's) become a retry decision
   through ``_failure``, with the key redacted;
3. the :class:`~agents.providers.base.ModelReply`: usage as the reply reported it,
   priced by :func:`agents.gateway_usage.call_cost` (cached prompt tokens at the
   provider family's cache price, ``cache_pricing``), attempts, latency.

:class:`SdkAdapter` is the base of the clients on a Stainless-generated SDK (``anthropic``
and ``openai``): it builds the SDK client on a checked HTTP client of the shared TLS
context, with the SDK's own retries off, and maps the SDK's exceptions.
"""

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from agents.gateway_usage import call_cost
from agents.providers.base import ModelReply, ProviderError, ToolSpec, Turn
from agents.providers.common import (
    ParsedReply,
    Price,
    SdkErrors,
    failure_from_sdk_error,
    read_json_object,
    shared_tls_context,
)
from agents.providers.redaction import register_secret
from agents.providers.retry import Backoff, call_with_retries
from agents.providers.transport import OutboundRefused, checked_http_client
from sandboxes.netpolicy import OutboundPolicy


@dataclass(frozen=True)
class ModelCall:
    """The arguments of one :meth:`ProviderAdapter.complete`."""

    system: str
    turns: list[Turn]
    tools: list[ToolSpec]
    max_tokens: int
    params: dict[str, Any]  # the scaffold's per-call keys, as given

    def sampling(self, known: frozenset[str]) -> dict[str, Any]:
        """The params a client passes on: the sampling keys it knows."""
        return {k: v for k, v in self.params.items() if k in known}


class ProviderAdapter:
    """A :class:`~agents.providers.base.ModelClient` from the two wire-format methods
    ``_request`` and ``_send`` (see the module docstring). After :meth:`close` every
    call raises ``ProviderError``.

    Construction is the same for every client: its key registered for redaction (and
    kept only for that: never put into messages, logs or repr), its timeouts and retry
    schedule, its price, and the address policy every connection of its SDK is checked
    against (the strict one, with the host's DNS, unless the caller brings the
    arena's). A subclass builds its SDK client after this, from ``self.outbound``."""

    provider = ""
    # The row of ``agents.gateway_usage.CACHE_PRICE_FACTORS`` that prices cached tokens.
    cache_pricing: ClassVar[str] = "openai"
    # The exceptions of one attempt that are an answer (the provider's, its SDK's or the
    # address policy's), turned by ``_failure`` into a retry decision.
    answer_errors: tuple[type[Exception], ...] = ()
    _closed = False

    def __init__(
        self,
        model: str,
        api_key: str,
        base_url: str | None = None,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff: Backoff | None = None,
        price: Price | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        outbound: OutboundPolicy | None = None,
    ) -> None:
        if not api_key:
            raise ProviderError(f"{self.provider}: no API key given")
        self._secrets = self._secrets_of(api_key)
        for secret in self._secrets:
            register_secret(secret)
        self.model = model
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff = backoff or Backoff()
        self.price = price
        self._sleep = sleep
        self._rng = rng
        self.outbound = OutboundPolicy() if outbound is None else outbound

    def _secrets_of(self, api_key: str) -> tuple[str, ...]:
        """What to redact from error texts: the key (a subclass may know a placeholder
        that is none)."""
        return (api_key,)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    def _request(self, call: ModelCall) -> Any:
        """The wire request for ``call``."""
        raise NotImplementedError

    def _send(self, request: Any, call: ModelCall) -> tuple[ParsedReply, str]:
        """One attempt: the parsed reply and the request id. Raises ``RetryableFailure``
        for a reply that cannot be used."""
        raise NotImplementedError

    def _failure(self, error: Exception) -> Exception:
        """The retry decision (``RetryableFailure`` or ``ProviderError``) for one of
        ``answer_errors``."""
        raise NotImplementedError

    def _release(self) -> None:
        """Release the connection pool."""

    def close(self) -> None:
        """Release the client's connection pool (not part of ``ModelClient``; garbage
        collection does it too, later). Closing twice is harmless."""
        self._closed = True
        self._release()

    def _retried[T](self, attempt: Callable[[], T], *, what: str = "") -> tuple[T, int]:
        """``attempt``'s value and the attempts it took, retried per
        :mod:`agents.providers.retry`. ``what`` names the call in messages (default:
        provider and model)."""
        if self._closed:
            raise ProviderError(f"{self.provider} {self.model}: the client is closed")

        def checked() -> T:
            try:
                return attempt()
            except self.answer_errors as error:
                raise self._failure(error) from None

        return call_with_retries(
            checked,
            what=what or f"{self.provider} {self.model}",
            max_retries=self.max_retries,
            backoff=self.backoff,
            sleep=self._sleep,
            rng=self._rng,
        )

    def complete(
        self,
        *,
        system: str,
        turns: list[Turn],
        tools: list[ToolSpec],
        max_tokens: int,
        params: dict[str, Any] | None = None,
    ) -> ModelReply:
        """One model call, retried per :mod:`agents.providers.retry`. Raises
        ``ProviderError`` when it cannot get an answer (a client's preconditions on
        ``turns`` are in its ``_request``)."""
        call = ModelCall(system, turns, tools, max_tokens, params or {})
        request = self._request(call)
        started = time.monotonic()
        (parsed, request_id), attempts = self._retried(lambda: self._send(request, call))
        usage = parsed.usage
        cost = call_cost(self.cache_pricing, usage, self.price)
        return ModelReply(
            text=parsed.text,
            tool_uses=parsed.tool_uses,
            usage=usage,
            cost_usd=cost or 0.0,
            stop_reason=parsed.stop_reason,
            model=parsed.model or self.model,
            attempts=attempts,
            request_id=request_id,
            extra={
                "price_known": self.price is not None,
                "response_id": parsed.response_id,
                # Counts the retries and their waits.
                "latency_ms": round((time.monotonic() - started) * 1000),
                **parsed.extra,
            },
        )


@dataclass(frozen=True)
class Sdk:
    """What :class:`SdkAdapter` needs of one Stainless-generated SDK: its client class,
    its default HTTP client class mixed with ``CloseOnCollect``, its exception classes
    and the response header carrying the request id."""

    client_class: type
    http_client_class: type
    errors: SdkErrors
    request_id_header: str


class SdkAdapter(ProviderAdapter):
    """A client on a Stainless-generated SDK, which a subclass names (``sdk``). The key
    lives only inside the SDK client; ``outbound`` checks every connection it makes."""

    sdk: ClassVar[Sdk]

    def __init__(self, model: str, api_key: str, base_url: str | None = None, **options) -> None:
        super().__init__(model, api_key, base_url, **options)
        errors = self.sdk.errors
        self.answer_errors = (errors.status, errors.connection, OutboundRefused)
        self._sdk = self.sdk.client_class(
            api_key=api_key,
            base_url=base_url,
            timeout=self.timeout_s,
            max_retries=0,
            http_client=checked_http_client(
                self.sdk.http_client_class, self.outbound, verify=shared_tls_context()
            ),
        )

    def _failure(self, error: Exception) -> Exception:
        return failure_from_sdk_error(error, errors=self.sdk.errors, secrets=self._secrets)

    def _release(self) -> None:
        self._sdk.close()

    def _read(self, raw: Any) -> tuple[dict[str, Any], str]:
        """The body (a JSON object, else ``RetryableFailure``) and request id of the
        SDK's raw response."""
        http_response = raw.http_response
        body = read_json_object(http_response.content, secrets=self._secrets)
        return body, http_response.headers.get(self.sdk.request_id_header, "")
