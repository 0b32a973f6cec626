"""A coding battle from claim to judging (docs/coding.md): the source made once (clone),
both lanes on byte-identical copies, each lane's diff collected before its sandbox is
destroyed, and only when both agents' sandboxes are gone, a fresh judge sandbox per
run grading the stored patch. The rest (accounting, screening) is the usual path."""

import logging
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import copy_context
from dataclasses import asdict
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from battles.coding_models import CodingOutcome, CodingPhase, RepoSource
from battles.models import Battle, Run, Span
from battles.parity import LaneInputs
from battles.services.coding_judge import coding_judge, patch_relative
from battles.services.coding_phases import phase, phase_close, phase_open
from battles.services.coding_sandbox import diff_collect
from battles.services.lanes import run_lane
from battles.services.live import battle_heartbeat
from battles.services.repo_source import SourceUnavailable, lane_repo, repo_source_prepare
from coding.metrics import directness
from coding.trajectory import tool_uses

logger = logging.getLogger(__name__)

# The tools a scaffold or remote agent may have on a repo task: the shell, the file
# editor, and deliver to end; narrowed by both agents' tool sets, as on a desktop.
CODING_TOOLS = ("shell", "edit", "deliver")


def coding_tools(agents) -> tuple[str, ...]:
    """The repo task's tools both sides are offered (identical schemas for both)."""
    return tuple(
        tool for tool in CODING_TOOLS if all(not a.tool_set or tool in a.tool_set for a in agents)
    )


REPO_NOTE = (
    "\n\nThe repository is checked out at /work/repo (a git repository; the shell starts "
    "in /work). Make your changes there, with the shell or the edit tool where it is "
    "offered: they are collected as a diff against the "
    "checkout when you finish. When you are done, call deliver with a short message."
)


def lane_instruction(instruction: str) -> str:
    """What both agents are told: the task, and where the repository is."""
    return instruction + REPO_NOTE


class CodingBattleFailed(Exception):
    """The battle cannot go on through nobody's fault but the arena's (the source)."""


def coding_battle_drive(battle_id: int, barrier_action) -> None:
    """Runs a claimed coding battle's lanes and judges; raises ``CodingBattleFailed``
    (with a reason for the battle page) when the source cannot be prepared."""
    battle = Battle.objects.select_related("task").get(pk=battle_id)
    runs = list(battle.runs.select_related("agent").order_by("side"))
    source = RepoSource.objects.get(task_id=battle.task_id)
    try:
        with phase(battle_id, "clone") as said:
            source = repo_source_prepare(source_id=source.pk, run_id=runs[0].pk)
            said.detail = f"{source.files} files, tree {source.tree[:12]}"
    except SourceUnavailable as exc:
        raise CodingBattleFailed(str(exc)) from None
    inputs = LaneInputs(
        instruction=lane_instruction(battle.task.instruction),
        start_url="",
        step_budget=runs[0].step_budget,
        wall_budget_s=source.time_limit_s,
        tools=coding_tools([run.agent for run in runs]),
        repo=lane_repo(source),
    )
    outcomes = {run.pk: CodingOutcome.objects.get_or_create(run=run)[0] for run in runs}
    barrier = threading.Barrier(len(runs), action=barrier_action)
    with _beating(battle_id), ThreadPoolExecutor(max_workers=len(runs)) as pool:
        futures = [
            # the battle's log context in each lane (a copy per thread)
            pool.submit(
                copy_context().run, coding_lane, battle_id, run, inputs, outcomes[run.pk], barrier
            )
            for run in runs
        ]
        for future in futures:
            future.result()
    # Both agents' sandboxes are destroyed (the lanes have returned); only now judge.
    with _beating(battle_id):
        _judge_all(battle_id, runs, outcomes, source)


def _judge_all(battle_id: int, runs: list[Run], outcomes: dict, source: RepoSource) -> None:
    for run in runs:
        outcome = CodingOutcome.objects.get(pk=outcomes[run.pk].pk)
        try:
            coding_judge(outcome=outcome, source=source, battle_id=battle_id)
        except Exception as exc:
            logger.exception("the judge of run %s failed", run.pk)
            CodingOutcome.objects.filter(pk=outcome.pk).update(
                judge_error=f"{type(exc).__name__}: {exc}"[:2000]
            )


