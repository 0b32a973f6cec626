"""The judge sandbox's checks as the host runs them (docs/coding.md, "Grades from outside
the code under test"): the harness installed where the sandbox cannot change it, the
repository sealed read-only before any of the patch runs, the change set read, and each
task command run through the harness (a pytest run) or as a plain command (anything
else: its exit status and what it printed, which the code under test can forge, so it
is marked unverified)."""

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from battles.services.coding_sandbox import place_bundle, sh
from coding import grading, patchcheck, results, scripts
from sandboxes.base import Sandbox, ToolError
from sandboxes.untrusted import storable_text

INSIDE = Path(__file__).resolve().parents[2] / "coding" / "inside"
HARNESS_FILES = ("_arena_judge_harness.py", "_arena_run_pytest.py", "_arena_observer.py")
OUTPUT_TAIL_BYTES = 8 * 1024
JUNIT_PATH = f"{scripts.OUT_DIR}/junit.xml"
CHANGES_MAX_BYTES = 4 * 1024**2


def harness_sums() -> dict[str, str]:
    return {
        name: hashlib.sha256((INSIDE / name).read_bytes()).hexdigest() for name in HARNESS_FILES
    }


def harness_install(sandbox: Sandbox) -> dict[str, str]:
    """Copies the harness into the fresh judge sandbox at ``scripts.JUDGE_DIR``: a new
    directory, placed where the worker places a lane's files (opened without following
    links, made visible inside by ``push_work_dir``), then sealed (owned by root: the
    sandbox's uid can read it, never change it). Returns the files' hashes, which the
    sandbox checks before each run (where the tree could not be sealed, nothing else
    keeps the sandbox from writing there)."""
    work_fd = os.open(sandbox.work_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)  # type: ignore[attr-defined]
    name = Path(scripts.JUDGE_DIR).name
    try:
        os.mkdir(name, 0o755, dir_fd=work_fd)
        dir_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=work_fd)
    finally:
        os.close(work_fd)
    try:
        for file in HARNESS_FILES:
            fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                         dir_fd=dir_fd)  # fmt: skip
            with os.fdopen(fd, "wb") as out:
                out.write((INSIDE / file).read_bytes())
        os.fchmod(dir_fd, 0o755)
    finally:
        os.close(dir_fd)
    sandbox.push_work_dir()
    sandbox.seal_tree(scripts.JUDGE_DIR)
    return harness_sums()


def seal(sandbox: Sandbox) -> bool:
    """Makes the repository read-only for the sandbox before any code of the patch runs
    (``Sandbox.seal_tree``): the tests and their configuration (and the code under
    test) then cannot change, between two commands or during one. Returns whether it
    did (a worker that is not root cannot, unless its sandboxes seal inside)."""
    return sandbox.seal_tree(scripts.REPO_DIR)


def read_out(sandbox: Sandbox, name: str) -> bytes | None:
    """A file the judge's own script wrote to ``OUT_DIR`` (bounded, never through a link)."""
    with tempfile.TemporaryDirectory(dir=settings.PRIVATE_MEDIA_ROOT) as tmp:
        try:
            files = sandbox.collect_files([f"{scripts.OUT_DIR}/{name}"], Path(tmp) / "out")
        except ToolError:
            return None
        return files[0].path.read_bytes()


def change_set(sandbox: Sandbox) -> list[tuple[str, str, str, str]] | None:
    """What the applied patch changed in the judge's tree, as the judge's git sees it."""
    seen = scripts.report(sh(sandbox, scripts.change_set(), 120).stdout)
    if seen.get("changes_exit") != "0":
        return None
    data = read_out(sandbox, scripts.CHANGES_NAME)
    if data is None or len(data) > CHANGES_MAX_BYTES:
        return None
    return scripts.parse_changes(data)


def harness_run(sandbox: Sandbox, config: dict, sums: dict[str, str]) -> dict | None:
    """One harness run; its result, or None when it gave none."""
    script = scripts.harness(json.dumps(config), sums)
    result = sh(sandbox, script, float(config["timeout_s"]) + 60)
    return grading.parse_result(result.stdout)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def plain_run(sandbox: Sandbox, command: str, name: str, timeout_s: int, **kw) -> dict:
    """A command the harness cannot run (not pytest): its exit status and output's
    tail, killed leftovers first. Unverified: the code under test could write both."""
    log = f"{scripts.OUT_DIR}/{name}.log"
    started = time.monotonic()
    script = scripts.run_check(command, log, tail_bytes=OUTPUT_TAIL_BYTES, **kw)
    result = sh(sandbox, script, timeout_s + 5)
    head, _, _ = result.stdout.partition(scripts.OUTPUT_MARK)
    exit_code = None if result.timed_out else _int(scripts.report(head).get("check_exit"))
    output = scripts.check_output(result.stdout)
    return {
        "command": command,
        "exit_code": exit_code,
        "seconds": round(time.monotonic() - started, 3),
        "timed_out": result.timed_out,
        "output": storable_text(output[-OUTPUT_TAIL_BYTES:])[0],
        "verified": False,
    }


