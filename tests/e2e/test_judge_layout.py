"""The judge page holds its layout at a laptop's and a phone's width, before and after
the reveal: no agent name is clipped (every name box is as wide as its text and lies
inside its side or card, none over another), each side's screen is at least 60 % of the
side's width, and axe finds nothing serious. A screen enlarges, whole and at full size,
by mouse and by keyboard. Real servers, real Chromium, measured boxes."""

import datetime as dt

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from agents.models import Agent
from battles.models import Step
from judging.models import Assignment
from judging.services import vote_cast
from tests.e2e.test_accessibility import violations
from tests.e2e.test_judge_page import judged_battle, log_in, undo_window  # noqa: F401 - fixtures
from tests.judging.battle_factories import people

pytestmark = pytest.mark.e2e

LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# Long, and one word of it too long for a phone's line: it must wrap, not run out.
LONG_NAME = "Nimbus Seven Extended Reasoning Preview (Browsing Edition)"
LONG_MODEL = "nimbus-7-pro-20261001-extended-reasoning-browsing-preview-with-tools"
PAGE = {"url": "http://demo.test/notes/", "title": "Notes - Demo"}

# Every problem of the judge page's layout as it stands, one line each: a name box
# narrower than its text, a name outside the side or card that holds it, two name boxes
# over each other, a screen narrower than 60 % of its side.
LAYOUT_PROBLEMS = """() => {
  const problems = [];
  const inside = (r, box) => r.left >= box.left - 0.5 && r.right <= box.right + 0.5 &&
    r.top >= box.top - 0.5 && r.bottom <= box.bottom + 0.5;
  const over = (a, b) => !(a.right <= b.left || b.right <= a.left || a.bottom <= b.top ||
    b.bottom <= a.top);
  const names = Array.from(document.querySelectorAll(
    ".side-head h2, .side-head .side-meta, .reveal-sides dt, .reveal-sides dd"));
  names.forEach((el) => {
    const what = el.className || el.tagName;
    if (el.scrollWidth > el.clientWidth) {
      problems.push(`${what}: text ${el.scrollWidth} px in a ${el.clientWidth} px box`);
    }
    const holder = el.closest("section.side, .card").getBoundingClientRect();
    Array.from(el.getClientRects()).forEach((r) => {
      if (!inside(r, holder)) problems.push(`${what} "${el.textContent.trim()}" runs out`);
    });
  });
  for (let i = 0; i < names.length; i++) {
    for (let j = i + 1; j < names.length; j++) {
      if (names[i].contains(names[j]) || names[j].contains(names[i])) continue;
      if (over(names[i].getBoundingClientRect(), names[j].getBoundingClientRect())) {
        problems.push(`"${names[i].textContent.trim()}" overlaps "${names[j].textContent.trim()}"`);
      }
    }
  }
  document.querySelectorAll("section.replay").forEach((side) => {
    const img = side.querySelector("img.shot");
    const width = side.getBoundingClientRect().width;
    if (!img || img.hidden || !img.complete || !img.naturalWidth) {
      problems.push(`side ${side.dataset.side}: no screen shown`);
      return;
    }
    const shot = img.getBoundingClientRect();
    if (shot.width < 0.6 * width) {
      problems.push(`side ${side.dataset.side}: screen ${shot.width} px of a ${width} px side`);
    }
    if (!inside(shot, side.querySelector(".screen").getBoundingClientRect())) {
      problems.push(`side ${side.dataset.side}: the screen is cut by its box`);
    }
  });
  return problems;
}"""


@pytest.fixture
def browsing_battle(judged_battle):  # noqa: F811
    """judged_battle with a long agent name and model, side A on a web page at every step
    (its screens show the page area), side B without page state (shown whole)."""
    battle, judges, base_url = judged_battle
    Agent.objects.filter(pk=battle.agent_a_id).update(display_name=LONG_NAME, model_id=LONG_MODEL)
    for step in Step.objects.filter(run__battle=battle, run__side="A"):
        step.result = {**step.result, "page": PAGE}
        step.save(update_fields=["result"])
    return battle, judges, base_url


def context_for(browser, base_url: str, window: dict):
    if window == PHONE:
        return browser.new_context(base_url=base_url, viewport=window, device_scale_factor=2,
                                   is_mobile=True, has_touch=True)  # fmt: skip
    return browser.new_context(base_url=base_url, viewport=window)


def open_judge_page(page: Page, username: str) -> None:
    log_in(page, username)
    page.goto("/judge/")
    for side in ("A", "B"):
        shot = page.locator(f'section.replay[data-side="{side}"] img.shot')
        expect(shot).to_be_visible()
        shot.evaluate("img => img.decode()")
    page.wait_for_load_state("networkidle")


def layout_problems(page: Page) -> list[str]:
    return page.evaluate(LAYOUT_PROBLEMS)


def decide(battle) -> None:
    """Two more judges vote: with hers, the battle has its three votes."""
    now = timezone.now()
    for other, choice in zip(people(2, prefix="late"), ("B", "A"), strict=True):
        Assignment.objects.create(
            judge=other, battle=battle, served_at=now - dt.timedelta(minutes=1)
        )
        vote_cast(judge=other, battle_id=battle.pk, choice=choice)


