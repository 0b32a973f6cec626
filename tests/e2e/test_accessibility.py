"""Every page through axe-core (axe-playwright-python bundles it: nothing is fetched)
in headless Chromium against the real servers: no "serious" or "critical" violation on
any of them. The pages: the leaderboard (the home page), an agent's page, the metrics,
log in, sign up, submit, settings, a battle's live page, a run's waterfall, the judge page
(before and after the vote), a team's page, an invite link, a team's agents and their
test drives, the 400/403/404/500 pages, the API documentation (Swagger UI) and the staff
judging-quality page."""

import contextlib

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.test import RequestFactory
from django.urls import NoReverseMatch, reverse
from django.views import defaults
from playwright.sync_api import Page, expect

from accounts.models import Membership
from accounts.services import consent_terms_current, team_invite_create
from agents.models import Agent
from battles.models import TestDrive
from tests.arena_site.test_security_headers import POLICY
from tests.conftest import make_person
from tests.e2e.test_arena_loop import PASSWORD, production_hash
from tests.e2e.test_csp import PROBE
from tests.e2e.test_judge_page import judged_battle, log_in, undo_window  # noqa: F401 - fixtures
from tests.environments.environment_factories import desktop_state, environment

pytestmark = pytest.mark.e2e

BLOCKING = ("serious", "critical")
AXE = Axe()


def violations(page: Page) -> list[str]:
    """axe-core's serious and critical findings on the page as it stands, one line each
    (rule, impact, how many elements, the first element's selector and the fix)."""
    results = AXE.run(page).response
    found = []
    for v in results["violations"]:
        if v["impact"] in BLOCKING:
            node = v["nodes"][0]
            found.append(
                f"{v['id']} ({v['impact']}, {len(v['nodes'])}x) at {node['target']}: "
                f"{node.get('failureSummary', '').splitlines()[-1].strip()}"
            )
    return found


def check(page: Page, path: str, report: dict[str, list[str]], status: int = 200) -> None:
    """Opens ``path`` and records its findings in ``report`` (the test asserts once, at
    the end, so that one run lists every page's findings)."""
    response = page.goto(path)
    assert response is not None and response.status == status, (path, response and response.status)
    page.wait_for_load_state("networkidle")
    report[path] = violations(page)


def error_html(status: int) -> str:
    """The site's own 400/403/500 pages as Django's handlers render them."""
    request = RequestFactory().get("/somewhere/")
    request.user = AnonymousUser()
    response = {
        400: lambda: defaults.bad_request(request, SuspiciousOperation("bad")),
        403: lambda: defaults.permission_denied(request, PermissionDenied()),
        500: lambda: defaults.server_error(request),
    }[status]()
    assert response.status_code == status
    return response.content.decode()


def serve(html: str, status: int):
    def handler(route, request) -> None:
        route.fulfill(status=status, body=html, content_type="text/html; charset=utf-8")

    return handler


def test_every_page_has_no_serious_or_critical_violation(judged_battle, browser):  # noqa: F811
    battle, _, base_url = judged_battle
    report: dict[str, list[str]] = {}
    boss = make_person("boss", None, consent_terms_current())
    boss.password = production_hash(PASSWORD)
    boss.is_staff = boss.is_superuser = True
    boss.save(update_fields=["password", "is_staff", "is_superuser"])
    agent = Agent.objects.get(slug="rulebook")

    # Visitors: the public pages, the error pages and the API documentation
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 800})
    context.add_init_script(PROBE)  # records Content-Security-Policy violations
    page = context.new_page()
    public = ["/", f"/agents/{agent.slug}/", "/metrics/", "/accounts/login/",
              "/accounts/signup/", "/environments/", "/method/"]  # fmt: skip
    with contextlib.suppress(NoReverseMatch):  # the matrices page, where it exists
        public.append(reverse("ratings:matrices"))
    for path in public:
        check(page, path, report)
    # The API documentation, once Swagger UI has drawn the operations, then with one open;
    # under the site's unchanged policy, which it does not violate
    response = page.goto("/api/docs/")
    assert response.headers["content-security-policy"] == POLICY
    operation = page.locator(".opblock-summary-control").first
    expect(operation).to_be_visible()
    assert page.locator("script[src*='drf_spectacular_sidecar/swagger-ui-dist']").count() == 2
    report["/api/docs/"] = violations(page)
    operation.click()
    expect(page.locator(".opblock-body").first).to_be_visible()
    report["/api/docs/ (an operation open)"] = violations(page)
    assert page.evaluate("window.__violations") == []
    check(page, "/no-such-page/", report, status=404)
    for status in (400, 403, 500):
        html = error_html(status)
        # Served at the arena's own origin, so its stylesheet loads as on a real error.
        page.route(f"{base_url}/__error/{status}/", serve(html, status))
        check(page, f"/__error/{status}/", report, status=status)
    context.close()

    # A judge: the judge page before and after her vote, submit, settings, the battle
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    log_in(page, "judith")
    check(page, "/judge/", report)
    vote_a = page.locator('#vote-form button[value="A"]')
    expect(vote_a).to_be_enabled(timeout=15_000)
    report["/judge/ (voting open)"] = violations(page)
    vote_a.click()
    expect(page.locator("#reveal-card")).to_be_visible()
    report["/judge/ (after the vote)"] = violations(page)
    for path in ("/submit/", "/accounts/settings/", f"/battles/{battle.pk}/"):
        check(page, path, report)
    # Her team's page (members, and an owner's invite links), an invite link's page and
    # the page of her team's agents
    membership = Membership.objects.select_related("team").get(user__username="judith")
    owner = membership.team.memberships.get(role=Membership.Role.OWNER).user
    _, token = team_invite_create(team=membership.team, actor=owner)
    for path in (f"/accounts/teams/{membership.team_id}/", f"/accounts/invites/{token}/",
                 "/my-agents/"):  # fmt: skip
        check(page, path, report)
    context.close()

    # Staff: the run waterfall (it names the model) and the judging-quality page
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("#id_username", "boss")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    page.wait_for_load_state("networkidle")
    for path in (f"/battles/{battle.pk}/runs/A/", "/judging/quality/"):
        check(page, path, report)
    # An agent's test drives and one drive's page, as an admin sees them
    drive = TestDrive.objects.create(
        agent=agent, requested_by=boss, sample="demo", instruction="Open the news page."
    )
    for path in (f"/my-agents/{agent.pk}/test-drives/", f"/test-drives/{drive.pk}/"):
        check(page, path, report)
    # A training environment made from the battle, listed and shown as staff see it
    made = environment(battle, state={**desktop_state(), "attachments": []})
    for path in ("/environments/", f"/environments/{made.pk}/"):
        check(page, path, report)
    context.close()

    assert len(report) >= 24
    assert {path: found for path, found in report.items() if found} == {}
