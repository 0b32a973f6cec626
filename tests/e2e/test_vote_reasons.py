"""Reasons with votes in a real browser against the real server: a judge votes, the "say
why" form appears naming sides A and B only (nothing in it or in what the browser
received for it names an agent while the vote can be undone), she tags both sides and
adds a note, and once the battle is decided the agent page shows the counts."""

import random
import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from accounts.models import Team
from accounts.services import consent_terms_publish
from agents.models import Agent
from agents.services import roster_install_builtins
from battles.models import Battle, Run
from battles.services import task_submit
from judging.models import VoteReason
from tests.conftest import make_person
from tests.e2e.test_arena_loop import PASSWORD, production_hash
from tests.e2e.test_judge_page import (
    FINAL_A,
    FINAL_B,
    INSTRUCTION,
    fill_side,
    forbidden_strings,
    identity_hits,
    log_in,
)
from tests.servers import ensure_public_arena

pytestmark = pytest.mark.e2e

UNDO_S = 3


@pytest.fixture
def undo_window(settings):
    """Before the servers start: they take the window from this process's settings."""
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=UNDO_S)


@pytest.fixture
def one_judge_battle(undo_window, arena_servers):
    """A battle through admission whose lanes are test data, one judge wanted: the
    entrant Nimbus Seven on side A, the built-in Rulebook on side B."""
    terms = consent_terms_publish(text="You agree to publication.")
    roster = roster_install_builtins(arena=ensure_public_arena())
    owner = make_person("lab-owner", "Entrant Labs", terms)
    entrant = Agent.objects.create(
        arena=roster[0].arena, slug="nimbus-7", display_name="Nimbus Seven",
        kind=Agent.Kind.SCAFFOLD, provider="nimbuscorp", model_id="nimbus-7-pro-20261001",
        aliases=["NimbusBot"], team=Team.objects.get(memberships__user=owner),
    )  # fmt: skip
    submitter = make_person("sam", "Submitters Guild", terms)
    battle = task_submit(user=submitter, instruction=INSTRUCTION, rng=random.Random(3))
    rulebook = Agent.objects.get(slug="rulebook")
    Battle.objects.filter(pk=battle.pk).update(
        agent_a=entrant, agent_b=rulebook, status=Battle.Status.JUDGING,
        ended_at=timezone.now(), redundancy_target=1,
    )  # fmt: skip
    Run.objects.filter(battle=battle, side="A").update(agent=entrant)
    Run.objects.filter(battle=battle, side="B").update(agent=rulebook)
    media = arena_servers.private_media_root
    fill_side(
        battle.runs.get(side="A"),
        media,
        [("click", {"x": 960, "y": 600}), ("deliver", {"message": FINAL_A})],
        FINAL_A,
    )
    fill_side(
        battle.runs.get(side="B"),
        media,
        [("type", {"text": "milk eggs bread"}), ("deliver", {"message": FINAL_B})],
        FINAL_B,
    )
    judge = make_person("judith", "judith-team", terms)
    judge.password = production_hash(PASSWORD)  # the servers know no MD5 hasher
    judge.save(update_fields=["password"])
    battle.refresh_from_db()
    return battle, judge, arena_servers.base_url


def test_a_judge_tags_both_sides_and_the_agent_page_counts_them(one_judge_battle, browser):
    battle, judith, base_url = one_judge_battle
    names, patterns = forbidden_strings(battle)
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    log_in(page, "judith")
    page.goto("/judge/")
    reasons = page.locator("#vote-reasons")
    expect(reasons.locator("#reasons-form")).to_have_count(0)  # nothing before the vote

    # When she votes A once the reading time has passed
    vote_a = page.locator('#vote-form button[value="A"]')
    expect(vote_a).to_be_enabled(timeout=15_000)
    received = []
    page.on("response", lambda r: received.append(r) if "/reasons/" in r.url else None)
    vote_a.click()

    # Then the form appears inside the undo window, naming sides A and B only
    expect(page.locator("#undo")).to_be_visible()
    form = page.locator("#reasons-form")
    expect(form).to_be_attached()
    page.locator("#vote-reasons summary").first.click()
    expect(form.locator('fieldset[data-side="A"] legend')).to_have_text("Side A")
    expect(form.locator('fieldset[data-side="B"] legend')).to_have_text("Side B")
    # (fetched as the vote request ended, so inside the window; the form never names an
    # agent at any time: tests/judging/test_reasons_pages.py pins that inside the window)
    html = reasons.inner_html()
    assert identity_hits(html, names, patterns) == []
    assert received and all(identity_hits(r.text(), names, patterns) == [] for r in received)
    done = form.locator('fieldset[data-side="A"] input[value="completed"]')
    assert done.locator("xpath=..").get_attribute("title").startswith("Did everything")

    # She ticks what went right on A and wrong on B, with a note, and saves
    done.check()
    form.locator('fieldset[data-side="A"] input[value="efficient"]').check()
    form.locator('fieldset[data-side="B"] input[value="false_success"]').check()
    form.locator('fieldset[data-side="B"] input[value="gave_up"]').check()
    page.fill("#note-B", "Said the list was done; the screen shows it empty.")
    page.locator("#reasons-save").click()
    expect(page.locator("#reasons-status")).to_have_text("Saved.")
    assert identity_hits(page.locator("#vote-reasons").inner_html(), names, patterns) == []
    stored = {r.side: r.tags for r in VoteReason.objects.filter(vote__judge=judith)}
    assert stored == {"A": ["completed", "efficient"], "B": ["false_success", "gave_up"]}

    # Once the window passes the battle is decided (her page asks) and the names show
    expect(page.locator("#reveal-card .reveal-a")).to_have_text("Nimbus Seven", timeout=20_000)
    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == ("decided", "A")

    # The agent pages show what judges said, over one tagged vote each
    page.goto("/agents/nimbus-7/")
    said = page.locator("#judges-said")
    expect(said.locator("#tagged-votes")).to_have_text("1")
    expect(said.locator('tr[data-tag="completed"] .count')).to_have_text(re.compile(r"^1\s+of 1$"))
    expect(said.locator('tr[data-tag="efficient"] .count')).to_have_text(re.compile(r"^1\s+of 1$"))
    expect(said.locator('tr[data-tag="gave_up"] .count')).to_have_text(re.compile(r"^0\s+of 1$"))
    page.goto("/agents/rulebook/")
    expect(said.locator('tr[data-tag="false_success"] .count')).to_have_text(
        re.compile(r"^1\s+of 1$")
    )
    expect(said.locator('tr[data-tag="completed"] .count')).to_have_text(re.compile(r"^0\s+of 1$"))
    context.close()
