"""r and ℓ (SPEC §6) of battles in tests: read from, or written as, the refit run that
first included each battle (``ratings.models.Incorporation``)."""

from datetime import datetime

from ratings.models import IncorporatedBattle, Incorporation


def stamps_of(battles) -> dict[int, tuple[datetime | None, datetime | None]]:
    """(r, ℓ) per battle id; (None, None) for a battle no published refit includes."""
    ids = [getattr(battle, "pk", battle) for battle in battles]
    found = {
        row.battle_id: (row.incorporation.incorporated_at, row.incorporation.leaderboard_served_at)
        for row in IncorporatedBattle.objects.filter(battle_id__in=ids).select_related(
            "incorporation"
        )
    }
    return {pk: found.get(pk, (None, None)) for pk in ids}


def r_of(battle) -> datetime | None:
    return stamps_of([battle])[battle.pk][0]


def ell_of(battle) -> datetime | None:
    return stamps_of([battle])[battle.pk][1]


def stamp(battle, *, r: datetime, ell: datetime | None = None) -> Incorporation:
    """Records the battle as first included by a run at ``r``, served at ``ell``."""
    run = Incorporation.objects.create(
        arena_id=battle.arena_id, incorporated_at=r, leaderboard_served_at=ell
    )
    IncorporatedBattle.objects.create(battle_id=battle.pk, incorporation=run)
    return run


def unstamp(battle) -> None:
    """As if no published refit included the battle."""
    IncorporatedBattle.objects.filter(battle_id=battle.pk).delete()
