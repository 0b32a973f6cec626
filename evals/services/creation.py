"""Creating, starting and cancelling an evaluation.

Which agents a team may evaluate: its own and the arena's (no team), approved and not
retired — never another team's, whose calls would spend that team's key. The judge
follows the same rule and must not be a candidate, nor the same model as one (003).
A candidate must be able to run every kind of task in the suite: a chat task needs a
model agent; a desktop task any agent that can drive a lane (``lane_refusal``); a repo
task an agent that works on a repository (``repo_refusal``).
"""

import random
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import Team
from agents.models import Agent
from agents.policies import BUILTIN_POLICIES
from arena_site.exceptions import ApplicationError
from evals import calls, reducers, scorers, tournaments
from evals.models import Candidate, Evaluation, Rubric, Suite
from evals.services.baseline import baseline_choose
from evals.services.files import eval_attachments_store
from evals.services.repo import eval_repos_store

MAX_BEST_OF = 99
MAX_SEED = 2**63 - 1

# Desktop lanes of one host's evaluations at once (each is a sandbox: a slot, ~1.3 GB
# with its desktop); the lanes go through the sandbox slots like a battle's.
DESKTOP_LANES = 2
# Runs of each (task, agent): the epochs; pass@k is reported for k ≤ this.
MAX_REPLICATES = reducers.MAX_EPOCHS


def _evaluable(team: Team):
    """The agents this team may evaluate: its own and the arena's, approved, not retired
    (not the demo board's copies of the built-ins: its arena holds simulated votes)."""
    return Agent.objects.filter(
        Q(team=team) | Q(team__isnull=True),
        retired_at=None,
        approval=Agent.Approval.APPROVED,
        arena__demo=False,
    )


def _found(team: Team, slug: str, *, role: str) -> Agent:
    agent = _evaluable(team).filter(slug=slug).first()
    if agent is None:
        raise ApplicationError(
            f"no agent {slug!r} this team may evaluate ({role}): it must be the team's own "
            "or the arena's, approved and not retired",
            code="unknown_agent",
            status=404,
        )
    return agent


def _usable(team: Team, slug: str, *, role: str) -> Agent:
    agent = _found(team, slug, role=role)
    if agent.kind != Agent.Kind.SCAFFOLD or not agent.model_id:
        raise ApplicationError(
            f"agent {slug!r} is not a model agent (kind {agent.kind}): chat tasks and judging "
            "need a provider and a model",
            code="not_a_model",
        )
    return agent


def lane_refusal(agent: Agent) -> str | None:
    """Why ``agents.services.policy_for`` could not drive a lane for this agent, from
    its rules (a built-in of a known policy, a scaffold with a provider and a model, a
    remote agent with an endpoint); None when it can. Whether its key or endpoint
    answers is known only when the lane runs (then the run is an error)."""
    params = agent.params or {}
    if agent.kind == Agent.Kind.BUILTIN:
        known = agent.builtin_policy in BUILTIN_POLICIES
        return None if known else f"its built-in policy {agent.builtin_policy!r} is unknown"
    if agent.kind == Agent.Kind.SCAFFOLD:
        return None if agent.provider and agent.model_id else "it has no provider and model"
    if agent.kind == Agent.Kind.REMOTE:
        return None if params.get("endpoint") else "it has no endpoint (params.endpoint)"
    return f"agents of kind {agent.kind!r} cannot run"


def repo_refusal(agent: Agent) -> str | None:
    """Why the agent cannot work on a repo task, by a battle's rule (a CLI agent, or a
    scaffold or remote agent offered the shell) and ``lane_refusal``'s; None when it can."""
    if agent.kind == Agent.Kind.CLI:
        return None if (agent.params or {}).get("cli") else "it names no CLI (params.cli)"
    if agent.kind not in (Agent.Kind.SCAFFOLD, Agent.Kind.REMOTE):
        return f"agents of kind {agent.kind!r} do not work on repositories"
    if agent.tool_set and "shell" not in agent.tool_set:
        return "it is not offered the shell (tool_set)"
    return lane_refusal(agent)


def _candidate(team: Team, slug: str, tasks: Sequence[dict]) -> Agent:
    """A candidate that can run every task of the suite; refused naming the first task
    it cannot run."""
    agent = _found(team, slug, role="candidate")
    chat = next((t["id"] for t in tasks if t["kind"] == "chat"), None)
    if chat is not None and (agent.kind != Agent.Kind.SCAFFOLD or not agent.model_id):
        raise ApplicationError(
            f"agent {slug!r} cannot answer chat task {chat!r}: it is not a model agent "
            f"(kind {agent.kind}); chat tasks need a provider and a model",
            code="not_a_model",
        )
    desktop = next((t["id"] for t in tasks if t["kind"] == "desktop"), None)
    refusal = lane_refusal(agent) if desktop is not None else None
    if refusal:
        raise ApplicationError(
            f"agent {slug!r} cannot drive desktop task {desktop!r}: {refusal}",
            code="cannot_drive",
        )
    repo = next((t["id"] for t in tasks if t["kind"] == "repo"), None)
    refusal = repo_refusal(agent) if repo is not None else None
    if refusal:
        raise ApplicationError(
            f"agent {slug!r} cannot work on repo task {repo!r}: {refusal}", code="cannot_code"
        )
    return agent


