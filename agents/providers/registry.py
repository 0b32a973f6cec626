"""Provider name → model client, with keys from the environment and prices from
settings.

Keys are never stored in the database: an agent names at most the *variable* that
holds its key (``params["api_key_env"]``), and the variable is read when the client is
built. Agent params are not trusted with keys they did not bring, so:

- ``api_key_env`` must end in ``_API_KEY`` and not start ``ARENA_``: params cannot
  reach the arena's other secrets (``ARENA_SECRET_KEY``, ``DATABASE_URL``);
- an agent that sets its own ``base_url`` must also name its own key variable, and not
  one of the arena's provider key variables (``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``,
  ``GEMINI_API_KEY``, ``OPENROUTER_API_KEY``): those keys go only to the provider or to
  the operator's ``<PROVIDER>_BASE_URL``, never to a URL an agent chose;
- ``openai_compatible`` sends a key only when the agent names one.

The arena's side comes in as ``ProviderDefaults`` (built from ``settings.ARENA``):

- ``prices``: ``{model_id: [usd_per_mtok_in, usd_per_mtok_out]}``; a model not in it
  costs 0 and its replies carry ``extra["price_known"] = False``;
- ``timeout_s`` and ``max_retries``: defaults an agent's ``params["timeout_s"]`` /
  ``params["max_retries"]`` override;
- ``outbound``: the address policy (``sandboxes.netpolicy.OutboundPolicy``) a base URL
  must pass here, and every connection of the client at dial time
  (``agents.providers.transport``): no internal address unless the operator's
  ``ARENA_INTERNAL_ALLOWLIST`` lists it, whether the URL came from the agent's params or
  from ``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL``.

Agent params read: ``base_url``, ``api_key_env``, ``timeout_s``, ``max_retries``.
"""

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from agents.providers.anthropic_client import AnthropicClient
from agents.providers.anthropic_computer import AnthropicComputerUseClient
from agents.providers.base import ModelClient, ProviderError
from agents.providers.common import Price
from agents.providers.openai_client import OpenAIClient, OpenAICompatibleClient, OpenRouterClient
from agents.providers.openai_computer import OpenAIComputerUseClient
from agents.providers.transport import describe_refusal, url_host
from sandboxes.netpolicy import EgressRefused, OutboundPolicy

# The native computer-use adapters (agents.providers.anthropic_computer,
# agents.providers.openai_computer) use their vendor's key and base URL variables.
COMPUTER_USE_PROVIDERS = ("anthropic-computer-use", "openai-computer-use")
PROVIDERS = (
    "anthropic",
    "openai",
    "openai_compatible",
    "gemini",
    "openrouter",
    *COMPUTER_USE_PROVIDERS,
)

DEFAULT_KEY_ENV = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "anthropic-computer-use": "ANTHROPIC_API_KEY",
    "openai-computer-use": "OPENAI_API_KEY",
}
BASE_URL_ENV = {
    "anthropic": "ANTHROPIC_BASE_URL",
    "openai": "OPENAI_BASE_URL",
    "gemini": "GEMINI_BASE_URL",
    "openrouter": "OPENROUTER_BASE_URL",
    "anthropic-computer-use": "ANTHROPIC_BASE_URL",
    "openai-computer-use": "OPENAI_BASE_URL",
}

_KEY_ENV_NAME = re.compile(r"(?!ARENA_)[A-Z][A-Z0-9_]*_API_KEY")


@dataclass(frozen=True)
class ProviderDefaults:
    """What the arena sets for every model call (ARENA provider_* and model_prices)."""

    timeout_s: float = 60.0
    max_retries: int = 4
    prices: Mapping[str, Any] = field(default_factory=dict)
    # One per lane (its lookups are bounded per instance); default: public only, DNS.
    outbound: OutboundPolicy = field(default_factory=OutboundPolicy)


def price_for(model: str, prices: Mapping[str, Any]) -> Price | None:
    """``model``'s (in, out) USD per million tokens from a ``MODEL_PRICES`` table, or
    None when it has no entry. A malformed entry is a configuration error."""
    entry = prices.get(model)
    if entry is None:
        return None
    if (
        not isinstance(entry, list | tuple)
        or len(entry) != 2
        or not all(isinstance(v, int | float) and v >= 0 for v in entry)
    ):
        raise ProviderError(f"MODEL_PRICES[{model!r}] must be [usd_per_mtok_in, usd_per_mtok_out]")
    return (float(entry[0]), float(entry[1]))


