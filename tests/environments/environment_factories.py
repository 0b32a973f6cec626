"""Environment rows straight into the database, for the package, page and API tests:
a source battle decided a chosen number of days ago (published past the open data's
delay, or not yet), its two runs, and the redacted state's blobs stored through the
media API."""

import hashlib
from datetime import timedelta

from django.utils import timezone

from arena_site.media import media_save
from battles.models import Battle, Run
from battles.snapshots import manifest_digest
from environments.models import BLOB_PREFIX, Environment
from tests.exports.factories import old_battle

CSV = b"name,amount\n<PERSON_1>,3\n<PERSON_2>,5\n"
GRADER = {
    "version": 1,
    "checks": [
        {"type": "file_exists", "path": "out.csv"},
        {"type": "csv_shape", "path": "out.csv", "header": ["name", "amount"], "rows": 2},
        {"type": "message_contains", "text": "sorted"},
    ],
}
FAILING = [{"tool": "shell", "args": {"command": "cat /work/attachments/data.csv"}}]
REFERENCE = [{"tool": "shell", "args": {"command": "sort /work/attachments/data.csv > out.csv"}}]


def _replay(role: str, passed: bool, detail: str) -> dict:
    check = {"type": "file_exists", "path": "out.csv", "passed": passed, "detail": detail}
    return {
        "role": role,
        "expected_pass": role == "reference",
        "passed": passed,
        "error": "",
        "steps_replayed": 1,
        "duration_ms": 900,
        "grader": {"passed": passed, "error": "", "checks": [check]},
    }


REPLAYS = [_replay("failing", False, "no such file"), _replay("reference", True, "a regular file")]


def blob(data: bytes) -> dict:
    """Stores ``data`` as an environment blob; its manifest entry (sha256, size)."""
    sha = hashlib.sha256(data).hexdigest()
    media_save(BLOB_PREFIX + sha, data)
    return {"sha256": sha, "size": len(data)}


def source_battle(submitter, roster, judge, *, days: float = 30) -> Battle:
    """A battle of the public arena decided ``days`` ago, with its two ended runs."""
    battle = old_battle(submitter, roster[0], roster[1], judge=judge, days=days)
    for side, agent in (("A", battle.agent_a), ("B", battle.agent_b)):
        Run.objects.create(
            battle=battle,
            side=side,
            agent=agent,
            status=Run.Status.ENDED,
            step_budget=20,
            wall_budget_s=300,
            end_reason="gave_up" if side == "A" else "delivered",
            final_message="I give up" if side == "A" else "sorted",
        )
    return battle


def desktop_state(
    *,
    instruction: str = "Sort <PERSON_1>'s data.csv by amount into out.csv.",
    attachments: dict[str, bytes] | None = None,
    start_url: str = "https://example.com/start",
) -> dict:
    attachments = {"data.csv": CSV} if attachments is None else attachments
    return {
        "version": 1,
        "kind": "desktop",
        "instruction": instruction,
        "start_url": start_url,
        "simulated_web": None,
        "screen": {"width": 1280, "height": 800},
        "tools": ["shell", "screenshot", "deliver"],
        "step_budget": 20,
        "wall_budget_s": 300,
        "attachments": [{"name": name, **blob(data)} for name, data in attachments.items()],
        "repo": None,
    }


def repo_state(*, bundle: bytes, judge_bundle: bytes | None = None) -> dict:
    repo = {
        **blob(bundle),
        "commit": "a" * 40,
        "tree": "b" * 40,
        "head": "a" * 40,
        "time_limit_s": 600,
    }
    if judge_bundle is not None:
        repo["judge"] = {**blob(judge_bundle), "head": "c" * 40}
    return {
        "version": 1,
        "kind": "repo",
        "instruction": "Make the failing test pass.",
        "start_url": "",
        "simulated_web": None,
        "screen": None,
        "tools": ["shell", "read_file", "write_file"],
        "step_budget": 40,
        "wall_budget_s": 600,
        "attachments": [],
        "repo": repo,
    }


def environment(
    battle: Battle,
    *,
    status: str = Environment.Status.VALIDATED,
    state: dict | None = None,
    grader: dict | None = GRADER,
    failure_mode: str = Environment.FailureMode.GAVE_UP,
    run_duration_s: float = 120.0,
    conversion_s: float | None = 400.0,
    failing: list | None = None,
    reference: list | None = None,
) -> Environment:
    """The environment of ``battle``'s side A (reference: side B)."""
    state = desktop_state() if state is None else state
    validated = status in (Environment.Status.VALIDATED, Environment.Status.REJECTED)
    now = timezone.now()
    return Environment.objects.create(
        run=battle.runs.get(side="A"),
        battle=battle,
        reference_run=battle.runs.get(side="B"),
        failure_mode=failure_mode,
        status=status,
        snapshot_digest="d" * 64,
        state=state,
        state_digest=manifest_digest(state),
        grader=grader,
        failing_actions=FAILING if failing is None else failing,
        reference_actions=REFERENCE if reference is None else reference,
        replays=REPLAYS if validated else [],
        failed_at=now - timedelta(seconds=conversion_s or 600),
        run_duration_s=run_duration_s,
        validated_at=now if validated else None,
        conversion_s=conversion_s if validated else None,
        rejected_reason="not useful" if status == Environment.Status.REJECTED else "",
    )
