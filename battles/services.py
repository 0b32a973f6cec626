"""Writes for battles: admission of a task (one service behind the form and the API)
and the execution of a battle's two lanes."""

import logging
import math
import random
import secrets
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import close_old_connections, connection, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from accounts.selectors import consent_is_current
from agents.models import PUBLIC_ARENA_SLUG, Arena
from agents.policies import GiveUp, Observation
from agents.services import AgentFailure, policy_for
from arena_site.exceptions import ApplicationError
from arena_site.realtime import group_send
from arena_site.redis import queue
from battles import admission_db
from battles.attachments import (
    Staged,
    attachments_check,
    attachments_place,
    attachments_stage,
    attachments_store,
    sandbox_paths,
)
from battles.classify import classify
from battles.matchmaking import Candidate, draw_pair
from battles.models import Battle, Run, Span, Step, Task
from battles.parity import LaneInputs, lane_attachments, shared_tools
from battles.similarity import most_similar, trigrams
from sandboxes.base import TOOL_NAMES, Sandbox, SandboxSpec, ToolResult
from sandboxes.netpolicy import EgressRefused, check_url, default_resolver
from sandboxes.services import egress_refusals_take, sandbox_session
from sandboxes.tools import tool_call

logger = logging.getLogger(__name__)
_system_rng = random.SystemRandom()


# --- admission ------------------------------------------------------------------------


def _check_instruction(instruction: object) -> str:
    if not isinstance(instruction, str):
        raise ApplicationError("instruction must be a string.", code="invalid_instruction")
    text = instruction.strip()
    if not text:
        raise ApplicationError(
            "The instruction is empty: describe the task for the agents.", code="empty_instruction"
        )
    limit = settings.ARENA.instruction_max_chars
    if len(text) > limit:
        raise ApplicationError(
            f"The instruction is {len(text)} characters; the limit is {limit}.",
            code="instruction_too_long",
            status=413,
        )
    if "\x00" in text or any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        raise ApplicationError(
            "The instruction contains control characters; send plain text.",
            code="invalid_instruction",
        )
    return text