@pytest.mark.parametrize("window", [LAPTOP, PHONE], ids=["1280x800", "390x844"])
def test_the_layout_holds_before_and_after_the_reveal(browsing_battle, browser, window):
    battle, _, base_url = browsing_battle
    context = context_for(browser, base_url, window)
    page = context.new_page()
    open_judge_page(page, "judith")

    # Before the vote: every screen wide enough, nothing clipped, nothing serious for axe
    assert layout_problems(page) == []
    assert violations(page) == []
    side_a = page.locator('section.replay[data-side="A"] img.shot')
    side_b = page.locator('section.replay[data-side="B"] img.shot')
    # A's screenshots were taken on a web page: its page area shows; B's show whole
    expect(side_a).to_have_class("shot page-only")
    expect(side_b).to_have_class("shot")
    box = side_a.bounding_box()
    assert box["width"] / box["height"] == pytest.approx(1280 / 713, rel=0.02)
    # the pointer of A's click at (960, 600) on the screen sits where it clicked in the
    # page area (87 px of browser bar above it cut away)
    if window == LAPTOP:
        page.keyboard.press("ArrowLeft")
        pointer = page.locator('section.replay[data-side="A"] .pointer')
        expect(pointer).to_be_visible()
        mark = pointer.bounding_box()
        centre = (mark["x"] + mark["width"] / 2, mark["y"] + mark["height"] / 2)
        assert centre[0] == pytest.approx(box["x"] + box["width"] * 960 / 1280, abs=2)
        assert centre[1] == pytest.approx(box["y"] + box["height"] * (600 - 87) / 713, abs=2)

    # When she votes and two more judges decide the battle
    vote_a = page.locator('#vote-form button[value="A"]')
    expect(vote_a).to_be_enabled(timeout=15_000)
    vote_a.click()
    expect(page.locator("#reveal-card .choice")).to_have_text("A is better")
    decide(battle)
    card = page.locator("#reveal-card")
    expect(card.locator(".reveal-a")).to_have_text(LONG_NAME, timeout=20_000)
    expect(page.locator("#who-A")).to_contain_text(LONG_NAME)
    page.wait_for_load_state("networkidle")

    # Then the names wrap inside their boxes, the screens keep their width, and axe is
    # content: at the top of the page and scrolled to the reveal
    assert layout_problems(page) == []
    assert violations(page) == []
    card.scroll_into_view_if_needed()
    assert layout_problems(page) == []
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1] == window["width"], widths
    context.close()


def test_a_screen_enlarges_whole_by_mouse_and_by_keyboard(browsing_battle, browser):
    battle, _, base_url = browsing_battle
    context = context_for(browser, base_url, LAPTOP)
    page = context.new_page()
    open_judge_page(page, "judith")
    screen = page.locator('section.replay[data-side="A"] button.screen')
    shot = screen.locator("img.shot")
    dialog = page.locator("#enlarge-dialog")
    big = dialog.locator("img")

    # A click opens the whole screen (not the page area the side shows), fitted
    screen.click()
    expect(dialog).to_be_visible()
    expect(big).to_have_attribute("src", shot.get_attribute("src"))
    big.evaluate("img => img.decode()")
    assert big.evaluate("img => [img.naturalWidth, img.naturalHeight]") == [1280, 800]
    box = big.bounding_box()
    assert box["width"] / box["height"] == pytest.approx(1280 / 800, rel=0.01)
    assert box["width"] > 2 * shot.bounding_box()["width"] * 0.9  # far larger than on the page
    expect(dialog.locator(".enlarge-close")).to_be_focused()
    assert violations(page) == []
    # "Actual size" shows it pixel for pixel, in a frame that scrolls
    dialog.locator(".enlarge-size").click()
    expect(dialog.locator(".enlarge-size")).to_have_attribute("aria-pressed", "true")
    assert big.bounding_box()["width"] == pytest.approx(1280, abs=1)
    # The vote keys do nothing while it is open; Escape closes it, focus back on the screen
    page.keyboard.press("a")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(screen).to_be_focused()
    expect(page.locator("#reveal-card")).to_have_count(0)

    # By keyboard: Enter on the focused screen opens it, the Close button closes it; Space
    # on side B's opens B's, a click beside the picture closes it
    page.keyboard.press("Enter")
    expect(dialog).to_be_visible()
    page.keyboard.press("Enter")  # on the focused Close button
    expect(dialog).to_be_hidden()
    expect(screen).to_be_focused()
    screen_b = page.locator('section.replay[data-side="B"] button.screen')
    screen_b.focus()
    page.keyboard.press("Space")
    expect(dialog).to_be_visible()
    expect(big).to_have_attribute("src", screen_b.locator("img.shot").get_attribute("src"))
    page.mouse.click(3, 3)  # the backdrop's corner
    expect(dialog).to_be_hidden()
    expect(screen_b).to_be_focused()
    assert not battle.votes.exists()
    context.close()
