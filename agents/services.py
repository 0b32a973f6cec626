"""Writes for the roster."""

import os
import time
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agents.models import Agent, AgentStandingLogEntry, Arena
from agents.policies import BUILTIN_POLICIES, BUILTIN_ROSTER, Policy
from arena_site.exceptions import ApplicationError
from sandboxes.netpolicy import Allowlist, OutboundPolicy, default_resolver

if TYPE_CHECKING:
    from agents.providers.base import ModelClient


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


# The agent params that a model call carries as they are (in a battle's scaffold and an
# evaluation's candidate calls alike); everything else in ``params`` configures the client.
SAMPLING = ("temperature", "top_p")


def sampling_params(agent: Agent) -> dict:
    """The agent's own sampling settings, nothing forced."""
    params = agent.params or {}
    return {k: params[k] for k in SAMPLING if k in params}


def model_client_for(agent: Agent, *, retries: int | None = None) -> "ModelClient":
    """The model client of a scaffold agent: its team's key (else the arena's key
    variable), the arena's timeouts, prices and address policy. ``retries`` overrides
    the client's own retries (an evaluation retries in ``evals.calls`` instead, so it
    passes 0). Raises ``AgentFailure`` naming what is missing."""
    from agents.keys import KeyEncryptionError
    from agents.providers.base import ProviderError
    from agents.providers.registry import ProviderDefaults, client_for

    params = dict(agent.params or {})
    if retries is not None:
        params["max_retries"] = retries
    try:
        arena = settings.ARENA
        defaults = ProviderDefaults(
            timeout_s=arena.provider_timeout_s,
            max_retries=arena.provider_max_retries,
            prices=arena.model_prices,
            outbound=outbound_policy(),
        )
        return client_for(
            agent.provider, agent.model_id, params=params, defaults=defaults,
            team_key=_team_key(agent),
        )  # fmt: skip
    except (ProviderError, KeyEncryptionError) as exc:
        raise AgentFailure(str(exc)) from exc


def policy_for(
    agent: Agent,
    *,
    tools: tuple[str, ...],
    session: str,
    attachments: list[dict] | None = None,
    run_id: int = 0,
) -> Policy:
    """The policy that drives one lane for ``agent``, offered ``tools``. ``session`` is
    an opaque per-run token (remote entrants see it; it names nobody); ``attachments``
    describe the files in /work/attachments (name, sha256, size); ``run_id`` is the
    run the lane drives (an MCP entrant's token is bound to it, agents.mcp_server)."""
    if agent.kind == Agent.Kind.BUILTIN:
        return BUILTIN_POLICIES[agent.builtin_policy]()
    params = agent.params or {}
    if agent.kind == Agent.Kind.SCAFFOLD:
        from agents.providers.base import ProviderError
        from agents.scaffold import ScaffoldPolicy

        client = model_client_for(agent)
        return _Failing(
            ScaffoldPolicy(
                client=client,
                system_prompt=agent.system_prompt,
                tool_names=tools,
                max_tokens=int(params.get("max_tokens", 1024)),
                keep_screenshots=int(params.get("keep_screenshots", 3)),
                params=sampling_params(agent),
            ),
            failures=(ProviderError,),
        )
    if agent.kind == Agent.Kind.REMOTE:
        from agents.protocol import ProtocolError
        from agents.remote import RemoteAgentError, RemotePolicy

        endpoint = params.get("endpoint", "")
        if not endpoint:
            raise AgentFailure("this remote agent has no endpoint (params.endpoint)")
        if params.get("protocol") == "mcp":  # the run's tools over MCP (agents.mcp_server)
            from agents.mcp_server import McpPolicy

            try:
                return McpPolicy(
                    endpoint=endpoint, secret=agent.remote_secret, run_id=run_id,
                    session=session, tools=tools, attachments=attachments or (),
                    outbound=outbound_policy(),
                    idle_timeout_s=float(params.get("idle_timeout_s", 120)),
                )  # fmt: skip
            except ValueError as exc:  # an endpoint the address policy refuses
                raise AgentFailure(str(exc)) from exc
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
    if agent.kind == Agent.Kind.HUMAN:  # a person at the operator page (agents.human)
        from agents.human import HumanPolicy, take_s_of

        return HumanPolicy(agent=agent, run_id=run_id, tools=tools, take_s=take_s_of(agent))
    raise AgentFailure(f"agents of kind {agent.kind!r} cannot run")


