"""The judge sandbox of a coding run (seed 002, docs/coding.md): created only after the
agent's sandbox was destroyed, from a fresh copy of the task's source (the judge's
bundle: hidden tests included), the stored patch applied through the fallback chain,
then each check bounded in time and recorded, and the scores computed from them."""

import logging
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from battles.coding_models import CodingOutcome, RepoSource
from battles.services.coding_phases import phase
from battles.services.coding_sandbox import place_bundle, repo_checkout, repo_spec, sh
from battles.services.repo_source import lane_repo
from coding import results, scores, scripts
from coding.protect import is_protected
from sandboxes.base import Sandbox, ToolError
from sandboxes.services import lane_sandbox_spec, sandbox_session
from sandboxes.untrusted import storable_text

logger = logging.getLogger(__name__)

# What a check's record keeps of its output (the tail: test summaries come last).
OUTPUT_TAIL_BYTES = 8 * 1024
JUNIT_PATH = f"{scripts.OUT_DIR}/junit.xml"
# A check may take the task's time limit, and never more than this.
CHECK_MAX_S = 900
LINTED_FILES_MAX = 200


def patch_relative(sha256: str) -> str:
    return f"patches/{sha256}.patch"


def _check_timeout(source: RepoSource) -> int:
    return min(source.time_limit_s, CHECK_MAX_S)


def _run_check(sandbox: Sandbox, command: str, name: str, timeout_s: int, **kw) -> dict:
    """One task command in the judge sandbox: exit code, seconds, timed out, the
    output's tail (escaped, bounded)."""
    log = f"{scripts.OUT_DIR}/{name}.log"
    started = time.monotonic()
    script = scripts.run_check(command, log, tail_bytes=OUTPUT_TAIL_BYTES, **kw)
    result = sh(sandbox, script, timeout_s + 5)
    seconds = round(time.monotonic() - started, 3)
    head, _, _ = result.stdout.partition(scripts.OUTPUT_MARK)
    exit_code = None if result.timed_out else _int(scripts.report(head).get("check_exit"))
    output = scripts.check_output(result.stdout)
    return {
        "command": command,
        "exit_code": exit_code,
        "seconds": seconds,
        "timed_out": result.timed_out,
        "output": storable_text(output[-OUTPUT_TAIL_BYTES:])[0],
    }


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _changed_files(sandbox: Sandbox, patch: str) -> list[dict]:
    out = sh(sandbox, scripts.judge_prepare(patch), 60).stdout
    files = []
    for line in out.splitlines():
        parts = line.split("\t", 2)
        if len(parts) != 3:
            continue
        added, removed, path = parts
        binary = added == "-" and removed == "-"
        files.append(
            {
                "path": storable_text(path[:500])[0],
                "added": 0 if binary else _int(added) or 0,
                "removed": 0 if binary else _int(removed) or 0,
                "binary": binary,
            }
        )
    return files


def _measure(sandbox: Sandbox, python_files: list[str]) -> tuple[int, scores.ComplexitySummary]:
    lint = scripts.report(sh(sandbox, scripts.lint_count(python_files), 120).stdout)
    csv = sh(sandbox, scripts.complexity_csv(python_files), 120).stdout
    return _int(lint.get("lint")) or 0, scores.parse_lizard_csv(csv)