def repo_settings(*, agents: Sequence[Agent], step_budget: int | None, lanes: int | None,
                  replicates: int) -> dict:  # fmt: skip
    """The repo lanes' settings: the step budget by the battle rule (``desktop_settings``;
    each lane's time is its task's ``time_limit_s``), the lanes at once (shared with the
    desktop lanes' gate) and the runs per (task, agent)."""
    chosen = desktop_settings(agents=agents, step_budget=step_budget, wall_budget_s=None,
                              success_timeout_s=None, lanes=lanes)  # fmt: skip
    return {"step_budget": chosen["step_budget"], "lanes": chosen["lanes"],
            "replicates": replicates}  # fmt: skip


def desktop_settings(
    *,
    agents: Sequence[Agent],
    step_budget: int | None,
    wall_budget_s: int | None,
    success_timeout_s: int | None,
    lanes: int | None,
) -> dict:
    """The desktop lanes' settings, the same for every lane (a battle's parity rule:
    the smallest of the candidates' budgets, the arena's where an agent has none),
    unless given. The success command's bound is the sandbox's shell bound
    (``ARENA_SHELL_TIMEOUT_S``), which it may shorten, never lengthen."""
    arena = settings.ARENA
    shell_bound = arena.shell_timeout_s
    chosen = {
        "step_budget": step_budget
        if step_budget is not None
        else min(a.step_budget or arena.step_budget for a in agents),
        "wall_budget_s": wall_budget_s
        if wall_budget_s is not None
        else min(a.wall_budget_s or arena.wall_budget_s for a in agents),
        "success_timeout_s": shell_bound if success_timeout_s is None else success_timeout_s,
        "lanes": DESKTOP_LANES if lanes is None else lanes,
    }
    bounds = {
        "step_budget": (1, 1000),
        "wall_budget_s": (1, 86_400),
        "success_timeout_s": (1, shell_bound),
        "lanes": (1, 16),
    }
    for key, (lo, hi) in bounds.items():
        if not lo <= chosen[key] <= hi:
            shell = key == "success_timeout_s"
            why = " (the sandbox's shell bound, ARENA_SHELL_TIMEOUT_S)" if shell else ""
            raise ApplicationError(
                f"{key} must lie in {lo}..{hi}{why}, got {chosen[key]}",
                code="invalid_desktop_setting",
            )
    return chosen


def evaluable_candidates(team: Team) -> list[Agent]:
    """Every agent this team may evaluate, of any kind, by slug (which tasks each can
    run is ``_candidate``'s rule, checked at creation)."""
    return list(_evaluable(team).order_by("slug"))


def evaluable_agents(team: Team) -> list[Agent]:
    """The model agents among them, by slug."""
    return list(
        _evaluable(team).filter(kind=Agent.Kind.SCAFFOLD).exclude(model_id="").order_by("slug")
    )


def tournament_settings(
    *,
    slugs: Sequence[str],
    format: str,
    best_of: int,
    seed: int,
    opening: Sequence[Sequence[str]] | None,
    rubric: Rubric | None,
    seeded: bool = False,
) -> dict:
    """A tournament's schedule, checked (``evals.tournaments.check``) before anything is
    stored: ``format`` empty means none, and then best-of, seed and opening matchups
    have nothing to act on and are refused rather than ignored — but the seed when
    ``seeded`` (a baseline-anchored evaluation's bootstrap takes it)."""
    if not format:
        if best_of != 1 or (seed != 0 and not seeded) or opening:
            raise ApplicationError(
                "best-of, seed and opening matchups belong to a tournament (a seed to a "
                "baseline-anchored evaluation too): name its format "
                f"({', '.join(tournaments.FORMATS)})",
                code="not_a_tournament",
            )
        if not 0 <= seed <= MAX_SEED:
            raise ApplicationError("the seed must lie in 0..2^63-1", code="invalid_seed")
        return {"tournament": "", "best_of": 1, "seed": seed, "opening": None}
    if rubric is not None:
        raise ApplicationError(
            "a tournament plays pairwise games; a rubric belongs to an evaluation without one",
            code="rubric_in_tournament",
        )
    if not isinstance(best_of, bool) and isinstance(best_of, int) and best_of > MAX_BEST_OF:
        raise ApplicationError(
            f"best-of must be at most {MAX_BEST_OF}, got {best_of}", code="invalid_tournament"
        )
    if not 0 <= seed <= MAX_SEED:
        raise ApplicationError("the seed must lie in 0..2^63-1", code="invalid_seed")
    if "tie" in slugs:
        raise ApplicationError(
            "an agent called 'tie' cannot play a tournament (a judgement's winner says tie)",
            code="invalid_tournament",
        )
    pairs = None if opening is None else [tuple(pair) for pair in opening]
    try:
        tournaments.check(slugs, format=format, best_of=best_of, opening=pairs)
    except tournaments.TournamentError as error:
        raise ApplicationError(str(error), code="invalid_tournament") from None
    return {
        "tournament": format,
        "best_of": best_of,
        "seed": seed,
        "opening": None if pairs is None else [list(pair) for pair in pairs],
    }


