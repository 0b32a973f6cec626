"""What the battle page and the judge page show of a coding battle, blind: each side's
diff file by file (``battles.diffview``: bounded, escaped, highlighted), what the judge
sandbox measured of it, the run's directness, and the battle's live phases; and, with
the names only (``coding_reveal``), each side's tokens, cost and the scores made from
the cost.

Blind like ``battles.presenters``: sides are "A" and "B"; every text that came out of
a sandbox (diff lines, file paths, command output, a phase's detail) passes the
``Redactor`` first; nothing names the agent, its model or its CLI (the usage's
``source``, "claude-json" for one, is left out). Tokens and cost are not shown blind:
their ratio gives the model's price tier away, and so do the cost efficiency score
(``1 / (1 + cost / $0.50)``) and the composite that contains it (its other parts are
shown, so the cost part could be worked back from it)."""

import hashlib
import json
from typing import Any

from django.core.cache import cache
from django.utils.safestring import mark_safe

from battles import diffview
from battles.coding_models import CodingOutcome, CodingPhase
from battles.models import Battle, Task

# Rendering is the slow part (Pygments, ~1 s for a full diff): kept by content.
RENDER_CACHE_S = 24 * 3600
# The judge sandbox keeps a check's output from its end, this much of it at most
# (battles.services.coding_judge.OUTPUT_TAIL_BYTES): an output this long was cut.
OUTPUT_KEPT_CHARS = 8 * 1024
# A diff line's kind → its row's class and the mark a reader sees (and hears) before it.
ROW_CLASSES = {"+": ("add", "+"), "-": ("del", "−"), " ": ("ctx", " "), "@": ("hunk", ""),
               "\\": ("note", "")}  # fmt: skip
# Shown blind: what the judge sandbox measured of the diff.
SCORES = (
    ("functional", "Functional (success command)"),
    ("regression", "Regression (tests passed)"),
    ("lint", "Lint"),
    ("complexity", "Complexity"),
)
# Shown with the names only (see the module's docstring).
REVEALED_SCORES = (("cost_efficiency", "Cost efficiency"), ("composite", "Composite"))
DIRECTNESS = (
    ("trajectory_efficiency", "Edits among reads and edits"),
    ("early_edit", "How early the first edit"),
    ("repeat_penalty", "Repeated reads"),
    ("loop_penalty", "Cyclic tool patterns"),
    ("stall_rate", "Long read-only stalls"),
)
TOKENS = (
    ("input_tokens", "input"),
    ("output_tokens", "output"),
    ("cache_read_tokens", "cache reads"),
    ("cache_creation_tokens", "cache writes"),
)


def is_coding(battle: Battle) -> bool:
    return battle.task.kind == Task.Kind.REPO


def rendered_diff(diff: str, redactor) -> dict[str, Any]:
    """The diff split, redacted and highlighted; the highlighting is cached under a
    digest of what is shown (after redaction, so a newly entered agent's name is never
    served from an older rendering)."""
    split = diffview.split(diff)
    for file in split.files:
        file.path = redactor.text(file.path)
        file.notes = [redactor.text(note) for note in file.notes]
        for line in file.lines:
            line.text = redactor.text(line.text)
    shown = [[f.path, f.notes, [[x.kind, x.text] for x in f.lines]] for f in split.files]
    digest = hashlib.sha256(json.dumps(shown).encode()).hexdigest()
    key = f"diffview:v1:{digest}"
    files = cache.get(key)
    if files is None:
        files = []
        for file in split.files:
            diffview.highlight(file)
            files.append(
                {
                    "path": file.path,
                    "notes": file.notes,
                    "added": file.added,
                    "removed": file.removed,
                    "more_lines": file.more_lines,
                    "lines": [[line.kind, line.html] for line in file.lines],
                }
            )
        cache.set(key, files, RENDER_CACHE_S)
    for file in files:
        # diffview escaped every character of these (html.escape); nothing else is marked.
        file["rows"] = [
            {"css": ROW_CLASSES[kind][0], "mark": ROW_CLASSES[kind][1], "html": mark_safe(markup)}  # noqa: S308
            for kind, markup in file["lines"]
        ]
    return {"files": files, "more_files": split.more_files}


def _check(record: dict | None, redactor) -> dict[str, Any] | None:
    """A check the judge sandbox ran. Its output is shown whole as stored (the judge
    keeps only its end): the leak scan reads exactly that text."""
    if not isinstance(record, dict):
        return None
    output = str(record.get("output") or "")
    # Through the judge's harness (docs/coding.md): its own verdict, never the exit code
    # (an honest run exits 1: the judge's check tests always fail). A plain command: its
    # exit code, as the command itself reports it.
    harness = "passes" in record
    return {
        "exit_code": record.get("exit_code"),
        "seconds": record.get("seconds"),
        "timed_out": bool(record.get("timed_out")),
        "harness": harness,
        "ok": bool(record.get("passes")) if harness else record.get("exit_code") == 0,
        "unverified": redactor.text(str(record.get("unverified") or "")) if harness else "",
        "output": redactor.text(output),
        "output_cut": len(output) >= OUTPUT_KEPT_CHARS,
    }


