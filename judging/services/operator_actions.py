"""What operators do to judging state, each with a reason in an audit log that cannot be
edited: exclude or re-admit a battle (the exclusion log); mark a judge untrusted (votes
inadmissible) or trusted again, approve an account to judge (while ARENA_JUDGE_APPROVAL
is on), end a probation directly (the judge standing log)."""

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from arena_site.exceptions import ApplicationError
from battles.models import Battle
from judging.admissibility import inadmissible_reason, reading_time_of
from judging.models import ExclusionLogEntry, JudgeTrustLogEntry, Vote
from judging.services.exclusions import (
    battle_exclude_locked,
    battle_exclusion_check,
    battle_readmit_locked,
)
from judging.services.resolution import battle_resolve, resolve_after_commit
from judging.services.trust import profiles_locked

Action = JudgeTrustLogEntry.Action


@transaction.atomic
def judge_trust_set(
    *, judge_id: int, untrusted: bool, note: str, actor: AbstractBaseUser
) -> JudgeTrustLogEntry:
    """An operator marks a judge untrusted (every live vote of theirs becomes
    inadmissible) or trusted again (votes made inadmissible only by that become
    admissible when they pass the other rules). Logged with who, when and why; the
    affected battles are resolved again after commit."""
    _note_check(note)
    profile = profiles_locked({judge_id})[judge_id]
    if profile.is_untrusted == untrusted:
        state = "untrusted" if untrusted else "trusted"
        raise ApplicationError(f"This judge is already {state}.", code="unchanged", status=409)
    profile.is_untrusted = untrusted
    profile.save(update_fields=["is_untrusted"])
    entry = _log(judge_id, Action.UNTRUST if untrusted else Action.TRUST, note, actor)
    live = Vote.objects.filter(judge_id=judge_id, retracted=False)
    affected: set[int] = set()
    if untrusted:
        affected.update(live.filter(admissible=True).values_list("battle_id", flat=True))
        live.filter(admissible=True).update(admissible=False, inadmissible_reason="untrusted_judge")
    else:
        for vote in live.filter(inadmissible_reason="untrusted_judge").select_related("battle"):
            reason = inadmissible_reason(
                choice=vote.choice,
                served_at=vote.served_at,
                voted_at=vote.voted_at,
                untrusted=False,
                read_s=reading_time_of([run.final_message for run in vote.battle.runs.all()]),
            )
            vote.admissible, vote.inadmissible_reason = not reason, reason
            vote.save(update_fields=["admissible", "inadmissible_reason"])
            affected.add(vote.battle_id)
    for battle_id in sorted(affected):
        resolve_after_commit(battle_id)
    return entry


@transaction.atomic
def judge_standing_set(
    *, judge_id: int, action: str, note: str, actor: AbstractBaseUser
) -> JudgeTrustLogEntry:
    """An operator approves an account to judge (``approve``, needed while
    ARENA_JUDGE_APPROVAL is on) or ends its probation (``establish``): logged with who,
    when and why. Untrusting goes through ``judge_trust_set``."""
    if action not in (Action.APPROVE, Action.ESTABLISH):
        raise ApplicationError("action must be approve or establish.", code="invalid_action")
    _note_check(note)
    profile = profiles_locked({judge_id})[judge_id]
    field = "approved_at" if action == Action.APPROVE else "established_at"
    if getattr(profile, field) is not None:
        done = "approved" if action == Action.APPROVE else "past probation"
        raise ApplicationError(f"This judge is already {done}.", code="unchanged", status=409)
    setattr(profile, field, timezone.now())
    profile.save(update_fields=[field])
    return _log(judge_id, action, note, actor)


def _note_check(note: str, log: str = "judge standing log") -> None:
    if not note.strip():
        raise ApplicationError(f"Say why (kept in the {log}).", code="note_required")


def _log(judge_id: int, action: str, note: str, actor: AbstractBaseUser) -> JudgeTrustLogEntry:
    return JudgeTrustLogEntry.objects.create(
        judge_id=judge_id, action=action, note=note.strip(), actor=actor, at=timezone.now()
    )


@transaction.atomic
def battle_exclude(
    *, battle_id: int, reason: str, note: str, actor: AbstractBaseUser
) -> ExclusionLogEntry:
    """An operator excludes a battle with a SPEC §5.3 reason; logged with who and why."""
    _note_check(note, "exclusion log")
    battle = (
        Battle.objects.select_for_update().select_related("agent_a", "agent_b").get(pk=battle_id)
    )
    battle_exclusion_check(battle=battle, action=ExclusionLogEntry.Action.EXCLUDE, reason=reason)
    return battle_exclude_locked(battle, reason=reason, note=note, actor=actor)


@transaction.atomic
def battle_readmit(*, battle_id: int, note: str, actor: AbstractBaseUser) -> ExclusionLogEntry:
    """An operator re-admits an excluded battle: it goes back to judging and is resolved
    from its live votes at once (decided if they suffice; rule 7 can exclude it again)."""
    _note_check(note, "exclusion log")
    battle = Battle.objects.select_for_update().get(pk=battle_id)
    battle_exclusion_check(battle=battle, action=ExclusionLogEntry.Action.READMIT)
    entry = battle_readmit_locked(battle, note=note, actor=actor)
    battle_resolve(battle_id=battle.pk)
    return entry
