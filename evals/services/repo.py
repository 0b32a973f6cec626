"""Repo tasks of an evaluation (docs/evaluations.md, "Repo tasks"): each (task, agent,
replicate) one coding lane like a battle side's (docs/coding.md), graded by the tests.

The task's source is what a battle's repo task has: a ``battles.Task`` of kind repo
owned by the evaluation's team (never admitted as a battle: no battle points at it)
with its ``RepoSource``, made at creation (``eval_repos_store``) and linked by an
``EvalRepo`` row. The first lane to run prepares the canonical bundles once, in a
sandbox (``repo_source_prepare``); every lane and judge sandbox clones them.

A run (``repo_run``) is ``battles.services.coding.coding_lane``: the lane on a copy of
the repository, the diff collected and stored before the agent's sandbox is destroyed,
then directness and usage; only after it has returned does ``coding_judge`` create the
judge sandbox and grade the stored patch. The run's score is the composite. Its
``EvalRun`` is stored once the judge has ended (a run whose worker died leaves none,
and resuming the evaluation runs it again)."""

import logging
import time
from collections.abc import Mapping

from django.core.files.base import ContentFile
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Membership
from agents.models import Agent
from arena_site.exceptions import ApplicationError
from battles.classify import CODING
from battles.coding_models import CodingOutcome, RepoSource
from battles.models import Run, Task
from battles.parity import LaneInputs
from battles.services.coding import CODING_TOOLS, coding_lane, lane_instruction
from battles.services.coding_judge import coding_judge
from battles.services.repo_admission import RepoRequest, repo_check, repo_store
from battles.services.repo_source import SourceUnavailable, lane_repo, repo_source_prepare
from evals.models import EvalRepo, EvalRun, Evaluation
from evals.selectors import lane_usage

logger = logging.getLogger(__name__)


def repo_paths(tasks) -> list[str]:
    """The uploads the suite's repo tasks name (paths relative to the suite file), once,
    in file order; an http(s) URL is fetched by the sandbox instead."""
    paths: dict[str, None] = {}
    for task in tasks:
        if task["kind"] == "repo" and "://" not in task["repo"]:
            paths.setdefault(task["repo"])
    return list(paths)


def _owner(evaluation: Evaluation, user):
    """Who the hidden task is submitted by: the evaluation's creator, else the team's
    first owner (the command line creates evaluations without a user)."""
    if user is not None:
        return user
    membership = (
        Membership.objects.filter(team_id=evaluation.team_id)
        .order_by("-role", "created_at")  # descending: "owner" before "member"
        .select_related("user")
        .first()
    )
    if membership is None:
        raise ApplicationError(
            "a repo task's source belongs to a member of the team, and the team has none",
            code="invalid_repo",
        )
    return membership.user


def eval_repos_store(*, evaluation: Evaluation, files: Mapping[str, bytes], user=None) -> None:
    """Each repo task's source, checked as a battle's repo task is
    (``battles.services.repo_admission``: the refs, commands and limit; an upload's kind
    from its first bytes, at most ``ARENA_ATTACHMENTS_MAX_TOTAL_BYTES``) and kept as a
    hidden ``battles.Task`` with its ``RepoSource``. ``files`` are the uploads by the
    path the suite names them with. Refuses a path not given or not named, naming the
    task. Call in the creating transaction."""
    tasks = [t for t in evaluation.suite.tasks if t["kind"] == "repo"]
    named = set(repo_paths(tasks))
    for path in files:
        if path not in named:
            raise ApplicationError(
                f"repository {path!r} is not named by any repo task of the suite",
                code="unknown_repo",
            )
    submitter = _owner(evaluation, user) if tasks else None
    for task in tasks:
        upload = None
        if task["repo"] in named:
            if task["repo"] not in files:
                raise ApplicationError(
                    f"task {task['id']!r} needs the repository {task['repo']!r}, which was not "
                    "given (the command line reads it beside the suite file)",
                    code="missing_repo",
                )
            upload = ContentFile(files[task["repo"]], name=task["repo"].rsplit("/", 1)[-1])
        request = RepoRequest(
            url="" if upload is not None else task["repo"],
            ref=task["ref"],
            judge_ref=task["judge_ref"],
            upload=upload,
            success_cmd=task["success_cmd"],
            test_cmd=task["test_cmd"] or "",
            time_limit_s=task["time_limit_s"],
        )
        try:
            checked = repo_store(repo_check(request), upload)
        except ApplicationError as error:
            raise ApplicationError(
                f"task {task['id']!r}: {error.message}", code=error.code, status=error.status
            ) from None
        hidden = Task.objects.create(
            team_id=evaluation.team_id, submitter=submitter, instruction=task["prompt"],
            category=CODING, kind=Task.Kind.REPO,
        )  # fmt: skip
        RepoSource.objects.create(
            task=hidden, origin=checked.origin, url=checked.url, ref=checked.ref,
            judge_ref=checked.judge_ref, upload_path=checked.upload_path,
            upload_sha256=checked.upload_sha256, success_cmd=checked.success_cmd,
            test_cmd=checked.test_cmd, time_limit_s=checked.time_limit_s,
        )  # fmt: skip
        EvalRepo.objects.create(evaluation=evaluation, task_id=task["id"], source_task=hidden)


