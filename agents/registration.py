"""A team entering its own agents: registration by a team owner, the health check a
team runs once its endpoint holds the secret, and an admin's approval.

- A **remote** agent gets a secret generated here, returned once by the registering
  call and never again (the arena signs every request to the endpoint with it). Its
  endpoint must pass the address policy now; its health call needs the secret in
  place, so it is asked by ``agent_entry_check`` (the team, when ready) and again by
  ``agent_approve`` (an admin cannot approve an endpoint that does not answer).
- A **scaffold** agent brings the team's own provider key, sealed at once
  (agents/keys.py) and never shown again; it cannot name an environment variable of
  the arena (``params.api_key_env``), so a team never spends the arena's keys.
- Every team entry starts ``pending``: matchmaking draws approved agents only
  (``Agent.objects.active()``). An admin approves or rejects it with a note the team
  reads through the API.

What may be drawn is decided by one door, ``agents.services.entry_problems``; this
module only adds the rules of a team's own entry."""

import copy
import logging
import re
import secrets
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from accounts.models import Team
from accounts.services import team_owner_check
from agents.keys import MAX_KEY_CHARS, KeyEncryptionError, key_ring, provider_key_seal
from agents.models import Agent, Arena
from agents.services import entry_problems
from agents.textfold import fold
from arena_site.exceptions import ApplicationError
from arena_site.ratelimit import FixedWindow

# Kinds a team may register (built-ins are the arena's own).
TEAM_KINDS = (Agent.Kind.REMOTE, Agent.Kind.SCAFFOLD)
TEAM_KIND_CHOICES = [(kind.value, kind.label) for kind in TEAM_KINDS]
# Providers that always need a key; openai_compatible servers may need none.
KEYED_PROVIDERS = ("anthropic", "openai", "gemini", "openrouter")
# Params a team may not set: the arena's environment is not the team's to name, and a
# remote endpoint is its own field.
FORBIDDEN_PARAMS = {
    "api_key_env": "a team's agent brings its own key in provider_key; it cannot name "
    "one of the arena's environment variables",
    "api_key": "send the key in provider_key, which is encrypted at rest; params are "
    "stored and shown as they are",
    "endpoint": "the endpoint is its own field",
}
_KEY_SHAPE = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces
SLUG_MAX = 64
NAME_MAX = 100
PROMPT_MAX = 20_000
# A sealed key stands in while the unsaved agent is checked: the key is present (it is
# in the request); it is sealed for the agent's id once the row exists.
KEY_PRESENT = b"key given in the registration"

# The checks a team may ask for (each one a health call to its endpoint).
ENTRY_CHECKS = FixedWindow("agent-check", limit=10, window_s=600)

logger = logging.getLogger(__name__)


def entry_refuse(message: str, code: str = "invalid", status: int = 400, **extra: Any):
    raise ApplicationError(message, code=code, status=status, extra=extra)


def problems_message(problems: dict[str, str]) -> str:
    return " ".join(f"{field}: {text}" for field, text in problems.items())


def params_clean(params: object, kind: str) -> dict[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, dict):
        entry_refuse("params must be a JSON object of provider parameters.")
    for name, why in FORBIDDEN_PARAMS.items():
        if name in params:
            entry_refuse(f"params {name} is not accepted: {why}.", code="forbidden_param")
    if params.get("base_url") not in (None, ""):
        _check_base_url(params["base_url"])
    return dict(params)


def _check_base_url(url: object) -> None:
    """The form of a scaffold's ``base_url`` (where it points is the address policy's,
    checked with the entry): an http(s) URL that urllib reads without raising (an
    unclosed IPv6 bracket, an IPv6 literal that is not one, a port out of range)."""
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is not None:
            parts.port  # noqa: B018 -- raises on a port that is not a number in range
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        shown = repr(url)[:120]
        entry_refuse(
            f"params base_url must be an http(s) URL with a host name or address (an IPv6 "
            f"address in brackets) and an optional port from 1 to 65535, got {shown}.",
            code="entry_refused",
        )


def provider_key_clean(provider: str, key: str) -> str:
    key = (key or "").strip()
    if not key:
        if provider in KEYED_PROVIDERS:
            entry_refuse(
                f"provider_key is required: a team's {provider} agent calls {provider} "
                "with the team's own key (it is encrypted at rest and never shown again).",
                code="key_missing",
            )
        return ""
    if len(key) > MAX_KEY_CHARS or not _KEY_SHAPE.fullmatch(key):
        entry_refuse(
            f"provider_key must be printable characters without spaces, at most "
            f"{MAX_KEY_CHARS}: paste the key exactly as the provider shows it.",
            code="invalid_key",
        )
    return key


