"""Exclusions (SPEC §5.3) and re-admissions of battles: the arena's own rules (screening
applies 1–5, resolution applies 6) and an operator's decisions, every one in the
exclusion log with its reason."""

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from arena_site.exceptions import ApplicationError
from battles.models import Battle
from judging.models import ExclusionLogEntry
from judging.services.decisions import battle_undecide
from ratings.services import leaderboard_changed

Reason = Battle.ExclusionReason
Action = ExclusionLogEntry.Action


def battle_exclude_locked(
    battle: Battle, *, reason: str, note: str, actor: AbstractBaseUser | None
) -> ExclusionLogEntry:
    """Excludes the battle with a SPEC §5.3 reason. A decided battle's decision is taken
    back first (its streaming update reverted). Precondition: the battle row is locked."""
    if battle.status == Battle.Status.DECIDED:
        battle_undecide(battle)
    battle.status = Battle.Status.EXCLUDED
    battle.exclusion_reason = reason
    battle.save(update_fields=["status", "exclusion_reason"])
    leaderboard_changed(arena_id=battle.arena_id)  # the board's exclusion counts
    return _log(battle, Action.EXCLUDE, reason, note, actor)


def battle_readmit_locked(
    battle: Battle, *, note: str, actor: AbstractBaseUser | None
) -> ExclusionLogEntry:
    """Clears the battle's exclusion: it is open for judging again. Precondition: the
    battle row is locked and the battle excluded."""
    entry = _log(battle, Action.READMIT, battle.exclusion_reason, note, actor)
    battle.status = Battle.Status.JUDGING
    battle.exclusion_reason = ""
    battle.decide_due_at = timezone.now()  # open again: the decider looks at it
    battle.save(update_fields=["status", "exclusion_reason", "decide_due_at"])
    leaderboard_changed(arena_id=battle.arena_id)  # the board's exclusion counts
    return entry


def _log(battle: Battle, action: str, reason: str, note: str, actor) -> ExclusionLogEntry:
    return ExclusionLogEntry.objects.create(
        battle=battle, action=action, reason=reason, note=note, actor=actor, at=timezone.now()
    )


def battle_exclusion_check(*, battle: Battle, action: str, reason: str = "") -> None:
    """Whether an operator may apply ``action`` (exclude / readmit) to the battle now."""
    if action == Action.EXCLUDE:
        if reason not in Reason.values:
            raise ApplicationError(
                f"reason must be one of {', '.join(Reason.values)}.", code="invalid_reason"
            )
        if battle.status not in (Battle.Status.JUDGING, Battle.Status.DECIDED):
            raise ApplicationError(
                f"Battle {battle.pk} is {battle.status}; only a battle being judged or "
                "decided can be excluded.",
                code="not_excludable",
                status=409,
            )
    elif action == Action.READMIT:
        if battle.status != Battle.Status.EXCLUDED:
            raise ApplicationError(
                f"Battle {battle.pk} is {battle.status}, not excluded.",
                code="not_excluded",
                status=409,
            )
    else:
        raise ApplicationError("action must be exclude or readmit.", code="invalid_action")
