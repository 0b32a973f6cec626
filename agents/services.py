"""Writes for the roster."""

import os
import time
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agents.models import Agent, AgentStandingLogEntry, Arena
from agents.policies import BUILTIN_POLICIES, BUILTIN_ROSTER, Policy
from arena_site.exceptions import ApplicationError
from sandboxes.netpolicy import Allowlist, OutboundPolicy, default_resolver


@transaction.atomic
def roster_install_builtins(*, arena: Arena) -> list[Agent]:
    """Idempotently enters the built-in offline agents in ``arena``."""
    agents = []
    for slug, name, policy, baseline in BUILTIN_ROSTER:
        assert policy in BUILTIN_POLICIES, policy
        agent, _ = Agent.objects.update_or_create(
            arena=arena,
            slug=slug,
            defaults={
                "display_name": name,
                "kind": Agent.Kind.BUILTIN,
                "builtin_policy": policy,
                "is_baseline": baseline,
            },
        )
        agents.append(agent)
    return agents


def _plain(value: Any) -> Any:
    """A standing value as the log keeps it (ids for rows, ISO text for times)."""
    if hasattr(value, "pk"):
        return value.pk
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def agent_standing_changes(*, agent: Agent, proposed: dict[str, Any]) -> dict[str, list]:
    """The standing fields ``proposed`` would change: {field: [before, after]}."""
    current = Agent.objects.get(pk=agent.pk) if agent.pk else None
    changes = {}
    for name in AgentStandingLogEntry.STANDING_FIELDS:
        if name not in proposed or current is None:
            continue
        before, after = _plain(getattr(current, name)), _plain(proposed[name])
        if before != after:
            changes[name] = [before, after]
    return changes


@transaction.atomic
def agent_standing_log(
    *, agent: Agent, changes: dict[str, list], note: str, actor: AbstractBaseUser
) -> AgentStandingLogEntry:
    """Records an operator's change of the agent's standing (paused, retired, arena,
    entrant team) with the reason. The caller saves the agent in the same transaction."""
    if not note.strip():
        raise ApplicationError(
            "Say why the agent's standing changes (kept in the standing log).",
            code="note_required",
        )
    return AgentStandingLogEntry.objects.create(
        agent=agent, changes=changes, note=note.strip(), actor=actor, at=timezone.now()
    )


def outbound_policy() -> OutboundPolicy:
    """The address policy of the worker's own calls for one lane (remote-agent
    endpoints, provider base URLs): public addresses only, plus the operator's
    ``ARENA_INTERNAL_ALLOWLIST``; names through the host's DNS unless
    ``ARENA_EGRESS_RESOLVE`` is off. A fresh one per lane: its lookups are bounded per
    instance, so an entrant whose name hangs holds up only its own lane."""
    arena = settings.ARENA
    return OutboundPolicy(
        allowlist=Allowlist.parse(arena.internal_allowlist),
        resolver=default_resolver if arena.egress_resolve else None,
    )


def agent_destinations_check(*, kind: str, provider: str, params: object) -> None:
    """Check the addresses an agent would make the worker call, as an operator enters
    it: a remote agent's ``params.endpoint``, a scaffold agent's base URL
    (``params.base_url``, else the operator's ``ANTHROPIC_BASE_URL`` /
    ``OPENAI_BASE_URL``). Raises ``ApplicationError`` (``destination_refused``) naming
    the address class. The same policy applies again at every call."""
    from agents.providers.base import ProviderError
    from agents.providers.registry import PROVIDERS, base_url_for
    from agents.remote import check_endpoint

    params = params if isinstance(params, dict) else {}
    policy = outbound_policy()
    try:
        if kind == Agent.Kind.REMOTE and params.get("endpoint"):
            check_endpoint(str(params["endpoint"]), policy, resolve=True)
        elif kind == Agent.Kind.SCAFFOLD and provider in PROVIDERS:
            base_url_for(provider, params, os.environ, policy)
    except (ValueError, ProviderError) as exc:
        raise ApplicationError(str(exc), code="destination_refused") from exc