def _team_key(agent: Agent) -> str | None:
    """The team's own provider key, decrypted for this lane (agents/keys.py), or None
    when the agent has none (its key comes from the environment). Raises
    ``KeyEncryptionError`` when the stored key does not open."""
    if not agent.provider_key_encrypted:
        return None
    from agents.keys import provider_key_open

    return provider_key_open(agent_id=agent.pk, sealed=agent.provider_key_encrypted)


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


# --- entry: one door for "may this agent be drawn?" --------------------------------------


def entry_problems(agent: Agent) -> dict[str, str]:
    """What stops ``agent`` (saved or not) from making a single move, by form field:
    ``{field: message}``, empty when nothing does. The one check behind the admin form
    and the API's registration; it writes nothing.

    Always: a known kind; a built-in's policy exists; a scaffold's provider is known and
    its base URL passes the address policy; a remote agent has an endpoint (an http(s)
    URL without credentials that passes the address policy) and a secret. For an agent
    in play (neither paused nor retired) also what needs the outside world: the
    scaffold's key is present (a team's own stored key, or the variable it names set in
    this environment), and the remote endpoint answers the protocol's health call
    (``agents.remote.health_check``: one signed POST, at most
    ``agents.protocol.HEALTH_TIMEOUT_S``). An agent saved out of play is not called, so
    an admin can always pause an agent whose endpoint is down; resuming it checks
    again. Fields: ``kind``, ``builtin_policy``, ``provider``, ``params``,
    ``remote_secret``."""
    params = agent.params if isinstance(agent.params, dict) else {}
    in_play = agent.retired_at is None and not agent.is_paused
    problems: dict[str, str] = {}
    if agent.kind == Agent.Kind.BUILTIN:
        if agent.builtin_policy not in BUILTIN_POLICIES:
            problems["builtin_policy"] = (
                f"Unknown built-in policy {agent.builtin_policy!r}: one of "
                f"{', '.join(sorted(BUILTIN_POLICIES))}."
            )
        return problems
    if agent.kind == Agent.Kind.SCAFFOLD:
        return _scaffold_problems(agent, params, in_play=in_play)
    if agent.kind == Agent.Kind.REMOTE:
        return _remote_problems(agent, params, in_play=in_play)
    if agent.kind == Agent.Kind.CLI:
        return _cli_problems(agent, params, in_play=in_play)
    if agent.kind == Agent.Kind.HUMAN:  # its operators come and go: nothing to call
        return {}
    return {"kind": f"Unknown kind {agent.kind!r}: one of {', '.join(Agent.Kind.values)}."}


def _cli_problems(agent: Agent, params: dict, *, in_play: bool) -> dict[str, str]:
    """A CLI coding agent (docs/coding.md): a known CLI, the provider its CLI speaks, a
    model, and, in play, the arena's own key for that provider (the model gateway holds
    it; a CLI agent never brings a base URL or key of its own)."""
    from agents.cli.commands import CLI_PROVIDERS
    from agents.gateway import grant_for
    from agents.providers.base import ProviderError

    cli = params.get("cli")
    if cli not in CLI_PROVIDERS:
        return {"params": f"params.cli must be one of {', '.join(CLI_PROVIDERS)}, not {cli!r}."}
    if agent.provider != CLI_PROVIDERS[cli]:
        return {"provider": f"{cli} talks to the {CLI_PROVIDERS[cli]} API: set provider to "
                f"{CLI_PROVIDERS[cli]!r}."}  # fmt: skip
    if not (agent.model_id or "").strip():
        return {"model_id": f"Name the model {cli} runs with (the gateway pins it)."}
    if set(params) - {"cli"}:
        return {"params": "A CLI agent's params hold only cli: the arena's gateway chooses "
                "the base URL and holds the key."}  # fmt: skip
    if in_play:
        try:
            grant_for(
                agent.provider, agent.model_id, max_calls=1, max_tokens=1, max_cost_usd=0.0,
                prices={}, outbound=outbound_policy(),
            )  # fmt: skip
        except ProviderError as exc:
            return {"provider": str(exc)}
    return {}


