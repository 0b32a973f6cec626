"""Desktop tasks of an evaluation: each (task, agent) one lane like a battle's — a
``battles.Run`` of its own (``for_evaluation``) driven by ``battles.services.lanes.run_lane``
in a fresh sandbox (the warm pool's or a cold one, each on a slot lease), under the
evaluation's budgets, with the task's attachments in /work/attachments; its steps,
screenshots and spans are stored as a battle's are. Once the agent has ended, in the
lane's final state, the task's success command runs with the sandbox's shell, bounded
in time, and its exit code decides the success score.

The run's ``EvalRun`` is stored once the lane and the command have ended (so a lane
whose worker died leaves no run, and resuming the evaluation runs it again);
``lanes_fail_stuck`` ends such orphaned lanes with the reason."""

import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.models import Agent
from arena_site.hosts import host_id
from battles.models import Run
from battles.parity import LaneAttachment, LaneInputs, shared_tools
from battles.services.lanes import run_lane
from evals import scoring
from evals.models import EvalAttachment, EvalRun, Evaluation
from evals.selectors import lane_usage
from sandboxes.base import Sandbox, ToolError
from sandboxes.untrusted import storable_text

logger = logging.getLogger(__name__)

# What of the command's output (stdout, then stderr) the run keeps.
SUCCESS_OUTPUT_MAX_CHARS = 16_000
STUCK_REASON = (
    "the worker running this evaluation lane stopped (no heartbeat for {seconds} s); "
    "resuming the evaluation runs the task again"
)


def lanes_endpoint() -> str:
    """The gate the desktop lanes of this host's evaluations share (``evals.gates``):
    sandboxes are the host's, so their bound is too."""
    return f"desktop lanes on {host_id()}"


@dataclass(frozen=True)
class SuccessResult:
    """The success command as it ran: ``exit_code`` None when it timed out or the
    sandbox did not answer (``error`` says which)."""

    exit_code: int | None
    output: str
    error: str
    timed_out: bool
    duration_ms: int

    @property
    def score(self) -> float:
        return 1.0 if self.exit_code == 0 else 0.0


def success_check(sandbox: Sandbox, *, command: str, timeout_s: float) -> SuccessResult:
    """Runs ``command`` with the sandbox's shell (in /work, as the agent's user), killed
    after ``timeout_s``; what it printed is untrusted and kept bounded and escaped."""
    t0 = time.monotonic()
    try:
        result = sandbox.shell(command, timeout_s=timeout_s)
    except (ToolError, OSError) as exc:
        elapsed = int((time.monotonic() - t0) * 1000)
        return SuccessResult(None, "", storable_text(str(exc)[:2000])[0], False, elapsed)
    elapsed = int((time.monotonic() - t0) * 1000)
    output = storable_text((result.stdout + result.stderr)[:SUCCESS_OUTPUT_MAX_CHARS])[0]
    return SuccessResult(
        exit_code=None if result.timed_out else result.exit_code,
        output=output,
        error=storable_text(result.error[:2000])[0],
        timed_out=result.timed_out,
        duration_ms=elapsed,
    )


@dataclass(frozen=True)
class LaneOutcome:
    lane: Run  # ended
    success: SuccessResult | None  # None: no command, or the sandbox never started


def _attachments(evaluation: Evaluation, task_id: str) -> tuple[LaneAttachment, ...]:
    rows = EvalAttachment.objects.filter(evaluation=evaluation, task_id=task_id)
    return tuple(
        LaneAttachment(a.name, a.sha256, a.size, a.stored) for a in rows.order_by("position")
    )


