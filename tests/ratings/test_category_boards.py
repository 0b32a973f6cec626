"""Boards per task category: each a Bradley-Terry fit of its own over the battles of its
tasks, with its own intervals; too few battles say so; tasks get their category at
admission, and old ones by the backfill the refit job runs."""

import random

import pytest
from django.core.management import call_command
from django.test import Client

from agents.models import Arena
from battles.models import Task
from battles.services import task_submit
from battles.services.categories import task_categories_backfill
from ratings.category_boards import category_board, category_boards_refresh
from ratings.jobs import ratings_refit
from ratings.refit import FitParams, fit, refit_input
from tests.ratings.factories import decided_battle, judges


@pytest.fixture(autouse=True)
def _small_fits(settings):
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=20, n0=6)


@pytest.fixture
def agents(roster):
    return {a.slug: a for a in roster}


def play(alice, crowd, winner, loser, *, times: int, instruction: str, rng) -> None:
    """``winner`` beats ``loser`` ``times`` times (one loss in five, for a finite fit) on
    tasks of ``instruction``; sides at random, judges in turn."""
    for i in range(times):
        won = i % 5 != 4
        a, b = (winner, loser) if rng.random() < 0.5 else (loser, winner)
        outcome = "A" if (a is winner) == won else "B"
        decided_battle(submitter=alice, a=a, b=b, outcome=outcome, judge=crowd[i % len(crowd)],
                       instruction=instruction)  # fmt: skip


@pytest.fixture
def split_field(alice, agents, rng):
    """Rulebook is strong at browsing, Surveyor at files and data; the built-in idle is
    beaten by both everywhere. No task has a category yet (written before categories)."""
    crowd = judges(4)
    rule, surv, idle = agents["rulebook"], agents["surveyor"], agents["idle"]
    web, files = "Open https://example.com and report the title", "Count the lines in data.csv"
    play(alice, crowd, rule, surv, times=10, instruction=web, rng=rng)
    play(alice, crowd, surv, rule, times=10, instruction=files, rng=rng)
    for instruction in (web, files):
        play(alice, crowd, rule, idle, times=5, instruction=instruction, rng=rng)
        play(alice, crowd, surv, idle, times=5, instruction=instruction, rng=rng)
    assert set(Task.objects.values_list("category", flat=True)) == {""}
    return agents


def board(**params) -> dict:
    response = Client().get("/api/leaderboard/", params)
    assert response.status_code == 200, response.content
    return response.json()


def test_each_category_has_its_own_order_and_intervals(split_field):
    arena_id = Arena.objects.public().pk
    assert ratings_refit(arena_id) != []  # the overall refit, then the category boards
    assert set(Task.objects.values_list("category", flat=True)) == {"browsing", "files_and_data"}
    browsing, files = board(category="browsing"), board(category="files_and_data")
    assert [r["slug"] for r in browsing["rows"]][:1] == ["rulebook"]
    assert [r["slug"] for r in files["rows"]][:1] == ["surveyor"]
    for body, name in ((browsing, "browsing"), (files, "files_and_data")):
        meta = body["category"]
        assert (meta["category"], meta["battles"], meta["enough"]) == (name, 20, True)
        rated = [r for r in body["rows"] if r["rating"] is not None]
        assert len(rated) == 3 and [r["rank"] for r in rated] == [1, 2, 3]
        for row in rated:
            assert row["lower"] < row["rating"] < row["upper"] and row["fit_battles"] >= 6
    # the figures are those of a fit over the category's battles alone
    params = FitParams.from_settings()
    data = refit_input(arena_id=arena_id, params=params, category="browsing")
    expected = fit(data, params)
    by_slug = {r["slug"]: r for r in browsing["rows"]}
    for estimate in expected.agents:
        slug = next(a.slug for a in split_field.values()
                    if a.pk == data.agent_ids[estimate.index])  # fmt: skip
        assert by_slug[slug]["rating"] == round(estimate.rating, 1)
        assert by_slug[slug]["lower"] == round(estimate.lower, 1)
    # the overall board mixes both: the two strong agents are closer there
    overall = {r["slug"]: r for r in board()["rows"]}
    gap = abs(overall["rulebook"]["rating"] - overall["surveyor"]["rating"])
    assert gap < by_slug["rulebook"]["rating"] - by_slug["surveyor"]["rating"]
    assert {c["slug"]: c["battles"] for c in board()["categories"]} == {
        "browsing": 20, "files_and_data": 20, "general": 0}  # fmt: skip


def test_a_category_with_too_few_battles_says_so_instead_of_printing_numbers(split_field):
    ratings_refit(Arena.objects.public().pk)
    general = board(category="general")
    assert general["category"]["enough"] is False and general["category"]["battles"] == 0
    assert all(r["rating"] is None and r["lower"] is None for r in general["rows"])
    page = Client().get("/", {"category": "general"}).content.decode()
    assert 'id="too-few-battles"' in page and "Too few battles for a general board yet" in page
    assert '<span class="value">' not in page and "ws-connect" not in page


def test_a_board_of_few_battles_rates_nobody_below_n0(alice, agents, rng, settings):
    settings.ARENA = settings.ARENA.replace(n0=30)
    play(alice, judges(2), agents["rulebook"], agents["idle"], times=8,
         instruction="write a haiku about autumn", rng=rng)  # fmt: skip
    category_boards_refresh(arena_id=Arena.objects.public().pk)
    document = category_board(arena_id=Arena.objects.public().pk, category="general")
    assert (document["battles"], document["enough"], document["rated_agents"]) == (8, False, 0)
    assert document["bootstrap_replicates"] == 0  # no fit was run at all
    page = Client().get("/", {"category": "general"}).content.decode()
    assert "8 rated battles so far, and fewer than two agents have 30 of them" in page
    row = page.split('data-agent="rulebook"')[1].split("</tr>")[0]
    assert '<td class="battles">8</td>' in row and "provisional" in row


