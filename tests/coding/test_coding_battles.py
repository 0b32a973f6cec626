"""Coding battles end to end (issue 18): a repo task admitted with an uploaded bundle,
two scaffold agents on the real Anthropic SDK (against a fake Messages API on
127.0.0.1, the one part that cannot exist here) working in real bubblewrap sandboxes,
each diff collected before its sandbox is destroyed, then a fresh judge sandbox per
run: the patch applied, the success command, the tests, ruff and lizard, for real.
The recorded scores must be exactly what each script implies."""

import contextlib
import random
from pathlib import Path

import pytest

from agents.models import Agent, Arena
from battles.coding_models import CodingOutcome, CodingPhase
from battles.models import Battle, Run, Span
from battles.services import battle_run, task_submit
from battles.services.repo_admission import RepoRequest
from coding import scores
from sandboxes.models import SandboxLease
from tests.agents.fake_providers import FakeAnthropic, tool_call
from tests.coding import fake_streaming as fs
from tests.coding import repos

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-ant-test-coding-0123456789abcdef0123"


def script(*commands: str, message: str = "done"):
    """A model that runs these shell commands in order, then delivers."""

    def policy(request: dict):
        done = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if done < len(commands):
            return tool_call("shell", {"command": commands[done]})
        return tool_call("deliver", {"message": message})

    return policy


def scaffold(arena: Arena, slug: str, base_url: str) -> Agent:
    return Agent.objects.create(
        arena=arena, slug=slug, display_name=slug.title(), kind="scaffold",
        provider="anthropic", model_id=f"{slug}-model", tool_set=["shell", "edit", "deliver"],
        params={"base_url": base_url, "api_key_env": "CODING_TEST_ANTHROPIC_API_KEY",
                "max_tokens": 512},
    )  # fmt: skip


def battle_between(user, agent_a: Agent, agent_b: Agent, project, tmp_path: Path, **extra):
    request = RepoRequest(
        upload=repos.bundle(project, tmp_path),
        ref="main",
        judge_ref="judge" if project.judge_files else "",
        success_cmd=project.success_cmd,
        test_cmd=project.test_cmd,
        time_limit_s=120,
        **extra,
    )
    battle = task_submit(
        user=user, instruction=f"Make the tests of {project.name} pass.", repo=request,
        rng=random.Random(0),
    )  # fmt: skip
    Battle.objects.filter(pk=battle.pk).update(agent_a=agent_a, agent_b=agent_b)
    Run.objects.filter(battle=battle, side="A").update(agent=agent_a)
    Run.objects.filter(battle=battle, side="B").update(agent=agent_b)
    return battle


