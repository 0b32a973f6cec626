"""One lane of a battle (or of a test drive, or of an offline evaluation): its sandbox,
the agent's loop under the run's budgets, every step (action, result, screenshot,
spans) stored as it happens. An ``after`` hook sees the sandbox in its final state,
before it is destroyed (an evaluation's success command runs there).

A lane that ends in error says whose fault it was (``Run.agent_fault``): only an
``AgentFailure`` (the agent's provider or endpoint failed, could not be called or broke
the protocol; ``agents.services.policy_for``) is the agent's. A sandbox that would not
start, the other lane failing, a full disk, a crash in the arena's own code (a built-in
policy raising) are not: they never count against the agent."""

import errno
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from django.db import close_old_connections
from django.db.models.functions import Now
from django.utils import timezone

from agents.models import Agent
from agents.policies import GiveUp, Observation, Policy, observes_page
from agents.services import AgentFailure, policy_for
from arena_site.media import media_local_dir, media_save, media_store_dir
from arena_site.worker import fault_point
from battles.attachments import (
    attachments_place,
    sandbox_paths,
)
from battles.media import deliveries_prefix, screenshot_name
from battles.models import Run, Span, Step, TestDrive
from battles.parity import LaneInputs
from battles.services.cli_lane import cli_drive
from battles.services.coding_sandbox import repo_checkout, repo_spec
from battles.services.conversation import lane_conversation, offered_tools
from battles.services.lane_fence import LaneLost, fenced, this_attempt
from battles.services.live import battle_heartbeat, battle_publish, test_drive_publish
from battles.services.live_frames import live_desktop_stream
from battles.snapshots import SnapshotIncomplete, snapshot_record
from sandboxes.base import Sandbox, SandboxLost, ToolResult
from sandboxes.services import egress_refusals_take, lane_sandbox_spec, sandbox_session
from sandboxes.tools import ASK_USER, TOOL_SCHEMAS, tool_call
from sandboxes.untrusted import storable, storable_text

logger = logging.getLogger(__name__)


def _publish(run: Run) -> None:
    """Tells the battle's or the test drive's live pages (an evaluation's page follows
    its evaluation, not each step)."""
    if run.battle_id is not None:
        battle_publish(battle_id=run.battle_id)
    elif run.test_drive_id is not None:
        test_drive_publish(drive_id=run.test_drive_id)


def _heartbeat(run: Run) -> None:
    if run.battle_id is not None:
        # The run's start time is this attempt's token: a re-queue clears it and the
        # next attempt sets its own.
        if not this_attempt(run).exists():
            raise LaneLost(f"run {run.pk} was re-queued while this lane ran")
        battle_heartbeat(battle_id=run.battle_id)
    elif run.test_drive_id is not None:
        TestDrive.objects.filter(pk=run.test_drive_id).update(heartbeat_at=Now())
    else:  # an evaluation's lane beats on itself
        Run.objects.filter(pk=run.pk).update(heartbeat_at=Now())


def _snapshot(run: Run, inputs: LaneInputs, spec) -> None:
    """Keeps the lane's initial state (battles.snapshots). A snapshot that cannot be
    kept costs the run its environment, never its battle: logged, and the lane goes on."""
    try:
        snapshot_record(run_id=run.pk, inputs=inputs, spec=spec)
    except (SnapshotIncomplete, OSError):
        logger.exception("the initial state of run %s could not be kept", run.pk)


