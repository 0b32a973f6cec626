"""The arena's model gateway: CLI coding agents in a sandbox reach their model through
it and never hold a provider key.

A sandbox's only way out is the worker's egress proxy (:mod:`sandboxes.egress`), and
this gateway is one of the proxy's simulated hosts: ``http://models.arena.internal/``
(plain HTTP, never resolved) is dialled to this server on the worker's loopback. The
proxy stamps every such request with the run of the socket it came in on
(``X-Arena-Run``, an HMAC under a key only the worker process holds), so the gateway
knows which run calls and a sandbox cannot pass for another.

For each run the worker ``grant``s one provider and model with a key, an upstream base
URL and a budget; ``revoke`` ends it. A request then:

1. must carry a valid stamp (403 otherwise: it did not come through the proxy) and
   belong to a run with a grant (403);
2. loses every credential the client sent (``authorization``, ``x-api-key``,
   ``api-key``, cookies: only an allow-list of headers is forwarded) and gets the
   grant's key; the key never appears in an answer (it is redacted from relayed bodies);
3. must name the granted model (400 naming it): an entrant's CLI must not choose a
   pricier model than the one it is rated as, since the board rates the pair of CLI
   and model, and a budget is set for that model's prices;
4. is bounded (a body over ``MAX_BODY_BYTES``: 413) and budgeted: calls, tokens and
   cost so far, checked before anything is forwarded (429, which the SDKs are told not
   to retry; at most ``MAX_IN_FLIGHT`` calls of a run at once);
5. is forwarded to the grant's upstream only, through the address policy at every
   dial (:mod:`agents.providers.transport`), with timeouts; a stream is relayed event
   by event as it arrives, a JSON reply as it is;
6. is recorded: usage is read from what passed (:mod:`agents.gateway_usage`) and
   ``on_span(run_id, GatewayCall)`` is called once the reply is over.

Routes (OpenAI- and Anthropic-compatible): ``POST /anthropic/v1/messages``,
``POST /openai/v1/chat/completions``, ``POST /openai/v1/responses``, the same without
the provider prefix when the run's grant is that provider's, and ``GET .../models``
(and ``.../models/<id>``), which list only the granted model.

The gateway imports no Django models: the worker turns ``GatewayCall`` into span rows.
"""

import ipaddress
import logging
import os
import secrets
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

import httpx2

from agents.gateway_http import GatewayServer
from agents.gateway_usage import PROVIDERS, CallUsage, GatewayCall, Grant, RunUsage
from agents.providers.base import ProviderError
from agents.providers.common import shared_tls_context
from agents.providers.registry import DEFAULT_KEY_ENV, base_url_for, price_for
from agents.providers.transport import checked_http_client
from sandboxes.netpolicy import OutboundPolicy, SimulatedHost

logger = logging.getLogger(__name__)

HOST = "models.arena.internal"
# The provider's own API when the operator sets no <PROVIDER>_BASE_URL (the SDKs' defaults).
DEFAULT_BASE_URLS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
}

MAX_BODY_BYTES = 8 * 1024 * 1024  # one request body (long conversations, screenshots)
MAX_IN_FLIGHT = 4  # calls of one run at once (a budget can be overrun by that many)
UPSTREAM_TIMEOUT_S = 120.0  # connect, and each wait for the upstream's next bytes
CALL_DEADLINE_S = 600.0  # one call from start to end of the reply, however it trickles


SpanCallback = Callable[[int, GatewayCall], None]


def grant_for(
    provider: str,
    model: str,
    *,
    max_calls: int,
    max_tokens: int,
    max_cost_usd: float,
    prices: Mapping[str, Any],
    outbound: OutboundPolicy,
    environ: Mapping[str, str] | None = None,
) -> Grant:
    """The grant for the arena's own key of ``provider`` (``ANTHROPIC_API_KEY`` /
    ``OPENAI_API_KEY``) at its base URL (``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL``,
    checked against ``outbound`` as ``client_for`` checks it; the provider's API when
    unset), priced from ``prices`` (``MODEL_PRICES``). Raises ``ProviderError`` naming
    the variable to set, or the address class refused; never the key."""
    environ = os.environ if environ is None else environ
    if provider not in PROVIDERS:
        raise ProviderError(f"the model gateway serves {' and '.join(PROVIDERS)}, not {provider!r}")
    variable = DEFAULT_KEY_ENV[provider]
    api_key = environ.get(variable)
    if not api_key:
        raise ProviderError(f"{provider}: no API key; set {variable} in the environment")
    base_url = base_url_for(provider, {}, environ, outbound) or DEFAULT_BASE_URLS[provider]
    return Grant(
        provider=provider,
        model=model,
        upstream_base_url=base_url,
        api_key=api_key,
        max_calls=max_calls,
        max_tokens=max_tokens,
        max_cost_usd=max_cost_usd,
        price=price_for(model, prices),
    )