HEARTBEAT_S = 10


@contextmanager
def _beating(battle_id: int) -> Iterator[None]:
    """Beats for the battle while one long command runs (a CLI agent, a test suite):
    the stuck-battle sweep must not take a working battle for a dead one."""
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(HEARTBEAT_S):
                battle_heartbeat(battle_id=battle_id)
        finally:
            connection.close()

    thread = threading.Thread(target=beat, name=f"beat-{battle_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def coding_lane(
    battle_id: int | None,
    run: Run,
    inputs: LaneInputs,
    outcome: CodingOutcome,
    barrier: threading.Barrier | None = None,
) -> None:
    """One run on a repo task: the lane (``run_lane`` on a repo copy), its diff stored
    before the sandbox goes, then its directness and usage. ``battle_id`` None for an
    offline evaluation's run (no live page). The caller judges it afterwards
    (``coding_judge``), once every sandbox of the comparison is gone."""
    side = run.side
    marks: dict = {}
    agent = phase_open(battle_id, f"agent {side}", run_id=run.pk)

    def after(sandbox) -> None:
        # The agent has ended (its run row says how); its sandbox is still there.
        ended = Run.objects.get(pk=run.pk)
        phase_close(agent, battle_id, detail=ended.end_reason)
        _diff(battle_id, run, inputs, outcome, sandbox)
        marks["diffed"] = timezone.now()

    try:
        run_lane(run_id=run.pk, inputs=inputs, barrier=barrier, after=after)
        ended = Run.objects.get(pk=run.pk)
        # (no after hook when the sandbox never started: the phase ends here)
        failed = ended.end_reason == Run.EndReason.ERROR and "diffed" not in marks
        phase_close(
            agent,
            battle_id,
            status=CodingPhase.Status.FAILED if failed else CodingPhase.Status.OK,
            detail=ended.error[:300] if failed else ended.end_reason,
        )
        # run_lane destroyed the sandbox when it returned; nothing of it is left.
        destroyed = timezone.now()
        CodingOutcome.objects.filter(pk=outcome.pk).update(agent_destroyed_at=destroyed)
        if "diffed" in marks:
            destroy = phase_open(battle_id, f"destroy {side}", run_id=run.pk, at=marks["diffed"])
            phase_close(destroy, battle_id, detail="agent sandbox destroyed", at=destroyed)
        _metrics(run, outcome)
    finally:
        connection.close()


def _diff(
    battle_id: int | None, run: Run, inputs: LaneInputs, outcome: CodingOutcome, sandbox
) -> None:
    with phase(battle_id, f"diff {run.side}", run_id=run.pk) as said:
        collected = diff_collect(sandbox, inputs.repo)
        if collected.data:
            path = Path(settings.PRIVATE_MEDIA_ROOT) / patch_relative(collected.sha256)
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_name(f".{path.name}.part")
            temp.write_bytes(collected.data)
            os.replace(temp, path)
        CodingOutcome.objects.filter(pk=outcome.pk).update(
            diff=collected.text,
            diff_sha256=collected.sha256,
            diff_bytes=len(collected.data),
            diff_error=collected.error,
        )
        said.detail = collected.error or f"{len(collected.data)} bytes"
        if collected.error:
            said.status = "failed"


def _metrics(run: Run, outcome: CodingOutcome) -> None:
    """Directness from the stored steps; tokens and cost from the CLI's own report when
    it gave one (already on the outcome), else from the run's model spans."""
    steps = list(run.steps.order_by("index").values("tool", "args"))
    measured = directness(tool_uses(steps))
    current = CodingOutcome.objects.get(pk=outcome.pk)
    usage = current.usage or {}
    if not usage:
        totals = Span.objects.filter(run=run, kind=Span.Kind.MODEL).aggregate(
            i=Sum("input_tokens"), o=Sum("output_tokens"), c=Sum("cost_usd")
        )
        usage = {
            "input_tokens": totals["i"] or 0,
            "output_tokens": totals["o"] or 0,
            "cache_creation_tokens": 0,
            "cache_read_tokens": 0,
            "cost_usd": float(totals["c"] or 0),
            "source": "spans",
        }
    CodingOutcome.objects.filter(pk=outcome.pk).update(directness=asdict(measured), usage=usage)