def _check_start_url(start_url: object) -> str:
    if start_url in (None, ""):
        return ""
    if not isinstance(start_url, str) or len(start_url) > 2000:
        raise ApplicationError(
            "start_url must be a URL of at most 2000 characters.", code="invalid_start_url"
        )
    parts = urlsplit(start_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ApplicationError(
            "start_url must be an http:// or https:// URL with a host.", code="invalid_start_url"
        )
    url = start_url.strip()
    # Without DNS, names pass (the egress proxy checks them when dialled); address
    # literals and odd spellings are checked either way.
    try:
        check_url(url, start_url_resolver() or _no_names)
    except _NameNotChecked:
        pass
    except EgressRefused as exc:
        raise ApplicationError(
            f"start_url must point to a public host on port 80 or 443; "
            f"{parts.hostname} is refused ({exc.reason}).",
            code="start_url_not_public",
        ) from exc
    return url


class _NameNotChecked(Exception):
    """Raised by ``_no_names``: the host is a name and no DNS may be asked."""


def _no_names(host: str, port: int) -> list:
    raise _NameNotChecked(host)


def start_url_resolver():
    """How admission resolves a start URL's host: the host's DNS, or (with
    ARENA_EGRESS_RESOLVE off) not at all."""
    return default_resolver if settings.ARENA.egress_resolve else None


class Conversation(Exception):
    """The submission was conversation, not a task: answer ``reply``, start nothing."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


def _near_duplicate_check(*, user_id: int, grams: frozenset) -> None:
    """SPEC §2: refuse when J ≥ θ against any of the submitter's tasks of the window
    (at most the newest DUP_MAX_TASKS)."""
    arena = settings.ARENA
    recent = admission_db.recent_task_grams(
        user_id=user_id,
        since=timezone.now() - timedelta(days=arena.dup_window_days),
        limit=arena.dup_max_tasks,
    )
    when = {task_id: created for task_id, created, _ in recent}
    earlier, score = most_similar(grams, ((task_id, known) for task_id, _, known in recent))
    if earlier is not None and score >= arena.dup_theta:
        raise ApplicationError(
            f"This task is nearly the same as your task #{earlier} of "
            f"{when[earlier]:%Y-%m-%d %H:%M} UTC (similarity {score:.2f} ≥ "
            f"{arena.dup_theta}); change it to submit a new one.",
            code="near_duplicate",
            status=409,
            extra={"earlier_task": earlier, "similarity": round(score, 4)},
        )


def _consent_refused() -> ApplicationError:
    return ApplicationError(
        "Accept the current publication consent terms before submitting tasks.",
        code="consent_required",
        status=403,
        extra={"consent_url": reverse("accounts:consent")},
    )


def task_check_admissible(*, user: AbstractBaseUser) -> None:
    """Authorisation half of admission: the rules that do not depend on the task."""
    if not consent_is_current(user):
        raise _consent_refused()


def _queue_check(*, arena_id: int, team_id: int) -> None:
    """Bounded admission. Called with the arena row locked, so concurrent submissions
    count each other."""
    total, team = admission_db.queued_counts(arena_id=arena_id, team_id=team_id)
    if total >= settings.ARENA.queue_max:
        raise ApplicationError(
            "The arena's queue is full; try again shortly.",
            code="queue_full",
            status=429,
            headers={"Retry-After": "60"},
        )
    if team >= settings.ARENA.team_queue_quota:
        raise ApplicationError(
            "Your team has the maximum number of queued tasks; wait for some to start.",
            code="team_quota",
            status=429,
            headers={"Retry-After": "60"},
        )


def _candidate(entry: admission_db.RosterEntry) -> Candidate:
    """The matchmaker's view of an agent: its rated-battle count and current strength
    (θ from the streaming rating; none before its first rated battle)."""
    n = entry.rated_battles
    theta = None
    if n and entry.streaming_rating is not None:
        theta = (entry.streaming_rating - settings.ARENA.r0) * math.log(10) / 400
    return Candidate(entry.agent_id, n, theta)


def calibration_pair(
    roster: Sequence[admission_db.RosterEntry], rng: random.Random
) -> tuple[int, int] | None:
    """SPEC §5.4's calibration showcase for a new submitter: a pairing chosen to show
    contrast, one agent from the top third of the rated (non-provisional) field by
    streaming rating and one from the bottom third, sides in random order. None when
    fewer than two agents are rated: then the ordinary draw applies."""
    rated = sorted(
        (e for e in roster if e.rated_battles >= settings.ARENA.n0),
        key=lambda e: (-(e.streaming_rating or 0.0), e.agent_id),
    )
    if len(rated) < 2:
        return None
    third = max(1, len(rated) // 3)
    strong = rng.choice(rated[:third]).agent_id
    weak = rng.choice(rated[-third:]).agent_id
    return (strong, weak) if rng.random() < 0.5 else (weak, strong)


def task_submit(
    *,
    user: AbstractBaseUser,
    instruction: object,
    start_url: object = "",
    attachments: Sequence[object] = (),
    rng: random.Random | None = None,
) -> Battle:
    """Admits a task and creates its battle in one transaction; the battle job is
    enqueued after commit. Raises ``ApplicationError`` with the reason on refusal.

    ``attachments`` are uploaded files (Django ``UploadedFile``). They are checked
    before anything is created, streamed to a staging area (hashed, type-confirmed)
    before the arena row is locked, and moved into place inside the transaction; if
    it fails, the files this call wrote are removed again."""
    submitter = admission_db.submitter_context(
        user_id=user.pk, cap=settings.ARENA.calibration_tasks
    )
    if not submitter.consent_current:
        raise _consent_refused()
    text = _check_instruction(instruction)
    pending = attachments_check(list(attachments))
    verdict = classify(text)
    if not verdict.is_task:
        raise Conversation(verdict.reply)
    url = _check_start_url(start_url)
    grams = trigrams(text)
    _near_duplicate_check(user_id=user.pk, grams=grams)
    if submitter.team_id is None:
        raise ApplicationError("Your account belongs to no team.", code="no_team", status=403)
    calibration = (
        settings.ARENA.calibration_showcase
        and submitter.earlier_tasks < settings.ARENA.calibration_tasks
    )
    staged = attachments_stage(pending)
    try:
        battle = _task_create(
            user=user,
            team_id=submitter.team_id,
            text=text,
            url=url,
            staged=staged,
            calibration=calibration,
            rng=rng or _system_rng,
        )
    except BaseException:
        staged.discard()
        raise
    admission_db.trigram_cache.put((battle.task.pk, battle.task.created_at), grams)
    return battle


def _task_create(
    *,
    user: AbstractBaseUser,
    team_id: int,
    text: str,
    url: str,
    staged: Staged,
    calibration: bool,
    rng: random.Random,
) -> Battle:
    """The "do" half of admission: the queue bound, the draw and every row, under the
    arena's row lock."""
    with transaction.atomic():
        arena_id = admission_db.arena_lock(slug=PUBLIC_ARENA_SLUG)
        if arena_id is None:  # a flushed database lost the migration's row
            Arena.objects.public()
            arena_id = admission_db.arena_lock(slug=PUBLIC_ARENA_SLUG)
        _queue_check(arena_id=arena_id, team_id=team_id)
        roster = admission_db.active_roster(arena_id=arena_id)
        if len(roster) < 2:
            raise ApplicationError(
                "The arena has fewer than two active agents; an admin must add some.",
                code="roster_too_small",
                status=503,
            )
        pair = calibration_pair(roster, rng) if calibration else None
        side_a, side_b = pair or draw_pair(
            [_candidate(entry) for entry in roster],
            rng,
            kappa=settings.ARENA.match_kappa,
            epsilon=settings.ARENA.match_epsilon,
        )
        task = Task(team_id=team_id, submitter=user, instruction=text, start_url=url)
        admission_db.rows_insert(task)
        attachments_store(task=task, staged=staged)
        redundant = rng.random() < settings.ARENA.redundancy_fraction
        battle = Battle(
            arena_id=arena_id,
            team_id=team_id,
            task=task,
            agent_a_id=side_a,
            agent_b_id=side_b,
            redundancy_target=settings.ARENA.redundancy_target if redundant else 1,
            is_calibration=pair is not None,
            submitted_at=timezone.now(),
        )
        admission_db.rows_insert(battle)
        # Parity: both sides run under the same budgets, the tighter of the two agents'.
        by_id = {entry.agent_id: entry for entry in roster}
        sides = (by_id[side_a], by_id[side_b])
        step_budget = min(e.step_budget or settings.ARENA.step_budget for e in sides)
        wall_budget = min(e.wall_budget_s or settings.ARENA.wall_budget_s for e in sides)
        admission_db.rows_insert(
            *(
                Run(
                    battle=battle,
                    side=side,
                    agent_id=agent_id,
                    step_budget=step_budget,
                    wall_budget_s=wall_budget,
                )
                for side, agent_id in (("A", side_a), ("B", side_b))
            )
        )
        battle_id = battle.pk
        transaction.on_commit(lambda: _enqueue_battle(battle_id))
    return battle


def _enqueue_battle(battle_id: int) -> None:
    queue("battles").enqueue("battles.jobs.battle_run", battle_id, job_id=f"battle-{battle_id}")


# --- execution ------------------------------------------------------------------------


def battle_publish(*, battle_id: int) -> None:
    """Tells the battle's live pages that it changed (after commit)."""
    from battles.views import render_battle_panel

    def send() -> None:
        group_send(
            f"battle-{battle_id}", {"type": "battle.update", "html": render_battle_panel(battle_id)}
        )

    transaction.on_commit(send)


def battle_heartbeat(*, battle_id: int) -> None:
    Battle.objects.filter(pk=battle_id).update(heartbeat_at=timezone.now())


def battle_end_side(*, user: AbstractBaseUser, battle_id: int, side: str) -> Run:
    """The submitter ends one side early from the live page (end reason
    ended_by_submitter; the battle is then excluded from the rating, SPEC §5.3)."""
    with transaction.atomic():
        battle = Battle.objects.select_for_update().filter(pk=battle_id).first()
        if battle is None or battle.task.submitter_id != user.pk:
            raise ApplicationError("No such battle.", code="not_found", status=404)
        run = battle.runs.filter(side=side).first()
        if run is None:
            raise ApplicationError("A battle has sides A and B.", code="invalid_side")
        if run.status == Run.Status.ENDED:
            raise ApplicationError(
                f"Side {side} has already ended.", code="already_ended", status=409
            )
        Run.objects.filter(pk=run.pk, end_requested_at=None).update(end_requested_at=timezone.now())
    return run


STUCK_REASON = (
    "the worker running this battle stopped (no progress for {seconds} s); its sandboxes "
    "were reaped and nothing was rated"
)


def battles_fail_stuck(*, stuck_after_s: int | None = None) -> list[int]:
    """Fails running battles whose lanes stopped beating (a worker killed mid-battle):
    a visible reason on the battle, runs ended with "error". Returns their ids."""
    seconds = stuck_after_s or settings.ARENA.stuck_after_s
    cutoff = timezone.now() - timedelta(seconds=seconds)
    stuck = Battle.objects.filter(status=Battle.Status.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at=None, dequeued_at__lt=cutoff)
    )
    failed = []
    for battle_id in stuck.values_list("pk", flat=True):
        reason = STUCK_REASON.format(seconds=seconds)
        with transaction.atomic():
            claimed = Battle.objects.filter(pk=battle_id, status=Battle.Status.RUNNING).update(
                status=Battle.Status.FAILED, failure_reason=reason, ended_at=timezone.now()
            )
            if not claimed:
                continue
            Run.objects.filter(battle_id=battle_id).exclude(status=Run.Status.ENDED).update(
                status=Run.Status.ENDED,
                end_reason=Run.EndReason.ERROR,
                error=reason,
                ended_at=timezone.now(),
            )
            battle_publish(battle_id=battle_id)
        failed.append(battle_id)
    return failed


