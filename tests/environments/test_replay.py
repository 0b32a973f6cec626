"""Replays for real: each one a fresh bubblewrap sandbox built from an environment's
state (its files read from the environment's blobs), the trajectory played back with
the lanes' own tool dispatcher or the coding judge's patch chain, then the grader. No
mocks: the trajectories that should pass pass, those that should not fail, and a link
out of the work dir is never read as the file it points to."""

import hashlib
import subprocess
from pathlib import Path

import pytest
from django.utils import timezone

from agents.models import Agent
from arena_site.media import media_save
from battles.models import Run
from battles.snapshots import MANIFEST_VERSION, simulated_web_digest
from environments.models import BLOB_PREFIX
from environments.replay import replay
from sandboxes.demoweb import HOST, ORIGIN, data

pytestmark = pytest.mark.django_db(transaction=True)

CSV = b"name,amount\nrent,700\nfood,250\nbooks,50\n"
TOTAL = b"1000\n"
ADD = "def add(a, b):\n    return a - b\n"
ADD_FIXED = "def add(a, b):\n    return a + b\n"
HIDDEN_TEST = "from calc import add\n\nassert add(-1, 1) == 0\nprint('hidden ok')\n"


def blob(data: bytes) -> dict:
    sha = hashlib.sha256(data).hexdigest()
    media_save(f"{BLOB_PREFIX}{sha}", data)
    return {"sha256": sha, "size": len(data)}


def desktop_state(*, screen: dict | None = None, attachments: tuple = ()) -> dict:
    return {
        "version": MANIFEST_VERSION,
        "kind": "desktop",
        "instruction": "Sum the amounts of data.csv into out.txt.",
        "start_url": "",
        "simulated_web": None,
        "screen": screen,
        "tools": ["shell", "deliver"],
        "step_budget": 20,
        "wall_budget_s": 120,
        "attachments": [{"name": name, **blob(data)} for name, data in attachments],
        "repo": None,
    }


def sum_grader() -> dict:
    return {
        "version": 1,
        "checks": [
            {
                "type": "text_equals",
                "path": "out.txt",
                "sha256": hashlib.sha256(b"1000").hexdigest(),
            },
            {"type": "message_contains", "text": "total is 1000"},
        ],
    }


def shell(command: str) -> dict:
    return {"tool": "shell", "args": {"command": command}}


def deliver(message: str, files: list[str]) -> dict:
    return {"tool": "deliver", "args": {"message": message, "files": files}}


SUM = "awk -F, 'NR>1{s+=$2} END{print s}' attachments/data.csv > out.txt"


def test_a_desktop_trajectory_that_makes_the_right_file_passes(settings):
    state = desktop_state(screen={"width": 1024, "height": 768}, attachments=[("data.csv", CSV)])
    actions = [
        {"tool": "screenshot", "args": {}},
        {"tool": "click", "args": {"x": 10, "y": 10}},
        shell(SUM),
        deliver("The total is 1000.", ["out.txt"]),
        shell("echo 0 > out.txt"),  # after the delivery: the lane had ended
    ]
    result = replay(state=state, actions=actions, grader=sum_grader(), label="reference")
    assert (result.error, result.passed) == ("", True)
    assert result.final_message == "The total is 1000."
    assert result.steps_replayed == 4
    assert result.failed_actions == []  # the click too: a real desktop
    assert [c["passed"] for c in result.grader.checks] == [True, True]
    assert result.duration_ms > 0
    assert result.as_dict()["grader"]["passed"] is True


def test_a_desktop_trajectory_that_makes_the_wrong_file_fails(settings):
    settings.ARENA = settings.ARENA.replace(sandbox_desktop=False)
    state = desktop_state(attachments=[("data.csv", CSV)])
    actions = [
        shell("head -n 2 attachments/data.csv | awk -F, 'NR>1{s+=$2} END{print s}' > out.txt"),
        {"tool": "deliver", "args": {"message": "x", "files": ["missing.txt"]}},  # refused
        shell("printf 'no\\n' >> out.txt"),
        deliver("The total is 700.", ["out.txt"]),
    ]
    result = replay(state=state, actions=actions, grader=sum_grader(), label="failing")
    assert (result.error, result.passed) == ("", False)
    assert result.final_message == "The total is 700."
    assert result.steps_replayed == 4
    (refused,) = result.failed_actions
    assert (refused["index"], refused["tool"]) == (1, "deliver")
    assert "missing.txt" in refused["error"]
    assert [c["passed"] for c in result.grader.checks] == [False, False]


