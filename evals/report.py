"""The audit report of a tournament run (003 "Reporting"): one self-contained HTML file
rendered from the run's record, and from nothing else — no refit, no recount: every
number shown is a number the record states. Judged games are the primary evidence;
statistics and ratings are shown as what they are, derived from those games.

The file embeds its CSS and has no script, no link, no image and no URL of any kind,
so it opens the same from a download, a mail attachment or ``file://``. Everything in
the record is text to escape (a candidate's reply is written by the candidate): the
template autoescapes, and nothing here marks a string safe.
"""

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from django.template.loader import render_to_string

from evals.tournament_record import SCHEMA
from evals.usage import TOKENS

TEMPLATE = "reports/audit.html"
SECTIONS = (
    ("coverage", "Coverage"),
    ("tournament", "Tournament"),
    ("judgments", "Pairwise judgements"),
    ("replies", "Candidate replies"),
    ("usage", "Tokens and cost"),
    ("raw", "Raw judge completions"),
    ("ratings", "Ratings and statistics"),
    ("comparisons", "Exact-match comparisons"),
    ("bootstrap", "Intervals"),
    ("configuration", "Configuration"),
)
CONFIG_FIELDS = (
    "run_id", "status", "app_version", "created_at", "started_at", "finished_at",
    "candidate_max_tokens", "attempts", "backoff_s", "concurrency", "selection_seed",
)  # fmt: skip