def battle_claim_oldest() -> int | None:
    """FIFO dispatch (SPEC §6): claims the earliest submitted queued battle of any arena
    (ties by id, i.e. admission order; the rule of ``queueing.fifo_next``) and marks it
    running. Concurrent workers skip each other's locked rows, so each battle is claimed
    once. None when nothing waits."""
    with transaction.atomic():
        battle_id = (
            Battle.objects.filter(status=Battle.Status.QUEUED)
            .order_by("submitted_at", "pk")
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)
            .first()
        )
        if battle_id is None:
            return None
        now = timezone.now()
        Battle.objects.filter(pk=battle_id).update(
            status=Battle.Status.RUNNING, dequeued_at=now, heartbeat_at=now
        )
    return battle_id


def battle_run_next() -> int | None:
    """Runs the oldest queued battle to its end; returns its id (None when the queue is
    empty). Every admission enqueues one job that calls this, and each of the
    BATTLE_SLOTS battle workers runs one job at a time, so the queue is served first in,
    first out whatever order the jobs arrive in."""
    battle_id = battle_claim_oldest()
    if battle_id is not None:
        _battle_drive(battle_id)
    return battle_id


def battle_run(*, battle_id: int) -> None:
    """Claims this queued battle and drives both lanes to their end. Idempotent: a
    battle that is not queued any more is left alone."""
    now = timezone.now()
    claimed = Battle.objects.filter(pk=battle_id, status=Battle.Status.QUEUED).update(
        status=Battle.Status.RUNNING, dequeued_at=now, heartbeat_at=now
    )
    if not claimed:
        logger.info("battle %s is not queued; nothing to do", battle_id)
        return
    _battle_drive(battle_id)


