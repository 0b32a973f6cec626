"""A repo task's sandboxes as the host drives them: the spec, the fresh copy of the
source (from the task's canonical bundle), the diff collected before destroy, and
running one bounded script. Nothing here runs git on the host."""

import hashlib
import logging
import shlex
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from django.conf import settings

from battles.attachments import attachments_place
from battles.parity import LaneAttachment, LaneRepo
from coding import scripts
from sandboxes.base import Sandbox, SandboxSpec, ToolError, ToolResult
from sandboxes.untrusted import storable_text

logger = logging.getLogger(__name__)

# The largest diff stored with a run (the judge applies exactly what was stored; a
# bigger one is refused, not cut: a cut patch would not apply).
DIFF_MAX_BYTES = 2 * 1024**2
# Setup scripts (checkout, diff) get this long; the agent's own commands their limits.
SETUP_TIMEOUT_S = 120


def repo_spec(spec: SandboxSpec, repo: LaneRepo, *, egress: bool = True) -> SandboxSpec:
    """A repo lane's sandbox: no desktop, the coding toolchain bound read-only, a shell
    whose one command may last the whole time limit (agents' own commands ask for
    less; a CLI agent is one such command)."""
    return replace(
        spec,
        desktop=False,
        toolchain=True,
        egress=egress,
        shell_timeout_s=max(spec.shell_timeout_s, repo.time_limit_s + 30, SETUP_TIMEOUT_S),
        deliver_max_files=4,
        deliver_max_bytes=max(spec.deliver_max_bytes, DIFF_MAX_BYTES + 1),
    )


def sh(sandbox: Sandbox, script: str, timeout_s: float) -> ToolResult:
    """Runs a bash script in the sandbox under the given bound."""
    return sandbox.shell(f"exec bash -c {shlex.quote(script)}", timeout_s=timeout_s)


def place_bundle(sandbox: Sandbox, *, name: str, path: str, sha256: str, size: int) -> str:
    """Copies a stored bundle (or upload) into the sandbox's work dir, verified by hash
    (then into its /work, where that is not the work dir: a remote engine's sandbox);
    returns its path inside."""
    attachments_place(
        work_dir=sandbox.work_dir,  # type: ignore[attr-defined]
        owner_uid=getattr(sandbox, "uid", None),
        attachments=(LaneAttachment(name=name, sha256=sha256, size=size, path=path),),
    )
    sandbox.push_work_dir()
    return f"/work/attachments/{name}"


def sandbox_quiesce(sandbox: Sandbox, clear: tuple[str, ...] = ()) -> bool:
    """Kills every process the agent left in its sandbox (``scripts.quiesce``), then
    removes ``clear``; True when nothing is left running. Called as soon as the agent
    has ended, before anything is read out of the sandbox: nothing the agent started can
    then change what is read."""
    result = sh(sandbox, scripts.quiesce(clear), SETUP_TIMEOUT_S)
    return not result.timed_out and scripts.report(result.stdout).get("quiet") == "1"


def place_source(sandbox: Sandbox, repo: LaneRepo) -> str:
    """The task's bundle (the judge's, for a judge's copy) placed fresh, hash checked."""
    return place_bundle(
        sandbox,
        name="source.bundle",
        path=repo.bundle_path,
        sha256=repo.bundle_sha256,
        size=repo.bundle_size,
    )


class RepoSetupFailed(Exception):
    """The fresh copy could not be made (the arena's fault, never the agent's)."""


def repo_checkout(sandbox: Sandbox, repo: LaneRepo) -> None:
    """The lane's copy at /work/repo, tagged as the checkpoint; its commit and tree
    must be the task's (both lanes then hold byte-identical trees)."""
    inside = place_source(sandbox, repo)
    result = sh(sandbox, scripts.checkout(inside), SETUP_TIMEOUT_S)
    seen = scripts.report(result.stdout)
    commit, tree = scripts.git_id(seen.get("commit")), scripts.git_id(seen.get("tree"))
    judge_copy = bool(repo.head) and repo.head != repo.commit
    expected = (repo.head, tree) if judge_copy else (repo.commit, repo.tree)
    if result.exit_code != 0 or (commit, tree) != expected:
        detail = (result.stderr or result.stdout or result.error)[-500:]
        raise RepoSetupFailed(
            f"the repository copy did not check out as prepared (commit {commit or '?'}, "
            f"tree {tree or '?'}): {detail}"
        )


@dataclass(frozen=True)
class CollectedDiff:
    """The patch's bytes (what the judge applies) and its text for people (NUL and
    bytes that are not UTF-8 escaped, ``sandboxes.untrusted``)."""

    data: bytes
    text: str
    error: str = ""

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest() if self.data else ""


def diff_collect(sandbox: Sandbox, repo: LaneRepo) -> CollectedDiff:
    """The agent's change against the checkpoint, read out of its sandbox (bounded,
    never followed through a link) before the sandbox is destroyed. First every process
    the agent left is killed (nothing can then rewrite the patch between its hashing
    and its reading), then the task's bundle is placed fresh and the diff made from a
    git directory of the arena's own (``scripts.collect_diff``); the bytes read must be
    the bytes hashed inside."""
    if not sandbox_quiesce(sandbox, clear=("/work/attachments", scripts.OUT_DIR)):
        return CollectedDiff(b"", "", error="the agent's processes could not all be stopped")
    bundle = place_source(sandbox, repo)
    result = sh(sandbox, scripts.collect_diff(repo.commit, bundle), SETUP_TIMEOUT_S)
    seen = scripts.report(result.stdout)
    if result.timed_out or seen.get("diff_exit") != "0":
        reason = seen.get("diff_error") or ("git diff timed out" if result.timed_out else "")
        return CollectedDiff(b"", "", error=reason or "git diff failed in the agent's sandbox")
    with tempfile.TemporaryDirectory(dir=settings.PRIVATE_MEDIA_ROOT) as tmp:
        dest = Path(tmp) / "out"
        try:
            files = sandbox.collect_files([f"{scripts.OUT_DIR}/{scripts.PATCH_NAME}"], dest)
        except ToolError as exc:
            return CollectedDiff(b"", "", error=f"the patch could not be read: {exc}")
        data = files[0].path.read_bytes()
    if len(data) > DIFF_MAX_BYTES:
        return CollectedDiff(b"", "", error=f"the diff is {len(data)} bytes, over {DIFF_MAX_BYTES}")
    if hashlib.sha256(data).hexdigest() != seen.get("diff_sha256"):
        return CollectedDiff(b"", "", error="the patch read out is not the patch hashed inside")
    text, _ = storable_text(data.decode("utf-8", "surrogateescape"))
    return CollectedDiff(data, text)
