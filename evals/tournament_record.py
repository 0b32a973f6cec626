"""The record of one tournament run (003 "Output"): one JSON object that says what ran,
with what, and what came of it — provenance, the tasks, every candidate's result, the
exact-score comparisons and, when games were played (a judge, or repo tasks whose games
the composite score decides, ``composite_tasks``), every game, the failures,
the coverage, the statistics, the ratings with their bootstrap metadata, and the
tournament itself. Pure: no ORM, no Django; the caller hands over what it stored.

Copying is by name: only the fields listed here leave an input dict, so nothing the
caller happens to carry (a key, a token, a header) reaches the record. Coverage is
counted from the games, against the games the tournaments played; a mismatch is
reported as ``run.coverage_error``, never rewritten. Seeded-fallback advances are
tournament outcomes, never games: they appear only under ``tournament``.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evals import games as judged
from evals import usage as used
from evals.games import GameResult
from evals.tournaments import FORMATS, TaskTournament

SCHEMA = "agent-arena/tournament-record/1"

# run provenance the caller gives (all required); judge_decoding only with a judge
RUN_FIELDS = (
    "app_version",
    "run_id",
    "status",
    "created_at",
    "started_at",
    "finished_at",
    "candidate_max_tokens",
    "attempts",
    "backoff_s",
    "concurrency",
    "selection_seed",
    "suite",
    "agents",
)
SUITE_FIELDS = ("name", "sha256", "tasks")
AGENT_FIELDS = ("slug", "provider", "model", "base_url")
# a task as the suite parser leaves it; fields after id and prompt default as there
TASK_DEFAULTS: dict[str, Any] = {
    "kind": "chat",
    "reference": None,
    "expected": None,
    "meta": {},
    "start_url": "",
    "attachments": [],
    "success_cmd": None,
}
# a repo task's own fields, copied only for a repo task
REPO_TASK_FIELDS = ("repo", "ref", "judge_ref", "test_cmd", "time_limit_s")
RESULT_FIELDS = ("status", "output", "error", "exact_score", "duration_ms", "attempts")
CODING_FIELDS = ("functional", "regression", "lint", "complexity", "cost_efficiency",
                 "composite", "applied")  # fmt: skip


class RecordError(ValueError):
    """Inputs that do not make one consistent record (the message says which)."""


@dataclass(frozen=True)
class GameDetail(GameResult):
    """A judged game as the record shows it: the resolved result and both orientations,
    each already mapped back to the game's order (``"A"`` is ``a``): its winner
    (``"A"``, ``"B"``, ``"tie"``, or ``""`` when that orientation failed), its reason,
    and its raw judge completions (every attempt, the parsed one last). ``duration_ms``
    runs from the first orientation's start to the second's end."""

    ab_winner: str = ""
    ba_winner: str = ""
    ab_reason: str = ""
    ba_reason: str = ""
    ab_raw: tuple[str, ...] = field(default_factory=tuple)
    ba_raw: tuple[str, ...] = field(default_factory=tuple)
    duration_ms: int = 0


def _pick(source: dict, names: Sequence[str], what: str) -> dict:
    missing = [n for n in names if n not in source]
    if missing:
        raise RecordError(f"{what} lacks {', '.join(missing)}")
    return {n: source[n] for n in names}


def _agent(agent: dict) -> dict:
    return _pick(agent, AGENT_FIELDS, f"agent {agent.get('slug', '?')!r}")


def _task(task: dict) -> dict:
    out = _pick(task, ("id", "prompt"), "a task")
    for name, default in TASK_DEFAULTS.items():
        value = task.get(name, default)
        out[name] = list(value) if name == "attachments" else value
    if out["kind"] == "repo":
        out.update(_pick(task, REPO_TASK_FIELDS, f"repo task {out['id']!r}"))
    return out


def _results(
    results: list[dict], task_ids: list[str], candidates: list[str], epochs: int
) -> list[dict]:
    """One row per (task, candidate) in task-file then candidate order — with epochs,
    per (task, epoch, candidate), each row naming its ``epoch``; a pair with no result
    is ``missing``."""
    by_key: dict[tuple[str, str, int], dict] = {}
    for r in results:
        key = (r.get("task_id"), r.get("model"), r.get("epoch", 0))
        if key[0] not in task_ids or key[1] not in candidates or key[2] not in range(epochs):
            raise RecordError(f"a result for an unknown task, candidate or epoch: {key!r}")
        if key in by_key:
            raise RecordError(f"two results for task {key[0]!r}, candidate {key[1]!r}"
                              f"{f', epoch {key[2]}' if epochs > 1 else ''}")  # fmt: skip
        by_key[key] = r
    rows = []
    for t, e in ((t, e) for t in task_ids for e in range(epochs)):
        for c in candidates:
            r = by_key.get((t, c, e))
            head = {"task_id": t, "model": c, **({"epoch": e} if epochs > 1 else {})}
            if r is None:
                rows.append({**head, "status": "missing"})
            else:
                row = {**head, **_pick(r, RESULT_FIELDS, f"result {t!r}/{c!r}")}
                if r.get("coding") is not None:  # a repo task's scores, by name
                    row["coding"] = {k: r["coding"][k] for k in CODING_FIELDS}
                if r.get("usage") is not None:  # tokens, cost, directness (evals.usage)
                    row["usage"] = used.copied(r["usage"])
                rows.append(row)
    return rows


def _comparisons(rows: list[dict], task_ids: list[str], candidates: list[str]) -> list[dict]:
    """Per task (and epoch) and unordered pair (candidate order) where both have an
    exact score."""
    score = {
        (r["task_id"], r.get("epoch"), r["model"]): r["exact_score"]
        for r in rows
        if r.get("exact_score") is not None
    }
    out = []
    for t, e in dict.fromkeys((r["task_id"], r.get("epoch")) for r in rows):
        for i, a in enumerate(candidates):
            for b in candidates[i + 1 :]:
                if (t, e, a) not in score or (t, e, b) not in score:
                    continue
                sa, sb = score[(t, e, a)], score[(t, e, b)]
                winner = "tie" if sa == sb else (a if sa > sb else b)
                out.append(
                    {"task_id": t, **({} if e is None else {"epoch": e}), "model_a": a,
                     "model_b": b, "score_a": sa, "score_b": sb, "winner": winner}
                )  # fmt: skip
    return out


def _side(g: GameDetail, outcome: str) -> str | None:
    """An outcome in the game's order as a model id (``"tie"`` stays, ``""`` is None)."""
    return {"A": g.a, "B": g.b, "tie": "tie"}.get(outcome)


