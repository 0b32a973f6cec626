"""A team changing its own entry after registering it: edit it (a typo'd endpoint, a
new model, a replaced provider key), rotate its remote secret, pause and resume it,
and withdraw it. The one door for each of these: the API (agents/api.py) and the
pages (agents/views.py) call these functions and nothing else.

Rules, all tried to be broken in tests/agents/test_agent_pages.py and
tests/agents/test_registration_api.py:
- Only an owner of the agent's team may change it (403 ``not_team_owner``); the
  caller has already answered 404 to anyone outside the team.
- A change of what runs (endpoint, provider, model, prompt, params) sends an approved
  entry back to ``pending``: the admins approved what they checked, not its successor.
  Renaming it, replacing its key and rotating its secret keep its approval.
- Withdrawing retires the agent: it leaves the roster and matchmaking at once; its
  battles, votes and ratings stay as they are. A withdrawn agent cannot be changed
  (409 ``agent_withdrawn``); withdrawing it again changes nothing.
- Resuming checks the agent as if it were drawn now (the health call of a remote
  agent); a pause an admin made is the admins' to lift (403 ``paused_by_admin``)."""

import copy
import secrets
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from accounts.models import Membership
from accounts.services import team_owner_check
from agents.keys import provider_key_seal
from agents.models import Agent, AgentStandingLogEntry
from agents.registration import (
    KEY_PRESENT,
    NAME_MAX,
    PROMPT_MAX,
    agent_entry_check_asked,
    display_name_free_check,
    entry_refuse,
    key_storage_check,
    params_clean,
    problems_message,
    provider_key_clean,
)
from agents.services import agent_standing_log, entry_problems

# What a team may change; kind, slug and team stay (withdraw and register anew).
EDITABLE = ("display_name", "endpoint", "provider", "model_id", "provider_key",
            "system_prompt", "params")  # fmt: skip
NOT_EDITABLE = ("kind", "slug", "team")
# A change of one of these is a different agent to judge: it waits for an admin again.
RUNNING = ("provider", "model_id", "system_prompt", "params")
PAUSE_REASON_MAX = 1000


def _owner_of(agent: Agent, actor: AbstractBaseUser, doing: str) -> Agent:
    """The agent's row, locked, once ``actor`` is found to own its team and it is not
    withdrawn. The caller has answered 404 to anyone outside the team."""
    if agent.team_id is None:  # the arena's own agents are the admins'
        entry_refuse("This agent is the arena's own; only its admins change it.",
                     code="not_team_owner", status=403)  # fmt: skip
    team_owner_check(user=actor, team=agent.team, doing=doing)
    locked = Agent.objects.select_for_update().get(pk=agent.pk)
    if locked.retired_at is not None:
        entry_refuse(f"{locked.display_name} is withdrawn: it cannot change any more. "
                     "Register a new agent instead.", code="agent_withdrawn",
                     status=409)  # fmt: skip
    return locked


def _who(actor: AbstractBaseUser) -> str:
    return actor.get_username()


