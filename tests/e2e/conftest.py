"""End-to-end fixtures: the arena as real processes (Daphne + an RQ worker) on the test
database, and a headless Debian Chromium driven by Playwright's sync API."""

import os
from collections.abc import Iterator

import pytest
from django.db import connections

from tests.evals.tournament_world import world  # noqa: F401 - the tournaments' world (test_tournaments)
from tests.servers import LiveArena, live_arena

CHROMIUM = "/usr/lib/chromium/chromium"
# No network beyond 127.0.0.1: keep Chromium from phoning home.
CHROMIUM_ARGS = [
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
_LIVE_ARENA = pytest.StashKey[LiveArena]()


@pytest.fixture
def arena_servers(request, transactional_db, tmp_path, sandbox_root) -> Iterator[LiveArena]:
    """Daphne and one worker on every queue, against the committed test database. The
    worker starts suspended: call ``resume_workers()`` once jobs may run. On a failure
    the tails of their logs are added to the report."""
    with live_arena(tmp_path, sandbox_root) as arena:
        request.node.stash[_LIVE_ARENA] = arena
        yield arena


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    arena = item.stash.get(_LIVE_ARENA, None)
    if arena is not None and report.failed and report.when in ("call", "teardown"):
        report.sections.append(("arena server logs", arena.logs()))
    return report


@pytest.fixture
def browser(monkeypatch):
    """Headless Chromium. Playwright's sync API runs an event loop in this thread, which
    Django's ORM guard would refuse; the test's own ORM calls are plain blocking ones."""
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            # Chromium's own sandbox refuses to run as root; Playwright then passes
            # --no-sandbox. As any other user the sandbox stays on.
            chromium_sandbox=os.geteuid() != 0,
            args=CHROMIUM_ARGS,
        )
        try:
            yield browser
        finally:
            browser.close()
            # Inside Playwright's context the ORM opened connections of its own; left
            # open, they would keep pytest-django from dropping the test database.
            connections.close_all()
