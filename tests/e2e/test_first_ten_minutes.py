"""A lab's first ten minutes, from `make run` on a fresh data directory, in a real browser,
with no provider key anywhere (issue 37's walk):

- the first page is a ranked board with numbers (the demo board, labelled) within two
  minutes of starting `make run`;
- the demo lab's owner registers a remote agent through the pages (a typo in its
  endpoint), starts the reference entrant (examples/remote_entrant) with the secret the
  page showed once, corrects the endpoint on the agent's page, and test-drives it: the
  drive's page follows it from queued to done without a reload;
- invites a colleague, who signs up through the link and joins the team (and only it);
- evaluates the built-ins on a bundled sample suite from the Evaluations form and
  watches the evaluation finish without a reload.

Nothing is set up behind the arena's back but the operator's own settings: loopback
endpoints allowed (ARENA_INTERNAL_ALLOWLIST, the entrant runs on this machine), one
battle slot, no desktop in the lanes (the remote entrant and the sample suite use the
shell and files; the desktop's own walks are tests/e2e/test_newcomer.py's) and no demo
battles (they are seeded in the background and tested by their own tests).

``ARENA_WALK_SCREENSHOTS=<dir>`` saves a screenshot of each step of the walk (the ones in
docs/ come from here)."""

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import Page, expect

from tests.agents.conftest import LOOPBACK
from tests.e2e.test_accessibility import violations
from tests.e2e.test_lab_pages import invited_colleague_joins
from tests.makerun import BANNER, ROOT, MakeRun, free_port

pytestmark = pytest.mark.e2e

FIRST_PAGE_WITHIN_S = 120
PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY")


@pytest.fixture
def fresh_make_run(tmp_path, sandbox_root, monkeypatch):
    for name in PROVIDER_KEYS:
        monkeypatch.delenv(name, raising=False)
    started = time.monotonic()
    run = MakeRun(
        tmp_path,
        redis_url=settings.REDIS_URL,
        extra={
            "ARENA_SANDBOX_ROOT": str(sandbox_root),
            "ARENA_CACHE_PREFIX": f"arena-first-ten-{uuid.uuid4().hex}",
            "ARENA_INTERNAL_ALLOWLIST": LOOPBACK,
            "ARENA_SANDBOX_DESKTOP": "false",
        },
    )
    run.started = started
    yield run
    run.kill_everything()


@pytest.fixture
def entrant():
    """The reference remote entrant, started once its secret is known."""
    started: list[subprocess.Popen] = []
    port = free_port()

    def start(secret: str) -> None:
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "examples.remote_entrant.server", "--port", str(port)],
                cwd=ROOT,
                env={**os.environ, "ARENA_AGENT_SECRET": secret},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    start.port = port
    yield start
    for process in started:
        process.kill()
        process.wait()


def shot(page: Page, name: str) -> None:
    folder = os.environ.get("ARENA_WALK_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def demo_password(run: MakeRun) -> str:
    for line in (run.data_dir / "demo-logins.txt").read_text().splitlines():
        user, _, password = line.partition(" ")
        if user == "demo":
            return password
    raise AssertionError("make run wrote no password for demo")


def test_a_lab_s_first_ten_minutes_with_no_provider_key(fresh_make_run, entrant, browser):
    run = fresh_make_run
    run.wait_for(BANNER, timeout_s=FIRST_PAGE_WITHIN_S + 60)
    base_url = f"http://127.0.0.1:{run.port}"
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    page = context.new_page()

    # The first page: a ranked board with numbers, labelled as demo data, in time
    page.goto("/")
    first_rank = page.locator("td.rank").first
    expect(first_rank).to_have_text(re.compile(r"^1"))
    expect(page.locator("td.rating .value").first).to_have_text(re.compile(r"^-?\d+$"))
    elapsed = time.monotonic() - run.started
    assert elapsed <= FIRST_PAGE_WITHIN_S, f"the ranked board came after {elapsed:.0f} s"
    expect(page.locator("main")).to_contain_text("Demo data")
    assert violations(page) == []
    shot(page, "01-board")

    # The demo lab's owner logs in and registers a remote agent (a typo in its port)
    page.goto("/accounts/login/")
    page.fill("#id_username", "demo")
    page.fill("#id_password", demo_password(run))
    page.get_by_role("button", name="Log in", exact=True).click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="My agents").click()
    page.click("#register-agent-link")
    page.get_by_label("Remote system over HTTP").check()
    page.fill("#id_display_name", "Demo Lab Entrant")
    page.fill("#id_endpoint", f"http://127.0.0.1:{entrant.port + 1}/act")
    shot(page, "02-register")
    page.click("#register")
    secret = page.locator("#remote-secret").inner_text()
    assert len(secret) >= 20
    shot(page, "03-registered")

    # Its server starts with the secret shown once; the owner corrects the endpoint
    entrant(secret)
    page.goto("/my-agents/")
    page.get_by_role("link", name="Demo Lab Entrant").first.click()
    page.wait_for_url(re.compile(r".*/my-agents/\d+/$"))
    page.fill("#id_endpoint", f"http://127.0.0.1:{entrant.port}/act")
    page.click("#save-agent")
    expect(page.locator("#agent-endpoint")).to_have_text(f"http://127.0.0.1:{entrant.port}/act")
    shot(page, "04-edited")

    # and test-drives it: the drive's page follows it to its end without a reload
    page.click("#start-test-drive")
    page.wait_for_url(re.compile(r".*/test-drives/\d+/$"))
    page.evaluate("window.__sameDocument = true")
    expect(page.locator("#drive-status")).to_have_text("done", timeout=180_000)
    assert page.evaluate("window.__sameDocument") is True
    expect(page.locator("#drive-steps > li[data-step]").first).to_be_visible()
    expect(page.locator("#final-message")).not_to_be_empty()
    shot(page, "05-test-drive")

    # The owner invites a colleague, who signs up through the link and joins the team
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Team").click()
    page.click("#create-invite")
    link = page.locator("#new-invite-link").inner_text()
    shot(page, "06-invite")
    colleague = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    other = colleague.new_page()
    invited_colleague_joins(other, link, "colleague", team="demo")
    other.get_by_role("navigation", name="Main").get_by_role("link", name="Team").click()
    expect(other.locator("h1")).to_have_text("Team demo")
    shot(other, "07-colleague")
    colleague.close()

    # The owner evaluates the built-ins on a bundled sample suite, from the form
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Evaluations").click()
    page.select_option("#id_sample", "desktop-files")
    for slug in ("rulebook", "surveyor"):
        page.check(f'input[name="agents"][value="{slug}"]')
    shot(page, "08-evaluation-form")
    page.click("#eval-create")
    page.wait_for_url(re.compile(r".*/evaluations/\d+/$"))
    page.evaluate("window.__sameDocument = true")
    expect(page.locator("#eval-status")).to_have_text("done", timeout=240_000)
    expect(page.locator("#eval-live")).to_have_attribute("data-settled", "true")
    assert page.evaluate("window.__sameDocument") is True
    expect(page.locator("#eval-cancel")).to_have_count(0)
    expect(page.locator("#eval-agents")).to_have_text("rulebook (built-in), surveyor (built-in)")
    expect(page.locator("#eval-results tbody tr")).to_have_count(3)
    # every answer is in: rulebook writes the note and fails the poem (a success command)
    for task, exit_code in (("note", "exit 0"), ("poem", "exit 1")):
        cell = f'#eval-results tr[data-task="{task}"] td.m-success[data-agent="rulebook"]'
        expect(page.locator(cell)).to_have_text(exit_code)
    shot(page, "09-evaluation")
    context.close()