def epochs_settings(
    *, epochs: int | None, replicates: int, reducer: str
) -> tuple[int, reducers.Reducer]:
    """The runs of each (task, agent) and the reducer of their scores, checked;
    ``replicates`` is the older name of ``epochs`` (repo tasks only, then)."""
    if epochs is None:
        epochs = replicates
    elif replicates not in (1, epochs):
        raise ApplicationError(
            f"replicates is the older name of epochs: give one of them, got epochs {epochs} "
            f"and replicates {replicates}",
            code="invalid_epochs",
        )
    try:
        reducers.check_epochs(epochs)
        chosen = reducers.parse_reducer(reducer, epochs=epochs)
    except reducers.ReducerError as error:
        raise ApplicationError(str(error), code="invalid_epochs") from None
    return epochs, chosen


@dataclass(frozen=True)
class Selection:
    agents: list[str]
    judge: str | None
    seed: int


def random_selection(*, team: Team, candidates: int, judge: bool, seed: int | None) -> Selection:
    """003's ``--random``: ``candidates`` agents (and a judge) drawn once, before the run,
    from the model agents this team may evaluate, each of a different model; seeded by
    ``seed`` (a fresh one when None), which the record keeps so the draw can be redone."""
    if candidates < 1:
        raise ApplicationError("draw at least one candidate", code="no_agents")
    seed = secrets.randbelow(2**32) if seed is None else seed
    if not 0 <= seed < 2**63:
        raise ApplicationError("the selection seed must lie in 0..2^63-1", code="invalid_seed")
    one_per_model: dict[str, Agent] = {}
    for agent in evaluable_agents(team):  # by slug: the first agent of each model stands for it
        one_per_model.setdefault(agent.model_id, agent)
    pool = sorted(one_per_model.values(), key=lambda a: a.slug)
    wanted = candidates + (1 if judge else 0)
    if len(pool) < wanted:
        raise ApplicationError(
            f"only {len(pool)} models to draw from, {wanted} needed", code="too_few_agents"
        )
    drawn = random.Random(seed).sample(pool, wanted)  # noqa: S311 - reproducible, not secret
    return Selection(
        agents=[a.slug for a in drawn[:candidates]],
        judge=drawn[-1].slug if judge else None,
        seed=seed,
    )


