"""The board's organisation, kind and provider columns and its filters, on the page and
in the API; bad filters get a 400 that says what to send."""

import pytest
from django.test import Client

from accounts.models import Team
from agents.models import Agent, Arena
from ratings.refit import arena_refit
from tests.ratings.factories import judges, round_robin


@pytest.fixture(autouse=True)
def _few_replicates(settings):
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=20)


@pytest.fixture
def field(roster, charlie):
    """The built-ins (the arena's own) plus a scaffold model and a remote system entered
    by team Umbrella, and a retired agent of Umbrella that must not show."""
    umbrella = Team.objects.get(name="Umbrella")
    arena = Arena.objects.public()
    scaffold = Agent.objects.create(
        arena=arena, slug="umb-claude", display_name="Umbrella Claude", kind="scaffold",
        provider="anthropic", model_id="claude-x", team=umbrella,
    )  # fmt: skip
    remote = Agent.objects.create(
        arena=arena, slug="umb-remote", display_name="Umbrella Remote", kind="remote",
        params={"endpoint": "https://agent.umbrella.example/"}, team=umbrella,
    )  # fmt: skip
    Agent.objects.create(
        arena=arena, slug="umb-old", display_name="Umbrella Old", kind="scaffold",
        provider="openai", team=umbrella, retired_at="2026-11-01T00:00:00Z",
    )  # fmt: skip
    return {a.slug: a for a in [*roster, scaffold, remote]}


def rows_by_slug(body: dict) -> dict[str, dict]:
    return {row["slug"]: row for row in body["rows"]}


def test_the_api_names_organisation_kind_and_provider(field, django_assert_max_num_queries):
    with django_assert_max_num_queries(8):
        body = Client().get("/api/leaderboard/").json()
    rows = rows_by_slug(body)
    assert set(rows) == {"rulebook", "surveyor", "idle", "umb-claude", "umb-remote"}
    assert {k: rows["umb-claude"][k] for k in ("organisation", "kind", "kind_text", "provider")} \
        == {"organisation": "Umbrella", "kind": "scaffold", "kind_text": "scaffold model",
            "provider": "anthropic"}  # fmt: skip
    assert (rows["umb-remote"]["kind_text"], rows["umb-remote"]["provider"]) == (
        "remote system", "")  # fmt: skip
    assert {rows[s]["organisation"] for s in ("rulebook", "surveyor", "idle")} == {"Arena"}
    assert {rows[s]["kind_text"] for s in ("rulebook", "surveyor", "idle")} == {"built-in"}
    assert "agent_id" not in rows["idle"]  # internal key, not published


def test_the_page_shows_the_columns_with_a_legend(field):
    page = Client().get("/").content.decode()
    row = page.split('data-agent="umb-claude"')[1].split("</tr>")[0]
    assert '<td class="org">Umbrella</td>' in row
    assert '<td class="kind">scaffold model</td>' in row
    assert '<td class="provider">anthropic</td>' in row
    idle = page.split('data-agent="idle"')[1].split("</tr>")[0]
    assert '<td class="org">Arena</td>' in idle and '<td class="provider">–</td>' in idle
    assert 'id="legend"' in page and "<dt>Organisation</dt>" in page and "rank band" in page
    assert "SPEC" not in page and "§" not in page


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"kind": "builtin"}, {"rulebook", "surveyor", "idle"}),
        ({"kind": "scaffold"}, {"umb-claude"}),
        ({"provider": "Anthropic"}, {"umb-claude"}),  # case does not matter
        ({"organisation": "umbrella"}, {"umb-claude", "umb-remote"}),
        ({"organisation": "Arena", "kind": "remote"}, set()),
        ({"organisation": "Acme"}, set()),  # a submitter's team entered no agent
        ({"kind": "human"}, set()),  # a kind of its own (issue 39): none entered here
        ({"kind": "", "provider": " "}, {"rulebook", "surveyor", "idle", "umb-claude",
                                         "umb-remote"}),  # blank means any
    ],
)  # fmt: skip
def test_filters_keep_only_the_agents_asked_for(field, params, expected):
    body = Client().get("/api/leaderboard/", params).json()
    assert set(rows_by_slug(body)) == expected
    page = Client().get("/", params).content.decode()
    shown = {part.split('"')[0] for part in page.split('<tr data-agent="')[1:]}
    assert shown == expected
    if not expected:
        assert "No agent matches these filters." in page


def test_a_filter_keeps_the_whole_boards_ranks(alice, field, settings, rng):
    settings.ARENA = settings.ARENA.replace(n0=4)
    crowd = judges(3)
    agents = [field["rulebook"], field["umb-claude"], field["surveyor"], field["idle"]]
    round_robin(alice, agents, crowd, rounds=3, rng=rng)
    arena_refit(arena_id=Arena.objects.public().pk)
    everyone = rows_by_slug(Client().get("/api/leaderboard/").json())
    assert sorted(r["rank"] for r in everyone.values() if r["rank"]) == [1, 2, 3, 4]
    narrowed = rows_by_slug(Client().get("/api/leaderboard/", {"kind": "builtin"}).json())
    assert set(narrowed) == {"rulebook", "surveyor", "idle"}
    for slug, row in narrowed.items():
        assert row["rank"] == everyone[slug]["rank"]
    # and the matrices cover the agents shown, no more
    assert set(narrowed and Client().get("/api/leaderboard/", {"kind": "builtin"}).json()
               ["matrices"]["agents"]) == {"rulebook", "surveyor", "idle"}  # fmt: skip


def test_a_filtered_page_is_not_live_and_says_so(field):
    page = Client().get("/", {"kind": "builtin"}).content.decode()
    assert "ws-connect" not in page and 'id="not-live"' in page
    assert '<option value="builtin" selected>built-in</option>' in page
    assert 'href="/?kind=&amp;provider=&amp;organisation="' not in page  # clear drops them
    assert 'href="/">Clear filters</a>' in page
    unfiltered = Client().get("/").content.decode()
    assert 'ws-connect="/ws/leaderboard/"' in unfiltered and 'id="not-live"' not in unfiltered


def test_the_filter_choices_are_the_boards_own(field):
    page = Client().get("/").content.decode()
    organisations = page.split('id="filter-organisation"')[1].split("</select>")[0]
    assert '<option value="Arena">Arena</option>' in organisations
    assert '<option value="Umbrella">Umbrella</option>' in organisations
    assert "Acme" not in organisations  # alice's team submits tasks, enters no agent
    providers = page.split('id="filter-provider"')[1].split("</select>")[0]
    assert '<option value="anthropic">anthropic</option>' in providers
    assert "openai" not in providers  # only the retired agent had it


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"category": "cooking"}, "There is no 'cooking' board"),
        ({"kind": "robot"}, "kind 'robot' is unknown"),
        ({"provider": "x" * 101}, "at most 100 characters"),
        ({"organisation": "a\nb"}, "one line"),
    ],
)
def test_a_bad_filter_is_a_400_that_says_what_to_send(field, params, needle):
    response = Client().get("/api/leaderboard/", params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_board_query" and needle in error["message"]
    page = Client().get("/", params)
    assert page.status_code == 400
    text = page.content.decode()
    assert needle.replace("'", "&#x27;") in text and 'id="board-error"' in text
    assert Client().get("/matrices/", params).status_code == 400