def run_lane(
    *,
    run_id: int,
    inputs: LaneInputs,
    barrier: threading.Barrier | None = None,
    after: Callable[[Sandbox], None] | None = None,
) -> Run:
    """Provisions the run's sandbox, waits for the other lane, then lets the agent act
    until it delivers, gives up, errs or exhausts a budget. Every step is stored.

    ``after`` is called with the sandbox once the lane has ended, however it ended
    (delivered, a budget, the agent's error), before the sandbox is destroyed; not when
    the sandbox never started, its attachments could not be placed or the other lane
    never came. What it raises is logged and leaves the run as it ended."""
    close_old_connections()
    run = Run.objects.select_related("agent").get(pk=run_id)
    run.input_digest = inputs.digest()
    run.save(update_fields=["input_digest"])
    spec = lane_sandbox_spec(
        run_id=run.pk, start_url=inputs.start_url, lifetime_s=inputs.wall_budget_s + 120
    )
    if inputs.repo is not None:
        spec = repo_spec(spec, inputs.repo)
    _snapshot(run, inputs, spec)
    lost = False
    try:
        with sandbox_session(spec) as sandbox, live_desktop_stream(run.pk, sandbox):
            if inputs.repo is not None:
                repo_checkout(sandbox, inputs.repo)  # both lanes: the same tree
            if inputs.attachments:
                # Part of provisioning: both lanes hold the same files before either
                # starts. Both backends expose the run's work dir (bound at /work) and
                # the sandbox's uid (None when the worker is not root).
                attachments_place(
                    work_dir=sandbox.work_dir,  # type: ignore[attr-defined]
                    owner_uid=getattr(sandbox, "uid", None),
                    attachments=inputs.attachments,
                )
                sandbox.push_work_dir()  # (a remote engine's: over its channel)
            if barrier is not None:
                barrier.wait(timeout=120)
            try:
                if run.agent.kind == Agent.Kind.CLI:
                    _drive_cli(run, inputs, sandbox)
                else:
                    _drive(run, inputs, sandbox)
            except LaneLost:
                lost = True
                raise
            finally:
                if after is not None and not lost:
                    _after(run, after, sandbox)
    except threading.BrokenBarrierError:
        _end_run(run, Run.EndReason.ERROR, error="the other lane failed to start")
    except LaneLost as exc:
        if barrier is not None:
            barrier.abort()
        logger.warning("%s; this lane stops", exc)
        return run
    except SandboxLost as exc:
        # Not the agent's doing: the run ends in the arena's error, and the caller
        # decides what becomes of it (a battle is run again on a worker whose engine
        # answers: battles.services.orchestration).
        if barrier is not None:
            barrier.abort()
        logger.warning("run %s lost its sandbox: %s", run.pk, exc)
        _end_run(run, Run.EndReason.ERROR, error=f"{type(exc).__name__}: {exc}")
        raise
    except Exception as exc:
        if barrier is not None:
            barrier.abort()
        logger.exception("run %s failed", run.pk)
        _end_run(run, Run.EndReason.ERROR, error=f"{type(exc).__name__}: {exc}")
    finally:
        refusals = egress_refusals_take(run.pk)
        if refusals and not lost:
            this_attempt(run).update(egress_refusals=storable(refusals)[0])
    return run


def _after(run: Run, after: Callable[[Sandbox], None], sandbox: Sandbox) -> None:
    try:
        after(sandbox)
    except Exception:
        logger.exception("the after hook of run %s failed", run.pk)


class MediaWriteError(Exception):
    """The private media disk refused a write (full, or its quota reached)."""


DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def _store_screenshot(run: Run, index: int, png: bytes | None) -> str:
    """Stores the PNG in the private storage (arena_site/media.py): a write that fails
    leaves no file, whole or half."""
    if not png:
        return ""
    relative = screenshot_name(run.pk, index)
    try:
        media_save(relative, png)
    except OSError as exc:
        raise MediaWriteError(
            f"the media disk refused the screenshot of step {index} ({exc.strerror})"
        ) from exc
    return relative


def _tool_call(run: Run, sandbox: Sandbox, tool: str, args: object, deliveries: str) -> ToolResult:
    """One tool call; a delivery lands in the private storage under ``deliveries``
    (staged locally and uploaded, fenced, when the storage is remote)."""
    if tool != "deliver":  # no other tool writes to the delivery directory
        return tool_call(sandbox, tool, args, deliver_dir=Path(os.devnull))
    deliver_dir = media_local_dir(deliveries)
    try:
        result = tool_call(sandbox, tool, args, deliver_dir=deliver_dir)
    finally:
        with fenced(run):
            media_store_dir(deliveries, deliver_dir)
    return result


def _store_spans(run: Run, index: int, policy: object) -> None:
    """Moves the spans a policy recorded (model calls, remote exchanges) to the run.
    What a model or an entrant answered is untrusted: stored escaped where it must be."""
    records = getattr(policy, "spans", None)
    if not records:
        return
    with fenced(run):
        _spans_create(run, index, records)
    records.clear()