def _game(g: GameDetail) -> dict:
    row: dict[str, Any] = {"task_id": g.task_id, "model_a": g.a, "model_b": g.b, "game": g.game}
    if g.epoch is not None:
        row["epoch"] = g.epoch
    if g.resolved:
        row["winner"] = _side(g, g.winner)
        row["agreement"] = bool(g.agreement)
    else:
        row["failure"] = g.failure
    row["ab"] = {"winner": _side(g, g.ab_winner), "reason": g.ab_reason, "raw": list(g.ab_raw)}
    row["ba"] = {"winner": _side(g, g.ba_winner), "reason": g.ba_reason, "raw": list(g.ba_raw)}
    row["duration_ms"] = g.duration_ms
    return row


def _tournament(
    tournaments: list[TaskTournament] | None,
    task_ids: list[str],
    *,
    judged_run: bool,
    candidates: list[str],
    format: str,
    best_of: int,
    opening: list | None,
    epochs: int,
) -> dict:
    out: dict[str, Any] = {"format": format, "candidates": list(candidates), "best_of": best_of}
    if opening is not None:
        out["opening_matchups"] = [[a, b] for a, b in opening]
    if not judged_run:
        return {**out, "status": "not_judged", "tasks": []}
    by_task = {}
    for t in tournaments or []:
        if t.task_id not in task_ids or (t.task_id, t.epoch) in by_task:
            raise RecordError(f"a tournament for an unknown or repeated task: {t.task_id!r}")
        by_task[(t.task_id, t.epoch)] = t
    every_epoch = [None] if epochs == 1 else range(epochs)
    played = [by_task[(t, e)].as_dict() for t in task_ids for e in every_epoch if (t, e) in by_task]
    every = len(played) == len(task_ids) * len(every_epoch) and all(
        t["status"] == "complete" for t in played
    )
    return {**out, "status": "completed" if every else "incomplete", "tasks": played}


def _check_games(details: list[GameDetail], tournaments: list[TaskTournament]) -> None:
    """Each game names a game the tournaments played, once."""
    played = {
        (t.task_id, t.epoch, s.a, s.b, g.number)
        for t in tournaments
        for s in t.series
        for g in s.games
    }  # fmt: skip
    seen = set()
    for g in details:
        key = (g.task_id, g.epoch, g.a, g.b, g.game)
        shown = key if g.epoch is not None else (g.task_id, g.a, g.b, g.game)
        if key not in played:
            raise RecordError(f"game {shown!r} is in no tournament's series")
        if key in seen:
            raise RecordError(f"game {shown!r} given twice")
        seen.add(key)


