"""Whether a vote can count, by itself (SPEC §5.3): not a skip, not from an untrusted
judge, not cast while the battle's result was public to the judge, not faster than the
reading time. Pure: the caller brings the facts; settings give the constants."""

from datetime import datetime

from django.conf import settings

ABSTAIN = "abstain"


def reading_time_of(final_messages: list[str | None]) -> float:
    words = sum(len((message or "").split()) for message in final_messages)
    return max(settings.ARENA.min_read_s, words / settings.ARENA.read_words_per_s)


def inadmissible_reason(
    *,
    choice: str,
    served_at: datetime,
    voted_at: datetime,
    untrusted: bool,
    read_s: float,
    voided: bool = False,
) -> str:
    """Why the vote cannot count ("" when it is admissible), first reason first."""
    if voided:
        return "identities_public"
    if choice == ABSTAIN:
        return "abstain"
    if untrusted:
        return "untrusted_judge"
    if (voted_at - served_at).total_seconds() < read_s:
        return "too_fast"
    return ""
