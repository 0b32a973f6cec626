"""Demonstration: the phases of two coding battles on this machine (issue #18), each run
end to end through the real services in real bubblewrap sandboxes, against fake
provider servers on 127.0.0.1 (a throwaway database made from DATABASE_URL):

- two scaffold agents on the real Anthropic SDK: one fixes ``calc.add``, one only reads;
- two CLI agents, Claude Code and the Codex CLI, through the worker's model gateway.

The repository is tests/coding/repos.py's ``FIX`` (a failing test to fix), uploaded as a
git bundle. Prints one JSON document: for each battle its wall time, each phase (start
offset from the clone, seconds, status, detail) and each side's scores, tokens and cost.
Run as root (sandbox uids): DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \\
     .venv/bin/python tests/bench/bench_coding.py
"""

import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402

from accounts.services import consent_terms_publish  # noqa: E402
from agents.models import Agent, Arena  # noqa: E402
from battles.coding_models import CodingOutcome, CodingPhase  # noqa: E402
from battles.services import battle_run  # noqa: E402
from tests.agents.conftest import LOOPBACK  # noqa: E402
from tests.agents.fake_providers import FakeAnthropic  # noqa: E402
from tests.coding import fake_streaming as fs  # noqa: E402
from tests.coding import repos  # noqa: E402
from tests.coding.test_coding_battles import (  # noqa: E402
    ANTHROPIC_KEY,
    CALL_USAGE,
    KEY,
    OPENAI_KEY,
    battle_between,
    claude_fixes,
    codex_fixes,
    scaffold,
    script,
)
from tests.conftest import make_person  # noqa: E402


def timeline(battle_id: int) -> list[dict]:
    rows = list(CodingPhase.objects.filter(battle_id=battle_id).select_related("run"))
    zero = rows[0].started_at
    return [
        {
            "phase": row.name,
            "side": row.run.side if row.run_id else "",
            "at_s": round((row.started_at - zero).total_seconds(), 2),
            "seconds": round((row.ended_at - row.started_at).total_seconds(), 2)
            if row.ended_at
            else None,
            "status": row.status,
            "detail": row.detail,
        }
        for row in rows
    ]


def sides(battle) -> dict:
    found = {}
    for outcome in CodingOutcome.objects.filter(run__battle=battle).select_related("run"):
        found[outcome.run.side] = {
            "end": outcome.run.end_reason,
            "applied": outcome.applied,
            "functional": outcome.functional,
            "regression": outcome.regression,
            "lint": outcome.lint,
            "complexity": outcome.complexity,
            "cost_efficiency": outcome.cost_efficiency,
            "composite": outcome.composite,
            "directness": outcome.directness.get("score"),
            "tokens_in": outcome.usage.get("input_tokens"),
            "tokens_out": outcome.usage.get("output_tokens"),
            "cost_usd": outcome.usage.get("cost_usd"),
            "usage_source": outcome.usage.get("source"),
        }
    return dict(sorted(found.items()))


def fight(user, agent_a, agent_b, tmp: Path) -> dict:
    battle = battle_between(user, agent_a, agent_b, repos.FIX, tmp)
    started = time.perf_counter()
    battle_run(battle_id=battle.pk)
    wall = time.perf_counter() - started
    battle.refresh_from_db()
    return {
        "status": battle.status,
        "wall_s": round(wall, 2),
        "phases": timeline(battle.pk),
        "sides": sides(battle),
    }


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-coding-"))
    sandbox_root = Path(tempfile.mkdtemp(prefix="bench-coding-sandboxes-", dir="/var/tmp"))
    sandbox_root.chmod(0o711)
    settings.PRIVATE_MEDIA_ROOT = tmp / "private"
    settings.ARENA = settings.ARENA.replace(
        sandbox_root=sandbox_root,
        internal_allowlist=LOOPBACK,
        model_prices={"gpt-5-codex": [1.25, 10.0]},
    )
    config = setup_databases(verbosity=0, interactive=False)
    result = {}
    try:
        terms = consent_terms_publish(text="You agree.")
        # Two submitters: one person's second, identical instruction is a near-duplicate.
        alice, bob = make_person("alice", "Acme", terms), make_person("bob", "Acme", terms)
        arena = Arena.objects.public()
        os.environ["CODING_TEST_ANTHROPIC_API_KEY"] = KEY
        fixer = script("cd /work/repo && sed -i '0,/a - b/s//a + b/' calc.py", message="fixed")
        reader = script("cd /work/repo && cat calc.py", message="looked")
        with ExitStack() as stack:
            fa = stack.enter_context(FakeAnthropic(api_key=KEY, policy=fixer))
            fb = stack.enter_context(FakeAnthropic(api_key=KEY, policy=reader))
            a, b = scaffold(arena, "fixer", fa.base_url), scaffold(arena, "reader", fb.base_url)
            (tmp / "scaffold").mkdir()
            result["scaffold_battle"] = fight(alice, a, b, tmp / "scaffold")
            claude_api = stack.enter_context(
                fs.FakeAnthropicStream(claude_fixes, usage=CALL_USAGE, api_key=ANTHROPIC_KEY,
                                       model="claude-sonnet-4-5")
            )  # fmt: skip
            openai_api = stack.enter_context(
                fs.FakeResponses(codex_fixes, usage=CALL_USAGE, api_key=OPENAI_KEY,
                                 model="gpt-5-codex")
            )  # fmt: skip
            os.environ.update(
                ANTHROPIC_API_KEY=ANTHROPIC_KEY,
                ANTHROPIC_BASE_URL=f"http://127.0.0.1:{claude_api.port}",
                OPENAI_API_KEY=OPENAI_KEY,
                OPENAI_BASE_URL=f"http://127.0.0.1:{openai_api.port}/v1",
            )
            cc = Agent.objects.create(
                arena=arena, slug="cc", display_name="CC", kind="cli", provider="anthropic",
                model_id="claude-sonnet-4-5", params={"cli": "claude-code"},
            )  # fmt: skip
            cx = Agent.objects.create(
                arena=arena, slug="cx", display_name="CX", kind="cli", provider="openai",
                model_id="gpt-5-codex", params={"cli": "codex"},
            )  # fmt: skip
            (tmp / "cli").mkdir()
            result["cli_battle"] = fight(bob, cc, cx, tmp / "cli")
    finally:
        teardown_databases(config, verbosity=0)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(sandbox_root, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
