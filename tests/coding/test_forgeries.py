"""The attack suite (docs/coding.md, "Grades from outside the code under test"): each test
is a patch a hostile agent could submit, judged for real in the judge sandbox (the
source prepared from an uploaded bundle, the stored patch applied, pytest run through
the harness), and each must end as a non-pass (functional 0), a forgery, or a refused
patch, while the honest fix still passes. The agent-side attacks (a process that
rewrites the stored patch, a git hook, a filter) run in a real agent sandbox."""

import dataclasses
import subprocess
from pathlib import Path

import pytest

from tests.coding import repos
from tests.coding.test_judge_sandbox import FIXED_CALC, judged

pytestmark = pytest.mark.django_db(transaction=True)

# The gate alone (no test command): most attacks only need the success command.
GATE = dataclasses.replace(repos.FIX, test_cmd="")
UNITTESTS = repos.Project(
    "unittests",
    {
        "calc.py": repos.CALC,
        "test_calc.py": (
            "import unittest\n\nfrom calc import add\n\n\n"
            "class AddTest(unittest.TestCase):\n"
            "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
        ),
    },
    "python3 -m pytest -q test_calc.py",
    "",
)
SUMMARY = "===== 40 passed in 0.03s =====\\n"
JUNIT = (
    '<testsuites><testsuite name="s" tests="40">'
    + "".join(f'<testcase classname="t" name="t{i}"/>' for i in range(40))
    + "</testsuite></testsuites>"
)


def refused(outcome, reason: str) -> None:
    assert outcome.applied == "refused", outcome.applied
    assert reason in outcome.refused, outcome.refused
    assert (outcome.functional, outcome.composite) == (0.0, 0.0)


def not_passed(outcome) -> None:
    assert outcome.functional == 0.0, outcome.checks.get("success")
    assert outcome.composite == 0.0


def forged(outcome, reason: str) -> None:
    not_passed(outcome)
    assert outcome.forged.startswith(reason), outcome.forged
    assert outcome.checks["success"]["verdict"].startswith("forged: ")


def test_the_honest_fix_passes(alice, coders, tmp_path):
    outcome = judged(alice, repos.FIX, tmp_path, {"calc.py": FIXED_CALC})
    assert (outcome.functional, outcome.regression, outcome.forged) == (1.0, 1.0, "")
    assert outcome.checks["success"]["verdict"] == "passed"
    assert outcome.checks["sealed"] is True


def test_a_fake_summary_line_is_not_read(alice, coders, tmp_path):
    calc = f"import atexit\n\nprint('{SUMMARY}')\natexit.register(print, '{SUMMARY}')\n"
    outcome = judged(alice, repos.FIX, tmp_path, {"calc.py": calc + repos.CALC})
    not_passed(outcome)
    assert "40 passed" in outcome.checks["success"]["output"]  # printed, never believed
    assert outcome.checks["tests"]["counts"]["passed"] == 1


def test_a_fake_junit_file_is_not_read(alice, coders, tmp_path):
    calc = (
        "import os\n\n"
        "for path in (os.environ.get('ARENA_JUNIT_XML', ''), '/work/.arena-out/junit.xml'):\n"
        "    if path:\n"
        f"        open(path, 'w').write({JUNIT!r})\n\n"
    )
    outcome = judged(alice, repos.FIX, tmp_path, {"calc.py": calc + repos.CALC})
    not_passed(outcome)
    assert outcome.checks["tests"]["counts"]["total"] == 2


@pytest.mark.parametrize(
    ("prelude", "reason"),
    [
        ("import os\n\nos._exit(0)\n", "the test process exited 0"),
        ("import atexit\nimport os\n\natexit.register(os._exit, 0)\n", "the test process exited 0"),
    ],
    ids=["os._exit(0) at import", "an atexit hook that exits 0"],
)
def test_ending_the_process_with_status_0_is_forged(alice, coders, tmp_path, prelude, reason):
    forged(judged(alice, GATE, tmp_path, {"calc.py": prelude + repos.CALC}), reason)


def test_sys_exit_0_at_import_is_no_pass(alice, coders, tmp_path):
    outcome = judged(alice, GATE, tmp_path, {"calc.py": "import sys\n\nsys.exit(0)\n" + repos.CALC})
    not_passed(outcome)


def test_monkeypatching_pytests_reports_is_forged(alice, coders, tmp_path):
    calc = (
        "from _pytest.reports import TestReport\n\n"
        "_made = TestReport.from_item_and_call.__func__\n\n\n"
        "def _passed(cls, item, call):\n"
        "    report = _made(cls, item, call)\n"
        "    report.outcome, report.longrepr = 'passed', None\n"
        "    return report\n\n\n"
        "TestReport.from_item_and_call = classmethod(_passed)\n\n\n"
    )
    forged(judged(alice, GATE, tmp_path, {"calc.py": calc + repos.CALC}), "a check test")


def test_monkeypatching_unittest_is_forged(alice, coders, tmp_path):
    calc = "import unittest\n\nunittest.TestCase.assertEqual = lambda *args, **kwargs: None\n\n"
    forged(judged(alice, UNITTESTS, tmp_path, {"calc.py": calc + repos.CALC}), "a check test")


