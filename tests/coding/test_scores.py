"""The judge's scores and their composite (coding.scores), as tables."""

import math

import pytest

from coding.scores import (
    EMPTY_COMPLEXITY,
    LIZARD_MAX_CHARS,
    ComplexitySummary,
    complexity_score,
    composite,
    cost_efficiency,
    functional_score,
    lint_score,
    parse_lizard_csv,
)


@pytest.mark.parametrize(
    ("exit_code", "score"),
    [(0, 1.0), (1, 0.0), (2, 0.0), (-9, 0.0), (124, 0.0), (None, 0.0), (False, 0.0)],
)
def test_functional_score(exit_code, score):
    assert functional_score(exit_code) == score


@pytest.mark.parametrize(
    ("before", "after", "score"),
    [
        (3, 3, 1.0),
        (3, 5, 0.8),
        (0, 1, 0.9),
        (5, 0, 1.0),  # fewer warnings than before is not above 1
        (0, 10, 0.0),
        (0, 15, 0.0),
        (-4, 2, 0.8),  # a negative count is taken as 0
        (2, -3, 1.0),
    ],
)
def test_lint_score(before, after, score):
    assert lint_score(before, after) == score


@pytest.mark.parametrize(("before", "after"), [(0, math.nan), (math.inf, 3)])
def test_lint_score_refuses_counts_that_are_not_numbers(before, after):
    with pytest.raises(ValueError):
        lint_score(before, after)


# Real output of `python3 -m lizard --csv` (lizard 1.24.3) on a two-function file.
LIZARD = (
    '4,2,12,1,4,"a@1-4@/tmp/sample.py","/tmp/sample.py","a","a( x )",1,4\n'
    '4,4,18,2,4,"m@7-10@/tmp/sample.py","/tmp/sample.py","m","m( self , y )",7,10\n'
)
LIZARD_HEADER = "NLOC,CCN,token,PARAM,length,location,file,function,long_name,start,end\n"
# lizard does not escape a '"' in a file name
LIZARD_ODD_NAME = (
    '3,7,9,2,3,"f@1-3@/tmp/q/we,ird "n".py","/tmp/q/we,ird "n".py","f","f( a , b )",1,3\n'
)


@pytest.mark.parametrize(
    ("text", "summary"),
    [
        (LIZARD, ComplexitySummary(functions=2, total_ccn=6, max_ccn=4, mean_ccn=3.0)),
        (LIZARD_HEADER + LIZARD, ComplexitySummary(2, 6, 4, 3.0)),
        (LIZARD + LIZARD_ODD_NAME, ComplexitySummary(3, 13, 7, 13 / 3)),
        ("WARNING: no such file\n" + LIZARD + "garbage,,,\n", ComplexitySummary(2, 6, 4, 3.0)),
        ('1,12345678901,1,1,1,"x@1-1@f","f","x","x( )",1,1\n', EMPTY_COMPLEXITY),
        ("", EMPTY_COMPLEXITY),
        ("NLOC,CCN\n1,2\n", EMPTY_COMPLEXITY),
        (None, EMPTY_COMPLEXITY),
        (b"4,2,12,1,4", EMPTY_COMPLEXITY),
    ],
)
def test_parse_lizard_csv(text, summary):
    assert parse_lizard_csv(text) == summary


def test_parse_lizard_csv_is_bounded():
    row = '1,1,1,0,1,"f@1-1@x.py","x.py","f","f( )",1,1\n'
    rows = LIZARD_MAX_CHARS // len(row)  # 186413 whole rows in the first 8 MiB
    beyond = '9,99,1,0,1,"g@1-1@x.py","x.py","g","g( )",1,1'
    summary = parse_lizard_csv(row * (rows + 1000) + beyond)
    assert summary == ComplexitySummary(rows, rows, 1, 1.0)


def summary(mean: float, functions: int = 4) -> ComplexitySummary:
    return ComplexitySummary(functions, round(mean * functions), math.ceil(mean), mean)


@pytest.mark.parametrize(
    ("before", "after", "score"),
    [
        (summary(3.0), summary(3.0), 1.0),
        (summary(3.0), summary(2.5), 1.0),
        (summary(3.0), summary(5.0), 0.8),
        (summary(3.0), summary(3.35), 0.965),
        (summary(3.0), summary(20.0), 0.0),
        (summary(3.0), EMPTY_COMPLEXITY, 1.0),  # no function left in the changed files
        (EMPTY_COMPLEXITY, EMPTY_COMPLEXITY, 1.0),
        (EMPTY_COMPLEXITY, summary(7.0), 0.8),  # new files against the baseline of 5
        (EMPTY_COMPLEXITY, summary(4.0), 1.0),
        (summary(3.0), ComplexitySummary(1, 1, 1, math.nan), 0.0),
    ],
)
def test_complexity_score(before, after, score):
    assert complexity_score(before, after) == score


@pytest.mark.parametrize(
    ("cost", "score"),
    [
        (0.0, 1.0),
        (0, 1.0),
        (0.5, 0.5),
        (1.5, 0.25),
        (0.25, 0.6667),
        (math.inf, 0.0),
        (None, None),
        (math.nan, None),
        (-1.0, None),
        (True, None),
    ],
)
def test_cost_efficiency(cost, score):
    assert cost_efficiency(cost) == score


@pytest.mark.parametrize(
    ("components", "score"),
    [
        ((1.0, 1.0, 1.0, 1.0, 1.0), 1.0),
        ((1.0, 0.75, 0.8, 0.965, 0.5), 0.8515),
        ((1.0, None, None, None, None), 0.4),
        ((1.0, 0.0, 0.0, 0.0, 0.0), 0.4),
        ((1.0, math.nan, 2.0, -1.0, 0.5), 0.55),  # NaN counts as 0; clamped to [0, 1]
        ((1.0, 1.0, 1.0, 1.0, None), 0.9),
        ((0.0, 1.0, 1.0, 1.0, 1.0), 0.0),  # the functional gate
        ((0.99, 1.0, 1.0, 1.0, 1.0), 0.0),
        ((None, 1.0, 1.0, 1.0, 1.0), 0.0),
        ((math.nan, 1.0, 1.0, 1.0, 1.0), 0.0),
    ],
)
def test_composite(components, score):
    assert composite(*components) == score
