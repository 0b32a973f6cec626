"""Pages that follow their state without a reload, in Chromium against the real servers
(uvicorn and a worker):

- a test drive: its team starts it from the agent's page, lands on the drive's page
  while it is queued, and watches it run and end over the socket (steps, screenshots,
  "done") in the same document;
- training environments: a visitor's empty list gets the environment once it is
  validated, and staff watch an environment's page go from validating to ready, both by
  the pages' own polling, in the same document."""

import re

import pytest
from playwright.sync_api import Page, expect

from accounts.services import consent_terms_current, consent_terms_publish
from agents.models import Agent, Arena
from battles.models import TestDrive
from environments.models import Environment
from tests.conftest import make_person
from tests.e2e.test_arena_loop import (
    PASSWORD,
    assert_not_reloaded,
    mark_document,
    new_context,
    production_hash,
)
from tests.environments.environment_factories import environment, source_battle
from tests.ratings.factories import judges

pytestmark = pytest.mark.e2e

# Every status the drive's page showed, as htmx swapped each frame in.
SEEN = """
window.__statuses = [];
document.addEventListener("htmx:wsAfterMessage", () => {
  const status = document.getElementById("drive-status");
  if (status) window.__statuses.push(status.textContent.trim());
});
"""


def person(name: str, team: str | None, **fields):
    if consent_terms_current() is None:
        consent_terms_publish(text="You agree to publication.")
    user = make_person(name, team, consent_terms_current())
    user.password = production_hash(PASSWORD)
    for key, value in fields.items():
        setattr(user, key, value)
    user.save()
    return user


def log_in(page: Page, username: str) -> None:
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


def test_a_test_drive_moves_from_queued_to_done_without_a_reload(arena_servers, browser):
    erin = person("erin", "Acme")
    agent = Agent.objects.create(
        arena=Arena.objects.public(), slug="acme-rulebook", display_name="Acme Rulebook",
        kind="builtin", builtin_policy="rulebook", team=erin.memberships.get().team,
    )  # fmt: skip
    context = new_context(browser, arena_servers.base_url)
    context.add_init_script(SEEN)
    page = context.new_page()
    log_in(page, "erin")

    # Given the drive started from the agent's page, while no worker takes jobs
    page.goto(f"/my-agents/{agent.pk}/test-drives/")
    page.click("#start-drive")
    page.wait_for_url(re.compile(r".*/test-drives/\d+/$"))
    drive = TestDrive.objects.get(agent=agent)
    expect(page.locator("#drive-status")).to_have_text("queued")
    expect(page.locator("#live-status")).to_have_text("Live", timeout=15_000)
    mark_document(page)

    # When the worker runs it
    arena_servers.resume_workers()

    # Then the page follows it to its end, in the same document
    expect(page.locator("#drive-status")).to_have_text("done", timeout=90_000)
    assert_not_reloaded(page)
    statuses = page.evaluate("window.__statuses")
    assert "running" in statuses, statuses
    assert statuses[-1] == "done"
    run = drive.runs.get()
    steps = run.steps.count()
    assert steps >= 1
    expect(page.locator("#drive-steps > li[data-step]")).to_have_count(steps)
    expect(page.locator("#drive-steps img.thumb").first).to_be_visible()
    expect(page.locator("#end-reason")).to_have_text(
        "Acme Rulebook finished and delivered its answer."
    )
    expect(page.locator("#final-message")).not_to_be_empty()
    context.close()


def test_environments_appear_and_change_state_without_a_reload(arena_servers, browser, roster):
    alice = person("alice", "Acme")
    root = person("root", None, is_staff=True, is_superuser=True)
    judge = judges(1)[0]
    env = environment(source_battle(alice, roster, judge, days=30), status="graded")
    context = new_context(browser, arena_servers.base_url)

    # Given a visitor on the empty list, told why it is empty
    visitor = context.new_page()
    visitor.goto("/environments/")
    expect(visitor.locator("#environments-empty")).to_contain_text(
        "No environment is published yet"
    )
    expect(visitor.locator("#environments-on-the-way")).to_contain_text("1 being built or checked")
    mark_document(visitor)

    # and staff on the environment's page while its replays run
    staff_context = new_context(browser, arena_servers.base_url)
    staff = staff_context.new_page()
    log_in(staff, root.username)
    staff.goto(f"/environments/{env.pk}/")
    expect(staff.locator("#environment-status")).to_have_text("validating")
    mark_document(staff)

    # When its validation ends (as environments.validation writes it)
    Environment.objects.filter(pk=env.pk).update(
        status=Environment.Status.VALIDATED, validated_at=env.failed_at, conversion_s=400.0
    )

    # Then both pages show it without a reload
    expect(staff.locator("#environment-status")).to_have_text("ready", timeout=15_000)
    expect(staff.locator("#package-download")).to_be_visible()
    assert_not_reloaded(staff)
    expect(visitor.locator(f'tr[data-environment="{env.pk}"]')).to_be_visible(timeout=15_000)
    expect(visitor.locator(f'tr[data-environment="{env.pk}"] .status')).to_have_text("ready")
    assert_not_reloaded(visitor)
    staff_context.close()
    context.close()
