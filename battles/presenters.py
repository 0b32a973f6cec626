"""What a battle looks like from outside. ``battle_payload`` is blind unless asked to
reveal: sides are "A" and "B" and nothing names, numbers or orders the agents.

Blind by construction: a blind payload carries no agent row, no run or agent id, no
per-side time (durations, timestamps), no file name in a URL (screenshots and
delivered files are addressed by battle, side and position only), and every text the
agents wrote passes through ``Redactor``, which blanks any roster name, slug, model
id, alias, provider or entrant team name the leak scan would find."""

from collections.abc import Callable, Iterable
from pathlib import PurePosixPath
from typing import Any

from django.template.loader import render_to_string
from django.urls import reverse

from agents.identity import LeakScanner
from agents.models import Agent
from battles.models import Battle, Run
from battles.verdict import battle_verdict

HIDDEN = "[hidden]"


class Redactor:
    """Blanks, in text, every identity of the given agents that the leak scan of SPEC
    §5.1 would find (``agents.identity``: on folded text, so homoglyphs, invisible
    characters and spread-out letters too; whole tokens, any case, separator variants;
    ordinary words such as "idle" are left alone), plus providers and entrant teams."""

    def __init__(self, agents: Iterable[Agent]) -> None:
        names: list[str] = []
        for agent in agents:
            names += agent.identity_strings()
            names += [agent.provider] if agent.provider else []
            names += [agent.team.name] if agent.team_id else []
        self._scanner = LeakScanner(names)

    @classmethod
    def for_roster(cls) -> "Redactor":
        """Every agent ever entered, in any arena: a retired one's name still reveals."""
        return cls(Agent.objects.select_related("team"))

    def text(self, value: str) -> str:
        return self._scanner.redact(value, HIDDEN) if value else value

    def tree(self, value: Any) -> Any:
        """``text`` applied to every string in a JSON-like value (keys included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.tree(v) for v in value]
        if isinstance(value, dict):
            return {self.text(str(k)): self.tree(v) for k, v in value.items()}
        return value


def _step_payload(step, battle_id: int, side: str, redactor: Redactor | None) -> dict[str, Any]:
    """One step. Blind (``redactor`` given): the screenshot URL is the judge route and
    every text is redacted. Neither form carries the step's time or duration."""
    result = step.result or {}
    clean = redactor.tree if redactor is not None else (lambda v: v)
    screenshot = None
    if step.screenshot:
        route = "judging:screenshot" if redactor is not None else "battles:screenshot"
        screenshot = reverse(route, args=[battle_id, side, step.index])
    return {
        "index": step.index,
        "screenshot": screenshot,
        "tool": clean(step.tool),  # the agent's own word when it named no tool of the set
        "args": clean(step.args),
        "result": {
            "ok": result.get("ok"),
            "stdout": clean(result.get("stdout", "")),
            "stderr": clean(result.get("stderr", "")),
            "exit_code": result.get("exit_code"),
            "truncated": result.get("truncated", False),
            "timed_out": result.get("timed_out", False),
            "error": clean(result.get("error", "")),
            # Some text held NUL or bytes that are not UTF-8: shown escaped (\x00, \xff).
            "escaped": bool(result.get("escaped", False)),
        },
        "page": _page(result.get("page"), clean),
    }


def _page(page: Any, clean: Callable[[Any], Any]) -> dict[str, str] | None:
    """The browser page a step left (URL and title, as the sandbox reported them)."""
    if not isinstance(page, dict):
        return None
    return {key: clean(str(page.get(key) or "")) for key in ("url", "title")}


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


def blind_file_name(name: str, position: int, redactor: Redactor) -> str:
    """The name a judge sees for a delivered file: the agent's own name unless it names
    an agent, else ``file-<n>`` with the extension kept when that is harmless."""
    if redactor.text(name) == name:
        return name
    suffix = PurePosixPath(name).suffix
    return f"file-{position + 1}" + (suffix if redactor.text(suffix) == suffix else "")