def _tests(record: dict | None, redactor) -> dict[str, Any] | None:
    check = _check(record, redactor)
    if check is None:
        return None
    counts = record.get("counts") if isinstance(record.get("counts"), dict) else None
    check["crashed"] = bool(record.get("crashed"))
    check["passed"] = counts.get("passed") if counts else None
    check["total"] = counts.get("total") if counts else None
    return check


def _complexity(checks: dict) -> dict[str, Any] | None:
    record = checks.get("complexity")
    if not isinstance(record, dict):
        return None
    before, after = record.get("before") or {}, record.get("after") or {}
    return {"before": before.get("mean_ccn"), "after": after.get("mean_ccn"),
            "max_before": before.get("max_ccn"), "max_after": after.get("max_ccn")}  # fmt: skip


def outcome_payload(outcome: CodingOutcome, redactor) -> dict[str, Any]:
    """One run's diff and results as the pages show them (blind: no tokens, no cost, no
    score made from the cost)."""
    checks = outcome.checks if isinstance(outcome.checks, dict) else {}
    lint = checks.get("lint") if isinstance(checks.get("lint"), dict) else None
    directness = outcome.directness if isinstance(outcome.directness, dict) else {}
    success, tests = _check(checks.get("success"), redactor), _tests(checks.get("tests"), redactor)
    return {
        "diff": rendered_diff(outcome.diff, redactor) if outcome.diff else None,
        "diff_error": redactor.text(outcome.diff_error),
        "judged": outcome.judged_at is not None,
        "judge_error": redactor.text(outcome.judge_error),
        "applied": CodingOutcome.Applied(outcome.applied).label if outcome.applied else "",
        "patch_applied": outcome.applied not in ("", CodingOutcome.Applied.NONE),
        "success": success,
        "tests": tests,
        "outputs": [
            (name, c) for name, c in (("success command", success), ("test command", tests)) if c
        ],
        "lint": {
            "before": lint.get("before"),
            "after": lint.get("after"),
            "files": len(lint.get("files") or []),
        }
        if lint
        else None,
        "complexity": _complexity(checks),
        "scores": [(label, getattr(outcome, key)) for key, label in SCORES],
        "directness": {
            "score": directness.get("score"),
            "parts": [(label, directness.get(key)) for key, label in DIRECTNESS],
        }
        if directness
        else None,
    }


def usage_payload(outcome: CodingOutcome) -> dict[str, Any]:
    """One run's tokens, cost and the scores made from the cost: for those who may see
    the agent's name (``coding_reveal``), never blind."""
    usage = outcome.usage if isinstance(outcome.usage, dict) else {}
    return {
        "tokens": {key: usage.get(key) or 0 for key, _ in TOKENS} if usage else None,
        "cost_usd": usage.get("cost_usd") if usage else None,
        **{key: getattr(outcome, key) for key, _ in REVEALED_SCORES},
    }


def coding_reveal(battle: Battle) -> dict[str, dict[str, Any] | None] | None:
    """Each side's ``usage_payload`` (None until its outcome exists), or None for a
    battle that is not a coding battle. Shown only with the names (``battle_reveal``)."""
    if not is_coding(battle):
        return None
    outcomes = _outcomes_by_side(battle)
    return {side: usage_payload(o) if (o := outcomes.get(side)) else None for side in ("A", "B")}


def _outcomes_by_side(battle: Battle) -> dict[str, CodingOutcome]:
    rows = CodingOutcome.objects.filter(run__battle=battle).select_related("run")
    return {outcome.run.side: outcome for outcome in rows}


def coding_sides(battle: Battle, redactor) -> dict[str, dict[str, Any] | None] | None:
    """Each side's ``outcome_payload`` (None until its outcome exists), or None for a
    battle that is not a coding battle."""
    if not is_coding(battle):
        return None
    outcomes = _outcomes_by_side(battle)
    return {
        side: outcome_payload(o, redactor) if (o := outcomes.get(side)) else None
        for side in ("A", "B")
    }


# Battles past these statuses have a decision (or none can come): no vote on them can
# count any more, so how long each agent took may be shown.
TIMES_SHOWN = ("decided", "excluded", "failed")


def battle_phases(battle_id: int, redactor, *, status: str) -> list[dict[str, Any]]:
    """The battle's phases in the order they started: name, side (A, B or none),
    status, seconds taken (None while running) and the redacted detail."""
    rows = CodingPhase.objects.filter(battle_id=battle_id).select_related("run").order_by("pk")
    return [phase_payload(row, redactor, status=status) for row in rows]


def phase_payload(row: CodingPhase, redactor, *, status: str) -> dict[str, Any]:
    """One phase. The time an agent's own phases took can tell one agent from another
    (a slow CLI, a fast model), so while the battle's votes can still count the phases
    of a side say only their status; the judge's checks keep their times."""
    hidden = bool(row.run_id) and status not in TIMES_SHOWN and row.name.split(" ")[0] in (
        "agent", "diff", "destroy"
    )  # fmt: skip
    seconds = (row.ended_at - row.started_at).total_seconds() if row.ended_at else None
    return {
        "id": row.pk,
        "name": row.name,
        "side": row.run.side if row.run_id else "",
        "status": row.status,
        "started_at": None if hidden else row.started_at.isoformat(),
        "ended_at": None if hidden or not row.ended_at else row.ended_at.isoformat(),
        "seconds": None if hidden or seconds is None else round(seconds, 3),
        "detail": redactor.text(row.detail),
    }
