"""The whole loop through a real browser against real processes: sign up, consent,
submit a task, watch the battle run live, judge it blind in another session, and see
the leaderboard move live in a third."""

import re
import time

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from playwright.sync_api import BrowserContext, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from accounts.services import consent_terms_publish
from agents.models import Agent
from agents.services import roster_install_builtins
from battles.models import Battle, Step
from battles.verdict import end_reason_words
from ratings import elo
from ratings.services import elo_params
from tests.conftest import make_person
from tests.servers import ensure_public_arena

pytestmark = pytest.mark.e2e

INSTRUCTION = "Create a file named notes.txt containing hello arena"
PASSWORD = "arena-e2e-Passw0rd!"
# Counts the frames htmx's websocket extension has swapped in, and survives only as long
# as the document: a reload resets it.
PAGE_PROBE = """
window.__wsMessages = 0;
document.addEventListener("htmx:wsAfterMessage", () => { window.__wsMessages += 1; });
"""


def production_hash(password: str) -> str:
    hasher = PBKDF2PasswordHasher()
    return hasher.encode(password, hasher.salt())


def new_context(browser, base_url: str) -> BrowserContext:
    # Playwright's wait_for_function evaluates its predicate as a string, which the pages'
    # Content-Security-Policy forbids (no eval); tests/e2e/test_csp.py checks the policy.
    context = browser.new_context(
        base_url=base_url, viewport={"width": 1280, "height": 800}, bypass_csp=True
    )
    context.add_init_script(PAGE_PROBE)
    return context


def mark_document(page: Page) -> None:
    page.evaluate("window.__sameDocument = true")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"


def wait_for_socket(page: Page) -> None:
    """Both consumers send their current state right after joining their group, so the
    first swapped frame proves the page is subscribed."""
    page.wait_for_function("window.__wsMessages >= 1", timeout=15_000)


def board(page: Page) -> dict[str, tuple[str, str, str]]:
    """slug → (streaming, votes, W / D / L) as the leaderboard shows them."""
    rows = {}
    for row in page.locator("tr[data-agent]").all():
        rows[row.get_attribute("data-agent")] = (
            row.locator("td.streaming").inner_text(),
            row.locator("td.votes").inner_text(),
            row.locator("td.record").inner_text(),
        )
    return rows


def identity_leaks(text: str, agents: list[Agent], *, with_slugs: bool) -> list[str]:
    """Display names, model ids and aliases anywhere (case-sensitive); slugs, which are
    ordinary words ("idle"), only as whole words and only where asked."""
    leaks = []
    for agent in agents:
        names = [agent.display_name, agent.model_id, *agent.aliases]
        leaks += [name for name in names if name and name in text]
        if with_slugs and re.search(rf"(?<![\w-]){re.escape(agent.slug)}(?![\w-])", text):
            leaks.append(agent.slug)
    return leaks