class ModelGateway:
    """The gateway's HTTP server on ``host`` (loopback) at an ephemeral port, serving
    from a daemon thread (and a thread per connection). Thread-safe once started.

    ``stamp_key`` must be the egress proxy's: pass ``EgressProxy.stamp_key`` here, or
    this gateway's ``stamp_key`` (random by default) to ``EgressProxy(stamp_key=...)``.
    ``on_span`` is called on the request's thread after each forwarded call; it must be
    quick and not raise (an exception is logged, the call stands). ``outbound`` is the
    address policy of runs granted without their own; ``verify`` the TLS verification
    of upstream connections. The bounds are the module's constants.
    """

    def __init__(
        self,
        *,
        on_span: SpanCallback,
        stamp_key: bytes | None = None,
        outbound: OutboundPolicy | None = None,
        host: str = "127.0.0.1",
        upstream_timeout_s: float = UPSTREAM_TIMEOUT_S,
        call_deadline_s: float = CALL_DEADLINE_S,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_in_flight: int = MAX_IN_FLIGHT,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        if host not in ("127.0.0.1", "::1"):
            raise ValueError(f"the model gateway binds loopback only, not {host!r}")
        if stamp_key is not None and len(stamp_key) < 16:
            raise ValueError("stamp_key must be at least 16 bytes")
        self.on_span = on_span
        self.stamp_key = stamp_key or secrets.token_bytes(32)
        self.outbound = outbound
        self.host = host
        self.upstream_timeout_s = upstream_timeout_s
        self.call_deadline_s = call_deadline_s
        self.max_body_bytes = max_body_bytes
        self.max_in_flight = max_in_flight
        self.verify = verify
        self._runs: dict[int, RunState] = {}
        self._lock = threading.Lock()
        self._server: GatewayServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("already started")
        self._server = GatewayServer((self.host, 0), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="model-gateway",
            daemon=True,
        )
        self._thread.start()
        logger.info("model gateway serving %s at %s:%s", HOST, self.host, self.port)
        return self

    def close(self) -> None:
        """Stop serving and revoke every grant. Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        for run_id in list(self._runs):
            self.revoke(run_id)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("not started")
        return int(self._server.server_address[1])

    def simulated_host(self) -> SimulatedHost:
        """``models.arena.internal`` on port 80, dialled to this server: add it to the
        egress proxy's simulated hosts."""
        return SimulatedHost(
            name=HOST, address=ipaddress.ip_address(self.host), upstream_port=self.port
        )

    # --- grants ---------------------------------------------------------------------

    def grant(self, run_id: int, grant: Grant, *, outbound: OutboundPolicy | None = None) -> None:
        """Let ``run_id`` call ``grant``'s model, replacing any grant it had (and its
        usage). ``outbound``: the address policy of its upstream connections (one per
        lane, as the provider clients have one), else the gateway's, else public only."""
        policy = outbound or self.outbound or OutboundPolicy()
        verify = shared_tls_context() if self.verify is True else self.verify
        client = checked_http_client(httpx2.Client, policy, verify=verify)
        with self._lock:
            previous = self._runs.get(run_id)
            self._runs[run_id] = RunState(grant, client)
        if previous is not None:
            self._retire(previous)

    def revoke(self, run_id: int) -> RunUsage | None:
        """End ``run_id``'s grant and return what it spent (None without a grant).
        Calls in flight run to their end (the lane's sandbox is usually gone by then,
        which ends them) and are still reported."""
        with self._lock:
            state = self._runs.pop(run_id, None)
        if state is None:
            return None
        self._retire(state)
        with self._lock:
            return state.usage.copy()

    def usage(self, run_id: int) -> RunUsage | None:
        """What ``run_id`` has spent so far (a copy), None without a grant."""
        with self._lock:
            state = self._runs.get(run_id)
            return None if state is None else state.usage.copy()

    def _retire(self, state: "RunState") -> None:
        with self._lock:
            state.revoked = True
            idle = state.usage.in_flight == 0
        if idle:
            state.client.close()

    # --- for the request handler (agents.gateway_http) ------------------------------

    def state_for(self, run_id: int) -> "RunState | None":
        with self._lock:
            return self._runs.get(run_id)

    def refused(self, state: "RunState", reason: str) -> None:
        with self._lock:
            state.usage.refused[reason] += 1

    def admit(self, state: "RunState") -> tuple[str, bool] | None:
        """Take one call of ``state``'s budget, or say why not: the message of the 429
        and whether a retry may succeed (calls in flight) or not (the budget)."""
        with self._lock:
            problem = state.usage.over_budget(state.grant)
            if problem is not None:
                state.usage.refused["budget"] += 1
                return problem, False
            if state.usage.in_flight >= self.max_in_flight:
                state.usage.refused["in_flight"] += 1
                message = (
                    f"{self.max_in_flight} model calls of this run are already in progress; "
                    "retry when one has finished"
                )
                return message, True
            state.usage.calls += 1
            state.usage.in_flight += 1
        return None

    def finish(self, run_id: int, state: "RunState", call: GatewayCall, usage: CallUsage) -> None:
        """Account a call :meth:`admit` let through, then report it to ``on_span``."""
        with self._lock:
            state.usage.add(usage, call.cost_usd)
            state.usage.in_flight -= 1
            close = state.revoked and state.usage.in_flight == 0
        if close:
            state.client.close()
        try:
            self.on_span(run_id, call)
        except Exception:
            logger.exception("model gateway: on_span failed for run %s", run_id)


@dataclass
class RunState:
    """A run's grant, its upstream client and its usage. ``usage`` and ``revoked`` are
    guarded by the gateway's lock."""

    grant: Grant
    client: httpx2.Client
    usage: RunUsage = field(default_factory=RunUsage)
    revoked: bool = False
