"""The judge sandbox of a coding run (seed 002, docs/coding.md): created only after the
agent's sandbox was destroyed, from a fresh copy of the task's source (the judge's
bundle: hidden tests included). In order, each step bounded in time and recorded:

1. the stored patch read on the host, its hash checked, and reviewed
   (``coding.patchcheck``): anything but the arena's own diff format is refused;
2. lint and complexity of the changed files before, and the pristine tree's tests
   collected by the harness (the list every later run is held to);
3. the patch applied through the fallback chain, the change set read back from the
   judge's own git (not from the patch), links and submodules refused, and every
   protected file in it put back (``coding.protect``);
4. lint and complexity after, then the repository sealed read-only;
5. the success and test commands: a pytest run through the harness, whose result the
   host grades against an honest run's shape (``coding.grading``); anything else as a
   plain, unverified command.

A run whose test results contradict an honest run is marked *forged* (``forged``): never
a pass, and its battle is excluded at screening."""

import hashlib
import logging
import random
from dataclasses import asdict, replace
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from battles.coding_models import CodingOutcome, RepoSource
from battles.services.coding_phases import phase
from battles.services.coding_sandbox import repo_checkout, repo_spec, sh
from battles.services.judge_checks import (
    JUNIT_PATH,
    harness_check,
    harness_install,
    harness_run,
    junit_counts,
    patch_apply,
    plain_run,
    seal,
)
from battles.services.repo_source import lane_repo
from coding import grading, patchcheck, results, scores, scripts
from coding.protect import collected_files, command_paths, is_protected
from sandboxes.base import Sandbox
from sandboxes.services import lane_sandbox_spec, sandbox_session
from sandboxes.untrusted import storable_text

logger = logging.getLogger(__name__)

# A check may take the task's time limit, and never more than this.
CHECK_MAX_S = 900
LINTED_FILES_MAX = 200
# The harness prints its whole result as one line (every test's outcome).
JUDGE_OUTPUT_MAX_BYTES = 4 * 1024**2
_system_rng = random.SystemRandom()


def patch_relative(sha256: str) -> str:
    return f"patches/{sha256}.patch"


def _check_timeout(source: RepoSource) -> int:
    return min(source.time_limit_s, CHECK_MAX_S)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _measure(sandbox: Sandbox, python_files: list[str]) -> tuple[int, scores.ComplexitySummary]:
    lint = scripts.report(sh(sandbox, scripts.lint_count(python_files), 120).stdout)
    csv = sh(sandbox, scripts.complexity_csv(python_files), 120).stdout
    return _int(lint.get("lint")) or 0, scores.parse_lizard_csv(csv)


class StoredPatchChanged(Exception):
    """The stored patch's bytes are not the ones hashed when it was collected."""


def stored_patch(outcome: CodingOutcome) -> bytes:
    """The patch as stored when it was collected, its hash checked."""
    if not outcome.diff_sha256:
        return b""
    path = Path(settings.PRIVATE_MEDIA_ROOT) / patch_relative(outcome.diff_sha256)
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != outcome.diff_sha256:
        raise StoredPatchChanged(f"the stored patch of run {outcome.run_id} changed")
    return data


class _Judging:
    """One judge sandbox's state as the steps fill it in."""

    def __init__(self, outcome: CodingOutcome, source: RepoSource, battle_id: int | None):
        self.outcome, self.source, self.battle_id = outcome, source, battle_id
        self.run_id = outcome.run_id
        self.timeout = _check_timeout(source)
        self.checks: dict = {}
        self.applied = CodingOutcome.Applied.EMPTY
        self.attempts: list[dict] = []
        self.files: list[dict] = []
        self.refused = ""
        self.forged = ""
        self.python_files: list[str] = []
        self.review = patchcheck.PatchReview()
        self.before = self.after = (0, scores.EMPTY_COMPLEXITY)
        self.runs = {
            "success": grading.pytest_run(source.success_cmd),
            "tests": grading.pytest_run(source.test_cmd) if source.test_cmd else None,
        }
        self.expected: dict[str, grading.Expected | None] = {}
        self.named = command_paths(source.success_cmd, source.test_cmd)

    def phase(self, name: str):
        return phase(self.battle_id, name, run_id=self.run_id)


