"""Reading a test command's output and JUnit XML (coding.results), as tables."""

import time

import pytest

from coding.results import (
    JUNIT_MAX_BYTES,
    TestCounts,
    is_crash,
    parse_junit_xml,
    parse_test_output,
    regression_score,
)


def counts(passed, failed=0, errors=0, total=None, source="pytest") -> TestCounts:
    total = passed + failed + errors if total is None else total
    return TestCounts(passed, failed, errors, total, source)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5 passed", counts(5)),
        ("3 failed, 2 passed", counts(2, 3)),
        ("1 error, 2 failed, 3 passed in 0.12s", counts(3, 2, 1)),
        ("=== 2 failed, 1 passed, 1 skipped, 2 warnings in 0.3s ===", counts(1, 2)),
        ("============ no tests ran in 0.01s ============", counts(0)),
        ("no tests ran", counts(0)),
        ("== 1 passed, 2 xfailed, 1 xpassed, 3 deselected in 1.00s ==", counts(2)),
        ("=== 2 errors in 0.50s ===", counts(0, 0, 2)),
        ("=== 1 failed, 3 passed, 1 rerun in 75.12s (0:01:15) ===", counts(3, 1)),
        ("\x1b[31m=== \x1b[1m1 failed\x1b[0m, \x1b[32m4 passed\x1b[0m in 0.1s ===", counts(4, 1)),
        ("collected 3 items\n\ntests/test_a.py ...\n\n=== 3 passed in 0.02s ===\n", counts(3)),
        # a fake summary printed by a test before the real one
        ("=== 100 passed in 0.01s ===\nF..\n=== 1 failed, 2 passed in 0.20s ===", counts(2, 1)),
        # a fake framed summary before pytest -q's unframed one
        ("=== 100 passed in 0.01s ===\nF..\n1 failed, 2 passed in 0.20s", counts(2, 1)),
        # a bare count after the timed summary does not replace it
        ("=== 1 failed, 2 passed in 0.20s ===\n9 passed", counts(2, 1)),
        ("Ran: 7/10 tests passed", counts(7, 3, source="fraction")),
        ("3/4 passed\n1/1 test passed", counts(1, 0, source="fraction")),
        ("5/3 passed", None),
        ("3 files changed, 2 insertions(+)", None),
        ("99999999999 passed in 0.1s", None),  # more than nine digits: not a count
        ("", None),
        ("hello\nworld", None),
        (b"5 passed", None),
        (None, None),
    ],
)
def test_parse_test_output(text, expected):
    assert parse_test_output(text) == expected


def test_ten_megabytes_of_output_are_read_from_the_tail_only():
    # given 10 MB of noise before pytest's summary
    text = "x" * 10_000_000 + "\n=== 1 failed, 2 passed in 0.10s ===\n"
    started = time.perf_counter()
    # then the summary is found, quickly
    assert parse_test_output(text) == counts(2, 1)
    assert time.perf_counter() - started < 1.0
    # and a summary followed by more than the 64 KiB tail is not seen at all
    assert parse_test_output("=== 5 passed in 0.1s ===\n" + "y\n" * 40_000) is None
    # and one 10 MB line of repeated counts is not a summary
    assert parse_test_output("1 passed, " * 1_000_000) is None


JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites tests="1000" failures="0" errors="0">
  <testsuite name="a" tests="1000" failures="0">
    <testcase classname="a" name="ok1"/>
    <testcase classname="a" name="ok2"><system-out>fine</system-out></testcase>
    <testcase classname="a" name="bad"><failure message="boom"/></testcase>
    <testcase classname="a" name="both"><failure/><error/></testcase>
    <testcase classname="a" name="skip"><skipped/></testcase>
    <testsuite name="nested"><testcase name="ok3"/><testcase name="err"><error/></testcase>
    </testsuite>
  </testsuite>
  <testsuite name="b"><testcase name="ok4"/></testsuite>