def _source(evaluation: Evaluation, task_id: str) -> RepoSource:
    hidden = EvalRepo.objects.get(evaluation=evaluation, task_id=task_id).source_task_id
    return RepoSource.objects.get(task_id=hidden)


def repo_run(*, evaluation: Evaluation, task: dict, agent: Agent, replicate: int) -> EvalRun | None:
    """One replicate of the agent on the repo task: the coding lane, then (its sandbox
    destroyed) the judge sandbox; stored as the (task, agent, replicate)'s ``EvalRun``
    with the agent's final message as its output and its tokens, cost and directness
    (``lane_usage``: the CLI's report or the lane's model spans). An error when the
    source could not be prepared, the lane ended in error, or the judge failed. None
    when a concurrent executor stored the run first."""
    started, t0 = timezone.now(), time.monotonic()
    chosen = evaluation.settings["repo"]
    source = _source(evaluation, task["id"])
    lane = Run.objects.create(
        for_evaluation=True,
        side="A",
        agent=agent,
        step_budget=chosen["step_budget"],
        wall_budget_s=source.time_limit_s,
        heartbeat_at=timezone.now(),
    )
    outcome = CodingOutcome.objects.create(run=lane)
    error = ""
    try:
        source = repo_source_prepare(source_id=source.pk, run_id=lane.pk)
        inputs = LaneInputs(
            instruction=lane_instruction(task["prompt"]),
            start_url="",
            step_budget=chosen["step_budget"],
            wall_budget_s=source.time_limit_s,
            tools=CODING_TOOLS,
            repo=lane_repo(source),
        )
        coding_lane(None, lane, inputs, outcome)
        # coding_lane has returned: the agent's sandbox is destroyed; only now judge.
        outcome.refresh_from_db()
        coding_judge(outcome=outcome, source=source, battle_id=None)
    except SourceUnavailable as exc:
        error = f"the repository could not be prepared: {exc}"
    except Exception as exc:  # the arena's own failure: the run is an error, the rest goes on
        logger.exception("evaluation %s repo lane %s failed", evaluation.pk, lane.pk)
        error = f"the arena could not run the lane: {type(exc).__name__}"
    Run.objects.filter(pk=lane.pk).exclude(status=Run.Status.ENDED).update(
        status=Run.Status.ENDED,
        end_reason=Run.EndReason.ERROR,
        error=error or "the lane did not end",
        ended_at=timezone.now(),
    )
    lane.refresh_from_db()
    outcome.refresh_from_db()
    error = (
        error
        or outcome.judge_error
        or (lane.error if lane.end_reason == Run.EndReason.ERROR else "")
    )
    try:
        with transaction.atomic():
            return EvalRun.objects.create(
                evaluation=evaluation,
                task_id=task["id"],
                agent=agent,
                replicate=replicate,
                status=EvalRun.Status.ERROR if error else EvalRun.Status.DONE,
                output=lane.final_message,
                error=error[:2000],
                started_at=started,
                duration_ms=int((time.monotonic() - t0) * 1000),
                lane=lane,
                usage=lane_usage(lane, kind="repo"),
            )
    except IntegrityError:
        return None


# What a repo task's tournament game names as its judge: the tests, not a model.
COMPOSITE_JUDGE = "composite (tests)"


def composite_of(run: EvalRun | None) -> float | None:
    """The run's composite score; None when it has none (the run failed, or its judge
    did not score it)."""
    if run is None or run.status != EvalRun.Status.DONE or run.lane_id is None:
        return None
    coding = getattr(run.lane, "coding", None)
    return None if coding is None else coding.composite


def composite_game(a: Agent, b: Agent, run_a: EvalRun, run_b: EvalRun) -> dict:
    """A repo task's tournament game, as ``PairJudgement`` fields: decided by the two
    runs' composite scores (higher wins, equal within 1e-9 is a tie), no judge asked. One
    comparison, so both "orientations" say the same and agree. A run without a
    composite fails the game with the reason (never a tie)."""
    scores = {x.slug: composite_of(r) for x, r in ((a, run_a), (b, run_b))}
    silent = [(x, r) for x, r in ((a, run_a), (b, run_b)) if scores[x.slug] is None]
    if silent:
        x, r = silent[0]
        why = r.error or r.status if r is not None else "not run"
        return {"failure": f"no composite score: {x.slug}'s run failed ({why})"[:2000],
                "judge_model": COMPOSITE_JUDGE, "duration_ms": 0}  # fmt: skip
    sa, sb = scores[a.slug], scores[b.slug]
    winner = "tie" if abs(sa - sb) <= 1e-9 else "A" if sa > sb else "B"
    reason = f"composite {sa:.4f} vs {sb:.4f}"
    return {"winner": winner, "agreement": True, "ab_winner": winner, "ba_winner": winner,
            "ab_reason": reason, "ba_reason": reason, "judge_model": COMPOSITE_JUDGE,
            "duration_ms": 0}  # fmt: skip
