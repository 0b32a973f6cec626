"""The agent-side attacks on a patch (docs/coding.md, "Diff, then destroy"), in a real
agent sandbox on a real repository copy: a process the agent leaves running rewrites
the file the host reads next, and a repository whose own git configuration defines
hooks, an fsmonitor and a filter that would run during the diff. The diff the host
stores must be exactly the agent's change, nothing the agent configured may run, and
the judge must still grade the honest part of the change."""

import hashlib
import random
from pathlib import Path

import pytest

from battles.coding_models import RepoSource
from battles.services import task_submit
from battles.services.coding_sandbox import diff_collect, repo_checkout, repo_spec
from battles.services.repo_admission import RepoRequest
from battles.services.repo_source import lane_repo, repo_source_prepare
from sandboxes.services import lane_sandbox_spec, sandbox_session
from tests.coding import repos
from tests.coding.test_judge_sandbox import FIXED_CALC

pytestmark = pytest.mark.django_db(transaction=True)

TRIES = 10
FORGED = "diff --git a/calc.py b/calc.py\\n# forged by a process the agent left\\n"


@pytest.fixture
def lane(alice, coders, tmp_path):
    """An agent's repo sandbox on the FIX project, checked out as a lane is."""
    request = RepoRequest(
        upload=repos.bundle(repos.FIX, tmp_path),
        ref="main",
        judge_ref="",
        success_cmd=repos.FIX.success_cmd,
        test_cmd=repos.FIX.test_cmd,
        time_limit_s=60,
    )
    battle = task_submit(user=alice, instruction="Fix calc.", repo=request, rng=random.Random(0))
    run = battle.runs.get(side="A")
    source = repo_source_prepare(
        source_id=RepoSource.objects.get(task=battle.task).pk, run_id=run.pk
    )
    repo = lane_repo(source)
    with sandbox_session(repo_spec(lane_sandbox_spec(run_id=run.pk), repo)) as sandbox:
        repo_checkout(sandbox, repo)
        yield sandbox, repo


def honest_patch(tmp_path: Path, extra: dict[str, str] | None = None) -> bytes:
    return repos.patch(repos.FIX, tmp_path, {"calc.py": FIXED_CALC, **(extra or {})})


def fix(sandbox) -> None:
    result = sandbox.shell("cd /work/repo && sed -i '0,/a - b/s//a + b/' calc.py", timeout_s=20)
    assert result.exit_code == 0, result.stderr


def test_a_process_left_running_cannot_rewrite_the_patch(lane, tmp_path):
    # Each try: the agent leaves a detached loop that rewrites the patch file (and the
    # whole output dir) as fast as it can; the host reads exactly the agent's diff.
    sandbox, repo = lane
    fix(sandbox)
    expected = honest_patch(tmp_path)
    rewriter = (  # (written aside and renamed: a reader never sees it half written)
        "setsid sh -c 'while :; do mkdir -p /work/.arena-out; "
        f'printf "{FORGED}" > /work/.arena-out/f; '
        "mv /work/.arena-out/f /work/.arena-out/agent.patch; done' >/dev/null 2>&1 < /dev/null &"
    )
    for attempt in range(TRIES):
        assert sandbox.shell(rewriter, timeout_s=10).exit_code == 0
        seen = sandbox.shell("sleep 0.2; cat /work/.arena-out/agent.patch", timeout_s=10)
        assert "forged" in seen.stdout, f"try {attempt}: the rewriter did not run"
        collected = diff_collect(sandbox, repo)
        assert collected.error == "", collected.error
        assert collected.data == expected, f"try {attempt}"
        assert collected.sha256 == hashlib.sha256(expected).hexdigest()
    left = sandbox.shell("ps -eo args | grep -c '[w]hile :'", timeout_s=10).stdout.strip()
    assert left == "0"


def test_the_repositorys_own_hooks_filters_and_fsmonitor_never_run(lane, tmp_path):
    # The agent configures its repository so that git would run its programs during
    # the diff (hooks, an fsmonitor, a clean filter and a diff driver over every file),
    # each of which would leave a mark and rewrite what git reads.
    sandbox, repo = lane
    fix(sandbox)
    evil = (
        "cd /work/repo && mkdir -p .githooks && "
        "printf '#!/bin/sh\\ntouch /work/MARK-$(basename $0)\\n' > .githooks/hook && "
        "chmod +x .githooks/hook && "
        "for h in post-index-change pre-commit post-checkout reference-transaction; do "
        "cp .githooks/hook .githooks/$h; done && "
        "git config core.hooksPath .githooks && "
        "git config core.fsmonitor /work/repo/.githooks/hook && "
        "git config filter.evil.clean 'sh -c \"touch /work/MARK-filter; echo forged\"' && "
        "git config filter.evil.required true && "
        "git config diff.evil.command /work/repo/.githooks/hook && "
        "git config diff.noprefix true && "
        "printf '* filter=evil diff=evil\\n' > .gitattributes && "
        "git tag -f arena-checkpoint HEAD~0 && rm -f .git/objects/pack/*.idx; "
        "rm -f /work/MARK-*"  # (the agent's own git commands above ran its hooks)
    )
    assert sandbox.shell(evil, timeout_s=20).exit_code == 0
    collected = diff_collect(sandbox, repo)
    assert collected.error == ""
    marks = sandbox.shell("ls /work | grep MARK || echo none", timeout_s=10).stdout.strip()
    assert marks == "none"
    # The true change: calc.py fixed, and the files the agent added as they are.
    text = collected.data.decode()
    assert "+    return a + b" in text and "forged" not in text
    assert "diff --git a/.gitattributes b/.gitattributes" in text
    assert "diff --git a/.githooks/hook b/.githooks/hook" in text


def test_a_repository_without_its_git_dir_still_gives_its_diff(lane, tmp_path):
    # The agent removed .git altogether: the diff is made against the task's own commit.
    sandbox, repo = lane
    fix(sandbox)
    assert sandbox.shell("rm -rf /work/repo/.git", timeout_s=10).exit_code == 0
    collected = diff_collect(sandbox, repo)
    assert collected.error == "" and collected.data == honest_patch(tmp_path)
