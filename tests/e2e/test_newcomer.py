"""A newcomer's first visit to a fresh `make run`, in a real browser: sign up, submit one
of the demo tasks, watch both sides browse the demo web (navigation, clicks and typing
in their steps), have a second newcomer judge the battle blind, and find the agents on
the board. Nothing is set up behind the arena's back: the launcher migrates and seeds a
new data dir (SQLite, its embedded default), and everything else happens in pages."""

import re
import uuid
from collections import Counter

import pytest
from django.conf import settings
from playwright.sync_api import Page, expect

from sandboxes.demoweb import DEMO_TASKS
from tests.makerun import BANNER, MakeRun

pytestmark = pytest.mark.e2e

PASSWORD = "newcomer-Passw0rd!"


@pytest.fixture
def make_run(tmp_path, sandbox_root):
    # (pytest's tmp dirs are 0700: the sandboxes get a root their uids can traverse, as a
    # fresh clone's var/ is)
    run = MakeRun(
        tmp_path,
        redis_url=settings.REDIS_URL,  # the test's own database, emptied around each test
        # a fresh machine's Redis holds no earlier run's sign-up counts
        extra={
            "ARENA_SANDBOX_ROOT": str(sandbox_root),
            "ARENA_CACHE_PREFIX": f"arena-newcomer-{uuid.uuid4().hex}",
        },
    )
    yield run
    run.kill_everything()


def sign_up(page: Page, username: str, team: str) -> None:
    page.goto("/accounts/signup/")
    page.fill("#id_username", username)
    page.fill("#id_password1", PASSWORD)
    page.fill("#id_password2", PASSWORD)
    page.fill("#id_team_name", team)
    page.get_by_role("button", name="Create account").click()
    # sign-up signs nobody in (docs/security.md "Sign-up"): the log-in page comes next
    expect(page).to_have_url(re.compile(r"/accounts/login/\?signed_up=1$"))
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    # a new account lands on the judge page (judging.selectors.landing_url)
    expect(page).to_have_url(re.compile(r"/accounts/consent/\?next=/judge/$"))
    page.click("#accept-consent")
    expect(page).to_have_url(re.compile(r"/judge/$"))


def step_tools(page: Page, side: str) -> Counter:
    steps = page.locator(f'#battle-panel section.side[data-side="{side}"] ol.steps > li code')
    return Counter(code.inner_text() for code in steps.all() if code.inner_text().isidentifier())


def test_a_newcomer_signs_up_submits_watches_both_sides_browse_judges_and_sees_the_board(
    make_run, browser
):
    make_run.wait_for(BANNER)
    base_url = f"http://127.0.0.1:{make_run.port}"
    # (the contact form: every built-in opens it; the two better ones click and type)
    task = next(t for t in DEMO_TASKS if "contact" in t["instruction"])

    # When a newcomer signs up and submits a demo task
    submitter = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 800})
    page = submitter.new_page()
    sign_up(page, "newcomer", "Newcomers")
    page.goto("/submit/")
    page.fill("#instruction", task["instruction"])
    page.click("#submit-task")
    expect(page).to_have_url(re.compile(r"/battles/\d+/$"))

    # Then both sides run live on the battle page and both browse the demo web
    expect(page.locator("#battle-status")).to_have_text("judging", timeout=240_000)
    tools = {side: step_tools(page, side) for side in "AB"}
    assert all(used["navigate"] >= 1 for used in tools.values()), tools
    both = tools["A"] + tools["B"]
    assert both["click"] >= 1 and both["type"] >= 1, tools
    shots = page.locator("#battle-panel img.thumb")
    assert shots.count() >= 2

    # When a second newcomer signs up and opens the judge page
    judge = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 800})
    judging = judge.new_page()
    sign_up(judging, "second-newcomer", "Second team")
    judging.goto("/judge/")

    # Then the battle is served blind, and a vote after the reading time is taken
    expect(judging.locator(".card .instruction")).to_have_text(task["instruction"])
    vote_a = judging.locator('#vote-form button[value="A"]')
    expect(vote_a).to_be_enabled(timeout=60_000)
    vote_a.click()
    expect(judging.locator("#reveal-card")).to_be_visible()

    # And the board lists the agents that fought, with the battle counted
    judging.goto("/")
    rows = judging.locator("tr[data-agent]")
    expect(rows.first).to_be_visible()
    assert rows.count() >= 3