CONFTEST_PASSES = (
    "import pytest\n\n\n"
    "@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n"
    "    report = outcome.get_result()\n"
    "    report.outcome, report.longrepr = 'passed', None\n"
)


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("conftest.py", CONFTEST_PASSES),
        ("lib/deep/conftest.py", CONFTEST_PASSES),
        ("pytest.ini", "[pytest]\npython_functions = nothing_*\n"),
        ("sitecustomize.py", "import os\nos._exit(0)\n"),
        ("lib/hook.pth", "import os; os._exit(0)\n"),
        ("pytest.py", "import sys\nsys.exit(0)\n"),
        ("test_extra.py", "def test_padding():\n    pass\n"),
    ],
)
def test_a_protected_file_in_any_directory_is_put_back(alice, coders, tmp_path, path, text):
    outcome = judged(alice, GATE, tmp_path, {path: text})
    assert outcome.applied == "apply"
    assert outcome.checks["protected"] == {"restored": [path]}
    not_passed(outcome)
    assert outcome.forged == ""  # the file never ran: the real test simply failed
    assert outcome.checks["success"]["failing"] == ["test_calc.py::test_add"]


def _tool_diff(tmp_path: Path, *flags: str) -> bytes:
    """A diff of calc.py (fixed) and test_calc.py (made to pass) by diff(1)."""
    old, new = tmp_path / "old", tmp_path / "new"
    for root, calc, tests in ((old, repos.CALC, repos.CALC_TESTS),
                              (new, FIXED_CALC, "def test_add():\n    assert True\n")):  # fmt: skip
        root.mkdir()
        (root / "calc.py").write_text(calc)
        (root / "test_calc.py").write_text(tests)
    made = subprocess.run(["diff", *flags, "old/test_calc.py", "new/test_calc.py"],
                          cwd=tmp_path, capture_output=True, check=False)  # fmt: skip
    return made.stdout


def _git_diff(tmp_path: Path, setup, *flags: str) -> bytes:
    """A git diff after ``setup(root)`` changed the FIX project's checkout."""
    root = tmp_path / "git"
    root.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@x.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=root, check=True)
    for name, text in repos.FIX.files.items():
        (root / name).write_text(text)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "s"], cwd=root, check=True)
    setup(root)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    return subprocess.run([*git, "diff", "--cached", "--binary", "--full-index", *flags, "HEAD"],
                          cwd=root, capture_output=True, check=True).stdout  # fmt: skip


def _rename_tests(root: Path) -> None:
    (root / "test_calc.py").rename(root / "calc_checks.py")


def _symlink_tests(root: Path) -> None:
    (root / "test_calc.py").unlink()
    (root / "mine.py").write_text("def test_add():\n    assert True\n")
    (root / "test_calc.py").symlink_to("mine.py")


def _binary_module(root: Path) -> None:
    (root / "calc.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF\x02\x01\x01\0" * 64)


def _binary_tests(root: Path) -> None:
    (root / "test_calc.py").write_bytes(b"def test_add():\n    assert True\n# \0\n")


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda t: _tool_diff(t, "-c"), "not a git diff"),
        (lambda t: _tool_diff(t, "-e"), "not a git diff"),
        (lambda t: _tool_diff(t, "-u"), "not a git diff"),
        (lambda t: _git_diff(t, _rename_tests, "-M"), "does not name one path twice"),
        (lambda t: _git_diff(t, _symlink_tests), "becomes a symbolic link"),
        (lambda t: _git_diff(t, _binary_module), "a binary a Python process can run"),
        (
            lambda t: _git_diff(t, lambda r: (r / "calc.py").write_text(FIXED_CALC)).replace(
                b"a/calc.py", b"a/.git/hooks/post-checkout"
            ),
            "does not name one path twice",
        ),
        (
            lambda t: _git_diff(t, lambda r: (r / "calc.py").write_text(FIXED_CALC)).replace(
                b"calc.py", b".git/hooks/post-checkout"
            ),
            "enters .git",
        ),
        (
            lambda t: (
                _git_diff(t, lambda r: (r / "calc.py").write_text(FIXED_CALC))
                + b"junk between diffs\n"
            ),
            "no diff writes",
        ),
    ],
    ids=[
        "context diff",
        "ed script",
        "plain unified diff",
        "rename",
        "symlink",
        "binary extension module",
        "two paths",
        "git hook",
        "trailing text",
    ],
)
def test_a_patch_of_another_shape_is_refused(alice, coders, tmp_path, make, reason):
    refused(judged(alice, GATE, tmp_path, {}, raw=make(tmp_path)), reason)


def test_a_binary_patch_of_a_test_file_is_put_back(alice, coders, tmp_path):
    raw = _git_diff(tmp_path, _binary_tests)
    assert b"GIT binary patch" in raw
    outcome = judged(alice, GATE, tmp_path, {}, raw=raw)
    assert outcome.checks["protected"] == {"restored": ["test_calc.py"]}
    not_passed(outcome)


def test_a_gitattributes_filter_is_put_back_and_runs_nowhere(alice, coders, tmp_path):
    edits = {".gitattributes": "* filter=evil diff=evil\n", "calc.py": FIXED_CALC}
    outcome = judged(alice, GATE, tmp_path, edits)
    assert outcome.checks["protected"] == {"restored": [".gitattributes"]}
    assert outcome.functional == 1.0  # the honest part of the patch still passes
