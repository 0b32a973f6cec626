"""What a battle looks like from outside. ``battle_payload`` is blind unless asked to
reveal: sides are "A" and "B" and nothing names, numbers or orders the agents."""

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


def run_payload(run: Run) -> dict[str, Any]:
    return {
        "status": run.status,
        "end_reason": run.end_reason,
        "final_message": run.final_message,
        "files": [{"name": f["name"], "size": f["size"]} for f in run.delivered_files],
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
        "task": {"instruction": battle.task.instruction, "start_url": battle.task.start_url},
        "sides": sides,
        "outcome": battle.outcome or None,
    }


def battle_reveal(battle: Battle) -> dict[str, Any]:
    return {side: agent_identity(battle.agent_for(side)) for side in ("A", "B")}
