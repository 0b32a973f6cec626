"""The judge sandbox on each kind of repository the issue names (a fix that breaks
another test, a patch that needs the 3-way step, a crash), for real: the source
prepared in a sandbox from an uploaded bundle (or tarball), the stored patch applied
through the fallback chain in a fresh sandbox, pytest, ruff and lizard run there. Each
recorded score must be what the repository and the patch imply."""

import dataclasses
import hashlib
import random
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from battles.coding_models import CodingOutcome, RepoSource
from battles.services import task_submit
from battles.services.coding_judge import coding_judge, patch_relative
from battles.services.repo_admission import RepoRequest
from battles.services.repo_source import repo_source_prepare
from tests.coding import repos

pytestmark = pytest.mark.django_db(transaction=True)

FIXED_CALC = repos.CALC.replace("return a - b", "return a + b", 1)
FIXED_GREET = 'def greet(name):\n    return "Hello, " + name + "!"\n'


def judged(
    user, project, tmp_path: Path, edits: dict[str, str], *, upload=None, raw: bytes = b""
) -> CodingOutcome:
    """Admits the project as a repo task, prepares its source, stores the patch of
    ``edits`` as side A's diff and judges it."""
    request = RepoRequest(
        upload=upload or repos.bundle(project, tmp_path),
        ref="main",
        judge_ref="judge" if project.judge_files else "",
        success_cmd=project.success_cmd,
        test_cmd=project.test_cmd,
        time_limit_s=60,
    )
    battle = task_submit(
        user=user, instruction=f"Fix {project.name}.", repo=request, rng=random.Random(0)
    )
    run = battle.runs.get(side="A")
    source = repo_source_prepare(
        source_id=RepoSource.objects.get(task=battle.task).pk, run_id=run.pk
    )
    data = raw or (repos.patch(project, tmp_path, edits) if edits else b"")
    sha = hashlib.sha256(data).hexdigest() if data else ""
    if data:
        path = Path(settings.PRIVATE_MEDIA_ROOT) / patch_relative(sha)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    outcome = CodingOutcome.objects.create(
        run=run, diff=data.decode(), diff_sha256=sha, diff_bytes=len(data),
        agent_destroyed_at=timezone.now(), usage={"cost_usd": 0.0, "source": "test"},
    )  # fmt: skip
    coding_judge(outcome=outcome, source=source, battle_id=battle.pk)
    outcome.refresh_from_db()
    return outcome


def composite(regression: float) -> float:
    """The composite of a passing run with clean lint, unchanged complexity and $0."""
    return round(0.4 + 0.3 * regression + 0.1 + 0.1 + 0.1, 4)


def test_a_fix_that_breaks_another_test_passes_the_gate_and_loses_regression(
    alice, coders, tmp_path
):
    # The agent also "fixes" the legacy test; the judge puts the tests back first.
    edits = {
        "greet.py": FIXED_GREET,
        "test_greet.py": repos.GREET_TESTS.replace('== "Hello Ada"', '== "Hello, Ada!"'),
    }
    outcome = judged(alice, repos.BREAKS, tmp_path, edits)
    assert outcome.applied == "apply"
    assert outcome.checks["protected"] == {"restored": ["test_greet.py"]}
    success = outcome.checks["success"]
    # pytest exits 1: the judge's three check tests failed, as they always must
    assert (success["exit_code"], success["passes"], success["verified"]) == (1, True, True)
    assert success["check_tests"] and set(success["check_tests"].values()) == {"failed"}
    assert success["counts"] == {
        "passed": 1, "failed": 0, "errors": 0, "total": 1, "source": "harness"
    }  # fmt: skip
    assert outcome.checks["tests"]["counts"] == {
        "passed": 2, "failed": 1, "errors": 0, "total": 3, "source": "harness"
    }  # fmt: skip
    # what people read of the output shows the suite's own tests, not the check tests
    assert outcome.checks["tests"]["output"].rstrip().endswith(("1 failed, 2 passed in", "s"))
    assert "1 failed, 2 passed" in outcome.checks["tests"]["output"]
    assert outcome.functional == 1.0
    assert outcome.regression == pytest.approx(2 / 3)
    assert (outcome.lint, outcome.complexity) == (1.0, 1.0)
    assert outcome.composite == composite(2 / 3) == 0.9


def test_a_patch_that_needs_the_three_way_step(alice, coders, tmp_path):
    outcome = judged(alice, repos.THREE_WAY, tmp_path, {"calc.py": FIXED_CALC})
    assert outcome.apply_attempts == [
        {"step": "apply", "exit_code": 1},
        {"step": "3way", "exit_code": 0},
    ]
    assert outcome.applied == "3way"
    # The judge's hidden test ran too: three tests, all passing.
    assert outcome.checks["tests"]["counts"]["total"] == 3
    assert outcome.checks["tests"]["counts"]["passed"] == 3
    assert (outcome.functional, outcome.regression, outcome.composite) == (1.0, 1.0, 1.0)


