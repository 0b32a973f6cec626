"""Agreement among judges on the redundancy sample (SPEC §5.2). Pure: no ORM.

A *table* has one row per battle and one column per category (``CATEGORIES``), each
cell the number of judges who chose that category. Abstentions are not a category:
they are dropped before counting. Rows with fewer than two ratings say nothing about
agreement and are ignored.

- Pairwise agreement: of all pairs of judges rating the same battle, the share that
  chose alike, pooled over battles: Σᵢ Σⱼ nᵢⱼ(nᵢⱼ − 1) / Σᵢ nᵢ(nᵢ − 1).
- Fleiss' κ (Fleiss 1971), in the form that allows nᵢ to vary by battle:
  Pᵢ = (Σⱼ nᵢⱼ² − nᵢ) / (nᵢ(nᵢ − 1)), P̄ = mean Pᵢ, pⱼ = Σᵢ nᵢⱼ / Σᵢ nᵢ,
  Pₑ = Σⱼ pⱼ², κ = (P̄ − Pₑ) / (1 − Pₑ). With equal nᵢ this is Fleiss' original.
"""

from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence

CATEGORIES = ("A", "B", "tie", "both_bad")
ABSTAIN = "abstain"

Table = list[list[int]]


def rating_table(
    ratings: Iterable[tuple[Hashable, str]], categories: Sequence[str] = CATEGORIES
) -> Table:
    """(battle, choice) pairs → a table, one row per battle in first-seen order.
    Abstentions are dropped; any other unknown choice is a ``ValueError``."""
    column = {c: j for j, c in enumerate(categories)}
    rows: dict[Hashable, list[int]] = {}
    for item, choice in ratings:
        if choice == ABSTAIN:
            continue
        if choice not in column:
            raise ValueError(f"unknown category {choice!r}")
        rows.setdefault(item, [0] * len(categories))[column[choice]] += 1
    return list(rows.values())


def _rated(table: Sequence[Sequence[int]]) -> list[Sequence[int]]:
    for row in table:
        if any(n < 0 for n in row):
            raise ValueError("counts must be non-negative")
    return [row for row in table if sum(row) >= 2]


def pairwise_agreement(table: Sequence[Sequence[int]]) -> float | None:
    """The share of agreeing judge pairs, or None without any pair."""
    rows = _rated(table)
    pairs = sum(sum(row) * (sum(row) - 1) for row in rows)
    if not pairs:
        return None
    return sum(n * (n - 1) for row in rows for n in row) / pairs


def fleiss_kappa(table: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' κ, or None when it is undefined (no rated row, or every rating in one
    category, where chance agreement Pₑ is 1)."""
    rows = _rated(table)
    if not rows:
        return None
    totals = [sum(row) for row in rows]
    p_bar = sum(
        (sum(n * n for n in row) - n_i) / (n_i * (n_i - 1))
        for row, n_i in zip(rows, totals, strict=True)
    ) / len(rows)
    grand = sum(totals)
    p_e = sum((sum(column) / grand) ** 2 for column in zip(*rows, strict=True))
    if p_e >= 1.0:
        return None
    return (p_bar - p_e) / (1.0 - p_e)


def agreement_with_consensus(
    votes: Iterable[tuple[Hashable, Hashable, str]], outcomes: dict[Hashable, str]
) -> dict[Hashable, tuple[int, int]]:
    """(judge, battle, choice) votes against each decided battle's outcome →
    judge → (agreed, compared). Abstentions and undecided battles are not compared."""
    tally: dict[Hashable, list[int]] = defaultdict(lambda: [0, 0])
    for judge, battle, choice in votes:
        outcome = outcomes.get(battle)
        if choice == ABSTAIN or not outcome:
            continue
        tally[judge][1] += 1
        tally[judge][0] += int(choice == outcome)
    return {judge: (agreed, seen) for judge, (agreed, seen) in tally.items()}


def cohen_kappa(confusion: Sequence[Sequence[int]]) -> float | None:
    """Cohen's κ (Cohen 1960) of two raters from their square confusion table
    (``confusion[i][j]``: items rater one put in category i and rater two in j):
    κ = (pₒ − pₑ) / (1 − pₑ), pₒ = Σᵢ nᵢᵢ / N, pₑ = Σᵢ (rowᵢ / N)(colᵢ / N). None when
    it is undefined: no item, or chance agreement pₑ = 1 (both raters put every item in
    one and the same category)."""
    size = len(confusion)
    if any(len(row) != size for row in confusion):
        raise ValueError("the confusion table must be square")
    if any(n < 0 for row in confusion for n in row):
        raise ValueError("counts must be non-negative")
    total = sum(sum(row) for row in confusion)
    if total == 0:
        return None
    observed = sum(confusion[i][i] for i in range(size)) / total
    rows = [sum(row) / total for row in confusion]
    columns = [sum(row[j] for row in confusion) / total for j in range(size)]
    chance = sum(r * c for r, c in zip(rows, columns, strict=True))
    if chance >= 1.0:
        return None
    return (observed - chance) / (1.0 - chance)
