"""Machine judges on live battles (docs/evaluations.md, "Machine judges on live
battles"): an arena's machine judge reads each battle opened for judging as text — what
a human judge reads of it — and gives a pairwise verdict (both orders, ``evals.calls``)
and/or a rubric verdict (a weighted score per side). The verdict is stored beside the
votes (``MachineVerdict``): it never decides the battle (``battle_decide`` is the door
of human and imported decisions), never enters the human board, and is never served to
anyone before the battle is decided or excluded (``judging.machine_reads``).

The arena's settings (``Arena.machine_judge*``) are written here too, the rubric
checked by the offline evaluations' own parser (``evals.suites.parse_rubric``)."""

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from django.db import IntegrityError, transaction
from django.db.models import Count

from agents.models import Agent, Arena
from agents.services import AgentFailure, model_client_for
from arena_site.exceptions import ApplicationError
from arena_site.media import media_open
from battles.media import delivery_name
from battles.models import Battle, Run
from battles.presenters import Redactor, blind_file_name
from evals import aggregates, calls, suites
from judging import ocr
from judging.models import MachineVerdict
from judging.visible import decoded

logger = logging.getLogger(__name__)

Method = MachineVerdict.Method
Status = MachineVerdict.Status
# Only battles a judge may read: open for judging, or decided. Never an excluded one
# (its leak scan may have found a name) nor one still running or screened.
JUDGEABLE = (Battle.Status.JUDGING, Battle.Status.DECIDED)
# Bounds of the judge's view: a delivered file is quoted up to FILE_CHARS characters,
# a side's whole text up to SIDE_CHARS (the cut is said in the text).
FILE_CHARS = 20_000
SIDE_CHARS = 60_000
FILE_READ_BYTES = 4 * FILE_CHARS  # UTF-8: at most 4 bytes a character


# --- the arena's setting ------------------------------------------------------------


def machine_rubric_parse(criteria: object, *, arena_slug: str = "arena") -> suites.Rubric:
    """The rubric of an arena's criteria (a JSON list of ``{name, description, scale,
    weight}``), checked as a rubric file is (``evals.suites.parse_rubric``), its SHA-256
    that of the canonical JSON ``{"criteria": [...]}`` (sorted keys, no spaces).
    Raises ``suites.SuiteError`` naming the criterion and the field."""
    name = f"machine judge rubric of arena {arena_slug}"
    if not isinstance(criteria, list):
        raise suites.SuiteError(name, "must be a JSON list of criteria", "criteria")
    data = json.dumps(
        {"criteria": criteria}, sort_keys=True, ensure_ascii=False, separators=(",", ":")
    ).encode()
    return suites.parse_rubric(data, name=name)


def machine_judge_problem(judge: Agent) -> str:
    """Why ``judge`` cannot be an arena's machine judge, in words an operator can act
    on; "" when it can."""
    if judge.kind != Agent.Kind.SCAFFOLD or not judge.provider or not judge.model_id:
        return (
            f"{judge.slug} is a {judge.get_kind_display().lower()}, not a model: choose a "
            "scaffold agent with a provider and a model id."
        )
    if judge.team_id is not None:
        return (
            f"{judge.slug} was entered by team {judge.team}: its calls would spend that "
            "team's key. Choose one of the arena's own agents (no team)."
        )
    if judge.retired_at is not None:
        return f"{judge.slug} is retired: choose an agent on the roster."
    return ""


@transaction.atomic
def arena_machine_judge_configure(
    *,
    arena: Arena,
    judge: Agent | None,
    pairwise: bool,
    rubric: list | None,
) -> Arena:
    """Sets (or, with ``judge`` None, turns off) the arena's machine judge. Raises
    ``ApplicationError`` (400) naming what to change: a judge that is not an arena
    model, no method chosen, a rubric that does not parse."""
    sha = ""
    if rubric:
        try:
            sha = machine_rubric_parse(rubric, arena_slug=arena.slug).sha256
        except suites.SuiteError as exc:
            raise ApplicationError(str(exc), code="invalid_rubric") from None
    if judge is not None:
        problem = machine_judge_problem(judge)
        if problem:
            raise ApplicationError(problem, code="invalid_machine_judge")
        if not pairwise and not rubric:
            raise ApplicationError(
                "A machine judge needs a method: turn on pairwise judging or give rubric criteria.",
                code="no_machine_method",
            )
    arena.machine_judge = judge
    arena.machine_judge_pairwise = pairwise
    arena.machine_judge_rubric = rubric or None
    arena.machine_judge_rubric_sha256 = sha
    arena.save(
        update_fields=["machine_judge", "machine_judge_pairwise", "machine_judge_rubric",
                       "machine_judge_rubric_sha256"]
    )  # fmt: skip
    return arena


# --- what the judge reads -------------------------------------------------------------


