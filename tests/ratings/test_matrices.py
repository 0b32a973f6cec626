"""The win-rate and battle-count matrices: the pure tables, their SVG heatmaps (readable,
accessible, escaped) and where they are published (a page with table fallbacks, the
API)."""

import xml.etree.ElementTree as ET

import pytest
from django.test import Client

from agents.models import Agent, Arena
from ratings.heatmap_svg import battle_count_heatmap, short_name, win_rate_colour, win_rate_heatmap
from ratings.matrices import PairMatrices, pair_matrices
from tests.ratings.factories import decided_battle, judges

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(
    ("order", "pairs", "battles", "win_rate"),
    [
        # one pair, 3 battles from 1's side: a win, a loss, a tie → 1.5 / 3 each
        ([1, 2], [(1, 2, 1.0, 1), (1, 2, 0.0, 1), (1, 2, 0.5, 1)],
         [[0, 3], [3, 0]], [[None, 0.5], [0.5, None]]),
        # the board's order, not the ids': 2 is listed first; 1 won 3 of 4 against 2
        ([2, 1], [(1, 2, 1.0, 3), (1, 2, 0.0, 1)], [[0, 4], [4, 0]],
         [[None, 0.25], [0.75, None]]),
        # a row given from the higher id's side is turned round
        ([1, 2], [(2, 1, 1.0, 2)], [[0, 2], [2, 0]], [[None, 0.0], [1.0, None]]),
        # a pair that never met is None, not 0; an agent with no battle is left out
        ([1, 2, 3, 4], [(1, 2, 1.0, 1), (2, 3, 0.5, 2)],
         [[0, 1, 0], [1, 0, 2], [0, 2, 0]],
         [[None, 1.0, None], [0.0, None, 0.5], [None, 0.5, None]]),
        # a retired agent (not in the order) drops out with its battles
        ([1, 2], [(1, 2, 1.0, 1), (1, 9, 1.0, 5)], [[0, 1], [1, 0]], [[None, 1.0], [0.0, None]]),
        ([1, 2], [], [], []),
    ],
)  # fmt: skip
def test_pair_matrices(order, pairs, battles, win_rate):
    tables = pair_matrices(order, pairs)
    assert (tables.battles, tables.win_rate) == (battles, win_rate)
    for i in range(len(tables.agents)):  # the two cells of a pair add up to one
        for j in range(len(tables.agents)):
            if tables.win_rate[i][j] is not None:
                assert tables.win_rate[i][j] + tables.win_rate[j][i] == pytest.approx(1.0)


def test_pair_matrices_keep_the_first_agents_and_count_the_rest():
    order = list(range(1, 21))
    pairs = [(i, i + 1, 1.0, 1) for i in range(1, 20)]
    tables = pair_matrices(order, pairs, max_agents=16)
    assert tables.agents == list(range(1, 17)) and tables.left_out == 4
    assert tables.total_battles == 15


def small() -> tuple[PairMatrices, list[str]]:
    tables = pair_matrices([1, 2, 3], [(1, 2, 1.0, 3), (1, 2, 0.0, 1), (1, 3, 0.5, 2)])
    return tables, ["Rulebook", "A <very> long & odd agent name", "Idle"]


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # noqa: S314 - our own output


def test_the_win_rate_heatmap_is_readable_and_accessible():
    tables, names = small()
    root = parse(win_rate_heatmap(tables, names, title="Win rate between agents"))
    assert root.get("role") == "img"
    assert root.find(f"{SVG}title").text == "Win rate between agents"
    desc = root.find(f"{SVG}desc").text
    assert "win rate in per cent" in desc and "Highest: Rulebook against Idle" not in desc
    assert "Highest: Rulebook against A <very> long & odd agent name, 75%" in desc
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "1 Rulebook" in texts and f"2 {short_name(names[1])}" in texts and "3 Idle" in texts
    assert short_name(names[1]) == "A <very> long &…"  # 15 characters and an ellipsis
    assert {"75", "25", "50", "–"} <= set(texts)  # every cell says its figure in text
    assert "0 %" in texts and "100 %" in texts  # the legend
    titles = [t.text for t in root.iter(f"{SVG}title")]
    assert "Rulebook against A <very> long & odd agent name: 75% over 4 battles (ties count " \
        "half)" in titles  # fmt: skip
    assert "A <very> long & odd agent name and Idle never met" in titles


