"""The judge page at 1280 × 800 shows everything a judge needs at once, and the
leaderboard fits a 390 px phone. Real servers, real Chromium, measured bounding boxes.
Plus the page controls every page shares: the "Live / Reconnecting…" indicator follows
the socket, and taking back a vote asks first, in a dialog.

At 1280 × 800 the page does not scroll; both sides open at their latest screenshot that
shows something (a step on a blank browser page does not), each screenshot, step list
and final message lies inside the window; the vote bar is inside it too and overlaps none
of them; and the reading-time countdown is large and on screen."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from agents.services import roster_install_builtins
from battles.models import Step
from tests.e2e.test_judge_page import judged_battle, log_in, png  # noqa: F401 - fixtures
from tests.servers import ensure_public_arena

pytestmark = pytest.mark.e2e

WINDOW = {"width": 1280, "height": 800}
UNDO_S = 30
LONG_FINAL = (
    "I opened the notes app, created a list called Shopping and typed milk, eggs and "
    "bread on three lines. I saved it and checked that the three items show in the list."
)


@pytest.fixture
def undo_window(settings):
    """Long enough to cancel the confirmation once and then confirm (judged_battle asks
    for this fixture by name: this module's wins over test_judge_page's 3 s)."""
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=UNDO_S)


def add_steps(run, media, count: int, *, last_url: str) -> None:
    """More steps, each with a screenshot and output, the last on ``last_url``."""
    start = run.steps.count()
    for index in range(start, start + count):
        relative = f"screens/run-{run.pk}/step-{index}.png"
        (media / relative).write_bytes(png(f"side {run.side} step {index}"))
        url = last_url if index == start + count - 1 else f"http://demo.test/page-{index}"
        Step.objects.create(
            run=run, index=index, tool="shell", args={"command": f"echo line {index}"},
            result={"ok": True, "stdout": "\n".join(f"out {index}.{k}" for k in range(6)),
                    "page": {"url": url, "title": f"Page {index}"}},
            screenshot=relative, started_at=timezone.now(), duration_ms=900,
        )  # fmt: skip


def box_inside(box: dict, width: int, height: int) -> bool:
    return (
        box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= width + 0.5
        and box["y"] + box["height"] <= height + 0.5
    )


def overlap(a: dict, b: dict) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


def test_the_judge_page_fits_1280_by_800_and_the_vote_bar_covers_nothing(
    judged_battle,  # noqa: F811
    arena_servers,
    browser,
):
    battle, _, base_url = judged_battle
    media = arena_servers.private_media_root
    run_a, run_b = battle.runs.get(side="A"), battle.runs.get(side="B")
    # Side A: 12 steps in all, the last on a real page; side B: 7, the last one back on
    # about:blank, so B opens one step earlier than its end.
    add_steps(run_a, media, 9, last_url="http://demo.test/done")
    add_steps(run_b, media, 5, last_url="about:blank")
    run_a.final_message = LONG_FINAL
    run_a.save(update_fields=["final_message"])

    context = browser.new_context(base_url=base_url, viewport=WINDOW)
    page = context.new_page()
    log_in(page, "judith")
    page.goto("/judge/")
    side_a = page.locator('section.replay[data-side="A"]')
    side_b = page.locator('section.replay[data-side="B"]')
    # Each side opens at its latest screen that shows something
    expect(side_a.locator("output.position")).to_have_text("12 / 12")
    expect(side_b.locator("output.position")).to_have_text("6 / 7")
    expect(side_b.locator("li.current")).to_have_attribute("data-index", "5")
    for side in (side_a, side_b):
        expect(side.locator("img.shot")).to_be_visible()
        side.locator("img.shot").evaluate("img => img.decode()")
    page.wait_for_load_state("networkidle")

    # The page itself does not scroll
    height, inner = page.evaluate("[document.documentElement.scrollHeight, window.innerHeight]")
    assert height <= inner == WINDOW["height"], (height, inner)

    # Screens, step lists and final messages all lie inside the window
    content = {}
    for name, side in (("A", side_a), ("B", side_b)):
        for part in ("img.shot", "ol.timeline", ".final"):
            box = side.locator(part).bounding_box()
            assert box is not None and box["width"] > 0 and box["height"] > 0, (name, part)
            assert box_inside(box, **WINDOW), (name, part, box)
            content[(name, part)] = box
        shot = content[(name, "img.shot")]
        assert shot["width"] >= 380 and shot["height"] >= 230, (name, shot)  # readable
        # the current step is scrolled into view inside its list
        current, timeline = (
            side.locator("li.current").bounding_box(),
            content[(name, "ol.timeline")],
        )
        assert timeline["y"] <= current["y"] < timeline["y"] + timeline["height"], name
    expect(side_a.locator(".final .message")).to_have_text(LONG_FINAL)

    # The vote bar is inside the window, below the sides, and covers none of it
    bar = page.locator("#vote-form").bounding_box()
    assert box_inside(bar, **WINDOW), bar
    for where, box in content.items():
        assert not overlap(bar, box), (where, box, bar)
    for side in ("A", "B"):
        assert not overlap(bar, page.locator(f"#side-{side}").bounding_box()), side
    # Nothing is painted over the content: the topmost element at each part's centre is
    # that part or inside it
    for (name, part), box in content.items():
        on_top = page.evaluate(
            "([x, y, sel]) => { const el = document.elementFromPoint(x, y);"
            " return !!el && !!el.closest(sel); }",
            [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2,
             f'section.replay[data-side="{name}"] {part}'],
        )  # fmt: skip
        assert on_top, (name, part)

    # The reading-time countdown is large, on screen, then says voting is open
    timer = page.locator("#read-timer")
    expect(timer).to_contain_text("voting opens in")
    assert box_inside(timer.bounding_box(), **WINDOW)
    size = float(timer.evaluate("el => getComputedStyle(el).fontSize").removesuffix("px"))
    assert size >= 16, size
    expect(timer).to_contain_text("Voting is open", timeout=10_000)
    expect(page.locator("#read-announce")).to_have_text("Voting is open.")
    context.close()


# `make soak` (the judge page at 1280 × 800 and the phone layouts stay in make test).
@pytest.mark.soak
def test_the_leaderboard_has_no_horizontal_scroll_at_390_px(arena_servers, browser):
    roster_install_builtins(arena=ensure_public_arena())
    context = browser.new_context(
        base_url=arena_servers.base_url,
        viewport={"width": 390, "height": 844},
        device_scale_factor=2,
        is_mobile=True,
        has_touch=True,
    )
    page = context.new_page()
    page.goto("/")
    expect(page.locator("table.board tbody tr").first).to_be_visible()
    page.wait_for_load_state("networkidle")
    widths = page.evaluate(
        "[document.documentElement.scrollWidth, document.body.scrollWidth, window.innerWidth]"
    )
    assert max(widths[:2]) <= widths[2] == 390, widths
    context.close()


# `make soak` (the judge page at 1280 × 800 and the phone layouts stay in make test).
@pytest.mark.soak
def test_the_live_indicator_follows_the_socket_and_undo_asks_first(judged_battle, browser):  # noqa: F811
    battle, (judith, _), base_url = judged_battle
    context = browser.new_context(base_url=base_url, viewport=WINDOW)
    page = context.new_page()
    sockets = []

    def relay(ws) -> None:  # the page's socket, passed through to the real server
        ws.connect_to_server()
        sockets.append(ws)

    page.route_web_socket(re.compile(r".*/ws/judge/$"), relay)
    log_in(page, "judith")
    page.goto("/judge/")
    live = page.locator("#live-status")
    expect(live).to_have_text("Live")
    expect(live).to_have_attribute("aria-live", "polite")
    # When the connection drops, the page says so, and says "Live" again once htmx has
    # reconnected by itself
    sockets[0].close(code=1011, reason="test: server went away")
    expect(live).to_have_text("Reconnecting…")
    expect(live).to_have_attribute("data-state", "closed")
    expect(live).to_have_text("Live", timeout=15_000)
    assert len(sockets) == 2

    # A vote, then "Undo" opens the confirmation; Cancel keeps the vote
    page.locator('#vote-form button[value="A"]').wait_for(state="attached")
    expect(page.locator('#vote-form button[value="A"]')).to_be_enabled(timeout=10_000)
    page.keyboard.press("a")
    expect(page.locator("#reveal-card .choice")).to_have_text("A is better")
    dialog = page.locator("#confirm-dialog")
    page.locator("#undo").click()
    expect(dialog).to_be_visible()
    expect(dialog.locator("#confirm-title")).to_have_text("Take back your vote?")
    page.keyboard.press("b")  # keys do not vote while the dialog asks
    dialog.locator("#confirm-cancel").click()
    expect(dialog).to_be_hidden()
    page.wait_for_load_state("networkidle")
    vote = battle.votes.get(judge=judith)
    assert (vote.choice, vote.retracted) == ("A", False)
    # Confirmed, the vote is taken back and the battle shows again, voting closed
    page.locator("#undo").click()
    dialog.locator("#confirm-yes").click()
    expect(page.locator("#reveal-card")).to_have_count(0)
    expect(page.locator("#vote-form")).to_be_visible()
    assert not battle.votes.filter(judge=judith, retracted=False).exists()
    context.close()