@dataclass(frozen=True)
class MachineView:
    """The battle as text: the task, and each side's final message and delivered text
    files, blind (a name in them blanked as on the judge page, file names blinded)."""

    task: str
    side_a: str
    side_b: str


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[… cut: {len(text) - limit:,} more characters]"


def _file_text(run: Run, position: int, entry: dict, redactor: Redactor) -> str | None:
    name = str(entry.get("name", ""))
    if not name or name != PurePosixPath(name).name or name in (".", ".."):
        return None  # the judge route serves no such file either
    shown = blind_file_name(name, position, redactor)
    handle = media_open(delivery_name(run.pk, name))
    if handle is None:
        return None
    with handle:
        data = handle.read(FILE_READ_BYTES + 1)
    if ocr.image_format(data) is not None:
        return f'Delivered file "{shown}": an image (not shown to a text judge).'
    _, text = next(decoded(data[:FILE_READ_BYTES]))
    return f'Delivered file "{shown}":\n{_cut(text, FILE_CHARS)}'


def _side_text(run: Run | None, redactor: Redactor) -> str:
    if run is None:
        return "(no run)"
    parts = [f"Final message:\n{redactor.text(run.final_message) or '(none)'}"]
    for position, entry in enumerate(run.delivered_files or []):
        quoted = _file_text(run, position, entry, redactor)
        if quoted:
            parts.append(quoted)
    return _cut("\n\n".join(parts), SIDE_CHARS)


def machine_view(battle: Battle) -> MachineView:
    """What the machine judge reads of ``battle`` (no agent identity: the leak scan
    already ran, and the texts pass the judge page's redactor)."""
    task = battle.task
    lines = [task.instruction]
    if task.start_url:
        lines.append(f"Start URL: {task.start_url}")
    names = list(task.attachments.order_by("pk").values_list("name", flat=True))
    if names:
        lines.append(f"Attachments: {', '.join(names)}")
    runs = {run.side: run for run in battle.runs.all()}
    redactor = Redactor.for_roster()
    return MachineView(
        task="\n".join(lines),
        side_a=_side_text(runs.get("A"), redactor),
        side_b=_side_text(runs.get("B"), redactor),
    )


# --- running it -----------------------------------------------------------------------


def arena_machine_methods(arena: Arena) -> list[str]:
    methods = [Method.PAIRWISE] if arena.machine_judge_pairwise else []
    return methods + ([Method.RUBRIC] if arena.machine_judge_rubric else [])


def battle_machine_judge_enqueue(*, battle: Battle) -> bool:
    """After the current transaction commits, the machine judge's job for ``battle`` on
    the ``evals`` queue, when its arena has a machine judge. Returns whether it will."""
    on = Arena.objects.filter(pk=battle.arena_id, machine_judge__isnull=False).exists()
    if on:
        from arena_site.redis import queue

        battle_id = battle.pk
        transaction.on_commit(
            lambda: queue("evals").enqueue("judging.jobs.battle_machine_judge", battle_id),
            robust=True,
        )
    return on


def _self_judging(judge: Agent, battle: Battle) -> str:
    for side in ("A", "B"):
        agent = battle.agent_for(side)
        if agent.pk == judge.pk or (agent.model_id and agent.model_id == judge.model_id):
            return (
                f"the judge's model {judge.model_id} is side {side}'s model: a model does "
                "not judge a battle it plays in"
            )
    return ""


def _pairwise(client, view: MachineView, sleep) -> dict:
    game = calls.pairwise_game(
        client, task_prompt=view.task, response_a=view.side_a, response_b=view.side_b,
        sleep=sleep,
    )  # fmt: skip
    ab, ba = game.ab.verdict, game.ba.verdict
    resolved = game.resolved
    return {
        "status": Status.RESOLVED if resolved else Status.FAILED,
        "outcome": resolved.winner if resolved else "",
        "agreement": resolved.agreement if resolved else None,
        "reason": "" if resolved else f"the pairwise game failed: {game.failure}",
        "ab_winner": ab.winner if ab else "",
        "ba_winner": ba.winner if ba else "",
        "ab_reason": ab.reason if ab else "",
        "ba_reason": ba.reason if ba else "",
        "ab_raw": game.ab.outcome.raw,
        "ba_raw": game.ba.outcome.raw,
        "calls": game.ab.outcome.attempts + game.ba.outcome.attempts,
    }