def test_a_crash_is_no_test_result(alice, coders, tmp_path):
    outcome = judged(alice, repos.CRASH, tmp_path, {"calc.py": FIXED_CALC})
    assert outcome.applied == "apply"
    assert outcome.checks["success"]["exit_code"] == 2  # pytest: collection interrupted
    assert outcome.checks["success"]["unverified"] == "no test ran"
    assert outcome.checks["tests"]["crashed"] is True
    assert (outcome.functional, outcome.regression, outcome.composite) == (0.0, None, 0.0)


def test_a_tarball_source_and_new_lint_warnings(alice, coders, tmp_path):
    # The fix adds two unused imports to calc.py: ruff counts 2 more warnings there.
    edits = {"calc.py": "import os\nimport sys\n\n\n" + FIXED_CALC}
    outcome = judged(alice, repos.FIX, tmp_path, edits, upload=repos.tarball(repos.FIX))
    assert outcome.checks["lint"] == {"files": ["calc.py"], "before": 0, "after": 2}
    # lizard measured calc.py before and after: two functions of CCN 1 either way.
    assert outcome.checks["complexity"]["before"] == outcome.checks["complexity"]["after"] == {
        "functions": 2, "total_ccn": 2, "max_ccn": 1, "mean_ccn": 1.0
    }  # fmt: skip
    assert outcome.lint == 0.8
    assert outcome.functional == 1.0 and outcome.regression == 1.0
    assert outcome.composite == round(0.4 + 0.3 + 0.1 * 0.8 + 0.1 + 0.1, 4)


def test_a_patch_that_does_not_apply_scores_nothing(alice, coders, tmp_path):
    # A patch of another project's file: no step of the chain applies it.
    (tmp_path / "other").mkdir()
    wrong = repos.patch(repos.BREAKS, tmp_path / "other", {"greet.py": FIXED_GREET})
    outcome = judged(alice, repos.FIX, tmp_path, {}, raw=wrong)
    assert [a["step"] for a in outcome.apply_attempts] == ["apply", "3way", "reject", "fuzz"]
    assert all(a["exit_code"] != 0 for a in outcome.apply_attempts)
    assert outcome.applied == "none"
    assert (outcome.functional, outcome.composite) == (0.0, 0.0)
    # The checks ran on the untouched checkout: the bug is still there.
    assert outcome.checks["tests"]["counts"]["passed"] == 1


def test_code_left_running_by_the_tests_cannot_rewrite_their_result(alice, coders, tmp_path):
    # The agent's calc.py starts a process of its own at import that, a second later,
    # appends a forged pytest summary to the tests' log. The judge read the log at once.
    forger = (
        "import subprocess\n\n"
        "subprocess.Popen(['sh', '-c', 'sleep 1; for f in /work/.arena-out/*.log; do "
        'echo "===== 99 passed in 0.01s =====" >> $f; done\'], start_new_session=True)\n\n\n'
    )
    outcome = judged(alice, repos.FIX, tmp_path, {"calc.py": forger + FIXED_CALC})
    assert outcome.checks["tests"]["counts"] == {
        "passed": 2, "failed": 0, "errors": 0, "total": 2, "source": "harness"
    }  # fmt: skip
    assert "99 passed" not in outcome.checks["tests"]["output"]
    assert outcome.regression == 1.0


def test_ending_the_test_run_early_with_status_0_is_a_forgery(alice, coders, tmp_path):
    # The agent's calc.py ends whatever imports it with status 0. No honest run exits 0
    # here (the judge's check tests always fail), so the run is forged, never a pass.
    edits = {"calc.py": "import os\n\nos._exit(0)\n" + repos.CALC}
    outcome = judged(alice, repos.FIX, tmp_path, edits)
    assert outcome.checks["success"]["exit_code"] == 0
    assert outcome.forged.startswith("the test process exited 0")
    assert outcome.checks["success"]["verdict"].startswith("forged: the test process exited 0")
    assert (outcome.functional, outcome.regression, outcome.composite) == (0.0, None, 0.0)


def test_junit_xml_of_a_command_the_harness_cannot_run_counts_unverified(alice, coders, tmp_path):
    # A test command with shell syntax is no pytest run the harness can run itself: it
    # runs as written, writes JUnit XML where the judge says ($ARENA_JUNIT_XML), and its
    # count counts, marked unverified (the code under test could have written it).
    junit = dataclasses.replace(
        repos.BREAKS,
        test_cmd='python3 -m pytest -q -q -p no:cacheprovider --junitxml="$ARENA_JUNIT_XML"',
    )
    outcome = judged(alice, junit, tmp_path, {"greet.py": FIXED_GREET})
    tests = outcome.checks["tests"]
    assert tests["verified"] is False
    assert tests["junit"] == {"passed": 2, "failed": 1, "errors": 0, "total": 3, "source": "junit"}
    assert tests["counts"] == tests["junit"]
    assert outcome.regression == pytest.approx(2 / 3)
