"""SPEC §5.1: judge-visible text that names a roster agent excludes the battle
(named_model); ordinary words and near misses do not."""

import pytest

from agents.models import Agent, Arena
from battles.models import Battle
from judging.leaks import LeakScanner, identity_variants, is_distinctive
from judging.models import ExclusionLogEntry
from judging.services import battle_screen, judge_next
from tests.judging.battle_factories import ended_battle

ROSTER = [
    "Claude",
    "claude",
    "claude-3-5-sonnet-20241022",
    "GPT-4o",
    "openai/gpt-4o-mini",
    "Idle baseline",
    "idle",
    "o1",
    "Llama 3.1 70B",
]


@pytest.mark.parametrize(
    "text",
    [
        "I am Claude, an AI assistant.",
        "Built by claude-3 family",
        "CLAUDE's answer",
        "export MY_CLAUDE_KEY=1",
        "As Claude 3.5 Sonnet I think",
        "model: claude-3-5-sonnet",
        "gpt-4o says hi",
        "GPT4o",
        "running gpt-4o-mini now",
        "the Idle Baseline agent",
        "idle-baseline",
        "llama-3.1-70b-instruct",
        "navigate https://claude.ai/new",
    ],
)
def test_identities_are_found_case_insensitively_at_word_edges(text):
    assert LeakScanner(ROSTER).first(text) is not None, text


@pytest.mark.parametrize(
    "text",
    [
        "Claudette went to the market.",
        "Proclaude is not a model.",
        "gpt-40 is a part number",  # a different token, not gpt-4o
        "the server was idle for an hour",  # "idle" alone is an ordinary word
        "compile with gcc -O1 for speed",  # "o1" is too short to look for
        "baselines and idle loops",
        "llama farm in Peru",  # the roster name is "Llama 3.1 70B", not "llama"
        "",
    ],
)
def test_near_misses_and_ordinary_words_do_not_match(text):
    assert LeakScanner(ROSTER).first(text) is None, text


@pytest.mark.parametrize(
    ("identity", "distinctive"),
    [
        ("Claude", True),
        ("idle", False),
        ("Idle baseline", True),
        ("o1", False),
        ("o3-mini", True),
        ("2024", False),
        ("Agent", False),
        ("Rulebook", True),
        ("", False),
        ("--", False),
    ],
)
def test_which_identities_are_looked_for(identity, distinctive):
    assert is_distinctive(identity) is distinctive


def test_model_ids_are_also_looked_for_without_prefix_and_date():
    assert identity_variants("anthropic/claude-3-5-sonnet-20241022") == {
        "anthropic/claude-3-5-sonnet-20241022",
        "claude-3-5-sonnet-20241022",
        "anthropic/claude-3-5-sonnet",
        "claude-3-5-sonnet",
    }
    assert LeakScanner(["anthropic/claude-3-5-sonnet-20241022"]).first(
        "I run as Claude-3.5-Sonnet."
    ) == ("anthropic/claude-3-5-sonnet-20241022", "I run as Claude-3.5-Sonnet.")


@pytest.fixture
def claude(roster):
    return Agent.objects.create(
        arena=Arena.objects.public(),
        slug="sonnet-scaffold",
        display_name="Sonnet under scaffold",
        kind=Agent.Kind.SCAFFOLD,
        provider="anthropic",
        model_id="claude-sonnet-4-5",
        aliases=["Claude"],
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("message", "Done. (Answer by Claude.)"),
        ("message", "As Rulebook I computed 42."),  # a built-in's display name
        ("args", {"text": "Hello from CLAUDE-SONNET-4-5"}),
        ("args", {"command": "curl https://example.com/?ua=sonnet-scaffold"}),
        ("args", {"url": "https://claude.ai/chat"}),
        ("files", [{"name": "claude_notes.txt", "size": 3, "sha256": ""}]),
    ],
)
def test_a_name_in_any_judge_visible_text_excludes_the_battle(alice, claude, field, value):
    kwargs = {
        "message": {"messages": ("6*7 = 42", value)},
        "args": {"step_args": ({"command": "echo 42"}, value)},
        "files": {"files": ([], value)},
    }[field]
    battle = ended_battle(alice, **kwargs)

    assert battle_screen(battle_id=battle.pk) == "named_model"

    battle.refresh_from_db()
    assert battle.status == Battle.Status.EXCLUDED
    assert battle.exclusion_reason == "named_model"
    entry = ExclusionLogEntry.objects.get(battle=battle)
    assert entry.action == "exclude" and entry.actor is None and "side B" in entry.note


def test_a_name_in_a_tool_result_excludes_the_battle(alice, claude):
    battle = ended_battle(alice)
    step = battle.runs.get(side="A").steps.get()
    step.result = {"ok": True, "stdout": "User-Agent: claude-sonnet-4-5/1.0", "stderr": ""}
    step.save()
    assert battle_screen(battle_id=battle.pk) == "named_model"


def test_a_near_miss_leaves_the_battle_open_for_judging(alice, judge, claude):
    battle = ended_battle(
        alice,
        messages=("Claudette's sonnet has 14 lines.", "The machine was idle; rulebook attached."),
    )
    assert battle_screen(battle_id=battle.pk) == "named_model"  # "rulebook" is a roster name
    clean = ended_battle(
        alice, messages=("Claudette's sonnet has 14 lines.", "The machine was idle all night.")
    )
    assert battle_screen(battle_id=clean.pk) == ""
    clean.refresh_from_db()
    assert clean.status == Battle.Status.JUDGING and clean.exclusion_reason == ""
    assert judge_next(judge=judge).pk == clean.pk  # the excluded one is never served
    assert ExclusionLogEntry.objects.filter(battle=clean).count() == 0


def test_a_retired_agents_name_still_counts(alice, claude):
    from django.utils import timezone

    Agent.objects.filter(pk=claude.pk).update(retired_at=timezone.now())
    battle = ended_battle(alice, messages=("claude here", "no"))
    assert battle_screen(battle_id=battle.pk) == "named_model"