def _battle_drive(battle_id: int) -> None:
    """Drives a claimed (running) battle's two lanes to their end and opens it for
    judging, or fails it with the reason."""
    battle_publish(battle_id=battle_id)
    battle = Battle.objects.select_related("task").get(pk=battle_id)
    runs = list(battle.runs.select_related("agent"))
    inputs = LaneInputs(
        instruction=battle.task.instruction,
        start_url=battle.task.start_url,
        step_budget=runs[0].step_budget,
        wall_budget_s=runs[0].wall_budget_s,
        tools=shared_tools([run.agent for run in runs]),
        attachments=lane_attachments(battle.task.attachments.order_by("pk")),
    )
    barrier = threading.Barrier(len(runs), action=lambda: _lanes_started(battle_id))
    try:
        with ThreadPoolExecutor(max_workers=len(runs)) as pool:
            for future in [pool.submit(_lane_thread, run.pk, inputs, barrier) for run in runs]:
                future.result()
    except Exception as exc:
        logger.exception("battle %s failed", battle_id)
        Battle.objects.filter(pk=battle_id).update(
            status=Battle.Status.FAILED,
            failure_reason=f"orchestrator error: {exc}",
            ended_at=timezone.now(),
        )
        battle_publish(battle_id=battle_id)
        return
    from judging.services import battle_screen

    # Exclusion rules 1–5 (SPEC §5.3) apply in the same transaction that opens the
    # battle, so no judge is served a battle they exclude.
    with transaction.atomic():
        opened = Battle.objects.filter(pk=battle_id, status=Battle.Status.RUNNING).update(
            status=Battle.Status.JUDGING, ended_at=timezone.now()
        )
        if opened:
            battle_screen(battle_id=battle_id)
    battle_publish(battle_id=battle_id)


