"""What a judge is shown: their own vote (the page and the API say the same), and the
two sides laid out as replays."""

from typing import Any

from battles.models import FollowUp, FollowUpReceipt
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


# Pages a browser shows before anything was opened: a screenshot of one shows the empty
# window, not what the agent did.
BLANK_PAGE_URLS = frozenset(
    {"about:blank", "about:newtab", "chrome://newtab/", "chrome://new-tab-page/"}
)


def shows_something(step: dict[str, Any]) -> bool:
    """Whether a step's screenshot is worth showing first: it has one, and the browser was
    not on a blank page when it was taken (a step without page state, a shell-only
    sandbox's, counts as showing something)."""
    if not step.get("screenshot"):
        return False
    page = step.get("page") or {}
    return (page.get("url") or "").strip().lower() not in BLANK_PAGE_URLS


def replay_start(steps: list[dict[str, Any]]) -> int:
    """Where a side's replay opens: the latest step whose screenshot shows something, else
    the last step (0 for none). The judge sees each side's end state at a glance."""
    for position in range(len(steps) - 1, -1, -1):
        if shows_something(steps[position]):
            return position
    return max(0, len(steps) - 1)


def follow_ups_received(battle_id: int) -> list[dict[str, Any]]:
    """The submitter's follow-ups to a battle (docs/conversations.md), in order, each
    with the step (1-based, as the judge page counts) at which each side received it:
    the same words reached both sides, each at its next step."""
    seen: dict[int, dict[str, int]] = {}
    receipts = FollowUpReceipt.objects.filter(run__battle_id=battle_id)
    for follow_up, side, step in receipts.values_list("follow_up_id", "run__side", "step_index"):
        seen.setdefault(follow_up, {})[side] = step + 1
    return [
        {"seq": seq, "text": text, "steps": [(side, seen.get(pk, {}).get(side)) for side in "AB"]}
        for pk, seq, text in FollowUp.objects.filter(battle_id=battle_id)
        .order_by("seq")
        .values_list("pk", "seq", "text")
    ]


def replay_sides(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The two sides of a blind battle payload as the judge page lays them out: the run,
    the step its replay opens at, whether any screenshot showed more than a blank
    browser window, and the submitter's follow-ups (the same list on both sides)."""
    follow_ups = follow_ups_received(payload["id"]) if payload.get("id") else []
    sides = []
    for side in ("A", "B"):
        run = payload["sides"][side] or {"steps": [], "final_message": "", "files": []}
        steps = run["steps"]
        sides.append(
            {
                "side": side,
                "run": run,
                "start": replay_start(steps),
                "blank_only": bool(steps) and not any(shows_something(s) for s in steps),
                "follow_ups": follow_ups,
            }
        )
    return sides
