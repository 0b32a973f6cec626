"""A finished coding battle straight into the database (no sandboxes): two runs with
their diffs, what the judge sandbox measured and the battle's phases, for the pages, the
event stream and the leak scan. The real pipeline is tests/coding/test_coding_battles.py."""

import datetime as dt

from django.utils import timezone

from battles.coding_models import CodingOutcome, CodingPhase
from battles.models import Battle, Task
from tests.judging.battle_factories import ended_battle

FIX_DIFF = (
    "diff --git a/calc.py b/calc.py\n"
    "index 3b18e51..e69de29 100644\n"
    "--- a/calc.py\n"
    "+++ b/calc.py\n"
    "@@ -1,5 +1,5 @@\n"
    " def add(a, b):\n"
    "-    return a - b\n"
    "+    return a + b  # fixed <script>alert(1)</script>\n"
    " \n"
    " \n"
    " def sub(a, b):\n"
)
NOTES_DIFF = (
    "diff --git a/NOTES.md b/NOTES.md\n"
    "new file mode 100644\n"
    "--- /dev/null\n"
    "+++ b/NOTES.md\n"
    "@@ -0,0 +1,2 @@\n"
    "+# Notes\n"
    "+-- looked at calc.py only\n"
)


def checks(success_exit: int, passed: int, total: int, *, output: str = "") -> dict:
    return {
        "protected": {"restored": []},
        "success": {"command": "python3 -m pytest -q test_calc.py::test_add",
                    "exit_code": success_exit, "seconds": 0.41, "timed_out": False,
                    "output": output or f"{passed} passed in 0.02s"},
        "tests": {"command": "python3 -m pytest -q", "exit_code": 0 if passed == total else 1,
                  "seconds": 0.52, "timed_out": False,
                  "output": output or f"{total - passed} failed, {passed} passed in 0.03s",
                  "junit": None, "crashed": False,
                  "counts": {"passed": passed, "failed": total - passed, "errors": 0,
                             "total": total, "source": "pytest"}},
        "lint": {"files": ["calc.py"], "before": 2, "after": 1},
        "complexity": {"before": {"functions": 2, "total_ccn": 2, "max_ccn": 1, "mean_ccn": 1.0},
                       "after": {"functions": 2, "total_ccn": 3, "max_ccn": 2, "mean_ccn": 1.5}},
    }  # fmt: skip


def coding_battle(
    submitter,
    *,
    diffs: tuple[str, str] = (FIX_DIFF, NOTES_DIFF),
    outputs: tuple[str, str] = ("", ""),
    status: str = Battle.Status.JUDGING,
    a: str = "rulebook",
    b: str = "idle",
) -> Battle:
    """A judged coding battle of ``submitter``'s team: side A fixed the bug (all tests
    pass), side B wrote notes (the gate fails, 1 of 2 tests). Every phase has ended."""
    commands = ({"command": "sed -i s/-/+/ calc.py"}, {"command": "cat calc.py"})
    battle = ended_battle(submitter, a=a, b=b, status=status, step_args=commands)
    Task.objects.filter(pk=battle.task_id).update(kind=Task.Kind.REPO, category="coding")
    battle.task.refresh_from_db()
    runs = {run.side: run for run in battle.runs.all()}
    now = timezone.now()
    figures = {"A": (0, 2, 2, 1.0, 1.0), "B": (1, 1, 2, 0.0, 0.5)}
    for side, diff, output in zip("AB", diffs, outputs, strict=True):
        success_exit, passed, total, functional, regression = figures[side]
        CodingOutcome.objects.create(
            run=runs[side], diff=diff, diff_sha256=f"{side}" * 64, diff_bytes=len(diff),
            files=[{"path": "calc.py", "added": 1, "removed": 1, "binary": False}],
            applied="apply", apply_attempts=[{"step": "apply", "exit_code": 0}],
            checks=checks(success_exit, passed, total, output=output),
            functional=functional, regression=regression, lint=0.9, complexity=0.95,
            cost_efficiency=0.98, composite=0.93 if functional else 0.0,
            directness={"trajectory_efficiency": 1.0, "early_edit": 1.0, "repeat_penalty": 0.0,
                        "loop_penalty": 0.0, "stall_rate": 0.0, "score": 0.6},
            usage={"input_tokens": 4500, "output_tokens": 240, "cache_creation_tokens": 0,
                   "cache_read_tokens": 1200, "cost_usd": 0.0123, "source": "claude-json"},
            agent_destroyed_at=now, judge_created_at=now, judged_at=now,
        )  # fmt: skip
    phases = [("clone", None), ("agent A", "A"), ("agent B", "B"), ("diff A", "A"),
              ("destroy A", "A"), ("judge sandbox", "A"), ("apply", "A"),
              ("success command", "A"), ("tests", "A"), ("lint and complexity", "A")]  # fmt: skip
    for offset, (name, side) in enumerate(phases):
        start = now - dt.timedelta(seconds=60 - 5 * offset)
        CodingPhase.objects.create(
            battle=battle, run=runs[side] if side else None, name=name, status="ok",
            started_at=start, ended_at=start + dt.timedelta(seconds=2.5), detail="",
        )  # fmt: skip
    return battle