def agent_check_registration(
    *,
    team: Team,
    actor: AbstractBaseUser,
    kind: str,
    display_name: str,
    slug: str = "",
    endpoint: str = "",
    provider: str = "",
    model_id: str = "",
    provider_key: str = "",
    system_prompt: str = "",
    params: object = None,
) -> tuple[Agent, str]:
    """Check and authorise a registration: ``actor`` owns ``team`` (else 403
    ``not_team_owner``), and the entry is one that could make a move (else 400 with
    the problem in words). Returns the unsaved agent and the plain provider key ("" for
    none). May call nothing outside: a remote endpoint's health call needs the secret
    this registration creates."""
    team_owner_check(user=actor, team=team, doing="register agents")
    if kind not in TEAM_KINDS:
        entry_refuse(
            f"kind must be one of {', '.join(TEAM_KINDS)}, got {kind!r}.", code="invalid_kind"
        )
    display_name = (display_name or "").strip()
    if not display_name or len(display_name) > NAME_MAX:
        entry_refuse(f"display_name must be 1 to {NAME_MAX} characters.")
    slug = slugify(slug or display_name)[:SLUG_MAX].strip("-")
    if not slug:
        entry_refuse(
            "slug must have letters or digits (it is derived from display_name if omitted)."
        )
    arena = Arena.objects.public()
    if Agent.objects.filter(arena=arena, slug=slug).exists():
        entry_refuse(f"An agent named {slug!r} is already entered; choose another slug.",
                code="slug_taken", status=409)  # fmt: skip
    display_name_free_check(arena, display_name)
    if len(system_prompt or "") > PROMPT_MAX or len(model_id or "") > 200:
        entry_refuse(f"system_prompt is at most {PROMPT_MAX} characters, model_id at most 200.")
    clean = params_clean(params, kind)
    key = ""
    agent = Agent(
        arena=arena, team=team, kind=kind, slug=slug, display_name=display_name,
        system_prompt=system_prompt or "", approval=Agent.Approval.PENDING,
    )  # fmt: skip
    if kind == Agent.Kind.REMOTE:
        if provider or model_id or provider_key:
            entry_refuse("A remote agent has no provider, model_id or provider_key: it runs its "
                    "own model behind its endpoint.")  # fmt: skip
        agent.params = {**clean, "endpoint": (endpoint or "").strip()}
        agent.remote_secret = secrets.token_urlsafe(32)  # returned once, by agent_register
        # its endpoint cannot answer a signed call before it holds the secret
        checked = copy.copy(agent)
        checked.is_paused = True
    else:
        if endpoint:
            entry_refuse("A scaffold agent has no endpoint: the arena runs it with your "
                    "provider key; register a remote agent to run your own server.")  # fmt: skip
        if not model_id:
            entry_refuse("model_id is required: the provider's name of the model, e.g. "
                    "claude-sonnet-4-5 or gpt-4.1.")  # fmt: skip
        key = provider_key_clean(provider, provider_key)
        agent.provider, agent.model_id, agent.params = provider, model_id, clean
        agent.provider_key_encrypted = KEY_PRESENT if key else None
        checked = agent
    problems = entry_problems(checked)
    if problems:
        entry_refuse(problems_message(problems), code="entry_refused", problems=problems)
    agent.provider_key_encrypted = None
    return agent, key


@transaction.atomic
def agent_register(
    *, team: Team, actor: AbstractBaseUser, **fields: Any
) -> tuple[Agent, str | None]:
    """Registers a team's agent (pending approval). Returns the agent and, for a remote
    agent, its HMAC secret in plain: shown once, to the caller only. A scaffold's
    provider key is sealed for the new row (agents/keys.py). Raises
    ``ApplicationError``: 403 not an owner, 400 a problem with the entry, 409 the slug
    is taken, 503 the arena has no key-encryption key."""
    agent, key = agent_check_registration(team=team, actor=actor, **fields)
    if key:
        key_storage_check()
    secret = agent.remote_secret if agent.kind == Agent.Kind.REMOTE else None
    try:
        with transaction.atomic():
            agent.save()
    except IntegrityError:
        entry_refuse(f"An agent named {agent.slug!r} is already entered; choose another slug.",
                code="slug_taken", status=409)  # fmt: skip
    if key:
        agent.provider_key_encrypted = provider_key_seal(agent_id=agent.pk, plain=key)
        agent.save(update_fields=["provider_key_encrypted"])
    return agent, secret


def key_storage_check() -> None:
    """Before anything is written with a provider key: a misconfigured arena says so
    (503 ``key_storage_unavailable``) instead of storing a key it could not open."""
    try:
        key_ring()
    except KeyEncryptionError as exc:
        logger.error("a team's provider key was not stored: %s", exc)  # no key in it
        entry_refuse(
            "The arena cannot store provider keys right now: its operator has not set a "
            "key-encryption key. Try again later, or tell the operator.",
            code="key_storage_unavailable",
            status=503,
        )


