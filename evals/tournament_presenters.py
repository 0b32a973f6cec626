"""What a tournament's run page shows of its results: from its tournament record, as
the audit report shapes it (``evals.report.report_view``), one page of tasks' answers,
brackets or round-robin series and failed games, and for the whole run its coverage,
orientation agreement and each candidate's rating beside its statistics."""

from typing import Any

from django.core.paginator import Paginator

from evals import tournaments
from evals.models import Evaluation
from evals.presenters import TASKS_PER_PAGE, answer_rows, measures_of
from evals.report import report_view

# Why a rating or its bounds are missing, in words (ratings.task_bootstrap's codes).
UNAVAILABLE = {
    "no_comparisons": "no resolved game against another candidate",
    "disconnected": "no game links it to the others",
    "separated": "its wins and losses do not link it both ways to the others",
    "nonconvergence": "the fit did not converge",
    "nonfinite_result": "the fit gave no finite number",
    "too_few_tasks": "fewer than two tasks have a resolved game",
    "original_unrated": "a candidate has no rating on the whole run",
    "invalid_replicates": "some resampled runs could not rate every candidate",
    "too_few_effective_tasks": (
        "the tasks hold too little independent evidence for a t interval"
        " (under two effective tasks, or one task alone decides a rating)"
    ),
}


def tournament_results_view(
    evaluation: Evaluation, record: dict[str, Any], *, page: int | str | None = 1
) -> dict[str, Any]:
    """The results part of a tournament's run page, from its tournament record as the
    audit report shapes it (``evals.report.report_view``): the answers of one page of
    tasks, those tasks' brackets (or round-robin series) and failed games, and for the
    whole run its coverage, orientation agreement and each candidate's rating (formatted,
    with its bounds or why there are none) beside its statistics."""
    view = report_view(record)
    run = record["run"]
    agents = [a["slug"] for a in run["agents"]]
    tasks_page = Paginator(record["tasks"], TASKS_PER_PAGE).get_page(page)
    shown = {t["id"] for t in tasks_page}
    by_key = {(r["task_id"], r["model"]): r for r in record["results"] if not r.get("epoch")}
    measures = measures_of(evaluation, record["tasks"])
    unavailable = run.get("bootstrap_unavailable")
    statistics = {row["model"]: row for row in view.get("statistics", [])}
    return {
        "tournament": True,
        "agents": agents,
        "measures": measures,
        "rows": answer_rows(evaluation, tasks_page, by_key, agents, measures),
        "tasks_page": tasks_page,
        "judged": view["judged"],
        "format": view["format"],
        "elimination": view["format"] != tournaments.ROUND_ROBIN,
        "status": view["tournament_status"],
        "task_tournaments": [t for t in view["task_tournaments"] if t["task_id"] in shown],
        "coverage": view.get("coverage"),
        "candidates": [
            {
                **r,
                **statistics.get(r["model"], {}),
                "why": UNAVAILABLE.get(r["unavailable"], r["unavailable"]),
            }
            for r in view.get("ratings", [])
        ],
        "bootstrap": {
            "ran": run.get("bootstrap_ran"),
            "replicates": run.get("bootstrap_replicates"),
            "valid": run.get("bootstrap_valid"),
            "clusters": run.get("bootstrap_clusters"),
            "unavailable": unavailable,
            "why": UNAVAILABLE.get(unavailable, unavailable),
            "method": view.get("interval", {}).get("name"),
            "settings": [
                (label, value)
                for label, value in view.get("interval", {}).get("settings", [])
                if label != "level"
            ],
        },
        "failures": [f for f in view.get("failures", []) if f["task_id"] in shown],
        "run": run,
    }
