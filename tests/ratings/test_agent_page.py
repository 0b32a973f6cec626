"""The agent page: rating history from the snapshots, head-to-head counts, no private data."""

import re
from datetime import timedelta

import pytest
from django.test import Client

from agents.models import Agent, Arena
from battles.models import Battle, Task
from ratings.models import RatingSnapshot
from ratings.refit import arena_refit
from tests.ratings.factories import decided_battle, judges, round_robin


@pytest.fixture(autouse=True)
def _few_replicates(settings):
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=20)


@pytest.fixture
def agents(roster):
    return {a.slug: a for a in roster}


def test_the_history_plots_one_point_per_published_snapshot(alice, agents, rng):
    crowd = judges(3)
    order = [agents["rulebook"], agents["surveyor"], agents["idle"]]
    arena_id = Arena.objects.public().pk
    for _ in range(3):
        round_robin(alice, order, crowd, rounds=12, rng=rng)
        arena_refit(arena_id=arena_id)
    # the first snapshot had 24 battles per agent (provisional), then 48 and 72
    RatingSnapshot.objects.update(computed_at=RatingSnapshot.objects.first().computed_at)
    for i, snapshot in enumerate(RatingSnapshot.objects.order_by("pk")):
        snapshot.computed_at += timedelta(minutes=i)
        snapshot.save(update_fields=["computed_at"])
    page = Client().get("/agents/rulebook/").content.decode()
    svg = page.split('id="rating-history"')[1].split("</svg>")[0]
    assert len(re.findall(r"<circle ", svg)) == 2  # the provisional snapshot is a gap
    assert len(re.findall(r"<polygon ", svg)) == 1  # the 95% band
    assert "2 published snapshots of 3" in svg
    latest = RatingSnapshot.objects.latest().points.get(agent=agents["rulebook"])
    assert f'id="published-rating" class="headline">{latest.rating:.0f}<' in (page)


def test_head_to_head_counts_outcomes_from_the_agents_side(alice, agents):
    crowd = judges(1)
    rule, surv, idle = agents["rulebook"], agents["surveyor"], agents["idle"]
    for a, b, outcome in [
        (rule, surv, "A"),
        (surv, rule, "A"),
        (surv, rule, "B"),
        (rule, surv, "tie"),
        (rule, surv, "both_bad"),
        (idle, rule, "B"),
    ]:
        decided_battle(submitter=alice, a=a, b=b, outcome=outcome, judge=crowd[0])
    decided_battle(
        submitter=alice, a=rule, b=surv, outcome="B", status="excluded",
        exclusion_reason="budget_mismatch",
    )  # fmt: skip
    page = Client().get("/agents/rulebook/").content.decode()

    def row(slug: str) -> str:
        return page.split(f'data-opponent="{slug}"')[1].split("</tr>")[0]

    surveyor = row("surveyor")
    assert '<td>5</td><td class="wins">2</td><td class="losses">1</td>' in surveyor
    assert '<td class="ties">1</td><td class="both-bad">1</td>' in surveyor
    assert '<td class="wins">1</td><td class="losses">0</td>' in row("idle")
    other_side = Client().get("/agents/surveyor/").content.decode()
    assert '<td class="wins">1</td><td class="losses">2</td>' in other_side


def test_another_team_sees_counts_but_never_a_task_or_battle(alice, charlie, agents):
    crowd = judges(1)
    battle = decided_battle(
        submitter=alice, a=agents["rulebook"], b=agents["idle"], outcome="A", judge=crowd[0],
        instruction="Acme-private: reconcile the Q3 ledger at https://intranet.acme.example",
    )  # fmt: skip
    arena_refit(arena_id=battle.arena_id)
    client = Client()
    client.force_login(charlie)
    for slug in ("rulebook", "idle"):
        page = client.get(f"/agents/{slug}/").content.decode()
        assert "Acme" not in page and "ledger" not in page and "intranet" not in page
        assert f"/battles/{battle.pk}/" not in page and "/judge/" not in page.split("<main", 1)[1]
        assert 'data-opponent="' in page


def test_unknown_and_other_arena_agents_are_not_found(agents):
    other = Arena.objects.create(slug="acme-private", name="Acme private arena")
    Agent.objects.create(
        arena=other, slug="secret-bot", display_name="Secret Bot", kind="builtin",
        builtin_policy="idle",
    )  # fmt: skip
    assert Client().get("/agents/secret-bot/").status_code == 404
    assert Client().get("/agents/no-such-agent/").status_code == 404


def test_the_board_links_each_agent_to_its_page(agents):
    page = Client().get("/").content.decode()
    for slug in agents:
        assert f'<a href="/agents/{slug}/">' in page


def test_a_page_with_no_refit_yet_says_so(agents):
    page = Client().get("/agents/idle/").content.decode()
    assert '<strong id="published-rating">no published rating</strong>' in page
    assert "No published rating yet" in page
    assert Battle.objects.count() == 0 and Task.objects.count() == 0