def _spans_create(run: Run, index: int, records: list) -> None:
    Span.objects.bulk_create(
        Span(
            run=run,
            step_index=index,
            kind=r.kind,
            name=storable_text(r.name[:200])[0],
            input=storable(r.input)[0],
            output=storable(r.output)[0],
            error=storable_text(r.error[:2000])[0],
            started_at=datetime.fromtimestamp(r.started, tz=UTC),
            latency_ms=r.latency_ms,
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            cost_usd=Decimal(str(round(r.cost_usd, 6))),
        )
        for r in records
    )


def _drive(run: Run, inputs: LaneInputs, sandbox: Sandbox) -> None:
    try:
        policy = policy_for(
            run.agent,
            tools=offered_tools(run, inputs),  # ask_user on a battle's desktop lanes
            session=secrets.token_urlsafe(16),
            attachments=[
                {"name": a.name, "sha256": a.sha256, "size": a.size} for a in inputs.attachments
            ],
            run_id=run.pk,
        )
    except AgentFailure as exc:  # its provider or endpoint cannot even be set up
        return _end_run(
            run, Run.EndReason.ERROR, error=f"agent error: {exc}"[:2000], agent_fault=True
        )
    if hasattr(policy, "keepalive"):  # a human's policy beats while it waits (agents.human)
        policy.keepalive = lambda: _heartbeat(run)  # type: ignore[attr-defined]
    try:
        return _drive_policy(run, inputs, sandbox, policy)
    finally:
        _close_policy(run, policy)


def _drive_cli(run: Run, inputs: LaneInputs, sandbox: Sandbox) -> None:
    """A CLI coding agent: one bounded command in the sandbox (battles.services.cli_lane),
    its transcript stored as steps; the run ends as the CLI did."""
    run.status = Run.Status.RUNNING
    run.started_at = timezone.now()
    run.save(update_fields=["status", "started_at"])
    _publish(run)
    end = cli_drive(run, inputs, sandbox)
    _end_run(
        run,
        end.reason,
        final_message=end.final_message,
        error=end.error,
        agent_fault=end.agent_fault,
    )


def _close_policy(run: Run, policy: object) -> None:
    """Lets a policy that serves its agent (an MCP entrant's server, agents.mcp_server)
    stop: it answers calls still waiting with the run's end reason."""
    close = getattr(policy, "close", None)
    if close is None:
        return
    try:
        close(run.end_reason or "ended")
    except Exception:
        logger.exception("closing the policy of run %s failed", run.pk)


