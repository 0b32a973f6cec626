"""What a test command reported, read from its output or its JUnit XML. Pure.

The output comes from code the agent wrote, run in the judge sandbox: a test can print a
fake summary, and an ``atexit`` hook can even print one after pytest's own. The parsers
therefore read only the tail of the output (``OUTPUT_TAIL_CHARS``), take the *last*
summary, and never raise. The functional gate (``scores.functional_score``) rests on the
exit code alone, which printing cannot change; the counts only weigh the regression score.

Counting, for every parser: ``total = passed + failed + errors``. Skipped, xfailed and
deselected tests are not in the total; pytest's ``xpassed`` (an expected failure that
passed, not strict) counts as passed.
"""

import functools
import math
import re
from dataclasses import dataclass
from io import BytesIO
from xml.etree.ElementTree import ParseError

import defusedxml.ElementTree as safe_etree
from defusedxml import DefusedXmlException
from junitparser import Error, Failure, JUnitXml, JUnitXmlError, Skipped

OUTPUT_TAIL_CHARS = 64 * 1024
JUNIT_MAX_BYTES = 8 * 1024 * 1024
# pytest's own exit codes: 2 interrupted, 3 internal error, 4 usage error
# (https://docs.pytest.org/en/stable/reference/exit-codes.html).
PYTEST_CRASH_EXIT_CODES = frozenset({2, 3, 4})
CRASH_SIGNATURES = (
    "Traceback (most recent call last)",
    "ERROR collecting",
    "ImportError",
    "ModuleNotFoundError",
    "SyntaxError",
    "Segmentation fault",
    "INTERNALERROR",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# "=== 2 failed, 1 passed in 0.30s ===", "2 failed, 1 passed in 75.12s (0:01:15)",
# "5 passed", "no tests ran in 0.01s". Counts are capped at nine digits.
_SUMMARY = re.compile(
    r"^=*\s*(?P<body>no tests ran|\d{1,9} [a-z]+(?:, \d{1,9} [a-z]+)*)"
    r"(?P<timing>\s+in\s+\d{1,9}(?:\.\d+)?s(?:\s+\(\d+:\d\d:\d\d\))?)?\s*=*$"
)
_ITEM = re.compile(r"(\d{1,9}) ([a-z]+)")
_WORDS = {
    "passed": "passed",
    "xpassed": "passed",
    "failed": "failed",
    "error": "errors",
    "errors": "errors",
    "skipped": None,
    "xfailed": None,
    "deselected": None,
    "warning": None,
    "warnings": None,
    "rerun": None,
}
_FRACTION = re.compile(r"(\d{1,9})/(\d{1,9})\s+(?:tests?\s+)?passed")


@dataclass(frozen=True)
class TestCounts:
    __test__ = False  # not a pytest test class, despite the name

    passed: int
    failed: int
    errors: int
    total: int
    source: str  # "pytest", "fraction" or "junit"


def _tail(text: str) -> str:
    return _ANSI.sub("", text[-OUTPUT_TAIL_CHARS:])


def _summary_counts(line: str) -> tuple[TestCounts | None, bool]:
    """The counts of a pytest summary line and whether it carried its timing."""
    match = _SUMMARY.match(line.strip())
    if match is None:
        return None, False
    totals = {"passed": 0, "failed": 0, "errors": 0}
    for number, word in _ITEM.findall(match["body"]):
        if word not in _WORDS:
            return None, False  # "3 files changed" is not a test summary
        if (key := _WORDS[word]) is not None:
            totals[key] += int(number)
    total = totals["passed"] + totals["failed"] + totals["errors"]
    return TestCounts(**totals, total=total, source="pytest"), match["timing"] is not None


def parse_test_output(text: str) -> TestCounts | None:
    """The last pytest summary in ``text``, else the last "X/Y (tests) passed", else None.

    A summary with its timing ("in 0.12s", pytest's closing line, framed by ``=`` or not
    under ``-q``) beats a bare "5 passed"; among equals the last one wins, so a fake
    printed by a test before the real summary is ignored.
    """
    if not isinstance(text, str) or not text:
        return None
    tail = _tail(text)
    bare: TestCounts | None = None
    for line in reversed(tail.splitlines()):
        counts, timed = _summary_counts(line)
        if counts is None:
            continue
        if timed:
            return counts
        if bare is None:
            bare = counts
    if bare is not None:
        return bare
    fractions = _FRACTION.findall(tail)
    if not fractions:
        return None
    passed, total = (int(value) for value in fractions[-1])
    if passed > total:
        return None
    return TestCounts(passed, failed=total - passed, errors=0, total=total, source="fraction")


# Entity expansion ("billion laughs") and external entities: defusedxml's parser with
# forbid_dtd refuses any document type declaration before an entity can be defined, and
# junitparser accepts it as its parse function. Stdlib expat alone would expand them.
_safe_parse = functools.partial(
    safe_etree.parse, forbid_dtd=True, forbid_entities=True, forbid_external=True
)


def parse_junit_xml(data: bytes) -> TestCounts | None:
    """Counts from a JUnit XML report, or None when it is too large, malformed or unsafe.

    Counted from the ``<testcase>`` elements themselves, not the suites' ``tests`` /
    ``failures`` attributes (which the file can state freely): a case with an ``<error>``
    is an error, else with a ``<failure>`` a failure, else with ``<skipped>`` excluded,
    else passed. Nested ``<testsuite>`` elements are followed.
    """
    if not isinstance(data, bytes | bytearray) or len(data) > JUNIT_MAX_BYTES:
        return None
    try:
        report = JUnitXml.fromfile(BytesIO(data), parse_func=_safe_parse)
        passed = failed = errors = 0
        for suite in report:
            for case in suite:
                kinds = {type(result) for result in case.result}  # one pass per case
                if Error in kinds:
                    errors += 1
                elif Failure in kinds:
                    failed += 1
                elif Skipped not in kinds:
                    passed += 1
    except (ParseError, DefusedXmlException, JUnitXmlError, ValueError, RecursionError):
        return None
    total = passed + failed + errors
    return TestCounts(passed=passed, failed=failed, errors=errors, total=total, source="junit")


def is_crash(exit_code: int | None, counts: TestCounts | None, text: str) -> bool:
    """Whether the test command crashed rather than reported results.

    A crash: a non-zero exit (``None``, a timeout or a kill, counts as non-zero), no
    passed test, and either no counts at all (none parsed, or a total of 0) or a crash
    signature (``CRASH_SIGNATURES`` in the output's tail, or pytest's exit codes 2, 3, 4)
    with no real test result (no passed and no failed test: a collection error is
    reported as "1 error", which is not a test's result).
    """
    if exit_code == 0:
        return False
    if counts is not None and counts.passed > 0:
        return False
    if counts is None or counts.total <= 0:
        return True
    has_real_tests = counts.failed > 0
    tail = _tail(text) if isinstance(text, str) else ""
    signature = exit_code in PYTEST_CRASH_EXIT_CODES or any(s in tail for s in CRASH_SIGNATURES)
    return signature and not has_real_tests


def regression_score(counts: TestCounts | None, crashed: bool) -> float | None:
    """passed / total, or None ("not measured") without counts, with a total of 0, or
    after a crash. Never above 1 whatever the counts claim."""
    if counts is None or crashed or counts.total <= 0:
        return None
    score = min(max(counts.passed, 0), counts.total) / counts.total
    return score if math.isfinite(score) else None