def delivered_rows(run: Run, redactor: Redactor | None = None) -> list[dict[str, Any]]:
    """The run's delivered files. Blind (``redactor`` given): addressed by position on
    the judge route, names redacted; else by name on the team route."""
    rows = []
    for position, f in enumerate(run.delivered_files):
        if redactor is None:
            name = f["name"]
            url = reverse("battles:delivery", args=[run.battle_id, run.side, f["name"]])
        else:
            name = blind_file_name(f["name"], position, redactor)
            url = reverse("judging:file", args=[run.battle_id, run.side, position])
        rows.append({"name": name, "size": f["size"], "sha256": f.get("sha256", ""), "url": url})
    return rows


def run_payload(run: Run, redactor: Redactor | None = None) -> dict[str, Any]:
    clean = redactor.text if redactor is not None else (lambda v: v)
    return {
        "status": run.status,
        "end_reason": run.end_reason,
        "final_message": clean(run.final_message),
        "files": delivered_rows(run, redactor),
        "steps": [
            _step_payload(step, run.battle_id, run.side, redactor) for step in run.steps.all()
        ],
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


def _runs_with_steps(battle: Battle):
    """The battle's runs with their agents and steps: as prefetched by the caller
    (``judging.services.serving.judge_next``), else in one query each."""
    if "runs" in getattr(battle, "_prefetched_objects_cache", {}):
        return battle.runs.all()
    return battle.runs.select_related("agent").prefetch_related("steps")


def battle_payload(battle: Battle, *, reveal: bool) -> dict[str, Any]:
    """The battle for a page or the API. Blind (``reveal=False``) for judges before their
    vote and for the team's live page; ``reveal=True`` adds each side's identity."""
    runs = {run.side: run for run in _runs_with_steps(battle)}
    redactor = None if reveal else Redactor.for_roster()
    sides = {}
    for side in ("A", "B"):
        run = runs.get(side)
        sides[side] = run_payload(run, redactor) if run else None
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
        # Others' verdict would steer a judge who has not voted yet.
        "outcome": (battle.outcome or None) if reveal else None,
    }


def battle_what_happened(battle: Battle) -> dict[str, Any]:
    """For the battle's own team: where it stands in words (battles.verdict), why it
    failed, and the re-run of its task when an agent failed it (either way)."""
    verdict = battle_verdict(battle)
    rerun = Battle.objects.filter(rerun_of=battle).values_list("pk", flat=True).first()
    return {
        "headline": verdict.headline,
        "detail": verdict.detail,
        "failure_reason": battle.failure_reason,
        "rerun_of": battle.rerun_of_id,
        "rerun": rerun,
    }


def battle_reveal(battle: Battle) -> dict[str, Any]:
    """Each side's identity; for a coding battle also its tokens, cost and the scores
    made from the cost (``coding_presenters.coding_reveal``), which show only with the
    names."""
    from battles.coding_presenters import coding_reveal

    revealed = {side: agent_identity(battle.agent_for(side)) for side in ("A", "B")}
    coding = coding_reveal(battle)
    for side in revealed if coding else ():
        revealed[side]["coding"] = coding[side]
    return revealed


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


def render_battle_panel(battle_id: int) -> str:
    """The blind live panel of a battle (status + both lanes; for a coding battle also
    its phases, both diffs and their results), as sent over the socket."""
    from battles.coding_presenters import battle_phases, coding_sides, is_coding

    battle = Battle.objects.select_related("task").get(pk=battle_id)
    context = {"battle": battle, "payload": battle_payload(battle, reveal=False)}
    if is_coding(battle):
        redactor = Redactor.for_roster()
        context.update(
            coding=coding_sides(battle, redactor),
            phases=battle_phases(battle_id, redactor, status=battle.status),
        )
    return render_to_string("battles/_panel.html", context)