def test_two_scaffold_agents_fix_a_bug_and_the_judge_grades_their_diffs(
    alice, monkeypatch, tmp_path
):
    monkeypatch.setenv("CODING_TEST_ANTHROPIC_API_KEY", KEY)

    # A views calc.py and fixes add() with the edit tool; B only reads, with the shell.
    def fixer(request: dict):
        done = sum(1 for m in request["messages"] if m["role"] == "assistant")
        fix = {"command": "str_replace", "path": "calc.py",
               "old_str": "def add(a, b):\n    return a - b",
               "new_str": "def add(a, b):\n    return a + b"}  # fmt: skip
        steps = [("edit", {"command": "view", "path": "calc.py"}), ("edit", fix)]
        if done < len(steps):
            return tool_call(*steps[done])
        return tool_call("deliver", {"message": "fixed add"})

    reader = script("cd /work/repo && cat calc.py", "cat calc.py", message="looked")
    with (
        FakeAnthropic(api_key=KEY, policy=fixer) as fa,
        FakeAnthropic(api_key=KEY, policy=reader) as fb,
    ):
        arena = Arena.objects.public()
        a, b = scaffold(arena, "fixer", fa.base_url), scaffold(arena, "reader", fb.base_url)
        battle = battle_between(alice, a, b, repos.FIX, tmp_path)
        battle_run(battle_id=battle.pk)

    battle.refresh_from_db()
    said = [(r.side, r.end_reason, r.error) for r in battle.runs.order_by("side")]
    assert battle.status == "screening", (battle.failure_reason, said)
    run_a, run_b = battle.runs.order_by("side")
    assert run_a.end_reason == "delivered" and run_b.end_reason == "delivered"
    # Both lanes received the same inputs: the digest covers the bundle and its tree.
    assert run_a.input_digest == run_b.input_digest != ""
    ca, cb = CodingOutcome.objects.get(run=run_a), CodingOutcome.objects.get(run=run_b)

    # A's diff: exactly the one line of add().
    assert "-    return a - b\n+    return a + b\n" in ca.diff
    assert ca.diff.count("\n+    return") == 1
    assert ca.files == [{"path": "calc.py", "added": 1, "removed": 1, "binary": False}]
    assert (ca.applied, ca.apply_attempts) == ("apply", [{"step": "apply", "exit_code": 0}])
    # (pytest exits 1 in every honest run: the judge's check tests always fail)
    assert (ca.checks["success"]["exit_code"], ca.checks["success"]["verdict"]) == (1, "passed")
    assert ca.checks["tests"]["counts"]["passed"] == 2
    assert (ca.functional, ca.regression, ca.lint, ca.complexity) == (1.0, 1.0, 1.0, 1.0)
    assert ca.cost_efficiency == 1.0  # the fake model has no price: $0
    assert ca.composite == 1.0

    # B changed nothing: the empty diff is judged too, and fails the gate.
    assert (cb.diff, cb.applied, cb.files) == ("", "empty", [])
    assert cb.checks["success"]["verdict"] == "the success command's tests did not all pass"
    assert cb.checks["tests"]["counts"] == {
        "passed": 1, "failed": 1, "errors": 0, "total": 2, "source": "harness"
    }  # fmt: skip
    assert (cb.functional, cb.regression, cb.composite) == (0.0, 0.5, 0.0)

    # A's steps: a view (a read) then the edit; the edit tool's results came back.
    assert list(run_a.steps.values_list("tool", flat=True)) == ["edit", "edit", "deliver"]
    view, edit = run_a.steps.order_by("index")[:2]
    assert "     2\t    return a - b" in view.result["stdout"]
    assert edit.result["ok"] and "replaced 1 occurrence" in edit.result["stdout"]
    # Directness from the steps: A read once then edited at its second step, B only read.
    assert ca.directness["trajectory_efficiency"] == 0.5
    assert ca.directness["early_edit"] == round(1 - 1 / 3, 4)
    assert cb.directness["trajectory_efficiency"] == 0.0

    # The order: both agents' sandboxes destroyed before any judge sandbox was created,
    # and nothing of a sandbox left (no lease, no run dir) at the end.
    destroyed = max(ca.agent_destroyed_at, cb.agent_destroyed_at)
    assert destroyed < min(ca.judge_created_at, cb.judge_created_at)
    # The slot leases say the same from the sandboxes' side: the clone's and both
    # agents' sandboxes were released (destroyed) before either judge's was acquired.
    leases = list(SandboxLease.objects.order_by("acquired_at"))
    assert len(leases) == 5 and all(lease.released_at for lease in leases)
    clone_and_agents, judges = leases[:3], leases[3:]
    assert {lease.run_id for lease in judges} == {run_a.pk, run_b.pk}
    assert max(x.released_at for x in clone_and_agents) < min(j.acquired_at for j in judges)
    assert not any(Path(lease.path).exists() for lease in leases)
    phases = list(CodingPhase.objects.filter(battle=battle).values_list("name", "status"))
    names = [name for name, _ in phases]
    assert names[0] == "clone"
    assert names.index("judge sandbox") > max(names.index("destroy A"), names.index("destroy B"))
    assert all(status == "ok" for name, status in phases if name != "success command"), phases


# -- two CLI agents, through the arena's model gateway ---------------------------------