def test_the_refresh_refits_only_the_categories_whose_battles_changed(split_field, alice, rng):
    arena_id = Arena.objects.public().pk
    # The first refresh builds every board, the coding board (repo tasks) included.
    assert category_boards_refresh(arena_id=arena_id) == [
        "browsing", "files_and_data", "general", "coding"
    ]  # fmt: skip
    assert category_boards_refresh(arena_id=arena_id) == []
    play(alice, judges(1, prefix="late"), split_field["rulebook"], split_field["idle"], times=1,
         instruction="Count the lines in notes.csv", rng=rng)  # fmt: skip
    assert category_boards_refresh(arena_id=arena_id) == ["files_and_data"]
    assert board(category="files_and_data")["category"]["battles"] == 21


def test_a_cold_cache_builds_the_board_on_read(split_field):
    task_categories_backfill()
    body = board(category="browsing")  # no refit job has run
    assert body["category"]["battles"] == 20 and body["rows"][0]["slug"] == "rulebook"


def test_admission_sets_the_category(alice, roster):
    cases = {
        "Open https://example.com and report the page title": "browsing",
        "Create a file named notes.txt containing hello": "files_and_data",
        "Write a limerick about a cat": "general",
    }
    for instruction, category in cases.items():
        battle = task_submit(user=alice, instruction=instruction, rng=random.Random(1))
        assert Task.objects.get(pk=battle.task_id).category == category
    battle = task_submit(user=alice, instruction="Summarise what you find",
                         start_url="https://example.org/", rng=random.Random(2))  # fmt: skip
    assert Task.objects.get(pk=battle.task_id).category == "browsing"


def test_the_backfill_fills_only_empty_categories_and_is_idempotent(alice, agents, capsys):
    team = alice.memberships.first().team
    old = Task.objects.create(team=team, submitter=alice, instruction="list the files")
    kept = Task.objects.create(team=team, submitter=alice, instruction="list the files",
                               category="general")  # fmt: skip
    web = Task.objects.create(team=team, submitter=alice, instruction="Summarise it",
                              start_url="https://example.com/")  # fmt: skip
    call_command("categorize_tasks")
    assert "categorised 2 tasks" in capsys.readouterr().out
    old.refresh_from_db(), kept.refresh_from_db(), web.refresh_from_db()
    assert (old.category, kept.category, web.category) == ("files_and_data", "general", "browsing")
    assert task_categories_backfill() == 0


def test_the_backfill_command_refuses_a_bad_limit(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="positive"):
        call_command("categorize_tasks", "--limit", "0")


def test_a_private_arenas_battles_and_agents_stay_off_the_public_boards(alice, agents, rng):
    """Another arena's battles (a team's private arena) never enter the public boards'
    fits, counts or matrices, and its agents are no filter choice."""
    private = Arena.objects.create(slug="acme-private", name="Acme private",
                                   team=alice.memberships.first().team)  # fmt: skip
    from agents.models import Agent

    mine = [
        Agent.objects.create(arena=private, slug=f"acme-{i}", display_name=f"Acme Secret {i}",
                             kind="builtin", builtin_policy="idle")
        for i in range(2)
    ]  # fmt: skip
    play(alice, judges(2), mine[0], mine[1], times=8, instruction="Open https://intranet.example",
         rng=rng)  # fmt: skip
    category_boards_refresh(arena_id=Arena.objects.public().pk)
    category_boards_refresh(arena_id=private.pk)
    public = board(category="browsing")
    assert public["category"]["battles"] == 0 and public["matrices"]["agents"] == []
    assert {c["slug"]: c["battles"] for c in board()["categories"]}["browsing"] == 0
    page = Client().get("/", {"category": "browsing"}).content.decode()
    matrices = Client().get("/matrices/").content.decode()
    for text in (page, matrices, str(public)):
        assert "Acme Secret" not in text and "acme-0" not in text
    assert category_board(arena_id=private.pk, category="browsing")["battles"] == 8


def test_one_rated_agent_alone_is_no_board(alice, agents, rng, settings):
    """Rulebook has n0 battles (won 8 of 10), its opponents 5 each: a fit would centre
    on Rulebook alone (1000, an interval of zero width), so the board shows no number."""
    settings.ARENA = settings.ARENA.replace(n0=6)
    crowd = judges(2)
    play(alice, crowd, agents["rulebook"], agents["idle"], times=5, instruction="write a poem",
         rng=rng)  # fmt: skip
    play(alice, crowd, agents["rulebook"], agents["surveyor"], times=5,
         instruction="write a song", rng=rng)  # fmt: skip
    task_categories_backfill()
    document = category_board(arena_id=Arena.objects.public().pk, category="general")
    assert (document["battles"], document["enough"], document["rated_agents"]) == (10, False, 0)
    assert all(p["rating"] is None for p in document["points"].values())
    settings.ARENA = settings.ARENA.replace(n0=4)  # now all three have n0: a board
    fresh = category_boards_refresh(arena_id=Arena.objects.public().pk)
    assert "general" in fresh
    document = category_board(arena_id=Arena.objects.public().pk, category="general")
    assert document["enough"] is True and document["rated_agents"] >= 2