def desktop_lane(*, evaluation: Evaluation, task: dict, agent: Agent) -> LaneOutcome:
    """Runs the agent on the desktop task in a lane of its own, then the task's success
    command in the lane's final state; returns the ended lane and the command's result.
    A failure of the arena's own (not the agent's) ends the lane in error too."""
    chosen = evaluation.settings["desktop"]
    lane = Run.objects.create(
        for_evaluation=True,
        side="A",
        agent=agent,
        step_budget=chosen["step_budget"],
        wall_budget_s=chosen["wall_budget_s"],
        heartbeat_at=timezone.now(),
    )
    inputs = LaneInputs(
        instruction=task["prompt"],
        start_url=task["start_url"],
        step_budget=chosen["step_budget"],
        wall_budget_s=chosen["wall_budget_s"],
        tools=shared_tools([agent]),
        attachments=_attachments(evaluation, task["id"]),
    )
    checked: list[SuccessResult] = []
    command = task.get("success_cmd")

    def after(sandbox: Sandbox) -> None:
        checked.append(
            success_check(sandbox, command=command, timeout_s=chosen["success_timeout_s"])
        )

    try:
        run_lane(run_id=lane.pk, inputs=inputs, after=after if command else None)
    except Exception as exc:  # run_lane ends the lane itself; this is the backstop
        logger.exception("evaluation %s lane %s failed", evaluation.pk, lane.pk)
        Run.objects.filter(pk=lane.pk).exclude(status=Run.Status.ENDED).update(
            status=Run.Status.ENDED,
            end_reason=Run.EndReason.ERROR,
            error=f"the arena could not run the lane: {type(exc).__name__}",
            ended_at=timezone.now(),
        )
    lane.refresh_from_db()
    return LaneOutcome(lane=lane, success=checked[0] if checked else None)


def desktop_run(
    *, evaluation: Evaluation, task: dict, agent: Agent, replicate: int = 0
) -> EvalRun | None:
    """The agent's run of the desktop task: its lane and success command
    (``desktop_lane``), stored as the (task, agent)'s ``EvalRun`` with the agent's final
    message as the output the judges read and what the lane's model calls used
    (``lane_usage``); an error when the lane ended in error (the command's result is
    kept all the same). None when a concurrent executor stored
    the run first."""
    started, t0 = timezone.now(), time.monotonic()
    outcome = desktop_lane(evaluation=evaluation, task=task, agent=agent)
    lane, success = outcome.lane, outcome.success
    ok = lane.end_reason != Run.EndReason.ERROR
    expected = task.get("expected")
    try:
        with transaction.atomic():
            return EvalRun.objects.create(
                evaluation=evaluation,
                task_id=task["id"],
                agent=agent,
                replicate=replicate,
                status=EvalRun.Status.DONE if ok else EvalRun.Status.ERROR,
                output=lane.final_message,
                error=lane.error,
                exact_score=scoring.exact_match(lane.final_message, expected)
                if ok and expected is not None
                else None,
                started_at=started,
                duration_ms=int((time.monotonic() - t0) * 1000),
                lane=lane,
                success_exit_code=success.exit_code if success else None,
                success_output=success.output if success else "",
                success_error=success.error if success else "",
                success_timed_out=success.timed_out if success else None,
                success_duration_ms=success.duration_ms if success else None,
                success_score=success.score if success else None,
                usage=lane_usage(lane, kind="desktop"),
            )
    except IntegrityError:
        return None


def lanes_fail_stuck(*, stuck_after_s: int | None = None) -> list[int]:
    """Ends evaluation lanes that stopped beating (their worker died mid-lane) with the
    reason; they have no ``EvalRun``, so the evaluation runs them again when resumed.
    Returns their ids."""
    seconds = stuck_after_s or settings.ARENA.stuck_after_s
    now = timezone.now()
    stuck = Run.objects.filter(
        for_evaluation=True, heartbeat_at__lt=now - timedelta(seconds=seconds)
    ).exclude(status=Run.Status.ENDED)
    ids = list(stuck.values_list("pk", flat=True))
    Run.objects.filter(pk__in=ids).exclude(status=Run.Status.ENDED).update(
        status=Run.Status.ENDED,
        end_reason=Run.EndReason.ERROR,
        error=STUCK_REASON.format(seconds=seconds),
        ended_at=now,
    )
    return ids