def tournament_record(
    *,
    run: dict,
    tasks: list[dict],
    results: list[dict],
    games: list[GameDetail],
    tournaments: list[TaskTournament] | None,
    candidates: list[str],
    judge: dict | None,
    seed: int,
    replicates: int,
    format: str,
    best_of: int,
    opening: list | None,
    composite_tasks: list[str] | None = None,
    judge_usage: dict | None = None,
    epochs: int = 1,
) -> dict:
    """The record. ``run`` holds the provenance of ``RUN_FIELDS`` (plus
    ``judge_decoding`` with a judge): ``suite`` is the suite's name, hash and task
    count, ``agents`` the candidates' provenance in candidate order; ``results`` are rows with
    ``task_id``, ``model`` and ``RESULT_FIELDS``; ``games`` and ``tournaments`` are
    what the judge played (both empty/None without a judge). ``seed`` seeds the
    bootstrap (the tournaments' fallback already used it). ``composite_tasks`` are the
    repo tasks whose games the composite scores decided (no judge asked): given, the
    run has games even without a judge. A result's ``usage`` (``evals.usage``) is
    copied by name; with any, or with ``judge_usage`` (``usage.calls_totals`` of the
    judge's calls), the record's ``usage`` adds them up per candidate and names the
    judge's. With ``epochs`` > 1 each task has a tournament per epoch (its games and
    results name their ``epoch``); the ratings' bootstrap still resamples whole tasks."""
    if format not in FORMATS:
        raise RecordError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if "tie" in candidates:
        raise RecordError("a candidate may not be called 'tie' (a judgment's winner says tie)")
    head = _pick(run, RUN_FIELDS, "run")
    if [a.get("slug") for a in head["agents"]] != list(candidates):
        raise RecordError("agents must be the candidates' provenance, in candidate order")
    played = judge is not None or composite_tasks is not None
    if not played and (games or tournaments):
        raise RecordError("games and tournaments need a judge (or repo tasks)")
    if played and tournaments is None:
        raise RecordError("a judged run needs its tournaments")
    task_rows = [_task(t) for t in tasks]
    task_ids = [t["id"] for t in task_rows]
    if len(set(task_ids)) != len(task_ids):
        raise RecordError("task ids must be unique")

    record_run: dict[str, Any] = {
        **head,
        "suite": _pick(head["suite"], SUITE_FIELDS, "run.suite"),
        "agents": [_agent(a) for a in head["agents"]],
        "judge": _agent(judge) if judge is not None else None,
    }
    if epochs > 1:
        record_run["epochs"] = epochs
    rows = _results(results, task_ids, list(candidates), epochs)
    tournament = _tournament(
        tournaments,
        task_ids,
        judged_run=played,
        candidates=list(candidates),
        format=format,
        best_of=best_of,
        opening=opening,
        epochs=epochs,
    )
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "run": record_run,
        "tasks": task_rows,
        "results": rows,
        "comparisons": _comparisons(rows, task_ids, list(candidates)),
    }
    if composite_tasks is not None:
        unknown = [t for t in composite_tasks if t not in task_ids]
        if unknown:
            raise RecordError(f"composite tasks not in the suite: {unknown!r}")
        record_run["composite_tasks"] = list(composite_tasks)
    if played:
        _check_games(games, tournaments or [])
        expected = sum(t.games_played for t in tournaments or [])
        record_run.update(judged.coverage(games, expected=expected))
        # The arena's addition: a task whose tournament stopped at a game never played
        # (a cancel, or read while running) leaves the run incomplete, whatever the
        # games already played say.
        by_task = {(t.task_id, t.epoch): t.status for t in tournaments or []}
        every_epoch = [None] if epochs == 1 else range(epochs)
        unfinished = [
            t
            for t in task_ids
            if any(by_task.get((t, e), "unfinished") == "unfinished" for e in every_epoch)
        ]
        if unfinished:
            record_run["complete"] = False
            record_run["unfinished_tasks"] = unfinished
        record_run["orientation_agreement"] = judged.orientation_agreement(games)
        if judge is not None:
            record_run["judge_decoding"] = _pick(
                run.get("judge_decoding") or {}, ("temperature", "max_tokens"), "run.judge_decoding"
            )
        # Games in the record's order (task-file order, then play order within a task):
        # the bootstrap numbers its task clusters in the order it meets them, so rating
        # the stored order would tie the bounds to how concurrent tasks interleaved, and
        # the record's own judgments, rated again with its seed, would not reproduce them.
        order = {t: i for i, t in enumerate(task_ids)}
        in_order = sorted(games, key=lambda g: (order[g.task_id], g.epoch or 0))  # stable
        ratings, meta = judged.ratings(in_order, candidates, seed=seed, replicates=replicates)
        record_run.update(meta)
        # the method that makes the bounds, named even when it could not make any
        record_run.setdefault("interval", judged.interval_method())
        record["judgments"] = [_game(g) for g in in_order if g.resolved]
        record["judgment_failures"] = [_game(g) for g in in_order if not g.resolved]
        record["statistics"] = judged.statistics(games, candidates)
        record["ratings"] = ratings
    record["tournament"] = tournament
    if judge_usage is not None or any("usage" in r for r in rows):
        record["usage"] = _usage(rows, list(candidates), judge_usage)
    return record


def _usage(rows: list[dict], candidates: list[str], judge_usage: dict | None) -> dict:
    """Each candidate's results' usage added up (a result without one is left out and
    not counted), and the judge's calls as given, copied by name."""
    per = {c: [r["usage"] for r in rows if r["model"] == c and "usage" in r] for c in candidates}
    judge = None
    if judge_usage is not None:
        judge = {
            **_pick(judge_usage, ("calls", *used.FIGURES), "judge usage"),
            "by_role": {
                role: _pick(figures, ("calls", *used.FIGURES), f"judge usage of {role!r}")
                for role, figures in (judge_usage.get("by_role") or {}).items()
            },
        }
    return {"candidates": {c: used.totals(per[c]) for c in candidates}, "judge": judge}
