"""What a battle looks like from outside. ``battle_payload`` is blind unless asked to
reveal: sides are "A" and "B" and nothing names, numbers or orders the agents."""

from collections.abc import Iterable
from typing import Any

from django.urls import reverse

from battles.models import Battle, Run


def _step_payload(step, battle_id: int, side: str) -> dict[str, Any]:
    result = step.result or {}
    screenshot = (
        reverse("battles:screenshot", args=[battle_id, side, step.index])
        if step.screenshot
        else None
    )
    return {
        "index": step.index,
        "screenshot": screenshot,
        "tool": step.tool,
        "args": step.args,
        "result": {
            "ok": result.get("ok"),
            "stdout": result.get("stdout", ""),
            "stderr": result.get("stderr", ""),
            "exit_code": result.get("exit_code"),
            "truncated": result.get("truncated", False),
            "timed_out": result.get("timed_out", False),
            "error": result.get("error", ""),
        },
    }


def attachment_rows(attachments: Iterable, battle_id: int | None) -> list[dict[str, Any]]:
    """A task's attachments, in stored order, each with its access-checked download URL
    (through the battle: the URL names the battle and a position, nothing else)."""
    return [
        {
            "name": a.name,
            "size": a.size,
            "sha256": a.sha256,
            "content_type": a.content_type,
            "url": reverse("battles:attachment", args=[battle_id, index])
            if battle_id is not None
            else None,
        }
        for index, a in enumerate(attachments)
    ]


def delivered_rows(run: Run) -> list[dict[str, Any]]:
    return [
        {
            "name": f["name"],
            "size": f["size"],
            "sha256": f.get("sha256", ""),
            "url": reverse("battles:delivery", args=[run.battle_id, run.side, f["name"]]),
        }
        for f in run.delivered_files
    ]


def run_payload(run: Run) -> dict[str, Any]:
    return {
        "status": run.status,
        "end_reason": run.end_reason,
        "final_message": run.final_message,
        "files": delivered_rows(run),
        "steps": [_step_payload(step, run.battle_id, run.side) for step in run.steps.all()],
    }


def agent_identity(agent) -> dict[str, Any]:
    return {
        "agent": agent.display_name,
        "slug": agent.slug,
        "kind": agent.kind,
        "provider": agent.provider,
        "model": agent.model_id,
        "baseline": agent.is_baseline,
    }


def battle_payload(battle: Battle, *, reveal: bool) -> dict[str, Any]:
    runs = {run.side: run for run in battle.runs.select_related("agent").prefetch_related("steps")}
    sides = {}
    for side in ("A", "B"):
        run = runs.get(side)
        sides[side] = run_payload(run) if run else None
        if reveal and run:
            sides[side]["identity"] = agent_identity(run.agent)
    return {
        "id": battle.pk,
        "status": battle.status,
        "task": {
            "instruction": battle.task.instruction,
            "start_url": battle.task.start_url,
            "attachments": attachment_rows(battle.task.attachments.order_by("pk"), battle.pk),
        },
        "sides": sides,
        "outcome": battle.outcome or None,
    }


def battle_reveal(battle: Battle) -> dict[str, Any]:
    return {side: agent_identity(battle.agent_for(side)) for side in ("A", "B")}


def waterfall(run: Run) -> dict[str, Any]:
    """The run's spans laid out on its time axis: per span, offset and width in percent
    of the run's duration, plus totals of tokens, cost and time per kind."""
    spans = list(run.spans.all())
    steps = {step.index: step for step in run.steps.all()}
    if not spans:
        return {"rows": [], "totals": {}, "duration_ms": 0}
    start = min(s.started_at for s in spans)
    end = max(s.started_at.timestamp() * 1000 + s.latency_ms for s in spans)
    duration = max(1.0, end - start.timestamp() * 1000)
    rows = []
    for span in spans:
        offset = (span.started_at - start).total_seconds() * 1000
        step = steps.get(span.step_index) if span.step_index is not None else None
        rows.append(
            {
                "span": span,
                "offset_pct": round(100 * offset / duration, 2),
                "width_pct": max(0.3, round(100 * span.latency_ms / duration, 2)),
                "screenshot": reverse(
                    "battles:screenshot", args=[run.battle_id, run.side, step.index]
                )
                if step is not None and step.screenshot and span.kind == "tool"
                else None,
            }
        )
    totals: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
    for span in spans:
        totals["input_tokens"] += span.input_tokens
        totals["output_tokens"] += span.output_tokens
        totals["cost_usd"] += float(span.cost_usd)
        key = f"{span.kind}_ms"
        totals[key] = totals.get(key, 0) + span.latency_ms
    return {"rows": rows, "totals": totals, "duration_ms": int(duration)}