ANTHROPIC_KEY = "sk-ant-api03-coding-battle-provider-key-0123"
OPENAI_KEY = "sk-proj-coding-battle-provider-key-0123456789"
ADD_PATCH = (
    "*** Begin Patch\n*** Update File: calc.py\n@@\n def add(a, b):\n"
    "-    return a - b\n+    return a + b\n*** End Patch\n"
)
CALL_USAGE = fs.Usage(input_tokens=1500, output_tokens=60, cache_read_tokens=400)


def claude_fixing(answer: str, description: str):
    """Claude Code's model: read calc.py, edit add(), run the tests (Bash, described as
    ``description``), then ``answer``."""

    def fixes(request: dict) -> list:
        if not request.get("tools"):
            return [fs.Text("ok")]
        done = sum(
            1
            for m in request["messages"]
            if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        )
        steps = [
            fs.ToolUse("Read", {"file_path": "/work/repo/calc.py"}),
            fs.ToolUse("Edit", {"file_path": "/work/repo/calc.py",
                                "old_string": "def add(a, b):\n    return a - b",
                                "new_string": "def add(a, b):\n    return a + b"}),
            fs.ToolUse("Bash", {"command": "python3 -m pytest -q", "description": description}),
        ]  # fmt: skip
        return [steps[done]] if done < len(steps) else [fs.Text(answer)]

    return fixes


claude_fixes = claude_fixing("Fixed add().", "tests")


@contextlib.contextmanager
def claude_and_codex(monkeypatch):
    """Claude Code and the Codex CLI in the public arena, each fixing calc.py through a
    fake provider on loopback (the only part faked: a remote LLM API); yields the two
    agents and the two fake APIs (their calls)."""
    with fs.FakeAnthropicStream(
        claude_fixes, usage=CALL_USAGE, api_key=ANTHROPIC_KEY, model="claude-sonnet-4-5"
    ) as claude_api, fs.FakeResponses(
        codex_fixes, usage=CALL_USAGE, api_key=OPENAI_KEY, model="gpt-5-codex"
    ) as openai_api:  # fmt: skip
        monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{claude_api.port}")
        monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{openai_api.port}/v1")
        arena = Arena.objects.public()
        claude = Agent.objects.create(
            arena=arena, slug="cc", display_name="CC", kind="cli", provider="anthropic",
            model_id="claude-sonnet-4-5", params={"cli": "claude-code"},
        )  # fmt: skip
        codex = Agent.objects.create(
            arena=arena, slug="cx", display_name="CX", kind="cli", provider="openai",
            model_id="gpt-5-codex", params={"cli": "codex"},
        )  # fmt: skip
        yield claude, codex, claude_api, openai_api


def codex_fixes(request: dict) -> list:
    """Codex: cat, apply_patch through its shell tool, answer."""
    done = sum(1 for i in request["input"] if i.get("type", "").endswith("call_output"))
    steps = [
        fs.ToolUse("exec_command", {"cmd": "cat calc.py"}),
        fs.ToolUse("exec_command", {"cmd": f"apply_patch <<'EOF'\n{ADD_PATCH}EOF\n"}),
    ]
    return [steps[done]] if done < len(steps) else [fs.Text("Fixed add().")]


