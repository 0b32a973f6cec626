"""The demo board in a real browser, served as make run serves it (ARENA_DEMO_BOARD on):
a fresh arena's first page is a ranked board with numbers under its demo label, the
legend is folded until opened, and neither state has a serious accessibility finding."""

import pytest
from playwright.sync_api import expect

from agents.models import DEMO_ARENA_SLUG, Arena
from agents.services import roster_install_builtins
from judging.services.demo_board import demo_board_seed
from tests.e2e.test_accessibility import violations

pytestmark = pytest.mark.e2e


@pytest.fixture
def demo_servers(request, transactional_db, monkeypatch, settings):
    """The demo board built in this process, then the arena's processes with it on."""
    roster_install_builtins(arena=Arena.objects.public())
    settings.ARENA = settings.ARENA.replace(demo_board=True, bootstrap_replicates=50)
    demo_board_seed()
    assert Arena.objects.get(slug=DEMO_ARENA_SLUG).demo
    monkeypatch.setenv("ARENA_DEMO_BOARD", "true")
    return request.getfixturevalue("arena_servers")


def test_a_fresh_arena_opens_on_a_ranked_labelled_board(demo_servers, browser):
    context = browser.new_context(
        base_url=demo_servers.base_url, viewport={"width": 1280, "height": 800}
    )
    page = context.new_page()
    page.goto("/")
    note = page.locator("#demo-note")
    expect(note).to_be_visible()
    expect(note).to_contain_text("simulated votes between the built-in agents")
    ranks = page.locator("#leaderboard-rows td.rank")
    expect(ranks).to_have_count(3)
    assert [ranks.nth(i).inner_text().split()[0] for i in range(3)] == ["1", "2", "3"]
    expect(page.locator("#leaderboard-rows .rating .value")).to_have_count(3)
    legend = page.locator("#legend")
    expect(legend.locator("dl")).to_be_hidden()  # folded by default
    assert violations(page) == []
    legend.locator("summary").click()
    expect(legend.locator("dl")).to_be_visible()
    assert violations(page) == []
    # the real board, as it stands, is one click away
    page.locator("#demo-note a").click()
    expect(page.locator("#demo-note")).to_have_count(0)
    expect(page.locator("#demo-board-link")).to_be_visible()
    context.close()