def test_submit_watch_judge_and_leaderboard_move_live(arena_servers, browser):
    # Given the published terms, the built-in roster, and a judge with consent given
    terms = consent_terms_publish(text="You agree to publication.")
    roster = roster_install_builtins(arena=ensure_public_arena())
    judith = make_person("judith", "judges", terms)
    # The tests hash with MD5 for speed; the servers know only the production hashers.
    judith.password = production_hash(PASSWORD)
    judith.save(update_fields=["password"])
    base_url = arena_servers.base_url

    # When a newcomer signs up, accepts the terms and submits a task
    submitter = new_context(browser, base_url).new_page()
    submitter.goto("/accounts/signup/")
    submitter.fill("#id_username", "newcomer")
    submitter.fill("#id_password1", PASSWORD)
    submitter.fill("#id_password2", PASSWORD)
    submitter.fill("#id_team_name", "Newcomers")
    submitter.get_by_role("button", name="Create account").click()
    # sign-up signs nobody in (docs/security.md "Sign-up"): the log-in page comes next
    expect(submitter).to_have_url(f"{base_url}/accounts/login/?signed_up=1")
    submitter.fill("#id_username", "newcomer")
    submitter.fill("#id_password", PASSWORD)
    submitter.get_by_role("button", name="Log in").click()
    # a new account lands on the judge page (judging.selectors.landing_url); Submit is a
    # link away
    expect(submitter).to_have_url(f"{base_url}/accounts/consent/?next=/judge/")
    submitter.click("#accept-consent")
    expect(submitter).to_have_url(f"{base_url}/judge/")
    submitter.goto("/submit/")
    submitter.fill("#instruction", INSTRUCTION)
    submitter.click("#submit-task")
    expect(submitter).to_have_url(re.compile(rf"^{re.escape(base_url)}/battles/\d+/$"))
    battle_id = int(submitter.url.rstrip("/").rsplit("/", 1)[1])

    # Then the battle page shows it queued (the worker is held), and once the worker
    # runs it the status reaches "judging" over the socket, without a reload
    status = submitter.locator("#battle-status")
    expect(status).to_have_text("queued")
    wait_for_socket(submitter)
    mark_document(submitter)
    arena_servers.resume_workers()
    expect(status).to_have_text("judging", timeout=60_000)
    assert_not_reloaded(submitter)
    assert submitter.evaluate("window.__wsMessages") > 1
    battle = Battle.objects.select_related("agent_a", "agent_b").get(pk=battle_id)
    assert battle.status == Battle.Status.JUDGING
    for run in battle.runs.all():
        side = submitter.locator(f'#battle-panel section.side[data-side="{run.side}"]')
        expect(side.locator("ol.steps > li")).to_have_count(Step.objects.filter(run=run).count())
        expect(side.locator("ol.steps > li.muted")).to_have_count(0)  # "No steps yet."
        # how the side ended, in words (the code stays in the API)
        expect(side.locator("p.ended")).to_have_text(
            f"Side {run.side} {end_reason_words(run.end_reason)}."
        )
    assert identity_leaks(submitter.content(), roster, with_slugs=True) == []
    fought = {battle.agent_a.slug, battle.agent_b.slug}
    bystander = ({a.slug for a in roster} - fought).pop()

    # Given a leaderboard open in another session before anyone votes
    leaderboard = new_context(browser, base_url).new_page()
    leaderboard.goto("/")
    wait_for_socket(leaderboard)
    mark_document(leaderboard)
    untouched = ("1000.0", "0", "0 / 0 / 0")
    assert board(leaderboard) == {agent.slug: untouched for agent in roster}

    # When the judge logs in and opens the judge page
    judge = new_context(browser, base_url).new_page()
    judge.goto("/accounts/login/")
    judge.fill("#id_username", "judith")
    judge.fill("#id_password", PASSWORD)
    judge.get_by_role("button", name="Log in", exact=True).click()
    expect(judge).to_have_url(f"{base_url}/judge/")  # judges land on the judge page
    # Everything the judge's browser receives from here on (a body can be read only
    # while its document is current, so the log-in page and the judge page it landed on
    # stay out: a blank page first, so none of their late responses is caught).
    judge.goto("about:blank")
    responses, frames = [], []
    judge.on("response", lambda response: responses.append(response))
    judge.on("websocket", lambda ws: ws.on("framereceived", lambda frame: frames.append(frame)))
    judge.goto("/judge/")

    # Then it serves this battle blind, with voting closed for the reading time
    expect(judge.locator(".card .instruction")).to_have_text(INSTRUCTION)
    vote_a = judge.locator('#vote-form button[value="A"]')
    expect(vote_a).to_be_disabled()
    words = sum(len(run.final_message.split()) for run in battle.runs.all())
    min_read = float(judge.locator("#vote-form").get_attribute("data-min-read"))
    assert min_read == max(2.0, words / 4.0)
    expect(vote_a).to_be_enabled(timeout=min_read * 1000 + 10_000)
    bodies = [judge.content()]
    for response in responses:
        if not 300 <= response.status < 400:  # redirects have no body
            bodies.append(response.body().decode(errors="replace"))
    bodies += [f if isinstance(f, str) else f.decode(errors="replace") for f in frames]
    assert len(bodies) > 3  # the page, its static files, ...
    leaks = [leak for body in bodies for leak in identity_leaks(body, roster, with_slugs=False)]
    assert leaks == []
    assert identity_leaks(judge.content(), roster, with_slugs=True) == []

    # When the judge says A is better
    vote_a.click()

    # Then the reveal names both agents and the vote counts
    reveal = judge.locator("#reveal-card")
    expect(reveal).to_be_visible()
    expect(reveal.locator(".reveal-a")).to_have_text(battle.agent_a.display_name)
    expect(reveal.locator(".reveal-b")).to_have_text(battle.agent_b.display_name)
    expect(reveal.locator(".warn")).to_have_count(0)

    # And the open leaderboard moves live: one vote each for the two that fought
    winner, loser = elo.update(1000.0, 1000.0, 1.0, 0, 0, elo_params())
    a_row = leaderboard.locator(f'tr[data-agent="{battle.agent_a.slug}"]')
    b_row = leaderboard.locator(f'tr[data-agent="{battle.agent_b.slug}"]')
    expect(a_row.locator("td.votes")).to_have_text("1", timeout=30_000)
    expect(b_row.locator("td.votes")).to_have_text("1", timeout=30_000)
    assert_not_reloaded(leaderboard)
    expected = {
        battle.agent_a.slug: (f"{winner:.1f}", "1", "1 / 0 / 0"),
        battle.agent_b.slug: (f"{loser:.1f}", "1", "0 / 0 / 1"),
        bystander: untouched,
    }
    # (the small streaming frame and the full board that follows it arrive on their own
    # schedule; on a loaded machine give the second one a moment)
    deadline = time.monotonic() + 15
    while board(leaderboard) != expected and time.monotonic() < deadline:
        leaderboard.wait_for_timeout(200)
    assert board(leaderboard) == expected
    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == (Battle.Status.DECIDED, "A")


# A long idle wait: `make soak`.
@pytest.mark.soak
def test_an_idle_page_keeps_its_socket(arena_servers, browser):
    # Given a leaderboard page subscribed to live updates
    page = new_context(browser, arena_servers.base_url).new_page()
    with page.expect_websocket() as opened:
        page.goto("/")
    socket = opened.value
    wait_for_socket(page)

    # When nothing happens for longer than the channel layer's blocking pop (5 s)
    # Then the server does not drop the socket (with redis-py 8's default 5 s socket
    # timeout every idle consumer died with TimeoutError: django/channels_redis#422)
    with pytest.raises(PlaywrightTimeoutError):
        socket.wait_for_event("close", timeout=8_000)
