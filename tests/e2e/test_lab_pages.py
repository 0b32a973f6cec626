"""A lab acts from the browser, against the real servers: its owner finds "My agents"
in the navigation, registers a remote agent through the form (a typo in its
endpoint), sees its secret once, corrects the endpoint, pauses it, starts a test drive
from its page and lands on the drive's page; then invites a colleague from the team's
page, and the colleague signs up through the copied link and lands in the team, with
no other team of their own."""

import re

import pytest
from playwright.sync_api import Page, expect

from accounts.models import Membership
from accounts.services import consent_terms_current, consent_terms_publish
from agents.models import Agent
from battles.models import TestDrive
from tests.agents.conftest import LOOPBACK
from tests.conftest import make_person
from tests.e2e.conftest import _LIVE_ARENA
from tests.e2e.test_accessibility import violations
from tests.e2e.test_arena_loop import PASSWORD, production_hash
from tests.e2e.test_judge_page import log_in
from tests.servers import ensure_public_arena, live_arena

pytestmark = pytest.mark.e2e

COLLEAGUE_PASSWORD = "colleague-Passw0rd!"


@pytest.fixture
def lab_arena(request, transactional_db, tmp_path, sandbox_root, monkeypatch):
    """erin owns team Acme; the servers may reach loopback endpoints (the agent's)."""
    monkeypatch.setenv("ARENA_INTERNAL_ALLOWLIST", LOOPBACK)
    ensure_public_arena()
    if consent_terms_current() is None:
        consent_terms_publish(text="You agree to publication.")
    erin = make_person("erin", "Acme", consent_terms_current())
    erin.password = production_hash(PASSWORD)
    erin.save(update_fields=["password"])
    with live_arena(tmp_path, sandbox_root) as servers:
        request.node.stash[_LIVE_ARENA] = servers
        yield servers


def invited_colleague_joins(page: Page, link: str, username: str, *, team: str) -> None:
    """A newcomer opens an invite ``link``, signs up through it (no team name asked: the
    invite's team is theirs), logs in, accepts the terms and joins ``team``."""
    page.goto(link)
    page.locator("#content").get_by_role("link", name="Sign up").click()
    expect(page.locator("#invited")).to_contain_text(team)
    expect(page.locator("#id_team_name")).to_have_count(0)
    page.fill("#id_username", username)
    page.fill("#id_password1", COLLEAGUE_PASSWORD)
    page.fill("#id_password2", COLLEAGUE_PASSWORD)
    page.get_by_role("button", name="Create account").click()
    page.fill("#id_username", username)
    page.fill("#id_password", COLLEAGUE_PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    page.click("#accept-consent")
    page.click("#join-team")
    expect(page.locator(".messages")).to_contain_text(f"You joined team {team} as a member.")


def test_a_lab_registers_edits_pauses_drives_and_invites_from_the_browser(lab_arena, browser):
    base_url = lab_arena.base_url
    owner = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    page = owner.new_page()
    log_in(page, "erin")

    # Given the navigation's "My agents", when erin registers a remote agent (a typo)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="My agents").click()
    expect(page).to_have_url(f"{base_url}/my-agents/")
    page.click("#register-agent-link")
    expect(page.locator("#key-needed")).to_contain_text("need your team's own provider key")
    assert violations(page) == []
    page.get_by_label("Remote system over HTTP").check()
    page.fill("#id_display_name", "Acme Remote")
    page.fill("#id_endpoint", "http://127.0.0.1:9/ack")
    page.click("#register")

    # Then its secret is shown once, and the agent waits for an admin
    secret = page.locator("#remote-secret").inner_text()
    agent = Agent.objects.get(team__name="Acme")
    assert secret == agent.remote_secret
    expect(page.locator("#agent-state")).to_have_text("pending")

    # When she corrects the endpoint (the answer is the agent's page, with its forms)
    assert violations(page) == []
    page.fill("#id_endpoint", "http://127.0.0.1:9/act")
    page.click("#save-agent")
    expect(page).to_have_url(f"{base_url}/my-agents/{agent.pk}/")
    expect(page.locator(".messages")).to_contain_text("Acme Remote is saved.")
    expect(page.locator("#agent-endpoint")).to_have_text("http://127.0.0.1:9/act")
    assert secret not in page.content()  # shown once

    # and pauses it
    page.fill("#id_reason", "moving servers")
    page.click("#pause-agent")
    expect(page.locator("#agent-state")).to_have_text("paused")
    expect(page.locator("#paused-reason")).to_have_text("moving servers")
    assert Agent.objects.get(pk=agent.pk).is_paused

    # and starts a test drive from its page, she lands on the drive's page
    page.click("#start-test-drive")
    drive = TestDrive.objects.get(agent=agent)
    expect(page).to_have_url(f"{base_url}/test-drives/{drive.pk}/")
    expect(page.locator("h1")).to_contain_text("Acme Remote")

    # When she invites a colleague from the team's page (the navigation's "Team")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Team").click()
    expect(page).to_have_url(re.compile(r"/accounts/teams/\d+/$"))
    page.click("#create-invite")
    link = page.locator("#new-invite-link").inner_text()
    assert link.startswith(f"{base_url}/accounts/invites/")
    # and copies it with the button beside it
    owner.grant_permissions(["clipboard-read", "clipboard-write"], origin=base_url)
    page.click("#copy-invite-link")
    expect(page.locator("#copy-invite-status")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == link

    # Then the colleague signs up through the link, with no team name asked
    colleague = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    other = colleague.new_page()
    invited_colleague_joins(other, link, "frank", team="Acme")

    # and lands in the team, with no other team
    teams = list(
        Membership.objects.filter(user__username="frank").values_list("team__name", "role")
    )
    assert teams == [("Acme", "member")]
    other.get_by_role("navigation", name="Main").get_by_role("link", name="Team").click()
    expect(other.locator("h1")).to_have_text("Team Acme")
    expect(other.locator("main")).to_contain_text("frank")
    owner.close()
    colleague.close()
