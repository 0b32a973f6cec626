"""Reads of machine verdicts (``judging.services.machine``): a battle's verdicts, only
once the battle is decided or excluded (never to anyone while a vote on it can still
count), and the human–machine agreement on decided battles.

Agreement is measured on battles decided by humans (``decision_source`` crowd or
submitter: never an import) that have a resolved machine verdict, per judge model and
method, overall and per task category. The confusion table keeps the human outcome as
decided (A, B, tie, both bad: rows) against the machine's (A, B, tie: columns); the
agreement rate and Cohen's κ read "both bad" as a draw, as the board does (y = ½ for
both), so that the two raters share one set of categories: A, B, draw."""

from collections import defaultdict
from typing import Any

from django.db.models import Q

from battles.classify import BOARD_CATEGORIES, CATEGORY_LABELS
from battles.models import Battle
from judging import agreement
from judging.models import MachineVerdict

SHOWN_WHEN = (Battle.Status.DECIDED, Battle.Status.EXCLUDED)
HUMAN_OUTCOMES = ("A", "B", "tie", "both_bad")
MACHINE_OUTCOMES = ("A", "B", "tie")
# The shared categories of the agreement rate and κ: human "both bad" is a draw.
AS_DRAW = {"A": "A", "B": "B", "tie": "tie", "both_bad": "tie"}
UNCATEGORISED = "uncategorised"


def machine_verdict_payload(verdict: MachineVerdict) -> dict[str, Any]:
    return {
        "method": verdict.method,
        "judge_model": verdict.judge_model,
        "status": verdict.status,
        "outcome": verdict.outcome or None,
        "reason": verdict.reason,
        "agreement": verdict.agreement,
        "ab_winner": verdict.ab_winner or None,
        "ba_winner": verdict.ba_winner or None,
        "ab_reason": verdict.ab_reason,
        "ba_reason": verdict.ba_reason,
        "ab_raw": verdict.ab_raw,
        "ba_raw": verdict.ba_raw,
        "rubric_sha256": verdict.rubric_sha256 or None,
        "score_a": verdict.score_a,
        "score_b": verdict.score_b,
        "criteria": verdict.criteria or None,
        "calls": verdict.calls,
        "created_at": verdict.created_at.isoformat(),
    }


def battle_machine_verdicts(battle: Battle) -> list[dict[str, Any]] | None:
    """The battle's machine verdicts, or None while the battle is not decided nor
    excluded: before then nobody is shown them (a judge who still may vote would be
    steered). The caller has checked that the reader may see the battle."""
    if battle.status not in SHOWN_WHEN:
        return None
    rows = MachineVerdict.objects.filter(battle=battle).order_by("judge_model", "method")
    return [machine_verdict_payload(v) for v in rows]


def _cell(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """n, agreement, κ and the confusion table of (human, machine) outcome pairs."""
    table = {h: dict.fromkeys(MACHINE_OUTCOMES, 0) for h in HUMAN_OUTCOMES}
    square = [[0] * len(MACHINE_OUTCOMES) for _ in MACHINE_OUTCOMES]
    index = {c: i for i, c in enumerate(MACHINE_OUTCOMES)}
    for human, machine in pairs:
        table[human][machine] += 1
        square[index[AS_DRAW[human]]][index[machine]] += 1
    n = len(pairs)
    agreed = sum(square[i][i] for i in range(len(MACHINE_OUTCOMES)))
    return {
        "n": n,
        "agreed": agreed,
        "agreement": agreed / n if n else None,
        "kappa": agreement.cohen_kappa(square),
        "confusion": table,
    }


def _decided_by_humans(arena_id: int) -> Q:
    return Q(
        battle__arena_id=arena_id,
        battle__status=Battle.Status.DECIDED,
        battle__decision_source__in=[Battle.DecisionSource.CROWD, Battle.DecisionSource.SUBMITTER],
    ) & ~Q(battle__outcome="")


def machine_agreement(*, arena_id: int) -> dict[str, Any]:
    """Human–machine agreement of the arena, per (judge model, method): overall and per
    task category (categories in ``battles.classify`` order, then tasks without one).
    Public data only: decided battles (a decision is public when made)."""
    rows = (
        MachineVerdict.objects.filter(_decided_by_humans(arena_id), status="resolved")
        .order_by("judge_model", "method", "battle_id")
        .values_list(
            "judge_model", "method", "outcome", "battle__outcome", "battle__task__category"
        )
    )
    grouped: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for judge_model, method, machine, human, category in rows:
        grouped[(judge_model, method)][category or UNCATEGORISED].append((human, machine))
    order = [*BOARD_CATEGORIES, UNCATEGORISED]
    judges = []
    for (judge_model, method), by_category in sorted(grouped.items()):
        every = [pair for pairs in by_category.values() for pair in pairs]
        judges.append(
            {
                "judge_model": judge_model,
                "method": method,
                "overall": _cell(every),
                "categories": [
                    {
                        "category": c,
                        "label": CATEGORY_LABELS.get(c, "Uncategorised"),
                        **_cell(by_category[c]),
                    }
                    for c in order
                    if by_category.get(c)
                ],
            }
        )
    return {
        "judges": judges,
        "human_outcomes": list(HUMAN_OUTCOMES),
        "machine_outcomes": list(MACHINE_OUTCOMES),
    }


def machine_verdict_counts(*, arena_id: int) -> dict[str, int]:
    """Verdicts by status on the arena's decided or excluded battles (public ones)."""
    counts = dict.fromkeys(MachineVerdict.Status.values, 0)
    for status in MachineVerdict.objects.filter(
        battle__arena_id=arena_id, battle__status__in=SHOWN_WHEN
    ).values_list("status", flat=True):
        counts[status] += 1
    return counts