def display_name_free_check(
    arena: Arena, display_name: str, *, other_than: int | None = None
) -> None:
    """An entry may not pass for another agent on the board or in a reveal: its display
    name, folded as the leak scanner folds text (case, confusable letters such as I for
    l, full-width forms, spaces), must differ from every other agent's of the arena
    (``other_than``: the agent being renamed)."""
    wanted = "".join(fold(display_name).split())
    others = Agent.objects.filter(arena=arena).exclude(pk=other_than)
    for other in others.values_list("display_name", flat=True):
        if "".join(fold(other).split()) == wanted:
            entry_refuse(f"The name {display_name!r} reads as an agent already entered "
                    f"({other!r}); choose a name of your own.", code="name_taken",
                    status=409)  # fmt: skip


def agent_entry_check_asked(*, agent: Agent) -> dict[str, str]:
    """A team asking for its agent's check (``POST /api/agents/<id>/check/``): at most
    ``ENTRY_CHECKS.limit`` a team in ``ENTRY_CHECKS.window_s`` seconds, since each may
    hold a web thread for the health call's 5 s and have the arena call an address of
    the team's choosing. Over it: 429 ``rate_limited`` with Retry-After."""
    retry = ENTRY_CHECKS.hit(f"team:{agent.team_id}")
    if retry is not None:
        raise ApplicationError(
            f"Too many checks of your team's agents: at most {ENTRY_CHECKS.limit} in "
            f"{ENTRY_CHECKS.window_s // 60} minutes. Try again in {retry} s.",
            code="rate_limited",
            status=429,
            headers={"Retry-After": str(retry)},
            extra={"retry_after_s": retry},
        )
    return agent_entry_check(agent=agent)


def agent_entry_check(*, agent: Agent) -> dict[str, str]:
    """What would stop ``agent`` from making a move if it were in play now (for a
    remote agent: the health call, signed with its secret). ``{}`` when nothing does.
    Writes nothing; the team calls it once its endpoint holds the secret."""
    in_play = copy.copy(agent)
    in_play.is_paused, in_play.retired_at = False, None
    return entry_problems(in_play)


@transaction.atomic
def agent_approve(*, agent: Agent, actor: AbstractBaseUser, note: str = "") -> Agent:
    """An admin approves a team's entry: from now on matchmaking may draw it. Refused
    (400 ``entry_refused``) while the entry could not make a move (a remote endpoint
    that fails its health call, a missing key). Locks the row."""
    locked = Agent.objects.select_for_update().get(pk=agent.pk)
    problems = agent_entry_check(agent=locked)
    if problems:
        entry_refuse("Not approved: " + problems_message(problems), code="entry_refused",
                problems=problems)  # fmt: skip
    return _decide(locked, Agent.Approval.APPROVED, actor, note)


@transaction.atomic
def agent_reject(*, agent: Agent, actor: AbstractBaseUser, note: str) -> Agent:
    """An admin rejects a team's entry, with a note saying why (its team reads it).
    A rejected agent is never drawn; approving it later is possible."""
    if not (note or "").strip():
        entry_refuse(
            "Say why the entry is rejected: the team reads the note.", code="note_required"
        )
    locked = Agent.objects.select_for_update().get(pk=agent.pk)
    return _decide(locked, Agent.Approval.REJECTED, actor, note)


def _decide(agent: Agent, approval: str, actor: AbstractBaseUser, note: str) -> Agent:
    agent.approval = approval
    agent.approval_note = (note or "").strip()
    agent.approved_by = actor  # whoever decided, approving or rejecting
    agent.approved_at = timezone.now()
    agent.save(update_fields=["approval", "approval_note", "approved_by", "approved_at"])
    return agent


def provider_keys_reseal() -> tuple[int, list[int]]:
    """Re-encrypts every stored provider key under the first key of
    ``ARENA_KEY_ENCRYPTION_KEY`` (rotation, agents/keys.py). Returns how many were
    re-encrypted and the ids of agents whose key opens under none of the keys (left as
    they are; those teams must register their key again). One row at a time, each
    locked: safe while workers run."""
    from agents.keys import provider_key_reseal

    done, unreadable = 0, []
    ids = Agent.objects.exclude(provider_key_encrypted=None).values_list("pk", flat=True)
    for pk in list(ids):
        with transaction.atomic():
            agent = Agent.objects.select_for_update().get(pk=pk)
            try:
                agent.provider_key_encrypted = provider_key_reseal(agent.provider_key_encrypted)
            except KeyEncryptionError:
                unreadable.append(pk)
                continue
            agent.save(update_fields=["provider_key_encrypted"])
            done += 1
    return done, unreadable
