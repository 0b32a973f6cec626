"""The host's side of the judge harness (coding.grading): which commands the harness runs,
the check tests, and what a harness result means. Pure: the real harness runs in
tests/coding/test_forgeries.py and test_judge_sandbox.py."""

import random

import pytest

from coding import grading
from coding.grading import Expected, grade, pytest_run
from coding.protect import collected_files, command_paths, is_protected


@pytest.mark.parametrize(
    ("command", "args", "module", "env"),
    [
        ("pytest", ("-p", "no:cacheprovider"), False, ()),
        ("python3 -m pytest -q t.py::f", ("-p", "no:cacheprovider", "-q", "t.py::f"), True, ()),
        ("python -m pytest -p no:cacheprovider", ("-p", "no:cacheprovider"), True, ()),
        ("/usr/bin/python3.11 -m pytest", ("-p", "no:cacheprovider"), True, ()),
        (
            "PYTHONPATH=src pytest -k 'a and b'",
            ("-p", "no:cacheprovider", "-k", "a and b"),
            False,
            (("PYTHONPATH", "src"),),
        ),
        ('py.test "t.py::f[1-2]"', ("-p", "no:cacheprovider", "t.py::f[1-2]"), False, ()),
    ],
)
def test_pytest_runs_the_harness_runs(command, args, module, env):
    assert pytest_run(command) == grading.PytestRun(args=args, module=module, env=env)


@pytest.mark.parametrize(
    "command",
    [
        "",
        "python3 check.py",
        "python3 -m unittest",
        "make test",
        "pytest && echo ok",
        "pytest; true",
        "pytest | tee log",
        "pytest > log",
        "pytest $ARGS",
        'pytest "$X"',
        "pytest `x`",
        "pytest t*.py",
        "pytest t.py::f[1]",
        "pytest --co",
        "pytest --collect-only",
        "pytest --help",
        "pytest --lf",
        "pytest --setup-plan",
        "./pytest",
        "/tmp/pytest",
        "python3 -X dev -m pytest",
        "python3 -c 'import pytest'",
        "pytest 'unclosed",
        "pytest # comment",
        "(pytest)",
        "pytest\nrm -rf /",
    ],
)
def test_anything_else_runs_unverified(command):
    assert pytest_run(command) is None


def test_check_tests_are_named_like_the_suite_and_must_fail():
    names = ["tests/test_calc.py::test_add_numbers", "tests/test_calc.py::test_sub_numbers"]
    found = grading.check_tests(random.Random(3), names)
    assert [c["kind"] for c in found] == ["assert", "unittest", "raise"]
    for canary in found:
        assert canary["name"].startswith("test_") and canary["a"] != canary["b"]
        assert canary["name"] not in {n.split("::")[-1] for n in names}
        assert 0 <= canary["slot"] < 1 and 0 <= canary["parent"] < 1
    assert len({c["name"] for c in found}) == 3


HONEST = {
    "exit_code": 1, "signal": None, "timed_out": False, "finished": True, "malformed": 0,
    "overflow": False, "quiet": True, "watch_changed": [],
    "canaries": {"test_a_1": "failed", "test_b_2": "failed", "test_c_3": "failed"},
    "outcomes": {"t.py::test_x": "passed", "t.py::test_y": "passed"},
}  # fmt: skip
EXPECTED = Expected(frozenset({"t.py::test_x", "t.py::test_y"}))


def with_(**changes) -> dict:
    return {**HONEST, **changes}


def test_an_honest_passing_run_passes():
    graded = grade(HONEST, EXPECTED)
    assert graded.passes and graded.regression() == 1.0
    assert graded.counts() == {"passed": 2, "failed": 0, "errors": 0, "total": 2,
                               "source": "harness"}  # fmt: skip


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (with_(exit_code=0), "the test process exited 0"),
        (with_(canaries={**HONEST["canaries"], "test_b_2": "passed"}), "a check test"),
        (with_(malformed=2), "the test process wrote 2 record(s)"),
        (with_(watch_changed=["test_x.py"]), "the tests or their configuration changed"),
    ],
)
def test_what_no_honest_run_shows_is_forged(result, reason):
    graded = grade(result, EXPECTED)
    assert graded.forged.startswith(reason)
    assert not graded.passes and graded.regression() is None


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (None, "the harness gave no result"),
        (with_(timed_out=True), "timed out"),
        (with_(exit_code=None, signal=9), "killed by signal 9"),
        (with_(finished=False), "ended before pytest finished"),
        (with_(overflow=True), "more than the judge reads"),
        (with_(quiet=False), "could not be stopped"),
        (with_(canaries={**HONEST["canaries"], "test_c_3": "skipped"}), "did not run as"),
        (with_(canaries={**HONEST["canaries"], "test_c_3": None}), "did not run as"),
        (with_(outcomes={}, canaries={"test_a_1": None}), "no test ran"),
    ],
)
def test_what_ends_short_of_an_honest_run_is_unverified(result, reason):
    graded = grade(result, EXPECTED)
    assert reason in graded.unverified and not graded.forged
    assert not graded.passes and graded.regression() is None


def test_a_failure_an_error_or_a_missing_test_is_no_pass():
    assert not grade(with_(outcomes={"t.py::test_x": "passed", "t.py::test_y": "failed"}),
                     EXPECTED).passes  # fmt: skip
    assert not grade(with_(outcomes={"t.py::test_x": "passed", "t.py::test_y": "error"}),
                     EXPECTED).passes  # fmt: skip
    missing = grade(with_(outcomes={"t.py::test_x": "passed"}), EXPECTED)
    assert missing.missing == ["t.py::test_y"] and not missing.passes
    assert missing.regression() == 0.5  # a test that did not run counts as failed
    skipped = grade(with_(outcomes={"t.py::test_x": "passed", "t.py::test_y": "skipped"}),
                    EXPECTED)  # fmt: skip
    assert skipped.passes and skipped.regression() == 1.0 and skipped.skipped == 1


def test_protection_covers_tests_hooks_and_what_the_commands_name():
    named = command_paths("python3 check.py --rootdir=src tests/unit::x", "make -f ci/Makefile")
    assert {"check.py", "src", "tests/unit", "ci/Makefile"} <= named
    tests = collected_files(frozenset({"spec/check_calc.py::test_add", "spec/x.py"}))
    assert tests == {"spec/check_calc.py"}
    protected = ["conftest.py", "a/b/conftest.py", "pytest.ini", "x/sitecustomize.py",
                 "lib/evil.pth", "tests/data.json", "Test/x.py", "test_a.py", "a_test.py",
                 ".gitattributes", "pytest.py", "_pytest/x.py", "src/helper.py",
                 "check.py"]  # fmt: skip
    for path in protected:
        assert is_protected(path, named=named | {"src"}), path
    for path in ["calc.py", "lib/contest.py", "testsuite.py", "attest.py", "src2/x.py"]:
        assert not is_protected(path, named=named | {"src"}), path
