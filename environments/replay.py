"""Replaying a trajectory on an environment (docs/environments.md, "Replays"): a fresh
sandbox provisioned from the environment's redacted state with the lanes' own
machinery, the recorded actions played back through the fixed tool set (a desktop
trajectory) or the stored patch applied as the coding judge applies it (a repo
trajectory), then the grader. An environment is valid when its failing trajectory
fails its grader and its reference trajectory passes it.

Everything that goes wrong in the sandbox (it does not start, a file is missing from
storage, the checkout differs, a tool call fails to reach it) is the replay's
``error``, never an exception out of :func:`replay`: an invalid replay is a result."""

import hashlib
import logging
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from django.conf import settings

from arena_site.media import MediaTooLarge, MediaUnreadable, media_read
from battles.attachments import attachments_place
from battles.parity import LaneRepo
from battles.services.coding_judge import CHECK_MAX_S
from battles.services.coding_sandbox import DIFF_MAX_BYTES, repo_checkout, repo_spec, sh
from battles.services.judge_checks import patch_apply
from battles.snapshots import (
    blob_name,
    simulated_web_digest,
    snapshot_attachments,
    snapshot_repo,
)
from coding import patchcheck, scripts
from coding.protect import is_protected
from environments.graders import (
    GraderInvalid,
    GraderResult,
    grader_run,
    grader_timeout_s,
    grader_validate,
)
from environments.models import BLOB_PREFIX
from environments.mutation import mutations_run
from sandboxes.base import Sandbox, SandboxSpec
from sandboxes.services import egress_refusals_take, lane_sandbox_spec, sandbox_session
from sandboxes.tools import tool_call
from sandboxes.untrusted import storable_text

logger = logging.getLogger(__name__)

ACTIONS_MAX = 2000
# Observations change nothing in the sandbox: a replay skips them.
SKIPPED_TOOLS = ("screenshot",)
PATCH_NAME = "replay.patch"
ERROR_MAX_CHARS = 2000
FAILED_KEPT = 20
# Room, on top of the trajectory's own budget, for provisioning and the grader.
LIFETIME_MARGIN_S = 300