def test_the_battle_count_heatmap_counts_every_pair():
    tables, names = small()
    root = parse(battle_count_heatmap(tables, names, title="Battles"))
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert texts.count("4") >= 2 and texts.count("2") >= 2 and texts.count("0") >= 2
    assert "6 in all, at most 4 for one pair" in root.find(f"{SVG}desc").text


def test_empty_heatmaps_say_so():
    empty = pair_matrices([], [])
    for draw in (win_rate_heatmap, battle_count_heatmap):
        root = parse(draw(empty, [], title="T"))
        assert "No rated battles yet" in [t.text for t in root.iter(f"{SVG}text")]


@pytest.mark.parametrize(("rate", "rgb"), [(0.5, (255, 255, 255)), (1.0, (28, 126, 214)),
                                           (0.0, (232, 89, 12))])  # fmt: skip
def test_win_rate_colours_are_white_at_even(rate, rgb):
    assert win_rate_colour(rate) == rgb


@pytest.fixture
def fought(alice, roster):
    agents = {a.slug: a for a in roster}
    crowd = judges(2)
    for outcome in ("A", "A", "B", "tie"):
        decided_battle(submitter=alice, a=agents["rulebook"], b=agents["idle"], outcome=outcome,
                       judge=crowd[0])  # fmt: skip
    decided_battle(submitter=alice, a=agents["surveyor"], b=agents["idle"], outcome="A",
                   judge=crowd[1])  # fmt: skip
    decided_battle(submitter=alice, a=agents["surveyor"], b=agents["idle"], outcome="",
                   status="excluded", exclusion_reason="no_trajectory")  # fmt: skip
    return agents


def test_the_api_publishes_the_matrices_as_data(fought):
    matrices = Client().get("/api/leaderboard/").json()["matrices"]
    index = {slug: i for i, slug in enumerate(matrices["agents"])}
    assert set(index) == {"rulebook", "surveyor", "idle"}
    r, s, i = index["rulebook"], index["surveyor"], index["idle"]
    assert matrices["battles"][r][i] == 4 and matrices["battles"][s][i] == 1  # excluded: no
    assert matrices["win_rate"][r][i] == pytest.approx(2.5 / 4)
    assert matrices["win_rate"][i][s] == 0.0 and matrices["win_rate"][r][s] is None
    assert matrices["names"][r] == "Rulebook" and matrices["left_out"] == 0


def test_the_matrices_page_has_plots_and_table_fallbacks(fought):
    response = Client().get("/matrices/")
    assert response.status_code == 200
    page = response.content.decode()
    for plot in ('id="win-rate-plot"', 'id="battle-count-plot"'):
        assert plot in page
    assert page.count('role="img"') == 2 and page.count("<title>") >= 3
    table = page.split('id="win-rate-table"')[1].split("</table>")[0]
    row = table.split('data-agent="rulebook"')[1].split("</tr>")[0]
    assert "63&nbsp;%" in row or "62&nbsp;%" in row  # 2.5 of 4
    counts = page.split('id="battle-count-table"')[1].split("</table>")[0]
    assert '<td class="num">4</td>' in counts.split('data-agent="rulebook"')[1].split("</tr>")[0]
    assert "5 in all" in page or "5 in all" in page.replace("&nbsp;", " ")
    assert "SPEC" not in page and "§" not in page


def test_the_matrices_page_follows_the_board_and_its_filters(fought):
    Agent.objects.filter(slug="surveyor").update(provider="acme-ai")
    page = Client().get("/matrices/", {"provider": "acme-ai"}).content.decode()
    table = page.split('id="battle-count-table"')[1].split("</table>")[0]
    assert 'data-agent="surveyor"' in table and 'data-agent="rulebook"' not in table
    assert Client().get("/", {"category": "browsing"}).content.decode().count(
        'href="/matrices/?category=browsing"') == 1  # fmt: skip
    assert Client().get("/matrices/", {"category": "general"}).status_code == 200


def test_the_leaderboard_links_the_matrices(roster):
    page = Client().get("/").content.decode()
    assert '<p id="matrices-link"><a href="/matrices/">' in page
    assert Arena.objects.public().agents.count() == 3
