"""The entry check (agents.services.entry_problems, behind the admin form) for CLI
coding agents: a known CLI, the provider its CLI speaks, a model, nothing of its own
in params, and in play the arena's key for that provider."""

import pytest

from agents.models import Agent, Arena
from agents.services import entry_problems

pytestmark = pytest.mark.django_db


def cli_agent(**fields) -> Agent:
    values = {"kind": "cli", "provider": "anthropic", "model_id": "claude-sonnet-4-5",
              "params": {"cli": "claude-code"}, "slug": "cc", "display_name": "CC"}  # fmt: skip
    values.update(fields)
    return Agent(arena=Arena.objects.public(), **values)


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"params": {"cli": "cursor"}}, "params", "params.cli must be one of"),
        ({"params": {}}, "params", "params.cli must be one of"),
        ({"provider": "openai"}, "provider", "claude-code talks to the anthropic API"),
        ({"params": {"cli": "aider"}}, "provider", "aider talks to the openai API"),
        ({"model_id": " "}, "model_id", "Name the model claude-code runs with"),
        (
            {"params": {"cli": "claude-code", "base_url": "http://127.0.0.1:9"}},
            "params",
            "params hold only cli",
        ),
    ],
)
def test_a_cli_agent_that_cannot_run_is_refused_with_the_field_and_the_fix(fields, field, says):
    problems = entry_problems(cli_agent(**fields))
    assert list(problems) == [field] and says in problems[field]


def test_in_play_the_arena_needs_the_providers_key_out_of_play_it_does_not(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    problems = entry_problems(cli_agent())
    assert "set ANTHROPIC_API_KEY" in problems["provider"]
    assert entry_problems(cli_agent(is_paused=True)) == {}
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-entry-check-key")
    assert entry_problems(cli_agent()) == {}


def test_a_cli_cannot_report_a_cost_below_what_the_gateway_counted():
    from agents.gateway_usage import Grant, RunUsage
    from battles.services.cli_lane import gateway_cost, scored_cost

    spent = RunUsage(calls=2, input_tokens=3000, output_tokens=100, cost_usd=0.0123)
    priced = Grant("openai", "m", "http://x", "k", 9, 9, 9.0, price=(1.0, 2.0))
    unpriced = Grant("anthropic", "claude-sonnet-4-5", "http://x", "k", 9, 9, 9.0)
    assert gateway_cost(spent, priced, "m") == 0.0123
    # Without the arena's price: the gateway's tokens at the dated table ($3 / $15).
    assert gateway_cost(spent, unpriced, "claude-sonnet-4-5") == round(
        (3000 * 3 + 100 * 15) / 1e6, 6
    )
    assert gateway_cost(spent, unpriced, "no-such-model") is None
    # A forged low report (an agent's command appended it to the CLI's output) loses.
    assert scored_cost(0.0, 0.0123) == 0.0123
    assert scored_cost(0.05, 0.0123) == 0.05
    assert scored_cost(None, 0.0123) == 0.0123 and scored_cost(None, None) is None