def _drive_policy(run: Run, inputs: LaneInputs, sandbox: Sandbox, policy: Policy) -> None:
    run.status = Run.Status.RUNNING
    run.started_at = timezone.now()
    run.save(update_fields=["status", "started_at"])
    _publish(run)
    deadline = time.monotonic() + inputs.wall_budget_s
    deliveries = deliveries_prefix(run.pk)
    last_result = None
    screen = sandbox.screenshot().image if sandbox.spec.desktop else None
    # The page as text, only for agents that read it (one supervisor call, ~35 ms).
    reads_page = sandbox.spec.desktop and observes_page(
        kind=run.agent.kind, builtin_policy=run.agent.builtin_policy, params=run.agent.params
    )
    page_text = sandbox.page_text() if reads_page else None
    conversation, offered = lane_conversation(run, inputs), offered_tools(run, inputs)
    for index in range(inputs.step_budget):
        _heartbeat(run)
        if Run.objects.filter(pk=run.pk).exclude(end_requested_at=None).exists():
            return _end_run(run, Run.EndReason.ENDED_BY_SUBMITTER)
        seconds_left = deadline - time.monotonic()
        if seconds_left <= 0:
            return _end_run(run, Run.EndReason.TIME_BUDGET)
        observation = Observation(
            step=index,
            instruction=inputs.instruction,
            start_url=inputs.start_url,
            last_result=last_result,
            steps_left=inputs.step_budget - index,
            seconds_left=seconds_left,
            screenshot_png=screen,
            attachments=sandbox_paths(inputs.attachments),
            page=page_text,
            # the follow-ups committed since the last step (docs/conversations.md)
            messages=conversation.receive(step=index) if conversation is not None else (),
        )
        try:
            decision = policy.next_action(observation)
        except AgentFailure as exc:
            _store_spans(run, index, policy)
            return _end_run(
                run, Run.EndReason.ERROR, error=f"agent error: {exc}"[:2000], agent_fault=True
            )
        except Exception as exc:
            _store_spans(run, index, policy)
            logger.exception("agent of run %s raised", run.pk)
            return _end_run(run, Run.EndReason.ERROR, error=f"agent error: {type(exc).__name__}")
        _store_spans(run, index, policy)
        if isinstance(decision, GiveUp):
            return _end_run(run, Run.EndReason.GAVE_UP, final_message=decision.message)
        started = timezone.now()
        t0 = time.monotonic()
        if decision.tool in TOOL_SCHEMAS and decision.tool not in offered:
            result = ToolResult(
                ok=False, tool=decision.tool, error=f"{decision.tool} is not offered in this battle"
            )
        elif decision.tool == ASK_USER and conversation is not None:  # the team answers
            result = conversation.ask(
                step=index,
                args=decision.args,
                seconds_left=deadline - time.monotonic(),
                beat=lambda: _heartbeat(run),
            )
        else:
            try:
                result = _tool_call(run, sandbox, decision.tool, decision.args, deliveries)
            except OSError as exc:
                if exc.errno not in DISK_FULL_ERRNOS:
                    raise
                # The delivery is staged and moved all or nothing: nothing half-written.
                return _end_run(
                    run,
                    Run.EndReason.ERROR,
                    error=f"the media disk refused the {decision.tool} of step {index} "
                    f"({exc.strerror}); nothing of it was stored",
                )
        duration_ms = int((time.monotonic() - t0) * 1000)
        raw_args = (
            decision.args if isinstance(decision.args, dict) else {"raw": decision.args[:2000]}
        )
        # The agent's arguments and everything the sandbox answered are untrusted: NUL
        # and undecodable bytes are stored escaped, and the step says so.
        args, args_escaped = storable(raw_args)
        tool, tool_escaped = storable_text(result.tool)
        tool = tool[: Step._meta.get_field("tool").max_length]  # the agent's own word, maybe
        error, _ = storable_text(result.error[:2000])
        tool_span = Span(
            run=run,
            step_index=index,
            kind=Span.Kind.TOOL,
            name=tool,
            input=args,
            output={"ok": result.ok, "error": error, "exit_code": result.exit_code},
            error=error,
            started_at=started,
            latency_ms=duration_ms,
        )
        # An observation after every step: the screen as the action left it.
        stored = result.as_dict()
        if sandbox.spec.desktop:
            screen = result.image if decision.tool == "screenshot" else sandbox.screenshot().image
            # The page it shows, for judges and the leak scan (SPEC §5.1).
            page = sandbox.page_state()
            if page is not None:
                stored["page"] = page
            if reads_page:
                page_text = sandbox.page_text()
        stored, stored_escaped = storable(stored)
        if args_escaped or tool_escaped or stored_escaped:
            stored["escaped"] = True
        with fenced(run):
            tool_span.save()
        try:
            with fenced(run):
                screenshot = _store_screenshot(run, index, screen)
                Step.objects.create(
                    run=run,
                    index=index,
                    tool=tool,
                    args=args,
                    result=stored,
                    screenshot=screenshot,
                    started_at=started,
                    duration_ms=duration_ms,
                )
        except MediaWriteError as exc:
            return _end_run(run, Run.EndReason.ERROR, error=str(exc))
        _publish(run)
        fault_point("running")  # a lane mid-battle: a step stored, its sandbox live
        if decision.tool == "deliver" and result.ok:
            return _end_run(
                run,
                Run.EndReason.DELIVERED,
                final_message=str(args.get("message", "")),
                files=result.data.get("files", []),
            )
        last_result = result.as_dict()
    _end_run(run, Run.EndReason.STEP_BUDGET)


def _end_run(
    run: Run,
    reason: str,
    *,
    final_message: str = "",
    error: str = "",
    files: list | None = None,
    agent_fault: bool = False,
) -> None:
    run.status = Run.Status.ENDED
    run.agent_fault = agent_fault
    run.end_reason = reason
    run.final_message = storable_text(final_message)[0]
    run.error = storable_text(error)[0]
    run.delivered_files = storable(files or [])[0]
    run.ended_at = timezone.now()
    fields = (
        "status", "end_reason", "final_message", "error", "delivered_files", "ended_at",
        "agent_fault",
    )  # fmt: skip
    # (one statement, on this attempt's token: the end of a lane that lost its run to a
    # re-queue is not taken)
    if not this_attempt(run).update(**{field: getattr(run, field) for field in fields}):
        logger.warning("run %s was re-queued; the end of this lane is not taken", run.pk)
        return
    _publish(run)