@transaction.atomic
def agent_edit(
    *, agent: Agent, actor: AbstractBaseUser, rotate_secret: bool = False, **changes: Any
) -> tuple[Agent, str | None]:
    """Applies ``changes`` (a subset of ``EDITABLE``; a blank ``provider_key`` keeps the
    stored one) and, for a remote agent with ``rotate_secret``, a new HMAC secret, which
    is returned in plain (shown once; the old one stops at once). Returns the saved
    agent and the new secret or None. The entry is checked as at registration (the
    address policy, a key for a keyed provider, a free name); a remote endpoint's
    health call is the team's to ask afterwards (``agent_entry_check_asked``). Locks
    the row. Raises ``ApplicationError``: 400, 403, 409, 503."""
    fixed = sorted(set(changes) & set(NOT_EDITABLE))
    if fixed:
        entry_refuse(f"{', '.join(fixed)} cannot change: withdraw the agent and register "
                     "a new one.", code="not_editable")  # fmt: skip
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        entry_refuse(f"Unknown fields: {', '.join(unknown)}.", code="invalid")
    locked = _owner_of(agent, actor, "change its agents")
    edited = copy.copy(locked)
    edited.params = dict(locked.params) if isinstance(locked.params, dict) else {}
    remote = locked.kind == Agent.Kind.REMOTE
    if "display_name" in changes:
        edited.display_name = (changes["display_name"] or "").strip()
        if not edited.display_name or len(edited.display_name) > NAME_MAX:
            entry_refuse(f"display_name must be 1 to {NAME_MAX} characters.")
        display_name_free_check(locked.arena, edited.display_name, other_than=locked.pk)
    if "system_prompt" in changes:
        edited.system_prompt = changes["system_prompt"] or ""
        if len(edited.system_prompt) > PROMPT_MAX:
            entry_refuse(f"system_prompt is at most {PROMPT_MAX} characters.")
    key = _runtime_changes(edited, changes, remote=remote)
    secret = None
    if rotate_secret:
        if not remote:
            entry_refuse("Only a remote agent has a secret to rotate; a scaffold agent's "
                         "provider key is replaced by sending a new provider_key.")  # fmt: skip
        secret = edited.remote_secret = secrets.token_urlsafe(32)
    checked = copy.copy(edited)
    if remote:  # the health call is asked afterwards, once the endpoint has the secret
        checked.is_paused = True
    elif key:
        checked.provider_key_encrypted = KEY_PRESENT
    problems = entry_problems(checked)
    if problems:
        entry_refuse(problems_message(problems), code="entry_refused", problems=problems)
    if key:
        key_storage_check()
        edited.provider_key_encrypted = provider_key_seal(agent_id=locked.pk, plain=key)
    fields = ["display_name", "system_prompt", "provider", "model_id", "params",
              "remote_secret", "provider_key_encrypted"]  # fmt: skip
    if _runs_differently(locked, edited) and locked.approval == Agent.Approval.APPROVED:
        edited.approval = Agent.Approval.PENDING
        edited.approval_note = (
            f"Changed by its team ({_who(actor)}) on {timezone.now():%Y-%m-%d %H:%M} UTC: "
            "waiting for an admin's approval again."
        )
        fields += ["approval", "approval_note"]
    edited.save(update_fields=fields)
    return edited, secret


def _runtime_changes(edited: Agent, changes: dict[str, Any], *, remote: bool) -> str:
    """Applies endpoint, provider, model, params and key changes to ``edited``; returns
    the new plain provider key ("" for none)."""
    if remote:
        if any(changes.get(name) for name in ("provider", "model_id", "provider_key")):
            entry_refuse("A remote agent has no provider, model_id or provider_key: it runs "
                         "its own model behind its endpoint.")  # fmt: skip
        endpoint = edited.params.get("endpoint", "")
        if "params" in changes:
            edited.params = params_clean(changes["params"], edited.kind)
        if "endpoint" in changes:
            endpoint = (changes["endpoint"] or "").strip()
        edited.params["endpoint"] = endpoint
        return ""
    if changes.get("endpoint"):
        entry_refuse("A scaffold agent has no endpoint: the arena runs it with your "
                     "provider key; register a remote agent to run your own server.")  # fmt: skip
    if "params" in changes:
        edited.params = params_clean(changes["params"], edited.kind)
    if "model_id" in changes:
        edited.model_id = (changes["model_id"] or "").strip()
        if not edited.model_id or len(edited.model_id) > 200:
            entry_refuse("model_id must be 1 to 200 characters: the provider's name of the "
                         "model, e.g. claude-sonnet-4-5 or gpt-4.1.")  # fmt: skip
    new_provider = "provider" in changes and changes["provider"] != edited.provider
    if "provider" in changes:
        edited.provider = changes["provider"] or ""
    given = (changes.get("provider_key") or "").strip()
    if given or new_provider:
        # a key belongs to its provider: a new provider needs its own key (if keyed)
        key = provider_key_clean(edited.provider, given)
        if not key:
            edited.provider_key_encrypted = None
        return key
    return ""