def coding_judge(*, outcome: CodingOutcome, source: RepoSource, battle_id: int | None) -> None:
    """Judges one run's stored patch in a fresh sandbox and stores the checks and
    scores on ``outcome``. The agent's sandbox must be gone (``agent_destroyed_at``)."""
    if outcome.agent_destroyed_at is None:
        raise RuntimeError("a judge sandbox is never created while the agent's sandbox lives")
    data = stored_patch(outcome)
    repo = lane_repo(source, judge=True)
    job = _Judging(outcome, source, battle_id)
    spec = repo_spec(
        lane_sandbox_spec(run_id=outcome.run_id, lifetime_s=8 * job.timeout + 600),
        repo,
        egress=False,
    )
    spec = replace(
        spec, output_max_bytes=max(spec.output_max_bytes, JUDGE_OUTPUT_MAX_BYTES), seals=True
    )
    with job.phase("judge sandbox"):
        session = sandbox_session(spec)
        sandbox = session.__enter__()
    try:
        outcome.judge_created_at = timezone.now()
        CodingOutcome.objects.filter(pk=outcome.pk).update(
            judge_created_at=outcome.judge_created_at
        )
        repo_checkout(sandbox, repo)
        sums = harness_install(sandbox)
        _prepare(job, sandbox, data, sums)
        with job.phase("apply") as said:
            if data and not job.refused:
                _apply(job, sandbox, outcome)
            if job.refused:
                job.applied = CodingOutcome.Applied.REFUSED
            said.detail = CodingOutcome.Applied(job.applied).label
            if job.applied in (CodingOutcome.Applied.NONE, CodingOutcome.Applied.REFUSED):
                said.status = "failed"
        with job.phase("lint and complexity") as said:
            applied = job.applied not in (CodingOutcome.Applied.NONE, CodingOutcome.Applied.REFUSED)
            job.after = (
                _measure(sandbox, job.python_files) if applied and job.python_files else job.before
            )
            said.detail = f"ruff {job.before[0]} → {job.after[0]} on {len(job.python_files)} files"
        job.checks["sealed"] = seal(sandbox)
        if not job.refused:  # a refused patch has no grade to measure
            _commands(job, sandbox, sums)
    finally:
        session.__exit__(None, None, None)
    _score(job)


def _prepare(job: _Judging, sandbox: Sandbox, data: bytes, sums: dict[str, str]) -> None:
    """The review of the patch, lint before, and the pristine tree's tests."""
    try:
        review = job.review = patchcheck.review(data)
    except patchcheck.PatchRefused as exc:
        job.refused = str(exc)
        return
    job.files = [
        {"path": storable_text(c.path[:500])[0], "added": c.added, "removed": c.removed,
         "binary": c.binary}
        for c in review.files
    ]  # fmt: skip
    job.python_files = [
        c.path for c in review.files
        if c.path.endswith(".py") and not c.binary and not is_protected(c.path, named=job.named)
    ][:LINTED_FILES_MAX]  # fmt: skip
    job.before = _measure(sandbox, job.python_files)
    for name, run in job.runs.items():
        if run is None:
            continue
        with job.phase(f"collect {name}") as said:
            config = grading.harness_config(run, mode="collect", timeout_s=job.timeout)
            found = grading.expected_from(harness_run(sandbox, config, sums))
            job.expected[name] = found
            said.detail = f"{len(found.ids)} tests" if found else "nothing collected"


def _tests_of(job: _Judging) -> frozenset[str]:
    """The files the pristine tree collected tests from (or failed to collect)."""
    return frozenset().union(
        *(collected_files(e.ids | e.errors) for e in job.expected.values() if e is not None)
    )


def _apply(job: _Judging, sandbox: Sandbox, outcome: CodingOutcome) -> None:
    protected = job.named | _tests_of(job)
    done = patch_apply(
        sandbox,
        review=job.review,
        name="agent.patch",
        path=patch_relative(outcome.diff_sha256),
        sha256=outcome.diff_sha256,
        size=outcome.diff_bytes,
        protected=lambda path: is_protected(path, named=protected),
    )
    job.applied, job.attempts, job.refused = done.applied, done.attempts, done.refused
    if done.applied not in ("none", "refused"):
        job.checks["protected"] = {"restored": done.restored}