def key_variable(provider: str, params: Mapping[str, Any]) -> str | None:
    """The environment variable holding the key for this agent, None for none."""
    named = params.get("api_key_env")
    if named is not None:
        if not isinstance(named, str) or not _KEY_ENV_NAME.fullmatch(named):
            raise ProviderError(
                f"api_key_env must name a variable ending in _API_KEY (not ARENA_*), got {named!r}"
            )
        if params.get("base_url") and named in DEFAULT_KEY_ENV.values():
            raise ProviderError(
                f"{provider}: an agent with its own base_url cannot use the arena's {named}"
            )
        return named
    if params.get("base_url") and provider in DEFAULT_KEY_ENV:
        raise ProviderError(
            f"{provider}: an agent with its own base_url must name its own key variable "
            "(params api_key_env); the arena's key goes only to the provider or to "
            f"{BASE_URL_ENV[provider]}"
        )
    return DEFAULT_KEY_ENV.get(provider)


def base_url_for(
    provider: str,
    params: Mapping[str, Any],
    environ: Mapping[str, str],
    outbound: OutboundPolicy,
) -> str | None:
    """The base URL an agent of ``provider`` with ``params`` calls (its own
    ``base_url``, else the operator's ``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL``; None
    for the SDK's default), checked against the address policy: its form and its host's
    address class (a name is resolved here when DNS is on, and again at every dial).
    Raises ``ProviderError`` naming where the URL came from and the class refused."""
    variable = BASE_URL_ENV.get(provider, "")
    source = "base_url" if params.get("base_url") else variable
    url = params.get("base_url") or environ.get(variable) or None
    if url is None:
        return None
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        raise ProviderError(f"{provider}: base_url must be an http(s) URL, got {url!r}")
    try:
        outbound.check_registration(url)
    except EgressRefused as refused:
        message = describe_refusal(url_host(url), refused)
        raise ProviderError(f"{provider}: {source} {message}") from None
    return url


def _timeout_s(params: Mapping[str, Any], default: object) -> float:
    value = params.get("timeout_s", default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ProviderError(f"timeout_s must be a positive number of seconds, got {value!r}")
    return float(value)


def _max_retries(params: Mapping[str, Any], default: object) -> int:
    value = params.get("max_retries", default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProviderError(f"max_retries must be a whole number ≥ 0, got {value!r}")
    return value


def client_for(
    provider: str,
    model: str,
    *,
    params: Mapping[str, Any],
    defaults: ProviderDefaults,
    environ: Mapping[str, str] | None = None,
    team_key: str | None = None,
) -> ModelClient:
    """The client for an agent's ``provider`` and ``model``.

    ``params`` are the agent's params (see the module docstring for the keys read
    here; the client ignores them per call except its sampling keys).
    ``defaults`` are the arena's; ``environ`` defaults to ``os.environ``.
    Raises ``ProviderError`` for an unknown provider, a missing key (naming the
    variable to set, never a value), a bad base URL or one the address policy refuses,
    or a bad price entry.

    ``team_key``: the team's own key (decrypted from ``Agent.provider_key_encrypted``,
    agents/keys.py). When given it is the key, wherever the agent's base URL points (it
    is the team's to send), and no environment variable is read: an agent with its own
    key never spends the arena's."""
    environ = os.environ if environ is None else environ
    if provider not in PROVIDERS:
        raise ProviderError(f"unknown provider {provider!r}; known: {', '.join(PROVIDERS)}")
    if not model:
        raise ProviderError(f"{provider}: no model id")
    variable = key_variable(provider, params) if team_key is None else None
    api_key = team_key if team_key is not None else environ.get(variable) if variable else None
    if variable and not api_key:
        raise ProviderError(f"{provider}: no API key; set {variable} in the environment")
    common: dict[str, Any] = {
        "timeout_s": _timeout_s(params, defaults.timeout_s),
        "max_retries": _max_retries(params, defaults.max_retries),
        "price": price_for(model, defaults.prices),
        "outbound": defaults.outbound,
    }
    base_url = base_url_for(provider, params, environ, defaults.outbound)
    if provider == "anthropic":
        return AnthropicClient(model, api_key or "", base_url, **common)
    if provider == "openai":
        return OpenAIClient(model, api_key or "", base_url, **common)
    if provider == "openrouter":
        return OpenRouterClient(model, api_key or "", base_url, **common)
    if provider == "gemini":
        from agents.providers.gemini_client import GeminiClient  # its SDK is big to import

        return GeminiClient(model, api_key or "", base_url, **common)
    if provider == "anthropic-computer-use":
        return AnthropicComputerUseClient(
            model, api_key or "", base_url, params=dict(params), **common
        )
    if provider == "openai-computer-use":
        return OpenAIComputerUseClient(
            model, api_key or "", base_url, params=dict(params), **common
        )
    if base_url is None:
        raise ProviderError("openai_compatible: set the server's URL in params base_url")
    return OpenAICompatibleClient(model, api_key, base_url, **common)
