"""Cohen's κ of two raters from their confusion table (judging.agreement.cohen_kappa)."""

import pytest

from judging.agreement import cohen_kappa


@pytest.mark.parametrize(
    ("confusion", "kappa"),
    [
        # the textbook example (Wikipedia, "Cohen's kappa"): 50 proposals, pₒ 0.7, pₑ 0.5
        ([[20, 5], [10, 15]], 0.4),
        ([[5, 0], [0, 5]], 1.0),  # complete agreement
        ([[25, 25], [25, 25]], 0.0),  # no better than chance
        ([[0, 5], [5, 0]], -1.0),  # complete disagreement, balanced
        # three categories (A, B, draw): pₒ 6/8, pₑ 22/64 → 13/21
        ([[2, 1, 0], [1, 2, 0], [0, 0, 2]], 13 / 21),
        ([[2, 0, 0], [1, 1, 0], [0, 0, 0]], 0.5),  # a category nobody used
        # degenerate: pₑ = 1 (both raters always said the same one category), no item
        ([[7, 0], [0, 0]], None),
        ([[0, 0, 0], [0, 0, 0], [0, 0, 9]], None),
        ([[0, 0], [0, 0]], None),
        ([], None),
    ],
)
def test_cohen_kappa(confusion, kappa):
    got = cohen_kappa(confusion)
    assert got == (kappa if kappa is None else pytest.approx(kappa, abs=1e-12))


@pytest.mark.parametrize(
    ("confusion", "says"),
    [([[1, 2]], "square"), ([[1, 0], [0]], "square"), ([[1, -1], [0, 2]], "non-negative")],
)
def test_cohen_kappa_refuses_what_is_no_confusion_table(confusion, says):
    with pytest.raises(ValueError, match=says):
        cohen_kappa(confusion)