def _commands(job: _Judging, sandbox: Sandbox, sums: dict[str, str]) -> None:
    """The success command, then the test command, each its own record."""
    watch = sorted(job.named | _tests_of(job))
    for name, command in (("success", job.source.success_cmd), ("tests", job.source.test_cmd)):
        if not command:
            continue
        label = "success command" if name == "success" else "tests"
        with job.phase(label) as said:
            run = job.runs[name]
            if run is None:
                junit = {"junit": JUNIT_PATH} if name == "tests" else {}
                record = plain_run(sandbox, command, name, job.timeout, **junit)
                if name == "tests":
                    record["junit"] = junit_counts(sandbox)
                said.detail = f"exit {record['exit_code']} (unverified)"
            else:
                expected = job.expected.get(name)
                names = sorted(expected.ids) if expected is not None else []
                record, graded = harness_check(
                    sandbox, command=command, run=run, expected=expected,
                    canaries=grading.check_tests(_system_rng, names),
                    watch=watch, timeout_s=job.timeout, sums=sums,
                )  # fmt: skip
                record["passes"] = graded.passes
                record["regression"] = graded.regression()
                job.forged = job.forged or graded.forged
                counts = record["counts"]
                said.detail = (
                    f"forged: {graded.forged}" if graded.forged
                    else f"{counts['passed']}/{counts['total']} passed"
                )  # fmt: skip
                if graded.forged:
                    said.status = "failed"
            job.checks[name] = record


def _functional(job: _Judging, success: dict) -> float:
    """The gate: the patch applied and the success command passed. Through the harness:
    a sound run in which a test passed and none failed, erred or went missing. A plain
    command: exit 0 (and, when it runs pytest, pytest's own summary agreeing)."""
    if job.applied in (CodingOutcome.Applied.NONE, CodingOutcome.Applied.REFUSED):
        success["verdict"] = (
            f"the patch was refused: {job.refused}" if job.refused else "the patch did not apply"
        )
        return 0.0
    if "passes" in success:
        if success["forged"]:
            success["verdict"] = f"forged: {success['forged']}"
        elif success["unverified"]:
            success["verdict"] = f"not verified: {success['unverified']}"
        elif not success["passes"]:
            success["verdict"] = "the success command's tests did not all pass"
        else:
            success["verdict"] = "passed"
        return 1.0 if success["passes"] else 0.0
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
    success["verdict"] = "passed (unverified: reported by the command itself)"
    return 1.0


def _regression(tests: dict | None) -> float | None:
    if tests is None:
        return None
    if "passes" in tests:
        tests["crashed"] = bool(tests["unverified"]) and not tests["forged"]
        return tests["regression"]
    junit = tests.get("junit")
    counts = results.TestCounts(**junit) if junit else results.parse_test_output(tests["output"])
    crashed = results.is_crash(tests["exit_code"], counts, tests["output"])
    tests["counts"] = asdict(counts) if counts else None
    tests["crashed"] = crashed
    return results.regression_score(counts, crashed)


def _score(job: _Judging) -> None:
    checks = job.checks
    functional = _functional(job, checks.get("success", {}))
    regression = None if job.forged else _regression(checks.get("tests"))
    checks["lint"] = {"files": job.python_files, "before": job.before[0], "after": job.after[0]}
    checks["complexity"] = {"before": asdict(job.before[1]), "after": asdict(job.after[1])}
    lint = scores.lint_score(job.before[0], job.after[0])
    complexity = scores.complexity_score(job.before[1], job.after[1])
    cost = (job.outcome.usage or {}).get("cost_usd")
    efficiency = scores.cost_efficiency(cost)
    total = scores.composite(functional, regression, lint, complexity, efficiency)
    values = {
        "applied": job.applied,
        "apply_attempts": job.attempts,
        "files": job.files,
        "checks": checks,
        "refused": storable_text(job.refused[:2000])[0],
        "forged": storable_text(job.forged[:2000])[0],
        "functional": functional,
        "regression": regression,
        "lint": lint,
        "complexity": complexity,
        "cost_efficiency": efficiency,
        "composite": total,
        "judged_at": timezone.now(),
    }
    CodingOutcome.objects.filter(pk=job.outcome.pk).update(**values)
    for key, value in values.items():
        setattr(job.outcome, key, value)