def test_two_cli_agents_fight_a_coding_battle_through_the_model_gateway(
    alice, monkeypatch, settings, tmp_path
):
    settings.ARENA = settings.ARENA.replace(model_prices={"gpt-5-codex": [1.25, 10.0]})
    with claude_and_codex(monkeypatch) as (claude, codex, claude_api, openai_api):
        battle = battle_between(alice, claude, codex, repos.FIX, tmp_path)
        battle_run(battle_id=battle.pk)

    battle.refresh_from_db()
    said = [(r.side, r.end_reason, r.error) for r in battle.runs.order_by("side")]
    assert battle.status == "screening", (battle.failure_reason, said)
    run_a, run_b = battle.runs.order_by("side")
    assert (run_a.end_reason, run_b.end_reason) == ("delivered", "delivered"), said
    # Each side's final message is the agent's own last words (Claude Code's result,
    # Codex's last agent message), never what the CLI printed around them.
    assert (run_a.final_message, run_b.final_message) == ("Fixed add().", "Fixed add().")
    ca, cb = CodingOutcome.objects.get(run=run_a), CodingOutcome.objects.get(run=run_b)
    for outcome in (ca, cb):
        assert "-    return a - b\n+    return a + b\n" in outcome.diff
        assert outcome.files == [{"path": "calc.py", "added": 1, "removed": 1, "binary": False}]
        assert (outcome.functional, outcome.regression, outcome.lint) == (1.0, 1.0, 1.0)

    # The CLIs' steps, from their own transcripts, in one neutral shape: named by what
    # they did, with the path relative to the repository or the command; the CLI's own
    # name for each only in the result, which no blind payload carries.
    steps = {
        run.side: list(run.steps.order_by("index").values_list("tool", "args", "result"))
        for run in (run_a, run_b)
    }
    assert [(tool, args) for tool, args, _ in steps["A"]] == [
        ("read file", {"kind": "read", "path": "calc.py"}),
        ("edit file", {"kind": "edit", "path": "calc.py"}),
        ("run command", {"kind": "command", "command": "python3 -m pytest -q"}),
    ]
    assert [(tool, args) for tool, args, _ in steps["B"]] == [
        ("run command", {"kind": "command", "command": "cat calc.py"}),
        ("edit file", {"kind": "edit", "path": "calc.py"}),
    ]
    assert [result["cli_tool"] for _, _, result in steps["A"]] == ["Read", "Edit", "Bash"]
    assert [result["cli_tool"] for _, _, result in steps["B"]] == ["shell", "apply_patch"]
    # directness reads them: A read, edited, ran the tests; B read and edited
    assert ca.directness["trajectory_efficiency"] == cb.directness["trajectory_efficiency"] == 0.5
    # The CLI's command is a span of its own (its output's end only if it failed)
    cli_spans = Span.objects.filter(run__battle=battle, kind="tool").order_by("run__side")
    assert [(s.name, s.output["exit_code"], s.error) for s in cli_spans] == [
        ("cli claude-code", 0, ""), ("cli codex", 0, "")
    ]  # fmt: skip
    # Every model call went through the gateway, with the key it holds, as a span.
    assert len(claude_api.calls("/v1/messages")) == 4
    assert len(openai_api.calls("/v1/responses")) == 3
    assert Span.objects.filter(run=run_a, kind="model").count() == 4
    assert Span.objects.filter(run=run_b, kind="model").count() == 3
    # Tokens and cost: Claude Code's own report (with its own cost); Codex reports tokens
    # only, so the cost is what the gateway charged at the arena's price for the model.
    assert ca.usage["input_tokens"] == 4 * 1500 and ca.usage["output_tokens"] == 4 * 60
    assert ca.usage["cost_usd"] > 0 and ca.usage["source"].startswith("claude")
    assert cb.usage["output_tokens"] == 3 * 60
    per_call = (1100 * 1.25 + 400 * 1.25 * 0.5 + 60 * 10.0) / 1e6
    assert cb.usage["cost_usd"] == pytest.approx(3 * per_call)
    for outcome in (ca, cb):
        efficiency = scores.cost_efficiency(outcome.usage["cost_usd"])
        assert outcome.cost_efficiency == efficiency < 1.0
        assert outcome.composite == scores.composite(1.0, 1.0, 1.0, outcome.complexity, efficiency)

    # No provider key in any record of the battle.
    records = str(list(Span.objects.filter(run__battle=battle).values()))
    records += str(list(Run.objects.filter(battle=battle).values()))
    records += str(list(CodingOutcome.objects.filter(run__battle=battle).values()))
    assert ANTHROPIC_KEY not in records and OPENAI_KEY not in records