</testsuites>
"""

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol9 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
]>
<testsuite><testcase name="&lol9;"/></testsuite>
"""

EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE t [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<testsuite><testcase name="x"><failure>&secret;</failure></testcase></testsuite>
"""


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # counted from the cases, whatever the attributes claim; "both" is an error
        (JUNIT, counts(4, 1, 2, source="junit")),
        (b'<testsuite name="s"><testcase name="t"/></testsuite>', counts(1, source="junit")),
        (b"<testsuites/>", counts(0, source="junit")),
        (b"<testsuite><testcase", None),
        (b"", None),
        (b"\xff\xfe garbage", None),
        (b"<html><body/></html>", None),
        (BILLION_LAUGHS, None),
        (EXTERNAL_ENTITY, None),
        (b'<!DOCTYPE testsuite SYSTEM "http://example.com/x.dtd"><testsuite/>', None),
        (b"<testsuite>" + b" " * (JUNIT_MAX_BYTES - 22) + b"</testsuite>", None),
        ("<testsuite/>", None),
        (None, None),
    ],
)
def test_parse_junit_xml(data, expected):
    assert parse_junit_xml(data) == expected


def test_junit_deeply_nested_suites_do_not_raise():
    depth = 20_000
    data = b"<testsuite>" * depth + b"<testcase/>" + b"</testsuite>" * depth
    assert parse_junit_xml(data) is None


def test_junit_just_under_the_size_bound_is_read():
    cases = b'<testcase name="t"/>' * 3 + b"<testcase><failure/></testcase>"
    data = b"<testsuite>" + cases + b"</testsuite>"
    data += b" " * (JUNIT_MAX_BYTES - len(data))
    assert len(data) == JUNIT_MAX_BYTES
    assert parse_junit_xml(data) == counts(3, 1, source="junit")


def test_junit_many_cases_are_counted():
    data = b"<testsuite>" + b'<testcase name="t"/>' * 100_000 + b"</testsuite>"
    assert parse_junit_xml(data) == counts(100_000, source="junit")


@pytest.mark.parametrize(
    ("exit_code", "found", "text", "crashed"),
    [
        (0, counts(3), "", False),
        (0, None, "", False),
        (1, None, "", True),
        (None, None, "killed after the time limit", True),
        (1, counts(0, 3), "Traceback (most recent call last)", False),  # real failures
        (1, counts(1, 2), "INTERNALERROR", False),  # a passed test is a result
        (1, counts(0, 0, 1), "ERROR collecting tests/test_x.py", True),
        (1, counts(0, 0, 1), "E   ImportError: cannot import name 'f'", True),
        (1, counts(0, 0, 1), "E   fixture 'db' not found", False),  # an error, no crash
        (2, counts(0, 0, 2), "Interrupted: 2 errors during collection", True),
        (3, counts(0, 0, 1), "", True),  # pytest's internal error
        (4, counts(0, 0, 1), "", True),  # pytest's usage error
        (5, counts(0), "no tests ran", True),  # a total of 0 is no result
        (139, None, "Segmentation fault (core dumped)", True),
        (1, counts(0, 0, 1), None, False),
    ],
)
def test_is_crash(exit_code, found, text, crashed):
    assert is_crash(exit_code, found, text) is crashed


@pytest.mark.parametrize(
    ("found", "crashed", "score"),
    [
        (counts(3, 1), False, 0.75),
        (counts(2, 1, 1), False, 0.5),
        (counts(7, 3, source="fraction"), False, 0.7),
        (counts(0, 4), False, 0.0),
        (counts(3, 1), True, None),
        (None, False, None),
        (counts(0), False, None),
        (counts(5, total=3), False, 1.0),  # never above 1
        (counts(-1, 2, total=1), False, 0.0),
    ],
)
def test_regression_score(found, crashed, score):
    assert regression_score(found, crashed) == score