def _number(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _winner(value: str | None) -> str:
    return "failed" if value is None else value


def _series(s: dict) -> dict:
    games = [
        {
            "game": g.get("game"),
            "tie_break": g.get("kind") == "tie_break",
            "outcome": {"A": s.get("a"), "B": s.get("b")}.get(g.get("outcome"), g.get("outcome")),
        }
        for g in s.get("games", [])
    ]
    return {
        "a": s.get("a"),
        "b": s.get("b"),
        "status": s.get("status"),
        "winner": s.get("winner"),
        "advanced": s.get("advanced"),
        "seeded_fallback": bool(s.get("seeded_fallback")),
        "score": f"{s.get('wins_a', 0)}–{s.get('wins_b', 0)}",
        "draws": s.get("draws", 0),
        "games": games,
        "tie_breaks": sum(1 for g in games if g["tie_break"]),
    }


def _task_tournament(t: dict) -> dict:
    rounds: dict[int, list[dict]] = {}
    for s in t.get("series", []):
        rounds.setdefault(s.get("round", 1), []).append(_series(s))
    return {
        "task_id": t.get("task_id"),
        "status": t.get("status"),
        "champion": t.get("champion"),
        "rounds": [{"number": n, "series": rounds[n]} for n in sorted(rounds)],
    }


def _orientation(o: dict | None) -> dict:
    o = o or {}
    return {"winner": _winner(o.get("winner")), "reason": o.get("reason", ""),
            "raw": list(o.get("raw", []))}  # fmt: skip


def _game(j: dict) -> dict:
    return {
        "task_id": j.get("task_id"),
        "game": j.get("game"),
        "a": j.get("model_a"),
        "b": j.get("model_b"),
        "winner": j.get("winner"),
        "agreement": j.get("agreement"),
        "failure": j.get("failure"),
        "ab": _orientation(j.get("ab")),
        "ba": _orientation(j.get("ba")),
        "duration": _number(j.get("duration_ms")),
    }


def _replies(record: dict) -> list[dict]:
    by_task: dict[str, list[dict]] = {}
    for r in record.get("results", []):
        by_task.setdefault(r.get("task_id"), []).append(
            {
                "model": r.get("model"),
                "status": r.get("status"),
                "output": r.get("output", ""),
                "error": r.get("error", ""),
                "exact_score": _number(r.get("exact_score")),
                "duration": _number(r.get("duration_ms")),
                "attempts": _number(r.get("attempts")),
                "usage": _run_usage(r.get("usage")),
            }
        )
    return [
        {"id": t.get("id"), "prompt": t.get("prompt", ""), "expected": t.get("expected"),
         "results": by_task.get(t.get("id"), [])}
        for t in record.get("tasks", [])
    ]  # fmt: skip


def _usd(value: Any) -> str:
    return "—" if value is None else f"${value:.6f}"


def _figures(u: dict) -> dict:
    return {
        **{f: _number(u.get(f)) for f in TOKENS},
        "cost": _usd(u.get("cost_usd")),
    }


def _run_usage(u: dict | None) -> dict | None:
    """One reply's tokens, cost and directness as the record states them."""
    if u is None:
        return None
    directness = u.get("directness")
    return {
        **_figures(u),
        "directness": _number(directness.get("score"), 2) if directness else "—",
        "directness_reason": u.get("directness_reason", ""),
        "derived": bool(u.get("derived")),
    }


def _usage(record: dict) -> dict | None:
    """The record's totals: per candidate, and the judge's calls (all, then by role)."""
    usage = record.get("usage")
    if usage is None:
        return None
    judge = usage.get("judge")
    return {
        "candidates": [
            {
                "model": model,
                "runs": _number(t.get("runs")),
                **_figures(t),
                "unknown": _number(t.get("unknown_runs")),
                "directness": _number(t.get("directness_mean"), 2),
                "directness_runs": _number(t.get("directness_runs")),
            }
            for model, t in usage.get("candidates", {}).items()
        ],
        "judge": None
        if judge is None
        else [
            {"role": "all", "calls": _number(judge.get("calls")), **_figures(judge)},
            *(
                {"role": role, "calls": _number(r.get("calls")), **_figures(r)}
                for role, r in judge.get("by_role", {}).items()
            ),
        ],
    }


def _rating(r: dict) -> dict:
    has_bounds = "rating_lower" in r
    return {
        "model": r.get("model"),
        "rating": _number(r.get("rating")),
        "lower": _number(r.get("rating_lower")) if has_bounds else "—",
        "upper": _number(r.get("rating_upper")) if has_bounds else "—",
        "unavailable": r.get("unavailable", ""),
    }


# Records written before issue 38 carry no ``run.interval``: their bounds are the task
# bootstrap's percentiles (003's method), named here so an old record's report says so.
PERCENTILE_BOOTSTRAP = {
    "method": "task_clustered_percentile_bootstrap",
    "name": "task-clustered percentile bootstrap",
    "description": (
        "Each bound is a 2.5th or 97.5th percentile of the ratings refitted on resamplings "
        "of whole tasks (the method before issue 38, which covered less than its 95 % "
        "claim with few tasks)."
    ),
    "level": 0.95,
}
INTERVAL_FIELDS = (
    ("level", "level", 2),
    ("clusters", "tasks (clusters)", 0),
    ("effective_clusters", "effective tasks G*", 2),
    ("degrees_of_freedom", "degrees of freedom", 2),
    ("critical_value", "critical value t", 3),
)


def _interval(run: dict) -> dict:
    """The method that made the bounds, as the record names it (or, for a record from
    before issue 38, the percentile bootstrap it then used), with its settings."""
    interval = run.get("interval") or PERCENTILE_BOOTSTRAP
    return {
        "method": interval.get("method", ""),
        "name": interval.get("name", ""),
        "description": interval.get("description", ""),
        "settings": [
            (label, _number(interval[key], digits))
            for key, label, digits in INTERVAL_FIELDS
            if key in interval
        ],
    }


def report_view(record: dict) -> dict:
    """What the template shows, read from the record (numbers formatted, nothing
    recomputed). A record without ``run.judge`` is a no-judge run."""
    run = record.get("run", {})
    judge = run.get("judge")
    tournament = record.get("tournament", {})
    judged = judge is not None
    agreement = run.get("orientation_agreement", {})
    view: dict[str, Any] = {
        "sections": [{"id": i, "title": t} for i, t in SECTIONS],
        "run": run,
        "judged": judged,
        "judge": judge,
        "suite": run.get("suite", {}),
        "agents": run.get("agents", []),
        "format": tournament.get("format", ""),
        "best_of": tournament.get("best_of"),
        "candidates": tournament.get("candidates", []),
        "opening": tournament.get("opening_matchups"),
        "tournament_status": tournament.get("status", ""),
        "task_tournaments": [_task_tournament(t) for t in tournament.get("tasks", [])],
        "replies": _replies(record),
        "usage": _usage(record),
        "comparisons": record.get("comparisons", []),
        "config": [(k, _number(run.get(k))) for k in CONFIG_FIELDS if k in run],
    }
    if judged:
        view["coverage"] = {
            "expected": _number(run.get("expected_pairs")),
            "resolved": _number(run.get("resolved_pairs")),
            "failed": _number(run.get("failed_pairs")),
            "complete": bool(run.get("complete")),
            "error": run.get("coverage_error", ""),
            "unfinished": run.get("unfinished_tasks", []),
            "agreeing": _number(agreement.get("orientation_agreeing_pairs")),
            "disagreeing": _number(agreement.get("orientation_disagreeing_pairs")),
            "rate": _number(agreement.get("agreement_rate"), 3),
        }
        view["judgments"] = [_game(j) for j in record.get("judgments", [])]
        view["failures"] = [_game(j) for j in record.get("judgment_failures", [])]
        view["ratings"] = [_rating(r) for r in record.get("ratings", [])]
        view["statistics"] = record.get("statistics", [])
        view["interval"] = _interval(run)
        view["bootstrap"] = [
            (k, _number(run[k]))
            for k in ("bootstrap_seed", "bootstrap_replicates", "bootstrap_clusters",
                      "bootstrap_ran", "bootstrap_valid", "bootstrap_unavailable")
            if k in run
        ]  # fmt: skip
        decoding = run.get("judge_decoding", {})
        view["config"] += [(f"judge_decoding.{k}", _number(decoding[k])) for k in sorted(decoding)]
    return view


def audit_report_html(record: dict) -> str:
    """The report of ``record`` (a tournament record, as built or as read back from
    its JSON file) as one HTML document."""
    return render_to_string(TEMPLATE, report_view(record))


class RecordRejected(ValueError):
    """A file that is not a tournament record its schema accepts (the message says
    where it is wrong)."""


@cache
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((Path(__file__).parent / "tournament_record.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def audit_report_from_file(data: bytes) -> str:
    """The report of a saved record: parsed as JSON and checked against the published
    schema first, so a report is never rendered from something that only looks like
    a record (a truncated file, an evaluation record, a hand-edited count of the wrong
    type). The first problem found is named by its place in the file."""
    try:
        record = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise RecordRejected("not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise RecordRejected(
            f"not JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        found = record.get("schema") if isinstance(record, dict) else type(record).__name__
        raise RecordRejected(f"not a tournament record (schema {SCHEMA}), found {found!r}")
    error = jsonschema.exceptions.best_match(_validator().iter_errors(record))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the top level"
        raise RecordRejected(f"not a valid tournament record at {where}: {error.message[:300]}")
    return audit_report_html(record)