def test_each_replay_starts_from_the_state_not_from_an_earlier_replay(settings):
    settings.ARENA = settings.ARENA.replace(sandbox_desktop=False)
    state = desktop_state(attachments=[("data.csv", CSV)])
    first = replay(state=state, actions=[shell(SUM)], grader=sum_grader(), label="first")
    second = replay(state=state, actions=[], grader=sum_grader(), label="second")
    assert first.grader.checks[0]["passed"] is True
    assert second.grader.checks[0] == {
        "type": "text_equals",
        "path": "out.txt",
        "passed": False,
        "detail": "no such file",
    }


def test_a_link_out_of_the_work_dir_is_never_read_as_the_file(settings):
    settings.ARENA = settings.ARENA.replace(sandbox_desktop=False)
    passwd = Path("/etc/passwd").read_bytes()
    grader = {
        "version": 1,
        "checks": [
            {
                "type": "file_sha256",
                "path": "out.txt",
                "sha256": hashlib.sha256(passwd).hexdigest(),
            },
            {"type": "file_kind", "path": "out.txt", "kind": "text"},
            {"type": "file_exists", "path": "etc/passwd"},
        ],
    }
    actions = [shell("ln -s /etc/passwd out.txt && ln -s /etc etc"), deliver("done", [])]
    result = replay(state=desktop_state(), actions=actions, grader=grader, label="escape")
    assert (result.error, result.passed) == ("", False)
    assert [c["passed"] for c in result.grader.checks] == [False, False, False]
    assert all("link" in c["detail"] for c in result.grader.checks)


def test_a_replay_of_a_run_reaches_the_simulated_web_it_saw(settings, roster):
    settings.ARENA = settings.ARENA.replace(sandbox_desktop=False, demo_web=True)
    run = Run.objects.create(
        for_evaluation=True, side="A", agent=Agent.objects.get(slug="idle"),
        step_budget=20, wall_budget_s=120, heartbeat_at=timezone.now(),
    )  # fmt: skip
    url = f"{ORIGIN}/downloads/opening-hours.csv"
    state = {
        **desktop_state(),
        "start_url": url,
        "simulated_web": {"host": HOST, "content_sha256": simulated_web_digest()},
    }
    grader = {
        "version": 1,
        "checks": [
            {"type": "csv_shape", "path": "hours.csv", "rows": len(data.OPENING_HOURS),
             "header": list(data.OPENING_HOURS_HEADER)},
        ],
    }  # fmt: skip
    actions = [shell(f"curl -s -m 5 {url} > hours.csv"), deliver("saved", ["hours.csv"])]

    result = replay(state=state, actions=actions, grader=grader, label="x", run_id=run.pk)
    offline = replay(state=state, actions=actions, grader=grader, label="x")
    state["simulated_web"] = {"host": HOST, "content_sha256": "0" * 64}
    changed = replay(state=state, actions=actions, grader=grader, label="x", run_id=run.pk)

    assert (result.error, result.passed) == ("", True)
    assert (offline.error, offline.passed) == ("", False)  # no run: no egress
    assert changed.error.startswith("the simulated web has changed since the run")
    assert changed.retryable is False
    assert changed.grader is None


def test_an_invalid_grader_or_trajectory_is_a_replay_error_not_an_exception():
    state = desktop_state()
    bad_path = {"version": 1, "checks": [{"type": "file_exists", "path": "/etc/shadow"}]}
    result = replay(state=state, actions=[], grader=bad_path, label="x")
    assert result.passed is False and result.grader is None
    assert result.error.startswith("the grader is invalid: check 1 (file_exists): path")
    unknown = {"version": 1, "checks": [{"type": "exec", "code": "import os"}]}
    result = replay(state=state, actions=[], grader=unknown, label="x")
    assert "unknown type 'exec'" in result.error
    result = replay(
        state=state, actions=[{"tool": "apply_patch", "args": {}}], grader=sum_grader(), label="x"
    )
    assert result.error.startswith("action 1 (apply_patch): a repo trajectory")
    result = replay(state=state, actions=["rm -rf /"], grader=sum_grader(), label="x")
    assert result.error == "action 1 is not {'tool': name, 'args': {...}}"
    assert result.retryable is False


def test_a_blob_missing_from_storage_is_a_replay_error(settings):
    settings.ARENA = settings.ARENA.replace(sandbox_desktop=False)
    state = desktop_state(attachments=[("data.csv", CSV)])
    state["attachments"][0]["sha256"] = "0" * 64
    result = replay(state=state, actions=[shell(SUM)], grader=sum_grader(), label="gone")
    assert result.passed is False and result.grader is None
    assert "AttachmentCorrupted" in result.error and "missing from storage" in result.error
    assert result.retryable is True


# -- repo states ---------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )
    return out.stdout.decode().strip()


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).write_text(text)


