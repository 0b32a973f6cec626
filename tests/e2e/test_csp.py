"""The Content-Security-Policy in Chromium against the real servers: the leaderboard (its
websocket and htmx included), the judge page, the Django admin and the run waterfall work
with the policy enforced, the browser reports no violation, and every document carries
the header. The chart pages (metrics, agent) are styled by the site's stylesheet alone."""

import datetime as dt
import re

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from accounts.services import consent_terms_current
from agents.services import roster_install_builtins
from battles.models import Span
from tests.arena_site.test_security_headers import POLICY
from tests.conftest import make_person
from tests.e2e.test_arena_loop import PASSWORD, production_hash
from tests.e2e.test_judge_page import judged_battle, log_in, undo_window  # noqa: F401 - fixtures
from tests.servers import ensure_public_arena

pytestmark = pytest.mark.e2e

# Every violation the page reports, and the frames htmx's websocket extension swapped in.
PROBE = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__violations.push(`${e.effectiveDirective} blocked ${e.blockedURI || "inline"}`
                           + ` at ${e.sourceFile}:${e.lineNumber}`);
});
window.__wsMessages = 0;
document.addEventListener("htmx:wsAfterMessage", () => { window.__wsMessages += 1; });
"""


class Watch:
    """The pages of one browser context: each document's CSP header, and every violation
    the pages report (as events and as console messages)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.console: list[str] = []
        self.sockets: list[str] = []
        page.on("console", self._on_console)
        page.on("websocket", lambda ws: self.sockets.append(ws.url))

    def _on_console(self, message) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            self.console.append(message.text)

    def open(self, path: str) -> None:
        response = self.page.goto(path)
        assert response is not None and response.status == 200, (path, response)
        assert response.headers["content-security-policy"] == POLICY, path
        self.page.wait_for_load_state("networkidle")
        self.assert_clean(path)

    def assert_clean(self, where: str) -> None:
        assert self.page.evaluate("window.__violations") == [], where
        assert self.console == [], where


def test_the_pages_run_under_the_policy_without_a_violation(judged_battle, browser):  # noqa: F811
    battle, (judith, _), base_url = judged_battle
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    context.add_init_script(PROBE)
    page = context.new_page()
    watch = Watch(page)

    # The leaderboard: htmx (no eval) opens its websocket ('self' covers ws://) and swaps
    # the frames it receives
    watch.open("/")
    page.wait_for_function("() => window.__wsMessages >= 1", timeout=15_000)
    assert [url for url in watch.sockets if url.startswith("ws://")] == [
        base_url.replace("http://", "ws://") + "/ws/leaderboard/"
    ]
    watch.assert_clean("leaderboard with its socket")

    # The judge page: its script runs the replay, the screenshots load
    log_in(page, "judith")
    watch.open("/judge/")
    side_a = page.locator('section.replay[data-side="A"]')
    expect(side_a.locator("output.position")).to_have_text("3 / 3")  # its latest screen
    page.keyboard.press("ArrowLeft")  # back to the click
    expect(side_a.locator(".pointer")).to_be_visible()  # placed through element.style
    assert page.locator("img.shot").first.evaluate("img => img.naturalWidth") == 1280
    watch.assert_clean("judge page after stepping")
    context.close()

    # The admin: its log-in, index, a change list whose script works, a change form
    boss = make_person("boss", None, consent_terms_current())
    boss.password = production_hash(PASSWORD)
    boss.is_staff = boss.is_superuser = True
    boss.save(update_fields=["password", "is_staff", "is_superuser"])
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    context.add_init_script(PROBE)
    page = context.new_page()
    watch = Watch(page)
    watch.open("/admin/login/")
    page.fill("#id_username", "boss")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r".*/admin/$"))
    watch.assert_clean("admin index")
    watch.open("/admin/auth/user/")
    page.locator("#action-toggle").check()  # admin/js/actions.js selects every row
    expect(page.locator("input.action-select").first).to_be_checked()
    watch.open(f"/admin/auth/user/{judith.pk}/change/")
    watch.open(f"/admin/battles/battle/{battle.pk}/change/")

    # The run waterfall, which staff may open at any time: bars as SVG attributes
    run = battle.runs.get(side="A")
    start = timezone.now()
    for offset_ms, kind, latency_ms in ((0, "model", 800), (800, "tool", 1200)):
        Span.objects.create(
            run=run, kind=kind, name=f"{kind} call", latency_ms=latency_ms,
            started_at=start + dt.timedelta(milliseconds=offset_ms),
        )  # fmt: skip
    watch.open(f"/battles/{battle.pk}/runs/A/")
    first, second = (box.bounding_box() for box in page.locator(".waterfall rect.bar").all())
    track = page.locator(".waterfall svg.track").first.bounding_box()
    assert first["x"] == pytest.approx(track["x"], abs=1)
    assert first["width"] == pytest.approx(track["width"] * 0.4, abs=1)
    assert second["x"] == pytest.approx(track["x"] + track["width"] * 0.4, abs=1)
    assert second["width"] == pytest.approx(track["width"] * 0.6, abs=1)
    watch.assert_clean("run page")
    context.close()


# `make soak`: the chart pages' policy test below stays in make test.
@pytest.mark.soak
def test_the_charts_are_styled_by_the_sites_stylesheet(arena_servers, browser):
    roster_install_builtins(arena=ensure_public_arena())
    context = browser.new_context(base_url=arena_servers.base_url)
    page = context.new_page()

    # arena.css, not the charts' own (refused) <style> and style attribute
    for path in ("/metrics/", "/agents/rulebook/"):
        response = page.goto(path)
        assert response.headers["content-security-policy"] == POLICY
        chart = page.locator("svg.mx-svg").first
        assert chart.evaluate("svg => getComputedStyle(svg).display") == "block", path
        assert chart.evaluate("svg => getComputedStyle(svg).maxWidth") == "480px", path
    page.goto("/metrics/")
    axis = page.locator("#latency-plot .mx-axis").first
    # var(--muted), #5f6779
    assert axis.evaluate("line => getComputedStyle(line).stroke") == "rgb(95, 103, 121)"
    context.close()


def test_the_chart_pages_run_under_the_policy_without_a_violation(arena_servers, browser):
    roster_install_builtins(arena=ensure_public_arena())
    context = browser.new_context(base_url=arena_servers.base_url)
    context.add_init_script(PROBE)
    watch = Watch(context.new_page())

    watch.open("/metrics/")
    watch.open("/agents/rulebook/")
    context.close()