def _lanes_started(battle_id: int) -> None:
    Battle.objects.filter(pk=battle_id).update(lanes_started_at=timezone.now())


def _lane_thread(run_id: int, inputs: LaneInputs, barrier: threading.Barrier) -> None:
    try:
        run_lane(run_id=run_id, inputs=inputs, barrier=barrier)
    finally:
        connection.close()  # each lane thread has its own connection


def run_lane(*, run_id: int, inputs: LaneInputs, barrier: threading.Barrier | None = None) -> Run:
    """Provisions the run's sandbox, waits for the other lane, then lets the agent act
    until it delivers, gives up, errs or exhausts a budget. Every step is stored."""
    close_old_connections()
    run = Run.objects.select_related("agent").get(pk=run_id)
    run.input_digest = inputs.digest()
    run.save(update_fields=["input_digest"])
    arena = settings.ARENA
    spec = SandboxSpec(
        run_id=run.pk,
        shell_timeout_s=arena.shell_timeout_s,
        output_max_bytes=arena.shell_output_max_bytes,
        deliver_max_files=arena.deliver_max_files,
        deliver_max_bytes=arena.deliver_max_bytes,
        desktop=arena.sandbox_desktop,
        start_url=inputs.start_url,
        lifetime_s=inputs.wall_budget_s + 120,
    )
    try:
        with sandbox_session(spec) as sandbox:
            if inputs.attachments:
                # Part of provisioning: both lanes hold the same files before either
                # starts. Both backends expose the run's work dir (bound at /work) and
                # the sandbox's uid (None when the worker is not root).
                attachments_place(
                    work_dir=sandbox.work_dir,  # type: ignore[attr-defined]
                    owner_uid=getattr(sandbox, "uid", None),
                    attachments=inputs.attachments,
                )
            if barrier is not None:
                barrier.wait(timeout=120)
            _drive(run, inputs, sandbox)
    except threading.BrokenBarrierError:
        _end_run(run, Run.EndReason.ERROR, error="the other lane failed to start")
    except Exception as exc:
        if barrier is not None:
            barrier.abort()
        logger.exception("run %s failed", run.pk)
        _end_run(run, Run.EndReason.ERROR, error=f"{type(exc).__name__}: {exc}")
    finally:
        refusals = egress_refusals_take(run.pk)
        if refusals:
            Run.objects.filter(pk=run.pk).update(egress_refusals=refusals)
    return run