def repo_state(tmp_path: Path, *, hidden: dict[str, str] | None = None) -> dict:
    """A repo snapshot as ``battles.snapshots`` writes it: the canonical bundle (branch
    ``arena``, one commit), with a judge bundle one commit further when ``hidden``."""
    root = tmp_path / "src"
    root.mkdir()
    git(root, "init", "-q", "-b", "arena")
    write(root, {"calc.py": ADD, "test_calc.py": "from calc import add\n\nassert add(2, 3) == 5\n"})
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    commit, tree = git(root, "rev-parse", "HEAD"), git(root, "rev-parse", "HEAD^{tree}")
    git(root, "bundle", "create", "-q", str(tmp_path / "source.bundle"), "arena")
    repo = {**blob((tmp_path / "source.bundle").read_bytes()), "commit": commit, "tree": tree,
            "head": commit, "time_limit_s": 60}  # fmt: skip
    if hidden:
        write(root, hidden)
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "hidden tests")
        git(root, "bundle", "create", "-q", str(tmp_path / "judge.bundle"), "arena")
        judge = blob((tmp_path / "judge.bundle").read_bytes())
        repo["judge"] = {**judge, "head": git(root, "rev-parse", "HEAD")}
    return {
        **desktop_state(),
        "kind": "repo",
        "instruction": "Fix add.",
        "tools": ["shell", "edit", "deliver"],
        "repo": repo,
    }


def patch_of(tmp_path: Path, name: str, edits: dict[str, str]) -> dict:
    """An agent's diff as its sandbox collects it, stored as a blob: the action."""
    root = tmp_path / name
    root.mkdir()
    git(root, "init", "-q", "-b", "arena")
    write(root, {"calc.py": ADD, "test_calc.py": "from calc import add\n\nassert add(2, 3) == 5\n"})
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    write(root, edits)
    git(root, "add", "-A")
    data = subprocess.run(
        ["git", "diff", "--cached", "--binary", "--full-index", "--no-renames", "HEAD"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout
    return {"tool": "apply_patch", "args": blob(data)}


def command_grader(run: str) -> dict:
    check = {"type": "command", "run": run, "cwd": "repo", "timeout_s": 30}
    return {"version": 1, "checks": [check]}


def test_a_repo_state_passes_with_the_fixing_patch_and_fails_without(tmp_path):
    state = repo_state(tmp_path)
    grader = command_grader("python3 test_calc.py")
    fixing = patch_of(tmp_path, "fix", {"calc.py": ADD_FIXED})
    useless = patch_of(tmp_path, "useless", {"calc.py": "# TODO\n" + ADD})

    passed = replay(state=state, actions=[fixing], grader=grader, label="reference")
    failed = replay(state=state, actions=[useless], grader=grader, label="failing")
    nothing = replay(state=state, actions=[], grader=grader, label="no patch")

    assert (passed.error, passed.passed, passed.applied, passed.steps_replayed) == (
        "", True, "apply", 1,
    )  # fmt: skip
    assert (failed.error, failed.passed, failed.applied) == ("", False, "apply")
    assert failed.grader.checks[0]["detail"].startswith("exit 1 (expected 0)")
    assert "AssertionError" in failed.grader.checks[0]["detail"]
    assert (nothing.error, nothing.passed, nothing.steps_replayed) == ("", False, 0)


def test_a_repo_state_with_hidden_tests_checks_out_the_judges_copy(tmp_path):
    state = repo_state(tmp_path, hidden={"test_hidden.py": HIDDEN_TEST})
    state["attachments"] = [{"name": "data.csv", **blob(CSV)}]
    grader = command_grader("python3 test_hidden.py && python3 test_calc.py")
    grader["checks"].append(
        {"type": "file_sha256", "path": "attachments/data.csv", "sha256": blob(CSV)["sha256"]}
    )
    fixing = patch_of(tmp_path, "fix", {"calc.py": ADD_FIXED})
    result = replay(state=state, actions=[fixing], grader=grader, label="reference")
    assert (result.error, result.passed) == ("", True)
    assert "hidden ok" in result.grader.checks[0]["detail"]


def test_a_patch_that_rewrites_the_tests_gets_them_put_back(tmp_path):
    # As the coding judge does: the paths it protects come back as the checkout has them.
    state = repo_state(tmp_path)
    cheating = patch_of(tmp_path, "cheat", {"test_calc.py": "assert True\n"})
    result = replay(
        state=state,
        actions=[cheating],
        grader=command_grader("python3 test_calc.py"),
        label="failing",
    )
    assert (result.error, result.passed, result.applied) == ("", False, "apply")
    assert "AssertionError" in result.grader.checks[0]["detail"]


def test_a_patch_that_does_not_apply_fails_the_grader(tmp_path):
    state = repo_state(tmp_path)
    other = blob(
        b"diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n"
    )
    result = replay(
        state=state,
        actions=[{"tool": "apply_patch", "args": other}],
        grader=command_grader("python3 test_calc.py"),
        label="failing",
    )
    assert (result.error, result.passed, result.applied) == ("", False, "none")