@dataclass(frozen=True)
class ReplayResult:
    """One replay: ``passed`` when the grader passed and nothing went wrong;
    ``error`` says what went wrong in the sandbox (then ``passed`` is False);
    ``retryable``: the error was the arena's (the sandbox, storage) and a later replay
    may succeed; otherwise it is the environment's own (an invalid grader or
    trajectory, a changed simulated web) and replaying again changes nothing.
    ``applied`` is the patch's fallback step for a repo trajectory; ``failed_actions``
    the replayed calls the sandbox refused (``{"index", "tool", "error"}``, the first
    ``FAILED_KEPT``), as the lane's own steps may have been refused. ``mutations``:
    the grader on the wrong copies of this replay's result (``mutations_run``), when
    asked for and the grader passed."""

    label: str
    passed: bool
    grader: GraderResult | None
    final_message: str
    error: str
    duration_ms: int
    steps_replayed: int
    applied: str = ""
    failed_actions: list[dict] = field(default_factory=list)
    retryable: bool = False
    mutations: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The replay as ``Environment.replays`` keeps it (JSON)."""
        return asdict(self)


class ReplayFailed(Exception):
    """The replay could not be carried out (the arena's side, or a malformed trajectory)."""


def _actions(actions, kind: str) -> list[dict]:
    if not isinstance(actions, list) or len(actions) > ACTIONS_MAX:
        raise ReplayFailed(f"a trajectory is a list of at most {ACTIONS_MAX} actions")
    found = []
    for index, action in enumerate(actions):
        if (
            not isinstance(action, dict)
            or not isinstance(action.get("tool"), str)
            or not isinstance(action.get("args", {}), dict)
        ):
            raise ReplayFailed(f"action {index + 1} is not {{'tool': name, 'args': {{...}}}}")
        tool = action["tool"]
        if (tool == "apply_patch") != (kind == "repo"):
            raise ReplayFailed(
                f"action {index + 1} ({tool[:40]}): a repo trajectory is one apply_patch, "
                "a desktop trajectory the tool set's calls"
            )
        found.append({"tool": tool, "args": action.get("args", {})})
    return found


def _same_web(state: dict) -> None:
    """The demo web the run saw must be the one the replay sees (its pages are data:
    another version would answer other questions)."""
    seen = (state.get("simulated_web") or {}).get("content_sha256")
    if seen and seen != simulated_web_digest():
        raise ReplayFailed(
            "the simulated web has changed since the run (its content "
            f"{str(seen)[:12]}…, now {simulated_web_digest()[:12]}…): a replay would not "
            "see what the agent saw"
        )


def _judge_repo(state: dict) -> LaneRepo | None:
    """The copy a replay checks out: the judge's bundle (hidden tests) when the state
    names one, as the coding judge's sandbox does, else the agents'."""
    repo = state.get("repo")
    if repo is None:
        return None
    judge = repo.get("judge")
    if not judge:
        return snapshot_repo(state, prefix=BLOB_PREFIX)
    with_judge = {**state, "repo": {**repo, "sha256": judge["sha256"], "size": judge["size"]}}
    return snapshot_repo(with_judge, head=judge["head"], prefix=BLOB_PREFIX)


def _spec(state: dict, repo: LaneRepo | None, run_id: int | None, grader: dict) -> SandboxSpec:
    """The lane's sandbox as ``run_lane`` builds it, for the state's screen; its shell
    limit raised for the grader only (replayed shell calls keep the lane's own)."""
    wall = int(state.get("wall_budget_s") or 0)
    spec = lane_sandbox_spec(
        run_id=run_id,  # type: ignore[arg-type]  # None: a lease of no run, no egress
        start_url=state.get("start_url") or "",
        lifetime_s=wall + grader_timeout_s(grader) + LIFETIME_MARGIN_S,
    )
    screen = state.get("screen")
    if screen is None:
        spec = replace(spec, desktop=False)
    else:
        spec = replace(spec, width=int(screen["width"]), height=int(screen["height"]))
    if repo is not None:
        # No egress: the replay only applies a stored patch and runs the grader.
        spec = repo_spec(spec, repo, egress=False)
    if run_id is None:
        spec = replace(spec, egress=False)  # the egress identity is a run's
    return spec


def _apply_patch(sandbox: Sandbox, args: dict) -> str:
    """The stored patch applied as the coding judge applies it (``patch_apply``: reviewed,
    placed by hash, the change set held to the review, protected paths put back);
    returns the step that applied it (``none``: nothing did, or it was refused)."""
    sha256, size = args.get("sha256"), args.get("size")
    if not isinstance(sha256, str) or not isinstance(size, int) or isinstance(size, bool):
        raise ReplayFailed("apply_patch needs the patch blob's sha256 and size")
    name = blob_name(sha256, BLOB_PREFIX)
    try:
        data = media_read(name, DIFF_MAX_BYTES)
    except (MediaTooLarge, MediaUnreadable) as exc:
        raise ReplayFailed(f"the patch blob cannot be read: {exc}") from exc
    if data is None or hashlib.sha256(data).hexdigest() != sha256:
        raise ReplayFailed("the patch blob is missing or changed in storage")
    try:
        review = patchcheck.review(data)
    except patchcheck.PatchRefused as exc:
        raise ReplayFailed(f"the patch was refused: {exc}") from exc
    done = patch_apply(
        sandbox, review=review, name=PATCH_NAME, path=name, sha256=sha256, size=size,
        protected=is_protected,
    )  # fmt: skip
    sh(sandbox, "rm -rf /work/attachments", 30)  # the next patch is placed fresh
    if done.refused:
        raise ReplayFailed(f"the patch was refused: {done.refused}")
    return done.applied if done.applied in dict(scripts.APPLY_CHAIN) else "none"


def _play(
    sandbox: Sandbox,
    actions: list[dict],
    *,
    shell_limit_s: float,
    deadline: float,
    failed: list[dict],
) -> tuple[int, str]:
    """Plays a desktop trajectory until its delivery; returns the actions played and
    the delivered message. A call that fails is noted in ``failed`` and the replay goes
    on, as the lane did."""
    played, message = 0, ""
    # Deliveries are copied here and dropped: the grader reads the sandbox's files.
    Path(settings.PRIVATE_MEDIA_ROOT).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=settings.PRIVATE_MEDIA_ROOT) as tmp:
        for index, action in enumerate(actions):
            if time.monotonic() > deadline:
                raise ReplayFailed(f"the replay ran out of time after {played} actions")
            tool, args = action["tool"], dict(action["args"])
            played += 1
            if tool in SKIPPED_TOOLS:
                continue
            if tool == "shell":
                wanted = args.get("timeout_s")
                number = isinstance(wanted, int | float) and not isinstance(wanted, bool)
                args["timeout_s"] = min(wanted, shell_limit_s) if number else shell_limit_s
            deliveries = Path(tmp) / str(index)
            deliveries.mkdir()
            result = tool_call(sandbox, tool, args, deliver_dir=deliveries)
            if not result.ok and len(failed) < FAILED_KEPT:
                error = storable_text(result.error[:300])[0]
                failed.append({"index": index, "tool": tool[:40], "error": error})
            if tool == "deliver" and result.ok:
                message = args.get("message", "")
                break
    return played, message