def _runs_differently(before: Agent, after: Agent) -> bool:
    if any(getattr(before, name) != getattr(after, name) for name in RUNNING):
        return True
    return before.kind == Agent.Kind.REMOTE and (
        (before.params or {}).get("endpoint") != (after.params or {}).get("endpoint")
    )


@transaction.atomic
def agent_pause(*, agent: Agent, actor: AbstractBaseUser, reason: str = "") -> Agent:
    """Its team takes the agent out of matchmaking (an outage, a change on its side),
    with ``reason`` shown to the team and the admins. Pausing a paused agent changes
    nothing. Recorded in the standing log with the actor. Locks the row."""
    locked = _owner_of(agent, actor, "pause its agents")
    if locked.is_paused:
        return locked
    reason = (reason or "").strip()[:PAUSE_REASON_MAX] or f"Paused by its team ({_who(actor)})."
    agent_standing_log(agent=locked, changes={"is_paused": [False, True]}, note=reason,
                       actor=actor)  # fmt: skip
    locked.is_paused, locked.paused_reason = True, reason
    locked.save(update_fields=["is_paused", "paused_reason"])
    return locked


def agent_resume(*, agent: Agent, actor: AbstractBaseUser) -> Agent:
    """Its team puts a paused agent back into matchmaking (once approved), after the
    check of an agent drawn now: for a remote agent the signed health call (at most
    5 s, counted against the team's checks: 429 over them). Refused with the problems
    (400 ``entry_refused``) when it could not make a move, and (403
    ``paused_by_admin``) when an admin paused it. Resuming a running agent changes
    nothing. The check runs before the row is locked: no lock is held over a network
    call."""
    with transaction.atomic():
        locked = _owner_of(agent, actor, "resume its agents")
        if not locked.is_paused:
            return locked
        _not_paused_by_admins(locked)
    problems = agent_entry_check_asked(agent=locked)
    if problems:
        entry_refuse("Not resumed: " + problems_message(problems), code="entry_refused",
                     problems=problems)  # fmt: skip
    with transaction.atomic():
        locked = _owner_of(agent, actor, "resume its agents")
        if not locked.is_paused:
            return locked
        agent_standing_log(agent=locked, changes={"is_paused": [True, False]},
                           note=f"Resumed by its team ({_who(actor)}).", actor=actor)  # fmt: skip
        locked.is_paused, locked.paused_reason, locked.failure_streak = False, "", 0
        locked.save(update_fields=["is_paused", "paused_reason", "failure_streak"])
        return locked


def _not_paused_by_admins(agent: Agent) -> None:
    """The last pause was the team's own or the arena's (after failed runs), not an
    admin's from outside the team."""
    for entry in AgentStandingLogEntry.objects.filter(agent=agent).order_by("-at", "-pk"):
        if entry.changes.get("is_paused") != [False, True]:
            continue
        if entry.actor_id is None:
            return
        if Membership.objects.filter(team_id=agent.team_id, user_id=entry.actor_id).exists():
            return
        entry_refuse(f"An admin of the arena paused {agent.display_name}: {entry.note} Ask "
                     "the arena's admins to resume it.", code="paused_by_admin",
                     status=403)  # fmt: skip
    return


@transaction.atomic
def agent_withdraw(*, agent: Agent, actor: AbstractBaseUser) -> Agent:
    """Its team withdraws the agent: retired now, it leaves the roster and matchmaking
    (``Agent.objects.active()``) and cannot be driven or changed; its battles, votes
    and ratings stay. Withdrawing a withdrawn agent changes nothing. Locks the row."""
    if agent.team_id is not None and agent.retired_at is not None:
        team_owner_check(user=actor, team=agent.team, doing="withdraw its agents")
        return agent
    locked = _owner_of(agent, actor, "withdraw its agents")
    now = timezone.now()
    agent_standing_log(agent=locked, changes={"retired_at": [None, now.isoformat()]},
                       note=f"Withdrawn by its team ({_who(actor)}).", actor=actor)  # fmt: skip
    locked.retired_at = now
    locked.save(update_fields=["retired_at"])
    return locked