def _rubric(client, view: MachineView, rubric: suites.Rubric, sleep) -> dict:
    criteria: dict[str, list[dict]] = {"A": [], "B": []}
    scores: dict[str, float | None] = {}
    problems, made = [], 0
    for side, text in (("A", view.side_a), ("B", view.side_b)):
        judged = []
        for criterion in rubric.criteria:
            judgement = calls.rubric_criterion(
                client, criterion=criterion.name, description=criterion.description,
                scale=criterion.scale, task_input=view.task, reference=None, output=text,
                sleep=sleep,
            )  # fmt: skip
            made += judgement.outcome.attempts
            criteria[side].append(
                {
                    "criterion": criterion.name,
                    "score": judgement.score,
                    "scale": criterion.scale,
                    "weight": criterion.weight,
                    "justification": judgement.justification,
                    "status": judgement.status,
                    "error": judgement.error,
                    "corrected": judgement.corrected,
                    "raw": judgement.outcome.raw,
                }
            )
            if judgement.status != "ok":
                problems.append(f"side {side} {criterion.name}: {judgement.error}")
            judged.append((judgement.score, criterion.scale, criterion.weight))
        ok = all(score is not None for score, _, _ in judged)
        scores[side] = aggregates.weighted_score(judged) if ok else None
    a, b = scores["A"], scores["B"]
    outcome = ""
    if a is not None and b is not None:
        outcome = "tie" if abs(a - b) <= aggregates.TIE_TOLERANCE else ("A" if a > b else "B")
    return {
        "status": Status.RESOLVED if outcome else Status.FAILED,
        "outcome": outcome,
        "reason": "" if outcome else "the rubric judge failed: " + "; ".join(problems),
        "rubric_sha256": rubric.sha256,
        "criteria": criteria,
        "score_a": a,
        "score_b": b,
        "calls": made,
    }


def _store(**fields) -> MachineVerdict | None:
    """One verdict row; a concurrent job that stored it first wins (None)."""
    try:
        with transaction.atomic():
            return MachineVerdict.objects.create(**fields)
    except IntegrityError:
        return None


def battle_machine_judge(
    *, battle_id: int, sleep: Callable[[float], None] | None = None
) -> list[MachineVerdict]:
    """Runs the arena's machine judge on the battle for every method it has no verdict
    of yet (idempotent: one row per battle, judge model and method) and returns the
    rows it stored. Nothing when the arena has no machine judge, or the battle is not
    open for judging nor decided. A judge whose model plays in the battle stores
    ``skipped`` rows with the reason; a judge that cannot be called, a game failed for
    good, a criterion that failed twice store ``failed`` ones (never a tie). Makes model
    calls: call outside any transaction. ``sleep`` takes the backoff waits (default
    ``evals.calls._sleep``)."""
    battle = (
        Battle.objects.select_related("arena__machine_judge", "task", "agent_a", "agent_b")
        .filter(pk=battle_id)
        .first()
    )
    if battle is None or battle.status not in JUDGEABLE:
        return []
    arena, judge = battle.arena, battle.arena.machine_judge
    if judge is None:
        return []
    done = set(
        MachineVerdict.objects.filter(battle=battle, judge_model=judge.model_id).values_list(
            "method", flat=True
        )
    )
    methods = [m for m in arena_machine_methods(arena) if m not in done]
    if not methods:
        return []
    base = {"battle": battle, "judge": judge, "judge_model": judge.model_id}
    refusal = _self_judging(judge, battle) or machine_judge_problem(judge)
    if refusal:
        rows = [_store(**base, method=m, status=Status.SKIPPED, reason=refusal) for m in methods]
        return [row for row in rows if row is not None]
    try:
        client = model_client_for(judge, retries=0)
    except AgentFailure as failure:
        reason = f"the judge could not be called: {failure}"
        rows = [_store(**base, method=m, status=Status.FAILED, reason=reason) for m in methods]
        return [row for row in rows if row is not None]
    view = machine_view(battle)
    stored = []
    for method in methods:
        t0 = time.monotonic()
        if method == Method.PAIRWISE:
            fields = _pairwise(client, view, sleep)
        else:
            rubric = machine_rubric_parse(arena.machine_judge_rubric, arena_slug=arena.slug)
            fields = _rubric(client, view, rubric, sleep)
        row = _store(
            **base, method=method, duration_ms=int((time.monotonic() - t0) * 1000), **fields
        )
        if row is not None:
            stored.append(row)
            logger.info("machine verdict %s on battle %s: %s", method, battle_id, row.outcome
                        or f"{row.status} ({row.reason})")  # fmt: skip
    return stored


def battles_machine_judge_pending(*, arena: Arena, statuses: tuple[str, ...] = JUDGEABLE):
    """Battles of ``arena`` in ``statuses`` that lack a verdict of one of the machine
    judge's methods (the backfill's worklist), oldest first."""
    judge = arena.machine_judge
    if judge is None:
        return Battle.objects.none()
    methods = arena_machine_methods(arena)
    battles = Battle.objects.filter(arena=arena, status__in=statuses)
    have_all = (
        MachineVerdict.objects.filter(judge_model=judge.model_id, method__in=methods)
        .values("battle_id")
        .annotate(n=Count("method"))
        .filter(n=len(methods))
        .values("battle_id")
    )
    return battles.exclude(pk__in=have_all).order_by("pk")
