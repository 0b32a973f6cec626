"""What a judge is shown about their own vote (the page and the API say the same)."""

from typing import Any

from battles.presenters import battle_reveal
from judging.services.voting import VoteStatus


def vote_status_payload(status: VoteStatus) -> dict[str, Any]:
    vote = status.vote
    return {
        "vote": vote.pk,
        "battle": vote.battle_id,
        "choice": vote.choice,
        "final": status.final,
        "undo_until": None if status.final else vote.final_at.isoformat(),
        "counts": status.counts,
        "admissible": vote.admissible,
        "inadmissible_reason": vote.inadmissible_reason or None,
        "submitter_vote": vote.is_submitter,
        "battle_status": vote.battle.status,
        "message": status.message,
        "reveal": battle_reveal(vote.battle) if status.reveal else None,
        "status_url": f"/api/battles/{vote.battle_id}/votes/mine/",
    }
