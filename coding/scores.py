"""The judge's scores of a coding run and their composite. Pure.

Four dimensions after seed 002 (functionality, regressions, lint, complexity) plus cost
efficiency. Functionality is a gate: a run whose success command failed scores 0 overall
whatever the rest says. Every score lies in [0, 1]; ``None`` means "not measured" (shown
as such) and counts as 0 in the composite.

The composite's weights are the arena's choice (the seed names the dimensions but gives
no weights): functional 0.40, regression 0.30, lint 0.10, complexity 0.10, cost
efficiency 0.10. They sum to 1, so the weighted mean is the weighted sum.
"""

import math
import re
from dataclasses import dataclass

WEIGHT_FUNCTIONAL = 0.40
WEIGHT_REGRESSION = 0.30
WEIGHT_LINT = 0.10
WEIGHT_COMPLEXITY = 0.10
WEIGHT_COST = 0.10
# One warning more than before costs this much of the lint score; one point of mean
# cyclomatic complexity more than before costs as much of the complexity score (seed 002).
PENALTY_PER_STEP = 0.1
# The cost at which cost efficiency is 0.5 (seed 002: $0 → 1.0, $0.50 → 0.5).
COST_HALF_USD = 0.50
# Files that had no function before the change (new files) have no baseline of their
# own; their mean CCN is compared with this one instead. Our choice: McCabe's "simple
# function" range ends at 10, lizard warns at 15; new code averaging above 5 loses score.
NEW_CODE_BASELINE_MEAN_CCN = 5.0

LIZARD_MAX_CHARS = 8 * 1024 * 1024


def _finite01(value: float | None) -> float:
    """A component for the composite: None, NaN and garbage count as 0, clamped to [0, 1]."""
    if value is None or isinstance(value, bool):
        return 0.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    if math.isnan(number):
        return 0.0
    return min(max(number, 0.0), 1.0)


def _count(value: int) -> int:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"a warning count must be finite, not {value!r}")
    return max(0, int(value))


def functional_score(exit_code: int | None) -> float:
    """1.0 when the success command exited 0; anything else (a timeout is None) is 0.0."""
    return 1.0 if exit_code == 0 and not isinstance(exit_code, bool) else 0.0


def lint_score(before: int, after: int) -> float:
    """``max(0, 1 − 0.1 · max(0, after − before))`` over the changed files' warnings.

    Fewer warnings than before does not score above 1: cleaning up is not the task, and
    a score above 1 would let lint outweigh the functional dimension. A negative count
    is taken as 0; a count that is not a finite number is the caller's bug (ValueError).
    """
    added = max(0, _count(after) - _count(before))
    return round(max(0.0, 1.0 - PENALTY_PER_STEP * added), 4)


@dataclass(frozen=True)
class ComplexitySummary:
    functions: int
    total_ccn: int
    max_ccn: int
    mean_ccn: float  # 0.0 when there is no function


EMPTY_COMPLEXITY = ComplexitySummary(functions=0, total_ccn=0, max_ccn=0, mean_ccn=0.0)

# ``python3 -m lizard --csv <files>`` (lizard 1.24.3; ``--verbose`` adds this header):
#   NLOC,CCN,token,PARAM,length,location,file,function,long_name,start,end
# e.g. 4,2,12,1,4,"a@1-4@/tmp/sample.py","/tmp/sample.py","a","a( x )",1,4
# Extensions append columns after ``end``. Lizard quotes the file name without escaping
# a '"' inside it, so only the two leading numeric columns are trusted: a row is a
# function only when it starts with NLOC and CCN and ends with the start and end lines.
_LIZARD_ROW = re.compile(r"^(\d{1,9}),(\d{1,9}),\d{1,9},\d{1,9},\d{1,9},\".*,(\d{1,9}),(\d{1,9})$")


def parse_lizard_csv(text: str) -> ComplexitySummary:
    """The functions and their cyclomatic complexity in lizard's CSV output.

    Reads the first ``LIZARD_MAX_CHARS`` only (a row is at least ~40 characters); lines
    that are not function rows (the header, warnings, garbage) are skipped. Precondition
    for the caller: the file names passed to lizard hold no line break, or a crafted name
    could add rows.
    """
    if not isinstance(text, str):
        return EMPTY_COMPLEXITY
    ccns: list[int] = []
    for line in text[:LIZARD_MAX_CHARS].splitlines():
        match = _LIZARD_ROW.match(line.strip())
        if match is None:
            continue
        ccns.append(int(match[2]))
    if not ccns:
        return EMPTY_COMPLEXITY
    total = sum(ccns)
    return ComplexitySummary(
        functions=len(ccns), total_ccn=total, max_ccn=max(ccns), mean_ccn=total / len(ccns)
    )


def complexity_score(before: ComplexitySummary, after: ComplexitySummary) -> float:
    """1.0 when the changed files' mean CCN did not rise (or they hold no function after
    the change); else ``max(0, 1 − 0.1 · (mean_after − mean_before))``.

    Without functions before (only new files), ``NEW_CODE_BASELINE_MEAN_CCN`` is the
    baseline.
    """
    if after.functions <= 0:
        return 1.0
    baseline = before.mean_ccn if before.functions > 0 else NEW_CODE_BASELINE_MEAN_CCN
    rise = after.mean_ccn - baseline
    if not math.isfinite(rise):
        return 0.0
    if rise <= 0:
        return 1.0
    return round(max(0.0, 1.0 - PENALTY_PER_STEP * rise), 4)


def cost_efficiency(cost_usd: float | None) -> float | None:
    """``1 / (1 + cost / 0.50)``: $0 → 1.0, $0.50 → 0.5, $1.50 → 0.25.

    None when the cost is unknown or not a cost (NaN, negative): not measured.
    """
    if cost_usd is None or isinstance(cost_usd, bool):
        return None
    cost = float(cost_usd)
    if math.isnan(cost) or cost < 0:
        return None
    return round(1.0 / (1.0 + cost / COST_HALF_USD), 4)


def composite(
    functional: float | None,
    regression: float | None,
    lint: float | None,
    complexity: float | None,
    cost_efficiency: float | None,
) -> float:
    """The functional gate, then the weighted mean (module docstring), rounded to 4 places.

    0.0 when ``functional`` is below 1 (or None); None and NaN components count as 0.
    """
    if _finite01(functional) < 1.0:
        return 0.0
    weighted = (
        WEIGHT_FUNCTIONAL * 1.0
        + WEIGHT_REGRESSION * _finite01(regression)
        + WEIGHT_LINT * _finite01(lint)
        + WEIGHT_COMPLEXITY * _finite01(complexity)
        + WEIGHT_COST * _finite01(cost_efficiency)
    )
    weights = WEIGHT_FUNCTIONAL + WEIGHT_REGRESSION + WEIGHT_LINT + WEIGHT_COMPLEXITY + WEIGHT_COST
    return round(weighted / weights, 4)