def _scaffold_problems(agent: Agent, params: dict, *, in_play: bool) -> dict[str, str]:
    from agents.providers.registry import PROVIDERS

    if agent.provider not in PROVIDERS:
        return {"provider": f"Unknown provider {agent.provider!r}: one of {', '.join(PROVIDERS)}."}
    try:
        agent_destinations_check(kind=agent.kind, provider=agent.provider, params=params)
    except ApplicationError as exc:
        return {"params": exc.message}
    if in_play and not agent.provider_key_encrypted:
        try:
            agent_keys_check(kind=agent.kind, provider=agent.provider, params=params)
        except ApplicationError as exc:
            field = "provider" if exc.code == "unknown_provider" else "params"
            return {field: exc.message}
    return {}


def _remote_problems(agent: Agent, params: dict, *, in_play: bool) -> dict[str, str]:
    from agents.protocol import HEALTH_TIMEOUT_S, ProtocolError
    from agents.remote import RemoteAgentError, check_endpoint, health_check

    problems: dict[str, str] = {}
    endpoint = params.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint.strip():
        problems["params"] = (
            'A remote agent needs params {"endpoint": URL}: the http(s) URL the arena '
            "POSTs each step's observation to."
        )
    if not agent.remote_secret:
        problems["remote_secret"] = (
            "A remote agent needs a secret: the arena signs every request with it, and "  # noqa: S105
            "the endpoint checks the signature."
        )
    if "params" in problems:
        return problems
    policy = outbound_policy()
    try:
        check_endpoint(endpoint, policy, resolve=True)
    except ValueError as exc:
        problems["params"] = str(exc)
    if problems or not in_play:
        return problems
    try:
        timeout = min(float(params.get("timeout_s", HEALTH_TIMEOUT_S)), HEALTH_TIMEOUT_S)
    except (TypeError, ValueError):
        return {"params": "params timeout_s must be a number of seconds."}
    try:
        health_check(endpoint, agent.remote_secret, outbound=policy, timeout_s=max(timeout, 0.1))
    except (RemoteAgentError, ProtocolError, ValueError) as exc:
        problems["params"] = (
            f"The endpoint did not pass the protocol's health call: {exc}. Start the "
            "agent's server (it must answer the health call, see /api/agent-protocol/), "
            "or save the agent paused."
        )
    return problems


# --- failing lanes: the automatic pause ---------------------------------------------------


def _pause_reason(streak: int, last_error: str) -> str:
    return (
        f"Paused automatically: its last {streak} runs failed through the agent itself "
        f"(its provider or endpoint could not be reached or broke the protocol). The "
        f"last one: {last_error[:500]}. Fix the agent, then resume it from its page (My "
        "agents) or the API; resuming checks it again."
    )


@transaction.atomic
def agent_lane_failed(*, agent_id: int, error: str) -> bool:
    """A lane of a battle ended in error through ``agent_id``'s own fault (``error``
    says how). Its failure streak grows; at ``ARENA_AGENT_FAILURE_PAUSE`` consecutive
    failures it is paused with the reason in words (``paused_reason``, shown to admins
    and its team) and an entry in the standing log without an actor (the arena did it).
    Locks the agent's row. Returns whether this call paused it."""
    agent = Agent.objects.select_for_update().get(pk=agent_id)
    agent.failure_streak += 1
    fields = ["failure_streak"]
    paused = not agent.is_paused and agent.failure_streak >= settings.ARENA.agent_failure_pause
    if paused:
        agent.is_paused = True
        agent.paused_reason = _pause_reason(agent.failure_streak, error)
        fields += ["is_paused", "paused_reason"]
        AgentStandingLogEntry.objects.create(
            agent=agent,
            changes={"is_paused": [False, True]},
            note=agent.paused_reason,
            actor=None,
            at=timezone.now(),
        )
    agent.save(update_fields=fields)
    return paused


def agent_lane_succeeded(*, agent_id: int) -> None:
    """A lane of a battle ended without the agent failing (it delivered, gave up or
    used its budget): the failure streak starts again from zero."""
    Agent.objects.filter(pk=agent_id, failure_streak__gt=0).update(failure_streak=0)


def agent_pause_fields(*, agent: Agent, changes: dict[str, list], note: str) -> list[str]:
    """An operator's change of ``is_paused`` (``changes`` as ``agent_standing_changes``
    found them), applied to the unsaved ``agent``: pausing keeps the note as the reason
    its team sees; resuming clears the reason and the failure streak. Returns the
    fields it set."""
    if "is_paused" not in changes:
        return []
    if agent.is_paused:
        agent.paused_reason = note.strip()
        return ["paused_reason"]
    agent.paused_reason = ""
    agent.failure_streak = 0
    return ["paused_reason", "failure_streak"]