def agent_keys_check(*, kind: str, provider: str, params: object) -> None:
    """What a scaffold agent needs to make a single call, checked as an operator saves
    it, so an agent that cannot run is never drawn into battles: a known provider, and
    the key variable it names (``params.api_key_env``, else the provider's default) set
    in this environment (``openai_compatible`` without a named variable sends no key).
    The web process checks its own environment: the workers must run with the same
    provider keys (``make run`` gives them one). Raises ``ApplicationError``."""
    from agents.providers.base import ProviderError
    from agents.providers.registry import PROVIDERS, key_variable

    if kind != Agent.Kind.SCAFFOLD:
        return
    if provider not in PROVIDERS:
        raise ApplicationError(
            f"Unknown provider {provider!r}: one of {', '.join(PROVIDERS)}.",
            code="unknown_provider",
        )
    try:
        variable = key_variable(provider, params if isinstance(params, dict) else {})
    except ProviderError as exc:
        raise ApplicationError(str(exc), code="invalid_params") from exc
    if variable and not os.environ.get(variable):
        raise ApplicationError(
            f"{variable} is not set, so this agent could not call {provider}: set it in "
            "the arena's environment, or name the variable that holds this agent's key "
            "in params api_key_env.",
            code="key_missing",
        )


class AgentFailure(Exception):
    """The agent could not produce an action (provider or entrant unreachable after
    retries, a protocol violation). The run ends with end reason "error"."""


def policy_for(
    agent: Agent,
    *,
    tools: tuple[str, ...],
    session: str,
    attachments: list[dict] | None = None,
) -> Policy:
    """The policy that drives one lane for ``agent``, offered ``tools``. ``session`` is
    an opaque per-run token (remote entrants see it; it names nobody); ``attachments``
    describe the files in /work/attachments (name, sha256, size)."""
    if agent.kind == Agent.Kind.BUILTIN:
        return BUILTIN_POLICIES[agent.builtin_policy]()
    params = agent.params or {}
    if agent.kind == Agent.Kind.SCAFFOLD:
        from agents.providers.base import ProviderError
        from agents.providers.registry import ProviderDefaults, client_for
        from agents.scaffold import ScaffoldPolicy

        try:
            arena = settings.ARENA
            defaults = ProviderDefaults(
                timeout_s=arena.provider_timeout_s,
                max_retries=arena.provider_max_retries,
                prices=arena.model_prices,
                outbound=outbound_policy(),
            )
            client = client_for(agent.provider, agent.model_id, params=params, defaults=defaults)
        except ProviderError as exc:
            raise AgentFailure(str(exc)) from exc
        return _Failing(
            ScaffoldPolicy(
                client=client,
                system_prompt=agent.system_prompt,
                tool_names=tools,
                max_tokens=int(params.get("max_tokens", 1024)),
                keep_screenshots=int(params.get("keep_screenshots", 3)),
                params={k: params[k] for k in ("temperature", "top_p") if k in params},
            ),
            failures=(ProviderError,),
        )
    if agent.kind == Agent.Kind.REMOTE:
        from agents.protocol import ProtocolError
        from agents.remote import RemoteAgentError, RemotePolicy

        endpoint = params.get("endpoint", "")
        if not endpoint:
            raise AgentFailure("this remote agent has no endpoint (params.endpoint)")
        try:
            remote = RemotePolicy(
                endpoint,
                agent.remote_secret,
                session=session,
                timeout_s=float(params.get("timeout_s", 30)),
                tools=tools,
                attachments=attachments or (),
                outbound=outbound_policy(),
            )
        except ValueError as exc:  # an endpoint the address policy refuses
            raise AgentFailure(str(exc)) from exc
        return _Failing(remote, failures=(RemoteAgentError, ProtocolError))
    raise AgentFailure(f"agents of kind {agent.kind!r} cannot run")


class _Failing:
    """Turns a policy's own failure exceptions into ``AgentFailure`` and collects its
    spans: a scaffold records its model calls itself; a remote exchange becomes one."""

    def __init__(self, policy, failures: tuple[type[Exception], ...]) -> None:
        self.policy = policy
        self.failures = failures
        own = getattr(policy, "spans", None)
        self.spans = own if own is not None else []

    def next_action(self, observation):
        started = time.time()
        try:
            return self.policy.next_action(observation)
        except self.failures as exc:
            raise AgentFailure(str(exc)) from exc
        finally:
            self._record_exchange(started)

    def _record_exchange(self, started: float) -> None:
        exchange = getattr(self.policy, "last_exchange", None)
        if exchange is None:
            return
        from agents.scaffold import SpanRecord

        self.spans.append(
            SpanRecord(
                kind="remote",
                name="remote agent",
                input={"request_id": exchange.request_id, "bytes": exchange.request_bytes},
                output={
                    "status": exchange.status,
                    "attempts": exchange.attempts,
                    "bytes": exchange.response_bytes,
                    "thought": exchange.thought[:2000],
                },
                started=started,
                latency_ms=exchange.latency_ms,
                error=exchange.error,
            )
        )
        self.policy.last_exchange = None