def coding_judge(*, outcome: CodingOutcome, source: RepoSource, battle_id: int | None) -> None:
    """Judges one run's stored patch in a fresh sandbox and stores the checks and
    scores on ``outcome``. The agent's sandbox must be gone (``agent_destroyed_at``)."""
    if outcome.agent_destroyed_at is None:
        raise RuntimeError("a judge sandbox is never created while the agent's sandbox lives")
    repo = lane_repo(source, judge=True)
    timeout = _check_timeout(source)
    spec = repo_spec(
        lane_sandbox_spec(run_id=outcome.run_id, lifetime_s=8 * timeout + 600), repo, egress=False
    )
    checks: dict = {}
    run_id = outcome.run_id
    with phase(battle_id, "judge sandbox", run_id=run_id):
        session = sandbox_session(spec)
        sandbox = session.__enter__()
    try:
        outcome.judge_created_at = timezone.now()
        CodingOutcome.objects.filter(pk=outcome.pk).update(
            judge_created_at=outcome.judge_created_at
        )
        repo_checkout(sandbox, repo)
        applied, attempts, files = CodingOutcome.Applied.EMPTY, [], []
        python_files: list[str] = []
        before = (0, scores.EMPTY_COMPLEXITY)
        with phase(battle_id, "apply", run_id=run_id) as said:
            if outcome.diff_sha256:
                patch = place_bundle(
                    sandbox,
                    name="agent.patch",
                    path=patch_relative(outcome.diff_sha256),
                    sha256=outcome.diff_sha256,
                    size=outcome.diff_bytes,
                )
                files = _changed_files(sandbox, patch)
                python_files = [
                    f["path"]
                    for f in files
                    if f["path"].endswith(".py")
                    and not f["binary"]
                    and not is_protected(f["path"])
                    and "\n" not in f["path"]
                ][:LINTED_FILES_MAX]
                before = _measure(sandbox, python_files)
                seen = scripts.report(sh(sandbox, scripts.apply_patch(patch), 180).stdout)
                attempts = [
                    {"step": step, "exit_code": _int(seen.get(f"attempt_{step}"))}
                    for step, _ in scripts.APPLY_CHAIN
                    if f"attempt_{step}" in seen
                ]
                found = seen.get("applied", "none")
                applied = found if found in CodingOutcome.Applied.values else "none"
                protected = [f["path"] for f in files if is_protected(f["path"])]
                if protected and applied != CodingOutcome.Applied.NONE:
                    sh(sandbox, scripts.restore(protected), 60)
                checks["protected"] = {"restored": protected}
            said.detail = CodingOutcome.Applied(applied).label
            if applied == CodingOutcome.Applied.NONE:
                said.status = "failed"
        with phase(battle_id, "success command", run_id=run_id) as said:
            checks["success"] = _run_check(sandbox, source.success_cmd, "success", timeout)
            said.detail = f"exit {checks['success']['exit_code']}"
        if source.test_cmd:
            with phase(battle_id, "tests", run_id=run_id) as said:
                checks["tests"] = _run_check(
                    sandbox, source.test_cmd, "tests", timeout, junit=JUNIT_PATH
                )
                checks["tests"]["junit"] = _junit(sandbox)
                said.detail = f"exit {checks['tests']['exit_code']}"
        with phase(battle_id, "lint and complexity", run_id=run_id) as said:
            after = _measure(sandbox, python_files) if python_files else before
            checks["lint"] = {"files": python_files, "before": before[0], "after": after[0]}
            checks["complexity"] = {"before": asdict(before[1]), "after": asdict(after[1])}
            said.detail = f"ruff {before[0]} → {after[0]} on {len(python_files)} files"
    finally:
        session.__exit__(None, None, None)
    _score(outcome, applied, attempts, files, checks, before, after)


def _junit(sandbox: Sandbox) -> dict | None:
    """The JUnit XML a test command wrote at ``$ARENA_JUNIT_XML``, counted."""
    with tempfile.TemporaryDirectory(dir=settings.PRIVATE_MEDIA_ROOT) as tmp:
        try:
            files = sandbox.collect_files([JUNIT_PATH], Path(tmp) / "junit")
        except ToolError:
            return None
        counts = results.parse_junit_xml(files[0].path.read_bytes())
    return asdict(counts) if counts is not None else None


def _functional(applied: str, success: dict) -> float:
    """The gate: the patch applied and the success command exited 0. The code under test
    runs inside the test runner and could end it early with status 0 (``os._exit(0)`` at
    import), so when the command is a pytest run its own summary must agree: at least
    one test passed and none failed. The reason is kept with the check."""
    if applied == CodingOutcome.Applied.NONE:
        success["verdict"] = "the patch did not apply"
        return 0.0
    if scores.functional_score(success.get("exit_code")) < 1.0:
        success["verdict"] = "the success command failed"
        return 0.0
    counts = results.parse_test_output(success.get("output", ""))
    if counts is None and "pytest" in success.get("command", ""):
        success["verdict"] = "exited 0 without pytest's summary: not a passing test run"
        return 0.0
    if counts is not None and (counts.passed == 0 or counts.failed or counts.errors):
        success["verdict"] = "exited 0, but its own summary reports no pass or a failure"
        return 0.0
    success["verdict"] = "passed"
    return 1.0


def _score(outcome, applied, attempts, files, checks, before, after) -> None:
    success = checks.get("success", {})
    functional = _functional(applied, success)
    regression = None
    tests = checks.get("tests")
    if tests is not None:
        junit = tests.get("junit")
        counts = (
            results.TestCounts(**junit) if junit else results.parse_test_output(tests["output"])
        )
        crashed = results.is_crash(tests["exit_code"], counts, tests["output"])
        tests["counts"] = asdict(counts) if counts else None
        tests["crashed"] = crashed
        regression = results.regression_score(counts, crashed)
    lint = scores.lint_score(before[0], after[0])
    complexity = scores.complexity_score(before[1], after[1])
    cost = (outcome.usage or {}).get("cost_usd")
    efficiency = scores.cost_efficiency(cost)
    total = scores.composite(functional, regression, lint, complexity, efficiency)
    values = {
        "applied": applied,
        "apply_attempts": attempts,
        "files": files,
        "checks": checks,
        "functional": functional,
        "regression": regression,
        "lint": lint,
        "complexity": complexity,
        "cost_efficiency": efficiency,
        "composite": total,
        "judged_at": timezone.now(),
    }
    CodingOutcome.objects.filter(pk=outcome.pk).update(**values)
    for key, value in values.items():
        setattr(outcome, key, value)
