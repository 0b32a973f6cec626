"""Agreement statistics on hand-computed tables and on published reference values."""

from fractions import Fraction

import pytest

from judging.agreement import (
    agreement_with_consensus,
    fleiss_kappa,
    pairwise_agreement,
    rating_table,
)

# Fleiss (1971): 30 patients, 6 psychiatrists each, 5 diagnoses. Published κ = 0.430
# (R irr::kappam.fleiss on the same data: 0.4302445).
FLEISS_1971 = [
    [4, 4, 4, 4, 4, 4], [2, 2, 2, 5, 5, 5], [2, 3, 3, 3, 3, 5], [5, 5, 5, 5, 5, 5],
    [2, 2, 2, 4, 4, 4], [1, 1, 3, 3, 3, 3], [3, 3, 3, 3, 5, 5], [1, 1, 3, 3, 3, 4],
    [1, 1, 4, 4, 4, 4], [5, 5, 5, 5, 5, 5], [1, 4, 4, 4, 4, 4], [1, 2, 4, 4, 4, 4],
    [2, 2, 2, 3, 3, 3], [1, 4, 4, 4, 4, 4], [2, 2, 4, 4, 4, 5], [3, 3, 3, 3, 3, 5],
    [1, 1, 1, 4, 5, 5], [1, 1, 1, 1, 1, 2], [2, 2, 4, 4, 4, 4], [1, 3, 3, 5, 5, 5],
    [5, 5, 5, 5, 5, 5], [2, 4, 4, 4, 4, 4], [2, 2, 4, 5, 5, 5], [1, 1, 4, 4, 4, 4],
    [1, 4, 4, 4, 4, 5], [2, 2, 2, 2, 2, 4], [1, 1, 1, 1, 5, 5], [2, 2, 4, 4, 4, 4],
    [1, 3, 3, 3, 3, 3], [5, 5, 5, 5, 5, 5],
]  # fmt: skip
# Wikipedia's "Fleiss' kappa" worked example: 10 subjects, 14 raters, κ = 0.210.
WIKIPEDIA = [
    [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
]  # fmt: skip


def textbook_kappa(table, raters):
    """Fleiss' 1971 formulas for a constant number of raters, in exact fractions."""
    subjects = len(table)
    p_j = [Fraction(sum(col), subjects * raters) for col in zip(*table, strict=True)]
    p_i = [Fraction(sum(n * n for n in row) - raters, raters * (raters - 1)) for row in table]
    p_bar = sum(p_i) / subjects
    p_e = sum(p * p for p in p_j)
    return (p_bar - p_e) / (1 - p_e)


def test_fleiss_1971_diagnoses():
    table = rating_table(
        ((patient, str(d)) for patient, row in enumerate(FLEISS_1971) for d in row),
        categories=("1", "2", "3", "4", "5"),
    )
    assert len(table) == 30 and all(sum(row) == 6 for row in table)
    by_hand = textbook_kappa(table, raters=6)
    assert fleiss_kappa(table) == pytest.approx(float(by_hand), abs=1e-12)
    assert fleiss_kappa(table) == pytest.approx(0.4302445, abs=1e-7)
    assert round(fleiss_kappa(table), 3) == 0.430


def test_wikipedia_worked_example():
    assert fleiss_kappa(WIKIPEDIA) == pytest.approx(float(textbook_kappa(WIKIPEDIA, 14)))
    assert fleiss_kappa(WIKIPEDIA) == pytest.approx(0.20993, abs=1e-5)


@pytest.mark.parametrize(
    ("table", "kappa", "pairwise"),
    [
        # Unanimous on one battle, 2:1 on the other. P̄ = (1 + 1/3)/2 = 2/3;
        # p = (5/6, 1/6), Pₑ = 26/36; κ = (2/3 − 13/18)/(5/18) = −1/5. Pairs 8 of 12.
        ([[3, 0, 0, 0], [2, 1, 0, 0]], -0.2, 2 / 3),
        # Unanimous each time, on different verdicts: κ = 1.
        ([[3, 0, 0, 0], [0, 3, 0, 0]], 1.0, 1.0),
        # Judges always split 1:1 between A and B: P̄ = 0, Pₑ = 1/2, κ = −1.
        ([[1, 1, 0, 0], [1, 1, 0, 0]], -1.0, 0.0),
        # Varying n: P = (1, 0, 1/3), P̄ = 4/9; p = (3/7, 3/7, 1/7, 0), Pₑ = 19/49;
        # κ = (4/9 − 19/49)/(30/49) = 5/54. Agreeing pairs (2 + 0 + 2) of (2 + 2 + 6).
        ([[2, 0, 0, 0], [1, 1, 0, 0], [0, 2, 1, 0]], 5 / 54, 0.4),
        # A battle with a single rating carries no pair and is ignored.
        ([[3, 0, 0, 0], [0, 3, 0, 0], [0, 0, 1, 0]], 1.0, 1.0),
    ],
)
def test_hand_computed_tables(table, kappa, pairwise):
    assert fleiss_kappa(table) == pytest.approx(kappa)
    assert pairwise_agreement(table) == pytest.approx(pairwise)


@pytest.mark.parametrize("table", [[], [[1, 0, 0, 0]], [[0, 0, 0, 0]], [[3, 0, 0, 0]]])
def test_kappa_is_undefined_without_pairs_or_with_one_category(table):
    assert fleiss_kappa(table) is None


def test_pairwise_is_undefined_without_pairs():
    assert pairwise_agreement([[1, 0, 0, 0], [0, 1, 0, 0]]) is None
    assert pairwise_agreement([[4, 0, 0, 0]]) == 1.0


def test_negative_counts_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        fleiss_kappa([[3, -1, 0, 0]])


def test_rating_table_drops_abstentions_and_refuses_unknown_choices():
    votes = [(1, "A"), (1, "abstain"), (1, "A"), (2, "tie"), (2, "both_bad"), (3, "abstain")]
    assert rating_table(votes) == [[2, 0, 0, 0], [0, 0, 1, 1]]
    with pytest.raises(ValueError, match="unknown category"):
        rating_table([(1, "C")])


def test_agreement_with_consensus_counts_only_decided_non_abstentions():
    votes = [
        ("ann", 1, "A"), ("ann", 2, "B"), ("ann", 3, "A"), ("ann", 4, "abstain"),
        ("ben", 1, "B"), ("ben", 3, "tie"),
    ]  # fmt: skip
    outcomes = {1: "A", 2: "tie", 3: "", 4: "A"}  # battle 3 is not decided yet
    assert agreement_with_consensus(votes, outcomes) == {"ann": (1, 2), "ben": (0, 1)}
