"""The tournament workbench in Chromium against the real servers (Daphne and a worker on
the evals queue): a team member fills the "New evaluation" form for a single-elimination
tournament of four candidates — in an order of their own, with opening matchups, best of
three and a seed — on the fake provider servers of tests/evals/tournament_world.py's
world (in this process, on 127.0.0.1); watches the progress move and reach done without
a reload; sees each task's bracket, the coverage and the ratings; downloads the record
and opens the audit report, which renders under its own policy, runs no script and
fetches nothing but itself. axe finds nothing, the site's policy is never violated, and
charlie, of another team, gets 404 on every page of it."""

import json
import re

import pytest
from playwright.sync_api import expect

from accounts.services import consent_terms_current
from evals.models import Evaluation
from tests.agents.conftest import LOOPBACK
from tests.conftest import make_person
from tests.e2e.conftest import _LIVE_ARENA
from tests.e2e.test_accessibility import violations
from tests.e2e.test_arena_loop import PASSWORD, production_hash
from tests.e2e.test_evaluations import STATES, consistent, evaluations_page
from tests.e2e.test_judge_page import log_in
from tests.evals.test_tournament_pages import REPORT_POLICY
from tests.evals.tournament_world import suite_bytes
from tests.servers import live_arena

pytestmark = pytest.mark.e2e

# The order s, q, p, r with opening matchups s-p and q-r, best of three. Task 1: s beats
# p 2-1, r sweeps q, s sweeps r. Task 2: p sweeps s; q and r win one each and draw one
# (a drawn series), q takes the first tie-break; the final p-q opens with disagreeing
# orders (a draw), then q and p win one each: drawn, and q wins the first tie-break.
SCRIPT = {
    (1, "s", "p"): ["AA", "BB", "AA"],
    (1, "q", "r"): ["BB", "BB"],
    (1, "s", "r"): ["AA", "AA"],
    (2, "s", "p"): ["BB", "BB"],
    (2, "q", "r"): ["AA", "BB", "tt", "AA"],
    (2, "p", "q"): ["AB", "BB", "AA", "BB"],
}
ANSWERS, GAMES = 2 * 4, 7 + 10


@pytest.fixture
def tournament_arena(request, transactional_db, tmp_path, sandbox_root, monkeypatch, world):
    """The world's agents, erin of Acme and charlie of Umbrella with passwords to log in,
    and the arena's servers, whose worker may call loopback and reads the fakes' key
    from its environment (the world set it)."""
    monkeypatch.setenv("ARENA_INTERNAL_ALLOWLIST", LOOPBACK)
    for name, team in (("erin", "Acme"), ("charlie", "Umbrella")):
        person = make_person(name, team, consent_terms_current())
        person.password = production_hash(PASSWORD)
        person.save(update_fields=["password"])
    world.judge.script = SCRIPT
    world.judge.pause_s = 0.1  # the run lasts long enough for its progress to be seen
    with live_arena(tmp_path, sandbox_root) as servers:
        request.node.stash[_LIVE_ARENA] = servers
        yield servers