@transaction.atomic
def evaluation_create(
    *,
    team: Team,
    suite: Suite,
    agent_slugs: Sequence[str],
    rubric: Rubric | None = None,
    judge_slug: str | None = None,
    pairwise: bool = False,
    max_tokens: int = calls.MAX_TOKENS,
    user=None,
    selection_seed: int | None = None,
    attachments: Mapping[str, bytes] | None = None,
    step_budget: int | None = None,
    wall_budget_s: int | None = None,
    success_timeout_s: int | None = None,
    desktop_lanes: int | None = None,
    tournament: str = "",
    best_of: int = 1,
    seed: int = 0,
    opening: Sequence[Sequence[str]] | None = None,
    repos: Mapping[str, bytes] | None = None,
    replicates: int = 1,
    baseline_slug: str | None = None,
    epochs: int | None = None,
    reducer: str = "mean",
) -> Evaluation:
    """An evaluation of these agents (in this order) on the team's suite;
    ``selection_seed`` when they were drawn (``random_selection``), for the record.
    ``attachments`` are the desktop tasks' files by the path the suite names them with
    (``eval_attachments_store``); the budgets, the success command's bound and the lanes
    at once default as ``desktop_settings`` says. With a ``tournament`` format the judge
    (optional, as in 003) plays the pairwise games of that schedule (``best_of``,
    ``seed``, single elimination's ``opening`` matchups): ``pairwise`` is implied.
    ``repos`` are the repo tasks' uploads by the path the suite names them with
    (``eval_repos_store``). Each (task, agent) runs ``epochs`` times (``replicates``
    is its older name, for repo tasks' pass@k) and ``reducer`` makes one score per
    task of its epochs' (``evals.reducers``); a tournament plays each task's schedule
    once per epoch, on that epoch's replies."""
    if suite.team_id != team.pk or (rubric is not None and rubric.team_id != team.pk):
        raise ApplicationError("no such suite or rubric", code="not_found", status=404)
    if not agent_slugs:
        raise ApplicationError("name at least one agent", code="no_agents")
    if len(set(agent_slugs)) != len(agent_slugs):
        raise ApplicationError("each agent may be named once", code="duplicate_agent")
    if not 1 <= max_tokens <= 200_000:
        raise ApplicationError("max_tokens must lie in 1..200000", code="invalid_max_tokens")
    agents = [_candidate(team, slug, suite.tasks) for slug in agent_slugs]
    desktop = (
        desktop_settings(
            agents=agents,
            step_budget=step_budget,
            wall_budget_s=wall_budget_s,
            success_timeout_s=success_timeout_s,
            lanes=desktop_lanes,
        )
        if any(task["kind"] == "desktop" for task in suite.tasks)
        else None
    )
    epochs, chosen_reducer = epochs_settings(epochs=epochs, replicates=replicates, reducer=reducer)
    has_repo = any(task["kind"] == "repo" for task in suite.tasks)
    repo = (
        repo_settings(
            agents=agents, step_budget=step_budget, lanes=desktop_lanes, replicates=epochs
        )
        if has_repo
        else None
    )
    graded = [t["id"] for t in suite.tasks if scorers.needs_judge(t.get("scorers") or ())]
    if graded and not judge_slug:
        raise ApplicationError(
            f"task {graded[0]!r} has a model_graded_fact scorer: name the judge that grades "
            "it (--judge)",
            code="no_judge",
        )
    schedule = tournament_settings(
        slugs=agent_slugs,
        format=tournament,
        best_of=best_of,
        seed=seed,
        opening=opening,
        rubric=rubric,
        seeded=bool(baseline_slug),
    )
    baseline = (
        baseline_choose(
            agents=agents,
            slug=baseline_slug,
            has_judge=bool(judge_slug),
            tournament=tournament,
            pairwise=pairwise,
        )
        if baseline_slug
        else None
    )
    if tournament and judge_slug:
        pairwise = True  # a tournament's games are pairwise games
    judge = None
    if rubric is not None or pairwise or baseline or graded:
        if not judge_slug:
            raise ApplicationError("a rubric or pairwise judging needs --judge", code="no_judge")
        judge = _usable(team, judge_slug, role="judge")
        same = [a.slug for a in agents if a.pk == judge.pk or a.model_id == judge.model_id]
        if same:
            raise ApplicationError(
                f"the judge must not be one of the candidates (it is, or shares the model of, "
                f"{', '.join(same)})",
                code="judge_is_candidate",
            )
    if pairwise and len(agents) < 2:
        raise ApplicationError("pairwise judging needs two agents or more", code="too_few_agents")
    evaluation = Evaluation.objects.create(
        team=team,
        created_by=user,
        suite=suite,
        rubric=rubric,
        judge=judge,
        pairwise=pairwise,
        baseline=baseline,
        **schedule,
        settings={
            "candidate_max_tokens": max_tokens,
            "attempts": calls.ATTEMPTS,
            "backoff_s": [calls.BACKOFF.base_s, calls.BACKOFF.base_s * calls.BACKOFF.factor],
            "judge_decoding": {**calls.JUDGE_DECODING, "max_tokens": calls.MAX_TOKENS},
            "concurrency": settings.ARENA.eval_provider_concurrency,  # as executed, later
            "selection_seed": selection_seed,
            "desktop": desktop,
            "repo": repo,
            "epochs": epochs,
            "reducer": chosen_reducer.as_json(),
        },
    )
    Candidate.objects.bulk_create(
        Candidate(evaluation=evaluation, agent=agent, position=i) for i, agent in enumerate(agents)
    )
    eval_attachments_store(evaluation=evaluation, files=attachments or {})
    eval_repos_store(evaluation=evaluation, files=repos or {}, user=user)
    return evaluation


def evaluation_enqueue(evaluation_id: int) -> None:
    """The job that runs the evaluation, after the transaction that made it commits."""
    from arena_site.redis import queue

    transaction.on_commit(
        lambda: queue("evals").enqueue("evals.jobs.evaluation_run", evaluation_id)
    )


def evaluation_cancel(*, evaluation: Evaluation) -> Evaluation:
    """Stops the evaluation before its next call; what is stored stays. A finished one
    is left as it is."""
    Evaluation.objects.filter(
        pk=evaluation.pk, status__in=[Evaluation.Status.PENDING, Evaluation.Status.RUNNING]
    ).update(status=Evaluation.Status.CANCELLED, finished_at=timezone.now())
    evaluation.refresh_from_db()
    return evaluation