def junit_counts(sandbox: Sandbox) -> dict | None:
    """The JUnit XML a plain test command wrote at ``$ARENA_JUNIT_XML``, counted
    (what the command says of itself)."""
    data = read_out(sandbox, Path(JUNIT_PATH).name)
    counts = results.parse_junit_xml(data) if data is not None else None
    return counts.__dict__.copy() if counts is not None else None


def harness_check(
    sandbox: Sandbox,
    *,
    command: str,
    run: grading.PytestRun,
    expected: grading.Expected | None,
    canaries: list[dict],
    watch: list[str],
    timeout_s: int,
    sums: dict[str, str],
) -> tuple[dict, grading.Graded]:
    """A pytest command through the harness: its record for people and its grade."""
    config = grading.harness_config(
        run, mode="run", timeout_s=timeout_s, canaries=canaries, watch=watch,
        tail_bytes=OUTPUT_TAIL_BYTES,
    )  # fmt: skip
    result = harness_run(sandbox, config, sums)
    graded = grading.grade(result, expected)
    result = result or {}
    record = {
        "command": command,
        "exit_code": result.get("exit_code") if isinstance(result.get("exit_code"), int) else None,
        "seconds": result.get("seconds"),
        "timed_out": bool(result.get("timed_out")),
        "output": storable_text(str(result.get("output", ""))[-OUTPUT_TAIL_BYTES:])[0],
        "verified": not graded.forged and not graded.unverified,
        "forged": graded.forged,
        "unverified": graded.unverified,
        "counts": graded.counts(),
        "skipped": graded.skipped,
        "missing": [storable_text(i)[0] for i in graded.missing[: grading.SHOWN_IDS]],
        "missing_count": len(graded.missing),
        "failing": [storable_text(i)[0] for i in graded.failing],
        "check_tests": {
            str(name): outcome for name, outcome in (result.get("canaries") or {}).items()
        },
    }
    return record, graded


@dataclass
class PatchApplied:
    """What applying a reviewed patch did: the step that applied it (``none``: no step
    did; ``refused``: what it changed was refused, and the checkout was put back), each
    attempt's exit code, the refusal's reason, and the protected paths put back."""

    applied: str
    attempts: list[dict] = field(default_factory=list)
    refused: str = ""
    restored: list[str] = field(default_factory=list)


def patch_apply(
    sandbox: Sandbox,
    *,
    review: patchcheck.PatchReview,
    name: str,
    path: str,
    sha256: str,
    size: int,
    protected: Callable[[str], bool],
) -> PatchApplied:
    """The one door through which a stored patch reaches a checkout (the coding judge,
    an environment's replay): placed by hash, applied through the fallback chain, the
    change set read back from the judge's own git and held to the review (no link, no
    submodule, no path the patch does not name), then every ``protected`` path in it
    put back. Nothing of the patch has run when this returns."""
    patch = place_bundle(sandbox, name=name, path=path, sha256=sha256, size=size)
    seen = scripts.report(sh(sandbox, scripts.apply_patch(patch), 180).stdout)
    attempts = [
        {"step": step, "exit_code": _int(seen.get(f"attempt_{step}"))}
        for step, _ in scripts.APPLY_CHAIN
        if f"attempt_{step}" in seen
    ]
    applied = seen.get("applied", "none")
    if applied not in dict(scripts.APPLY_CHAIN):
        return PatchApplied("none", attempts)
    changes = change_set(sandbox)
    named = set(review.paths)
    refused = ""
    if changes is None:
        refused = "the judge could not read what the patch changed"
    elif bad := [c for c in changes if c[1] not in ("000000", *patchcheck.FILE_MODES)]:
        refused = f"{bad[0][3]!r} became a link or a submodule"
    elif unnamed := [c[3] for c in changes if c[3] not in named]:
        refused = f"applying the patch changed {unnamed[0]!r}, which it does not name"
    if refused:
        sh(sandbox, scripts.apply_reset(), 60)
        return PatchApplied("refused", attempts, refused=refused)
    restored = sorted(c[3] for c in changes if protected(c[3]))
    if restored:
        sh(sandbox, scripts.restore(restored), 60)
    return PatchApplied(applied, attempts, restored=restored)