def test_a_tournament_from_the_form_runs_live_to_its_brackets_and_report(tournament_arena, browser):
    base_url = tournament_arena.base_url
    page = evaluations_page(browser, base_url)
    page.context.add_init_script(STATES)

    # Given the form, filled as a person would: four candidates in an order of their own
    page.set_input_files(
        "#id_suite", {"name": "lines.json", "mimeType": "application/json",
                      "buffer": suite_bytes(2)},
    )  # fmt: skip
    for slug in ("p", "q", "r", "s"):
        page.check(f'input[name="agents"][value="{slug}"]')
    page.fill("#id_order", "s q p r")
    page.select_option("#id_judge", "judge")
    page.select_option("#id_tournament", "single-elimination")
    page.fill("#id_best_of", "3")
    page.fill("#id_seed", "5")
    page.fill("#id_opening", "s vs p\nq, r")
    tournament_arena.resume_workers()

    # When it is sent, the run page opens and its socket brings the progress
    page.click("#eval-create")
    page.wait_for_url(re.compile(r".*/evaluations/\d+/$"))
    evaluation = Evaluation.objects.get()
    assert page.url == f"{base_url}/evaluations/{evaluation.pk}/"
    page.evaluate("window.__sameDocument = true")
    expect(page.locator("#eval-schedule")).to_have_text(
        "single-elimination · best of 3 · seed 5 · opening matchups s vs p, q vs r"
    )
    expect(page.locator("#eval-status")).to_have_text("done", timeout=30_000)
    expect(page.locator("#eval-live")).to_have_attribute("data-settled", "true")

    # Then the bar moved through the frames and reached the games played, in one document,
    # and no state showed "done" beside a cancel button or brackets not yet brought up to date
    states = page.evaluate("window.__states")
    assert any(s["status"] in ("pending", "running") and s["cancel"] for s in states), states
    assert consistent(states) == [], states
    assert (states[-1]["status"], states[-1]["cancel"], states[-1]["pending"]) == ("done", False, 0)
    assert page.evaluate("window.__sameDocument") is True
    seen = page.evaluate("window.__seen")
    assert any(0 < done < ANSWERS + GAMES for done in seen), seen
    assert seen[-1] == ANSWERS + GAMES
    expect(page.locator("#eval-bar")).to_have_attribute("max", str(ANSWERS + GAMES))
    expect(page.locator('[data-part="pairs"]')).to_have_text(f"Games {GAMES} / {GAMES}")
    expect(page.locator("#eval-estimate")).to_have_count(0)
    expect(page.locator("#eval-cancel")).to_have_count(0)

    # And each task's bracket, read again over HTTP after the last frame
    first, second = (page.locator(f'.t-task[data-task="t0{n}"]') for n in (1, 2))
    expect(first).to_have_attribute("data-champion", "s")
    expect(second).to_have_attribute("data-champion", "q")
    expect(first.locator(".bracket-round")).to_have_count(2)
    expect(first.locator(".bracket-round").first.locator(".t-series")).to_have_count(2)
    expect(first.locator('.t-series[data-series="s-p"] .t-games li')).to_have_count(3)
    expect(first.locator('.t-series[data-series="s-p"] .t-side.won')).to_have_text("s advances")
    final = second.locator('.t-series[data-series="p-q"]')
    expect(final).to_have_attribute("data-status", "drawn")
    expect(final.locator(".t-outcome")).to_have_text(
        "1–1, 1 draw · q advances on a tie-break 1 tie-break"
    )
    expect(page.locator("#eval-coverage")).to_contain_text(
        f"{GAMES} played · {GAMES} resolved · 0 failed"
    )
    expect(page.locator("#eval-complete")).to_contain_text("complete: every game")
    expect(page.locator("#eval-ratings tbody tr")).to_have_count(4)
    assert page.evaluate("window.__violations") == []
    assert violations(page) == []

    # The record downloads: the tournament record, in the order given
    with page.expect_download() as download:
        page.click("#eval-record")
    record = json.loads(download.value.path().read_text())
    assert record["schema"] == "agent-arena/tournament-record/1"
    assert record["tournament"]["candidates"] == ["s", "q", "p", "r"]
    assert record["tournament"]["opening_matchups"] == [["s", "p"], ["q", "r"]]
    assert (record["tournament"]["best_of"], record["run"]["bootstrap_seed"]) == (3, 5)
    assert [t["champion"] for t in record["tournament"]["tasks"]] == ["s", "q"]

    # The report opens as a standalone document: rendered, no script, nothing fetched
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    with page.expect_navigation() as navigation:
        page.click("#eval-report-open")
    report_url = f"{base_url}/evaluations/{evaluation.pk}/report.html?inline=1"
    response = navigation.value
    assert (response.url, response.status) == (report_url, 200)
    assert response.headers["content-security-policy"] == REPORT_POLICY
    page.wait_for_load_state("networkidle")
    expect(
        page.get_by_role("heading", name=f"Audit report · tournament run {evaluation.pk}")
    ).to_be_visible()
    expect(page.get_by_role("heading", name="Task t02 · complete · champion q")).to_be_visible()
    assert page.evaluate("document.scripts.length + document.images.length") == 0
    assert page.evaluate("window.__violations") == []
    assert requests == [report_url]
    page.context.close()

    # Another team's member finds none of it
    context = browser.new_context(base_url=base_url)
    page = context.new_page()
    log_in(page, "charlie")
    base = f"/evaluations/{evaluation.pk}/"
    for path in ("", "live/", "record.json", "report.html", "report.html?inline=1"):
        assert page.request.get(base + path).status == 404, path
    context.close()
