"""Doing nothing is an outcome (docs/method.md §7): a side that ran and took no step,
delivered nothing or changed nothing is judged, and the other side can win against it;
only a side the arena failed voids the battle (``arena_fault``). Real battles: desktop
lanes in real sandboxes with a scaffold agent on the real Anthropic SDK (against a fake
Messages API on 127.0.0.1), and a coding battle whose two Claude Code CLIs reach a fake
provider through the arena's model gateway."""

import random

import pytest

from agents.models import Agent, Arena
from arena_site.media import media_delete
from battles.coding_models import CodingOutcome
from battles.models import Attachment, Battle, Run
from battles.services import battle_run, task_submit
from judging.services import battle_screen, judge_next
from tests.agents.conftest import LOOPBACK
from tests.agents.fake_providers import FakeAnthropic, text
from tests.battles.test_attachments import CSV, upload
from tests.coding import fake_streaming as fs
from tests.coding import repos
from tests.coding.test_coding_battles import (
    CALL_USAGE,
    battle_between,
    claude_fixes,
    scaffold,
    script,
)
from tests.coding.test_coding_battles import KEY as CODING_KEY

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _loopback_allowlisted(settings):
    """The fake providers live on 127.0.0.1 (tests/agents/conftest.py says why)."""
    settings.ARENA = settings.ARENA.replace(internal_allowlist=LOOPBACK)


KEY = "sk-ant-test-doing-nothing-0123456789abcd"
ANTHROPIC_KEY = "sk-ant-api03-doing-nothing-provider-0123"


def between(battle: Battle, a: Agent, b: Agent) -> Battle:
    Battle.objects.filter(pk=battle.pk).update(agent_a=a, agent_b=b)
    Run.objects.filter(battle=battle, side="A").update(agent=a)
    Run.objects.filter(battle=battle, side="B").update(agent=b)
    return battle


def quitter(arena: Arena, base_url: str) -> Agent:
    """A scaffold agent whose model answers in words at once: no step, no delivery."""
    return Agent.objects.create(
        arena=arena, slug="quitter", display_name="Quitter", kind="scaffold",
        provider="anthropic", model_id="m", tool_set=["shell", "deliver"],
        params={"base_url": base_url, "api_key_env": "NOTHING_TEST_ANTHROPIC_API_KEY",
                "max_tokens": 256},
    )  # fmt: skip


def test_a_desktop_side_that_does_nothing_is_judged(alice, roster, judge, monkeypatch):
    monkeypatch.setenv("NOTHING_TEST_ANTHROPIC_API_KEY", KEY)
    with FakeAnthropic(api_key=KEY, policy=lambda request: text("I will not do this.")) as fake:
        arena = Arena.objects.public()
        battle = task_submit(
            user=alice, instruction="Create a file named notes.txt containing hello arena",
            rng=random.Random(0),
        )  # fmt: skip
        between(battle, Agent.objects.get(slug="rulebook"), quitter(arena, fake.base_url))
        battle_run(battle_id=battle.pk)
    assert battle_screen(battle_id=battle.pk) == ""
    battle.refresh_from_db()
    assert (battle.status, battle.exclusion_reason) == ("judging", "")
    b = battle.runs.get(side="B")
    assert (b.end_reason, b.steps.count(), b.delivered_files) == ("gave_up", 0, [])
    assert b.final_message == "I will not do this."
    served = judge_next(judge=judge)
    assert served is not None and served.pk == battle.pk  # judges weigh it


def test_a_desktop_side_the_arena_failed_voids_the_battle(alice, roster):
    # The task's attachment is gone from the arena's storage when the lanes start: no
    # side can be provisioned, through no agent's fault.
    battle = task_submit(
        user=alice, instruction="Summarise the temperatures in the CSV",
        attachments=[upload("temps.csv", CSV)], rng=random.Random(0),
    )  # fmt: skip
    between(battle, Agent.objects.get(slug="rulebook"), Agent.objects.get(slug="surveyor"))
    for attachment in Attachment.objects.filter(task=battle.task):
        media_delete(attachment.path)
    battle_run(battle_id=battle.pk)
    assert battle_screen(battle_id=battle.pk) == "arena_fault"
    battle.refresh_from_db()
    assert battle.status == "excluded"
    a, b = battle.runs.order_by("side")
    assert a.end_reason == b.end_reason == "error"
    assert not (a.agent_fault or b.agent_fault)


def does_nothing(request: dict) -> list:
    """Claude Code's model, asked to fix the bug, says it sees nothing to change."""
    return [fs.Text("I looked at it and there is nothing to change.")]


def test_a_coding_side_that_changes_nothing_is_judged_and_loses_the_gate(
    alice, judge, monkeypatch, settings, tmp_path
):
    settings.ARENA = settings.ARENA.replace(
        model_prices={"claude-sonnet-4-5": [3.0, 15.0], "claude-haiku-4-5": [1.0, 5.0]}
    )

    def model(request: dict) -> list:  # the fixer's model fixes, the idler's says no
        fixes = request.get("model") == "claude-sonnet-4-5"
        return claude_fixes(request) if fixes else does_nothing(request)

    with fs.FakeAnthropicStream(model, usage=CALL_USAGE, api_key=ANTHROPIC_KEY) as claude_api:
        monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{claude_api.port}")
        arena = Arena.objects.public()
        fixer, idler = (
            Agent.objects.create(
                arena=arena,
                slug=slug,
                display_name=slug.title(),
                kind="cli",
                provider="anthropic",
                model_id=model_id,
                params={"cli": "claude-code"},
            )
            for slug, model_id in (("fixer", "claude-sonnet-4-5"), ("idler", "claude-haiku-4-5"))
        )
        battle = battle_between(alice, fixer, idler, repos.FIX, tmp_path)
        battle_run(battle_id=battle.pk)
    assert battle_screen(battle_id=battle.pk) == ""
    battle.refresh_from_db()
    assert (battle.status, battle.exclusion_reason) == ("judging", "")
    run_a, run_b = battle.runs.order_by("side")
    assert (run_b.end_reason, run_b.steps.count()) == ("delivered", 0)
    outcome_a, outcome_b = (CodingOutcome.objects.get(run=run) for run in (run_a, run_b))
    assert outcome_a.functional == 1.0
    assert (outcome_b.diff, outcome_b.applied, outcome_b.functional) == ("", "empty", 0.0)
    served = judge_next(judge=judge)
    assert served is not None and served.pk == battle.pk


def test_a_coding_side_that_never_ran_voids_the_battle(alice, monkeypatch, tmp_path):
    # Side B's CLI is one the arena does not have: the arena's roster is at fault.
    monkeypatch.setenv("CODING_TEST_ANTHROPIC_API_KEY", CODING_KEY)
    with FakeAnthropic(api_key=CODING_KEY, policy=script(message="nothing to do")) as fake:
        arena = Arena.objects.public()
        broken = Agent.objects.create(
            arena=arena, slug="broken-cli", display_name="Broken CLI", kind="cli",
            provider="anthropic", model_id="m", params={"cli": "no-such-cli"},
        )  # fmt: skip
        battle = battle_between(alice, scaffold(arena, "steady", fake.base_url), broken,
                                repos.FIX, tmp_path)  # fmt: skip
        battle_run(battle_id=battle.pk)
    run_b = battle.runs.get(side="B")
    assert (run_b.end_reason, run_b.agent_fault) == ("error", False)
    assert battle_screen(battle_id=battle.pk) == "arena_fault"
