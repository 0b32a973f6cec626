"""A forged grade end to end: a team's scaffold agent (real Anthropic SDK against a fake
Messages API on 127.0.0.1) fixes nothing and makes calc.py end the test process with
status 0; the judge sandbox grades it for real. The side is marked forged, never a
pass; screening excludes the battle under its own rule; the agent's failure streak
grows; its team reads why on its agents page, and another team reads nothing of it."""

import pytest

from agents.models import Agent, Arena
from battles.coding_models import CodingOutcome
from battles.services import battle_run
from judging.services import battle_screen
from tests.agents.fake_providers import FakeAnthropic
from tests.coding import repos
from tests.coding.test_coding_battles import KEY, battle_between, scaffold, script

pytestmark = pytest.mark.django_db(transaction=True)

FORGE = (
    "cd /work/repo && printf 'import os\\n\\nos._exit(0)\\n' | cat - calc.py > c && mv c calc.py"
)


def test_a_forged_grade_excludes_the_battle_and_its_team_reads_why(
    alice, charlie, client, monkeypatch, tmp_path
):
    monkeypatch.setenv("CODING_TEST_ANTHROPIC_API_KEY", KEY)
    entrants = charlie.memberships.get().team  # Umbrella enters the forger
    with (
        FakeAnthropic(api_key=KEY, policy=script(FORGE, message="all green")) as forger_api,
        FakeAnthropic(api_key=KEY, policy=script(message="nothing to do")) as other_api,
    ):
        arena = Arena.objects.public()
        forger = scaffold(arena, "forger", forger_api.base_url)
        Agent.objects.filter(pk=forger.pk).update(team=entrants)
        battle = battle_between(alice, forger, scaffold(arena, "other", other_api.base_url),
                                repos.FIX, tmp_path)  # fmt: skip
        battle_run(battle_id=battle.pk)

    outcome = CodingOutcome.objects.get(run__battle=battle, run__side="A")
    assert outcome.forged.startswith("the test process exited 0")
    assert (outcome.functional, outcome.regression, outcome.composite) == (0.0, None, 0.0)
    assert battle_screen(battle_id=battle.pk) == "forged_grade"
    battle.refresh_from_db()
    assert battle.status == "excluded"
    note = battle.exclusion_log.get().note
    assert note.startswith("side A's test results: the test process exited 0")
    forger.refresh_from_db()
    assert forger.failure_streak == 1

    # The entrant's team sees why on its agents page (the reason, not the task's files).
    client.force_login(charlie)
    page = client.get("/my-agents/").content.decode()
    assert f"Battle #{battle.pk}" in page
    assert "the test process exited 0, which no honest run here does" in page
    client.force_login(alice)  # the submitter's team entered no agent: it reads nothing
    assert f"Battle #{battle.pk}" not in client.get("/my-agents/").content.decode()
