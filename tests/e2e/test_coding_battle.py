"""A real coding battle read by a judge in Chromium against the real servers: two
scaffold agents (fake Messages APIs on 127.0.0.1) fix calc.py in real sandboxes, the
judge sandboxes grade both diffs, screening opens the battle, and the judge's page shows
both diffs side by side, highlighted, with the results beside them: nothing names the
agents, the Content-Security-Policy holds without a violation, and axe finds nothing
serious. With ``ARENA_SCREENSHOT_DIR`` set the page is saved there as
``coding-battle.png`` (docs/coding-battle.png is that file)."""

import os
import threading
from pathlib import Path

import pytest
from django.db import connection
from playwright.sync_api import expect

from accounts.services import consent_terms_publish
from battles.coding_models import CodingOutcome
from battles.services import battle_run
from judging.services import battle_screen
from tests.agents.conftest import LOOPBACK
from tests.agents.fake_providers import FakeAnthropic
from tests.coding import repos
from tests.coding.test_coding_battles import KEY, battle_between, scaffold, script
from tests.conftest import make_person
from tests.e2e.test_accessibility import violations
from tests.e2e.test_arena_loop import PASSWORD, production_hash
from tests.e2e.test_blindness import recorder
from tests.e2e.test_csp import PROBE, Watch
from tests.e2e.test_judge_page import log_in
from tests.servers import ensure_public_arena

pytestmark = pytest.mark.e2e


def run_battle(battle_id: int) -> None:
    try:
        battle_run(battle_id=battle_id)
        battle_screen(battle_id=battle_id)
    finally:
        connection.close()


def test_a_judge_reads_a_real_coding_battle_blind(
    arena_servers, browser, monkeypatch, settings, tmp_path
):
    # Given a coding battle run for real: A fixes add(), B fixes it and breaks sub()
    settings.ARENA = settings.ARENA.replace(internal_allowlist=LOOPBACK)
    monkeypatch.setenv("CODING_TEST_ANTHROPIC_API_KEY", KEY)
    terms = consent_terms_publish(text="You agree to publication.")
    arena = ensure_public_arena()
    submitter = make_person("sam", "Submitters Guild", terms)
    fix_add = script("cd /work/repo && sed -i '0,/a - b/s//a + b/' calc.py", message="fixed add")
    fix_all = script(
        "cd /work/repo && cat calc.py", "cd /work/repo && sed -i 's/a - b/a + b/g' calc.py",
        message="replaced every minus",
    )  # fmt: skip
    with (
        FakeAnthropic(api_key=KEY, policy=fix_add) as fa,
        FakeAnthropic(api_key=KEY, policy=fix_all) as fb,
    ):
        a, b = scaffold(arena, "zorblax", fa.base_url), scaffold(arena, "quuxotic", fb.base_url)
        battle = battle_between(submitter, a, b, repos.FIX, tmp_path)
        # In a thread of its own: this one runs Playwright's event loop, and the battle
        # publishes to its page's socket (async_to_sync) as it goes.
        worker = threading.Thread(target=run_battle, args=(battle.pk,))
        worker.start()
        worker.join(timeout=300)
    battle.refresh_from_db()
    assert battle.status == "judging", battle.exclusion_reason
    judith = make_person("judith", "Judith's", terms)
    judith.password = production_hash(PASSWORD)  # the servers know no MD5 hasher
    judith.save(update_fields=["password"])

    # When the judge opens the judge page (the policy enforced, every response kept)
    context = browser.new_context(
        base_url=arena_servers.base_url, viewport={"width": 1280, "height": 800}
    )
    context.add_init_script(PROBE)
    page = context.new_page()
    watch = Watch(page)
    received: list[tuple[str, str]] = []
    recorder(page, received)
    log_in(page, "judith")
    watch.open("/judge/")

    # Then both diffs are there, file by file, highlighted, the results beside them
    expect(page.locator("#vote-form")).to_have_attribute("hx-post", f"/judge/{battle.pk}/vote/")
    for side in ("A", "B"):
        column = page.locator(f"#coding-{side}")
        expect(column.locator(".diff-file summary code.path")).to_have_text(["calc.py"])
        expect(column.locator(".dl.add .tk-k").first).to_have_text("return")
        expect(column.locator(".applied")).to_have_text("Git apply")
        expect(column.locator(".success")).to_contain_text("passed (run by the judge's harness)")
    expect(page.locator("#coding-A .tests")).to_have_text("2 of 2 passed")
    expect(page.locator("#coding-B .tests")).to_have_text("1 of 2 passed")
    expect(page.locator("#coding-A .dl.add")).to_have_count(1)
    expect(page.locator("#coding-B .dl.add")).to_have_count(2)
    for side, functional, regression in (("A", 1.0, 1.0), ("B", 1.0, 0.5)):
        outcome = CodingOutcome.objects.get(run__battle=battle, run__side=side)
        assert (outcome.functional, outcome.regression) == (functional, regression)
        # the composite contains the cost: it shows with the names, not blind
        expect(page.locator(f"#coding-{side} .coding-scores")).not_to_contain_text("Composite")
    # and the diff colours come from the site's stylesheet (no inline style)
    colour = page.locator("#coding-A .dl.add .tk-k").first.evaluate(
        "e => getComputedStyle(e).color"
    )
    assert colour == "rgb(164, 14, 38)"
    # and the agents' steps, as in any battle
    expect(page.locator("#side-B ol.timeline li")).to_have_count(3)

    # Nothing the judge's browser received names the agents, their models or teams
    names = [n for agent in (a, b) for n in (agent.display_name, agent.slug, agent.model_id)]
    leaked = [(url, n) for url, body in received for n in names if n.lower() in body.lower()]
    assert leaked == []
    watch.assert_clean("the judge page of a coding battle")
    assert violations(page) == []

    if directory := os.environ.get("ARENA_SCREENSHOT_DIR"):
        # The whole page in one window, so the vote bar sits where it does at the end.
        expect(page.locator("#read-timer")).to_contain_text("Voting is open", timeout=15_000)
        height = page.evaluate("document.documentElement.scrollHeight")
        page.set_viewport_size({"width": 1280, "height": height})
        page.screenshot(path=str(Path(directory) / "coding-battle.png"))
    context.close()

    # And the submitter's battle page shows every phase with its time, under the same
    # policy and as cleanly for axe
    sam = submitter
    sam.password = production_hash(PASSWORD)
    sam.save(update_fields=["password"])
    context = browser.new_context(
        base_url=arena_servers.base_url, viewport={"width": 1280, "height": 800}
    )
    context.add_init_script(PROBE)
    page = context.new_page()
    watch = Watch(page)
    log_in(page, "sam")
    watch.open(f"/battles/{battle.pk}/")
    rows = page.locator("#phases tbody tr")
    expect(rows.first).to_have_attribute("data-phase", "clone")
    phases = rows.evaluate_all("rows => rows.map(r => r.dataset.phase + ' ' + r.dataset.status)")
    assert "judge sandbox ok" in phases and "lint and complexity ok" in phases
    expect(page.locator("#coding-B .tests")).to_have_text("1 of 2 passed")
    assert violations(page) == []
    context.close()
