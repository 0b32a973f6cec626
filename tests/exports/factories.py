"""Battles for the export tests: decided or excluded at chosen times, with steps and
screenshots, and a helper that runs an export into a fresh directory."""

import json
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from agents.models import Arena
from arena_site.media import media_save
from battles.models import Battle, Run, Step
from exports.services import ExportOptions, export_write
from judging.models import ExclusionLogEntry
from tests.ratings.factories import decided_battle

SECRET = "a-test-secret-that-is-long-enough-for-the-pseudonym-key-0123456789"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 100


def days_ago(days: float):
    return timezone.now() - timedelta(days=days)


def old_battle(submitter, a, b, *, judge, outcome="A", days=30, **kwargs) -> Battle:
    """Decided ``days`` ago: past any publication delay the tests use."""
    return decided_battle(
        submitter=submitter,
        a=a,
        b=b,
        outcome=outcome,
        judge=judge,
        judged_at=days_ago(days),
        **kwargs,
    )


def excluded_battle(submitter, a, b, *, reason="no_trajectory", days=30) -> Battle:
    battle = decided_battle(
        submitter=submitter,
        a=a,
        b=b,
        outcome="",
        judge=None,
        judged_at=days_ago(days),
        status=Battle.Status.EXCLUDED,
        exclusion_reason=reason,
    )
    ExclusionLogEntry.objects.create(
        battle=battle, action="exclude", reason=reason, at=days_ago(days)
    )
    return battle


def with_steps(battle: Battle, *, steps: int = 2, screenshot_bytes: int | None = None) -> None:
    """Two ended runs of ``steps`` steps each; with ``screenshot_bytes``, a PNG of that
    size stored after every step (through the media API)."""
    for side, agent in (("A", battle.agent_a), ("B", battle.agent_b)):
        run = Run.objects.create(
            battle=battle,
            side=side,
            agent=agent,
            status=Run.Status.ENDED,
            step_budget=20,
            wall_budget_s=300,
            final_message=f"done {side}",
            end_reason="delivered",
            delivered_files=[{"name": "out.txt", "size": 3, "sha256": "x", "path": "secret/p"}],
        )
        for index in range(steps):
            name = ""
            if screenshot_bytes is not None:
                name = f"screens/{battle.pk}/{side}/{index}.png"
                media_save(name, PNG + b"\x01" * (screenshot_bytes - len(PNG)))
            Step.objects.create(
                run=run,
                index=index,
                tool="shell",
                args={"command": f"echo {index}"},
                result={"ok": True, "stdout": str(index)},
                screenshot=name,
                started_at=battle.ended_at,
                duration_ms=5,
            )


def export(tmp_path: Path, name: str = "out", **options) -> tuple[Path, dict]:
    secret = options.pop("secret", SECRET)
    now = options.pop("now", None)
    out = tmp_path / name
    manifest = export_write(
        out_dir=out,
        arena_id=Arena.objects.public().pk,
        options=ExportOptions(**options),
        secret=secret,
        now=now,
    )
    return out, manifest


def rows(out: Path, table: str) -> list[dict]:
    path = out / f"{table}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]