def _store_screenshot(run: Run, index: int, png: bytes | None) -> str:
    if not png:
        return ""
    relative = f"screens/run-{run.pk}/step-{index}.png"
    path = settings.PRIVATE_MEDIA_ROOT / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)
    return relative


def _store_spans(run: Run, index: int, policy: object) -> None:
    """Moves the spans a policy recorded (model calls, remote exchanges) to the run."""
    records = getattr(policy, "spans", None)
    if not records:
        return
    Span.objects.bulk_create(
        Span(
            run=run,
            step_index=index,
            kind=r.kind,
            name=r.name[:200],
            input=r.input,
            output=r.output,
            error=r.error[:2000],
            started_at=datetime.fromtimestamp(r.started, tz=UTC),
            latency_ms=r.latency_ms,
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            cost_usd=Decimal(str(round(r.cost_usd, 6))),
        )
        for r in records
    )
    records.clear()


def _drive(run: Run, inputs: LaneInputs, sandbox: Sandbox) -> None:
    policy = policy_for(
        run.agent,
        tools=inputs.tools,
        session=secrets.token_urlsafe(16),
        attachments=[
            {"name": a.name, "sha256": a.sha256, "size": a.size} for a in inputs.attachments
        ],
    )
    run.status = Run.Status.RUNNING
    run.started_at = timezone.now()
    run.save(update_fields=["status", "started_at"])
    battle_publish(battle_id=run.battle_id)
    deadline = time.monotonic() + inputs.wall_budget_s
    deliver_dir = settings.PRIVATE_MEDIA_ROOT / "deliveries" / f"run-{run.pk}"
    last_result = None
    screen = sandbox.screenshot().image if sandbox.spec.desktop else None
    for index in range(inputs.step_budget):
        battle_heartbeat(battle_id=run.battle_id)
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
        )
        try:
            decision = policy.next_action(observation)
        except AgentFailure as exc:
            _store_spans(run, index, policy)
            return _end_run(run, Run.EndReason.ERROR, error=f"agent error: {exc}"[:2000])
        except Exception as exc:
            _store_spans(run, index, policy)
            logger.exception("agent of run %s raised", run.pk)
            return _end_run(run, Run.EndReason.ERROR, error=f"agent error: {type(exc).__name__}")
        _store_spans(run, index, policy)
        if isinstance(decision, GiveUp):
            return _end_run(run, Run.EndReason.GAVE_UP, final_message=decision.message)
        started = timezone.now()
        t0 = time.monotonic()
        if decision.tool in TOOL_NAMES and decision.tool not in inputs.tools:
            result = ToolResult(
                ok=False, tool=decision.tool, error=f"{decision.tool} is not offered in this battle"
            )
        else:
            result = tool_call(sandbox, decision.tool, decision.args, deliver_dir=deliver_dir)
        duration_ms = int((time.monotonic() - t0) * 1000)
        args = decision.args if isinstance(decision.args, dict) else {"raw": decision.args[:2000]}
        Span.objects.create(
            run=run,
            step_index=index,
            kind=Span.Kind.TOOL,
            name=result.tool,
            input=args,
            output={"ok": result.ok, "error": result.error, "exit_code": result.exit_code},
            error=result.error[:2000],
            started_at=started,
            latency_ms=duration_ms,
        )
        # An observation after every step: the screen as the action left it.
        if sandbox.spec.desktop:
            screen = result.image if decision.tool == "screenshot" else sandbox.screenshot().image
        Step.objects.create(
            run=run,
            index=index,
            tool=result.tool,
            args=args,
            result=result.as_dict(),
            screenshot=_store_screenshot(run, index, screen),
            started_at=started,
            duration_ms=duration_ms,
        )
        battle_publish(battle_id=run.battle_id)
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
) -> None:
    run.status = Run.Status.ENDED
    run.end_reason = reason
    run.final_message = final_message
    run.error = error
    run.delivered_files = files or []
    run.ended_at = timezone.now()
    run.save(
        update_fields=[
            "status",
            "end_reason",
            "final_message",
            "error",
            "delivered_files",
            "ended_at",
        ]
    )
    battle_publish(battle_id=run.battle_id)
