"""A judge's reasons for a vote (docs/method.md, "Reasons with votes"): after voting on a
battle, the judge may tag each side (A, B) with codes of the fixed taxonomy
``VoteReason.Tag`` and add a short note; never required, editable for as long as the
vote stands. Only the side letters are involved: nothing here names an agent.

Refusals, checked in this order: 404 for a battle the judge may not open (another team's
battle never served to them: ``battles.selectors.visible_battles``), 400 for a side that
is not A or B, tags that are not a list of known codes, a note that is not text or is
over ``VoteReason.NOTE_MAX`` characters, and 400 when the judge has no live vote on the
battle (tags go with a vote: before voting, or after undoing it, there is nothing to
tag). What counts in the tallies is decided on read (``VoteReasonQuerySet.counted``)."""

from collections.abc import Mapping
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from arena_site.exceptions import ApplicationError
from battles.selectors import visible_battles
from judging.models import Vote, VoteReason

SIDES = tuple(VoteReason.Side.values)
TAGS = frozenset(VoteReason.Tag.values)


@dataclass(frozen=True)
class SideReasons:
    """One side's tags (distinct known codes, in taxonomy order) and note, as checked."""

    tags: tuple[str, ...]
    note: str


def side_reasons_check(*, side: object, tags: object, note: object) -> SideReasons:
    """The input for one side, checked: 400 with a message a person can act on."""
    if side not in SIDES:
        raise ApplicationError(f"side must be A or B, not {str(side)[:20]!r}.", code="invalid_side")
    if tags is None:
        tags = []
    if not isinstance(tags, list | tuple) or not all(isinstance(t, str) for t in tags):
        raise ApplicationError("tags must be a list of tag codes.", code="invalid_tags")
    unknown = sorted({t for t in tags if t not in TAGS})
    if unknown:
        raise ApplicationError(
            f"Unknown tag {unknown[0][:40]!r}; the tags are: {', '.join(VoteReason.Tag.values)}.",
            code="unknown_tag",
        )
    if note is None:
        note = ""
    if not isinstance(note, str):
        raise ApplicationError("note must be text.", code="invalid_note")
    note = note.strip()
    if len(note) > VoteReason.NOTE_MAX:
        raise ApplicationError(
            f"The note has {len(note)} characters; at most {VoteReason.NOTE_MAX} are kept.",
            code="note_too_long",
        )
    chosen = set(tags)
    return SideReasons(tuple(t for t in VoteReason.Tag.values if t in chosen), note)


def battle_for_reasons(*, judge: AbstractBaseUser, battle_id: int) -> None:
    """404 unless the judge may open the battle (its team, a judge it was served to,
    staff): indistinguishable from a battle that does not exist."""
    if not visible_battles(judge).filter(pk=battle_id).exists():
        raise ApplicationError("No such battle.", code="not_found", status=404)


@transaction.atomic
def vote_reasons_set(
    *, judge: AbstractBaseUser, battle_id: int, sides: Mapping[str, Mapping[str, object]]
) -> dict[str, VoteReason]:
    """Sets the tags and note of each side in ``sides`` ({"A": {"tags": [...], "note":
    "..."}, ...}) on the judge's live vote on the battle, all or nothing; sides not
    given keep what they had. Returns the stored rows by side. Locks the vote's row, so
    an undo and a tagging of the same vote run one after the other: tags never land on a
    vote that was retracted meanwhile."""
    battle_for_reasons(judge=judge, battle_id=battle_id)
    if not sides:
        raise ApplicationError("Give the tags of side A, side B or both.", code="no_sides")
    checked = {
        side: side_reasons_check(side=side, tags=given.get("tags"), note=given.get("note"))
        for side, given in sides.items()
    }
    vote = (
        Vote.objects.select_for_update()
        .filter(judge=judge, battle_id=battle_id, retracted=False)
        .first()
    )
    if vote is None:
        raise ApplicationError(
            "You have no vote on this battle: vote first, then say why.", code="no_vote"
        )
    now = timezone.now()
    stored = {}
    for side, reasons in checked.items():
        stored[side], _ = VoteReason.objects.update_or_create(
            vote=vote,
            side=side,
            defaults={"tags": list(reasons.tags), "note": reasons.note, "updated_at": now},
        )
    return stored
