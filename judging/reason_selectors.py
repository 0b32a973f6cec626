"""Reads of the judges' reasons (``judging.services.reasons``): a judge's own tags on
their live vote (the form and the API), the taxonomy as shown, and the tallies per agent
that the agent page and the judging-quality page show. Tallies count only what
``VoteReasonQuerySet.counted`` admits: decided battles, so no tally moves while a vote on
the battle can still count or be undone (a count that moved then would tell a judge
which agent was which side)."""

from collections import Counter, defaultdict
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.utils import timezone

from arena_site.exceptions import ApplicationError
from judging.models import TAG_DEFINITIONS, WENT_RIGHT, Vote, VoteReason
from judging.services.reasons import battle_for_reasons
from judging.services.trust import probation_applies


def taxonomy() -> list[dict[str, str]]:
    """Every tag in taxonomy order: code, label, one-line definition, and kind
    ("wrong" or "right")."""
    return [
        {
            "code": code,
            "label": label,
            "definition": TAG_DEFINITIONS[code],
            "kind": "right" if code in WENT_RIGHT else "wrong",
        }
        for code, label in VoteReason.Tag.choices
    ]


def judge_vote_reasons(*, judge: AbstractBaseUser, battle_id: int) -> tuple[Vote, dict]:
    """The judge's live vote on the battle and its reasons per side ({"A": {"tags",
    "note", "updated_at"}, "B": ...}; empty for a side not tagged). 404 for a battle the
    judge may not open or without a live vote of theirs."""
    battle_for_reasons(judge=judge, battle_id=battle_id)
    vote = Vote.objects.filter(judge=judge, battle_id=battle_id, retracted=False).first()
    if vote is None:
        raise ApplicationError("You have no vote on this battle.", code="not_found", status=404)
    sides: dict[str, dict[str, Any]] = {
        side: {"tags": [], "note": "", "updated_at": None} for side in VoteReason.Side.values
    }
    for row in vote.reasons.all():
        sides[row.side] = {"tags": list(row.tags), "note": row.note, "updated_at": row.updated_at}
    return vote, sides


def _counted():
    return VoteReason.objects.counted(now=timezone.now(), probation_applies=probation_applies())


def _tally(counter: Counter, tagged: int) -> dict[str, Any]:
    rows = [dict(t, count=counter.get(t["code"], 0)) for t in taxonomy()]
    return {
        "tagged": tagged,
        "wrong": [r for r in rows if r["kind"] == "wrong"],
        "right": [r for r in rows if r["kind"] == "right"],
    }


def agent_reason_counts(*, agent_id: int) -> dict[str, Any]:
    """How often judges gave each tag to the agent's side, over ``tagged`` counted tag
    sets (one per vote and side: a judge counts once per battle)."""
    rows = _counted().filter(
        Q(side="A", vote__battle__agent_a_id=agent_id)
        | Q(side="B", vote__battle__agent_b_id=agent_id)
    )
    counter: Counter = Counter()
    tagged = 0
    for tags in rows.values_list("tags", flat=True):
        tagged += 1
        counter.update(set(tags))
    return _tally(counter, tagged)


def arena_reason_counts(*, arena_id: int) -> list[dict[str, Any]]:
    """``agent_reason_counts`` for every agent of the arena with a counted tag set, most
    tagged first: {"agent": slug, "name", "tagged", "counts": [count per tag in
    taxonomy order]}."""
    rows = _counted().filter(vote__battle__arena_id=arena_id)
    counters: dict[tuple[str, str], Counter] = defaultdict(Counter)
    tagged: Counter = Counter()
    for side, tags, *agents in rows.values_list(
        "side",
        "tags",
        "vote__battle__agent_a__slug",
        "vote__battle__agent_a__display_name",
        "vote__battle__agent_b__slug",
        "vote__battle__agent_b__display_name",
    ):
        agent = (agents[0], agents[1]) if side == "A" else (agents[2], agents[3])
        counters[agent].update(set(tags))
        tagged[agent] += 1
    codes = VoteReason.Tag.values
    table = [
        {
            "agent": slug,
            "name": name,
            "tagged": tagged[(slug, name)],
            "counts": [counters[(slug, name)].get(code, 0) for code in codes],
        }
        for slug, name in counters
    ]
    table.sort(key=lambda r: (-r["tagged"], r["agent"]))
    return table