def replay(
    *,
    state: dict,
    actions: list[dict],
    grader: dict,
    label: str,
    run_id: int | None = None,
    mutate: bool = False,
) -> ReplayResult:
    """Provisions a fresh sandbox from ``state`` (files read from the environment's
    blobs), plays ``actions``, runs ``grader`` and destroys the sandbox.

    ``run_id``: the run whose trajectory this is; it names the sandbox's lease and its
    egress identity (so two replays of one run must not overlap). Without it the
    sandbox has no egress at all. ``mutate``: once the grader passed, grade the
    result's wrong copies too (``environments.mutation``), in the same sandbox."""
    started = time.monotonic()
    played, message, applied = 0, "", ""
    checked: GraderResult | None = None
    error = ""
    failed: list[dict] = []
    mutations: list[dict] = []
    retryable = False
    try:
        grader = grader_validate(grader)
        kind = state.get("kind")
        if kind not in ("desktop", "repo") or (kind == "repo") != bool(state.get("repo")):
            raise ReplayFailed("the state is neither a desktop state nor a repo state")
        steps = _actions(actions, kind)
        _same_web(state)
        repo = _judge_repo(state)
        spec = _spec(state, repo, run_id, grader)
        shell_limit_s = spec.shell_timeout_s
        wall = int(state.get("wall_budget_s") or 0) or CHECK_MAX_S
        spec = replace(spec, shell_timeout_s=max(spec.shell_timeout_s, grader_timeout_s(grader)))
        with sandbox_session(spec) as sandbox:
            if repo is not None:
                repo_checkout(sandbox, repo)
                for step in steps:
                    applied = _apply_patch(sandbox, step["args"])
                    played += 1
            attachments = snapshot_attachments(state, prefix=BLOB_PREFIX)
            if attachments:
                attachments_place(
                    work_dir=sandbox.work_dir,  # type: ignore[attr-defined]
                    owner_uid=getattr(sandbox, "uid", None),
                    attachments=attachments,
                )
            if repo is None:
                played, message = _play(
                    sandbox,
                    steps,
                    shell_limit_s=shell_limit_s,
                    deadline=started + wall + 120,
                    failed=failed,
                )
            checked = grader_run(sandbox, grader, final_message=message)
            if checked.error:
                error, retryable = f"the grader did not run: {checked.error}", True
            elif mutate and checked.passed:
                mutations = mutations_run(
                    sandbox, grader, instruction=state.get("instruction") or "", actions=steps,
                    message=message,
                )  # fmt: skip
    except GraderInvalid as exc:
        error = f"the grader is invalid: {exc}"
    except ReplayFailed as exc:
        error = str(exc)
    except Exception as exc:
        logger.exception("replay %s failed", label)
        error, retryable = f"{type(exc).__name__}: {exc}", True
    finally:
        if run_id is not None:
            egress_refusals_take(run_id)  # a replay keeps no refusals
    return ReplayResult(
        label=label,
        passed=bool(checked and checked.passed and not error),
        grader=checked,
        final_message=message,
        error=storable_text(error[:ERROR_MAX_CHARS])[0],
        duration_ms=int((time.monotonic() - started) * 1000),
        steps_replayed=played,
        applied=applied,
        failed_actions=failed,
        retryable=retryable,
        mutations=mutations,
    )
