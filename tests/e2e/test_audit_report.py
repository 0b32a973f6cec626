"""The audit report in a real browser: Chromium opens the file from disk, it renders,
the console stays clean, no script runs, and the page asks for nothing but itself —
not one request beyond the file's own URL. A hostile candidate reply is shown, as
text, once its collapsed section is opened."""

import pytest
from playwright.sync_api import expect

from evals.report import audit_report_html
from tests.evals.test_report import HOSTILE, rr_record

pytestmark = pytest.mark.e2e


def test_the_report_opens_from_disk_and_fetches_nothing(browser, tmp_path):
    path = tmp_path / "report.html"
    path.write_text(audit_report_html(rr_record()), encoding="utf-8")
    url = path.as_uri()
    context = browser.new_context()
    page = context.new_page()
    requests, problems = [], []
    page.on("request", lambda r: requests.append(r.url))
    context.on("request", lambda r: requests.append(r.url))  # workers too, if any
    page.on(
        "console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None
    )
    page.on("pageerror", lambda e: problems.append(str(e)))

    page.goto(url)
    page.wait_for_load_state("networkidle")

    expect(page.get_by_role("heading", name="Audit report · tournament run 41")).to_be_visible()
    expect(page.get_by_role("heading", name="Pairwise judgements")).to_be_visible()
    assert page.evaluate("document.scripts.length") == 0
    # the hostile reply: hidden while collapsed, plain text once opened
    reply = page.locator("pre", has_text="alert(1)")
    expect(reply).to_be_hidden()
    page.locator("summary", has_text="Task t2").first.click()
    page.locator("summary", has_text="gamma · done").last.click()
    expect(reply).to_be_visible()
    assert reply.inner_text() == HOSTILE
    assert set(requests) == {url}
    assert page.evaluate("document.scripts.length + document.images.length") == 0
    assert problems == []
    context.close()
