"""The rows of each open-data table for one export's scope: which arena, the
publication cutoff, the pseudonym key. Reads (exports.selectors), except that the
``battles`` table first makes the redactions its instructions still lack
(exports.instructions)."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q, QuerySet

from exports import selectors
from exports.instructions import follow_ups_redact, instructions_redact
from exports.pseudonyms import judge_pseudonym, key_id, pseudonym_key


@dataclass(frozen=True)
class ExportScope:
    arena_id: int
    arena_slug: str
    now: datetime
    delay_days: int
    key: bytes = field(repr=False)

    @classmethod
    def build(
        cls,
        *,
        arena_id: int,
        arena_slug: str,
        now: datetime,
        delay_days: int | None = None,
        secret: str | None = None,
    ) -> "ExportScope":
        """The scope with the settings' delay and a key derived from the arena's secret
        key unless given (tests pass their own secret)."""
        return cls(
            arena_id=arena_id,
            arena_slug=arena_slug,
            now=now,
            delay_days=settings.ARENA.export_delay_days if delay_days is None else delay_days,
            key=pseudonym_key(settings.SECRET_KEY if secret is None else secret),
        )

    @property
    def cutoff(self) -> datetime:
        """Battles decided (or excluded) after this are not published yet."""
        return self.now - timedelta(days=self.delay_days)

    @property
    def key_id(self) -> str:
        return key_id(self.key)

    def pseudonym(self, user_id: int) -> str:
        return judge_pseudonym(user_id, self.key)

    def battles(self) -> QuerySet:
        return selectors.exportable_battles(arena_id=self.arena_id, cutoff=self.cutoff)

    def exclusions(self) -> QuerySet:
        return selectors.exportable_exclusions(arena_id=self.arena_id, cutoff=self.cutoff)


def _voted_battles(scope: ExportScope) -> Q:
    return Q(battle_id__in=scope.battles().values("pk")) | Q(
        battle_id__in=scope.exclusions().values("pk")
    )


def _battle_rows(scope: ExportScope) -> Iterator[dict]:
    instructions_redact(scope.battles().values("task_id"))
    return selectors.battle_rows(
        scope.battles(), arena_slug=scope.arena_slug, pseudonym=scope.pseudonym
    )


def _follow_up_rows(scope: ExportScope) -> Iterator[dict]:
    follow_ups_redact(_voted_battles(scope))
    return selectors.follow_up_rows(_voted_battles(scope))


ROWS: dict[str, Callable[[ExportScope], Iterator[dict]]] = {
    "battles": _battle_rows,
    "votes": lambda s: selectors.vote_rows(_voted_battles(s), now=s.now, pseudonym=s.pseudonym),
    "vote_reasons": lambda s: selectors.vote_reason_rows(
        _voted_battles(s), now=s.now, pseudonym=s.pseudonym
    ),
    "follow_ups": _follow_up_rows,
    "exclusions": lambda s: selectors.exclusion_rows(s.exclusions(), arena_slug=s.arena_slug),
    "ratings": lambda s: selectors.rating_rows(arena_id=s.arena_id, arena_slug=s.arena_slug),
    "runs": lambda s: selectors.run_rows(s.battles().values("pk")),
    "steps": lambda s: selectors.step_rows(s.battles().values("pk")),
}


def table_rows(name: str, scope: ExportScope) -> Iterator[dict]:
    return ROWS[name](scope)
