"""The evaluation pages in Chromium against the real servers (Daphne and a worker on the
evals queue): a team member creates an evaluation from the form — the 20-task scripted
suite, three candidates and a judge on fake provider servers in this process on
127.0.0.1 — and watches its progress bar move and reach done over the websocket without
a reload, then the results table, the win-rate matrix and the radar; opens one run's
waterfall; the pages pass axe and the Content-Security-Policy; charlie gets a 404."""

import re
from contextlib import ExitStack

import pytest
from playwright.sync_api import expect

from accounts.services import consent_terms_current, consent_terms_publish
from agents.services import roster_install_builtins
from evals.models import EvalRun, Evaluation
from tests.agents.conftest import LOOPBACK
from tests.agents.fake_providers import FakeAnthropic, FakeOpenAI
from tests.conftest import make_person
from tests.e2e.conftest import _LIVE_ARENA
from tests.e2e.test_accessibility import violations
from tests.e2e.test_arena_loop import PASSWORD, production_hash
from tests.e2e.test_csp import PROBE
from tests.e2e.test_judge_page import log_in
from tests.evals.conftest import scaffolds_on
from tests.evals.scripted import KEY, RUBRIC, candidate_policy, judge_policy, suite_bytes
from tests.servers import ensure_public_arena, live_arena

pytestmark = pytest.mark.e2e

EXPECTED = 60 + 118 + 58  # answers, criterion scores, pair judgements (tests/evals/scripted.py)

# Each frame's count of what is done, as the page had it after htmx swapped the frame in.
SEEN = """
window.__seen = [];
document.addEventListener("htmx:wsAfterMessage", () => {
  const progress = document.getElementById("eval-progress");
  if (progress) window.__seen.push(Number(progress.dataset.done));
});
"""


@pytest.fixture
def evaluation_arena(request, transactional_db, tmp_path, sandbox_root, monkeypatch):
    """The scripted world's agents on fakes in this process, and the arena's servers,
    whose worker may call loopback and reads the fakes' key from its environment."""
    monkeypatch.setenv("EVAL_TEST_API_KEY", KEY)
    monkeypatch.setenv("ARENA_INTERNAL_ALLOWLIST", LOOPBACK)
    ensure_public_arena()
    if consent_terms_current() is None:
        consent_terms_publish(text="You agree to publication.")
    terms = consent_terms_current()
    for name, team in (("erin", "Acme"), ("charlie", "Umbrella")):
        person = make_person(name, team, terms)
        person.password = production_hash(PASSWORD)
        person.save(update_fields=["password"])
    with ExitStack() as stack:
        fakes = {
            "alpha": FakeOpenAI(api_key=KEY, policy=candidate_policy("alpha")),
            "beta": FakeAnthropic(api_key=KEY, policy=candidate_policy("beta")),
            "gamma": FakeOpenAI(api_key=KEY, policy=candidate_policy("gamma")),
            "judge": FakeAnthropic(api_key=KEY, policy=judge_policy),
        }
        for fake in fakes.values():
            stack.enter_context(fake)
        scaffolds_on(fakes)
        servers = stack.enter_context(live_arena(tmp_path, sandbox_root))
        request.node.stash[_LIVE_ARENA] = servers
        yield servers


def evaluations_page(browser, base_url: str):
    """erin, logged in, on the evaluations page (no axe finding), in a context that
    records CSP violations and the live frames swapped in."""
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    context.add_init_script(PROBE)  # CSP violations, frames swapped in
    context.add_init_script(SEEN)
    page = context.new_page()
    log_in(page, "erin")
    page.get_by_role("link", name="Evaluations").click()
    expect(page).to_have_url(f"{base_url}/evaluations/")
    assert violations(page) == []
    return page


def test_an_evaluation_from_the_form_runs_live_to_its_results(evaluation_arena, browser):
    base_url = evaluation_arena.base_url
    page = evaluations_page(browser, base_url)

    # Given the form, filled as a person would
    page.set_input_files(
        "#id_suite", {"name": "arith.yaml", "mimeType": "application/yaml", "buffer": suite_bytes()}
    )
    page.set_input_files(
        "#id_rubric", {"name": "rubric.yaml", "mimeType": "application/yaml", "buffer": RUBRIC}
    )
    for slug in ("alpha", "beta", "gamma"):
        page.check(f'input[name="agents"][value="{slug}"]')
    page.select_option("#id_judge", "judge")
    page.check("#id_pairwise")
    evaluation_arena.resume_workers()

    # When it is sent, the run page opens and its socket brings the progress
    page.click("#eval-create")
    page.wait_for_url(re.compile(r".*/evaluations/\d+/$"))
    evaluation = Evaluation.objects.get()
    assert page.url == f"{base_url}/evaluations/{evaluation.pk}/"
    page.evaluate("window.__sameDocument = true")
    status = page.locator("#eval-status")
    expect(status).to_have_text("done", timeout=30_000)

    # Then the bar moved through the frames and reached done, in the same document
    assert page.evaluate("window.__sameDocument") is True
    seen = page.evaluate("window.__seen")
    assert any(0 < done < EXPECTED for done in seen), seen
    assert seen[-1] == EXPECTED
    expect(page.locator("#eval-bar")).to_have_attribute("value", str(EXPECTED))
    expect(page.locator("#eval-bar")).to_have_attribute("max", str(EXPECTED))
    expect(page.locator("#eval-cancel")).to_have_count(0)  # re-read over HTTP once done
    expect(page.locator("#eval-live")).to_have_attribute("data-settled", "true")
    # a frame after the last read (the job's last word) leaves the final results as they are
    page.wait_for_timeout(1500)
    expect(page.locator("#eval-body")).not_to_have_attribute("aria-busy", "true")
    # the results, read again over HTTP after the last frame
    results = page.locator("#eval-results")
    expect(results.locator("tbody tr")).to_have_count(20)
    failed = results.locator('tr[data-task="t05"] td.m-status[data-agent="gamma"]')
    expect(failed).to_contain_text("error")
    expect(failed).to_contain_text("HTTP 503")
    expect(results.locator('tr[data-task="t01"] td.m-weighted[data-agent="beta"]')).to_have_text(
        "0.47"
    )
    expect(page.locator("#eval-matrix svg rect.cell")).to_have_count(9)
    expect(page.locator("#eval-radar svg circle.mean")).to_have_count(6)
    expect(page.locator("#eval-pairs tbody tr")).to_have_count(58)
    assert page.evaluate("window.__wsMessages") >= 2
    assert page.evaluate("window.__violations") == []
    assert violations(page) == []

    # And one run's page has its waterfall: the candidate's call, the judge's three
    beta_t03 = EvalRun.objects.get(evaluation=evaluation, task_id="t03", agent__slug="beta")
    results.locator('tr[data-task="t03"] td.m-status[data-agent="beta"] a').click()
    expect(page).to_have_url(f"{base_url}/evaluations/{evaluation.pk}/runs/{beta_t03.pk}/")
    expect(page.locator("#run-output")).to_have_text("7")
    expect(page.locator(".waterfall rect.bar")).to_have_count(4)
    assert page.evaluate("window.__violations") == []
    assert violations(page) == []
    page.context.close()

    # Another team's member finds no such evaluation
    context = browser.new_context(base_url=base_url)
    page = context.new_page()
    log_in(page, "charlie")
    assert page.goto(f"/evaluations/{evaluation.pk}/").status == 404
    assert page.goto(f"/evaluations/{evaluation.pk}/runs/{beta_t03.pk}/").status == 404
    page.context.close()


# -- issue 37: the keyless path, from the form, watched live to the end ------------------

PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY")

# Every state the live part shows, as a person would see it after each change of the DOM:
# the status, what the progress counts, whether the cancel button is there, the results
# table's missing runs and a tournament's series not played, and whether the results are
# marked as being brought up to date. A page that shows "done" beside a cancel button, or
# beside unfinished results not marked so, is caught by ``consistent``.
STATES = """
window.__states = [];
new MutationObserver(() => {
  const progress = document.getElementById("eval-progress");
  if (!progress) return;
  const cells = [...document.querySelectorAll("#eval-results td.m-status")];
  window.__states.push({
    status: progress.dataset.status,
    done: Number(progress.dataset.done),
    cancel: document.getElementById("eval-cancel") !== null,
    missing: cells.filter((td) => td.classList.contains("run-missing")).length,
    pending: document.querySelectorAll('.t-series[data-status="pending"]').length,
    busy: document.getElementById("eval-body")?.getAttribute("aria-busy") === "true",
  });
}).observe(document, { subtree: true, childList: true, attributes: true });
"""


def consistent(states: list[dict]) -> list[dict]:
    """The states that show a finished evaluation inconsistently (none, on a live page)."""
    return [
        s for s in states
        if s["status"] in ("done", "cancelled")
        and (s["cancel"] or ((s["missing"] or s["pending"]) and not s["busy"]))
    ]  # fmt: skip


@pytest.fixture
def keyless_arena(request, transactional_db, tmp_path, sandbox_root, monkeypatch):
    """The arena as make run has it before anyone brings a key: the built-in agents in
    the public arena and no provider key in any process. The lanes run without the
    desktop (no Chromium in them): the same lanes, seconds cheaper on a shared machine."""
    for name in PROVIDER_KEYS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ARENA_SANDBOX_DESKTOP", "false")
    arena = ensure_public_arena()
    roster_install_builtins(arena=arena)
    if consent_terms_current() is None:
        consent_terms_publish(text="You agree to publication.")
    terms = consent_terms_current()
    for name, team in (("erin", "Acme"), ("charlie", "Umbrella")):
        person = make_person(name, team, terms)
        person.password = production_hash(PASSWORD)
        person.save(update_fields=["password"])
    with live_arena(tmp_path, sandbox_root) as servers:
        request.node.stash[_LIVE_ARENA] = servers
        yield servers


def test_a_newcomer_evaluates_the_built_ins_on_a_sample_suite_with_no_key(keyless_arena, browser):
    base_url = keyless_arena.base_url
    page = evaluations_page(browser, base_url)
    page.context.add_init_script(STATES)

    # Given the form as a newcomer finds it: the built-ins offered, the judge's note
    expect(page.locator("#judge-keyless")).to_contain_text("No model judge can be called here")
    expect(page.locator('label:has(input[name="agents"][value="rulebook"])')).to_contain_text(
        "built-in, needs no key · runs desktop tasks"
    )
    page.select_option("#id_sample", "desktop-files")
    for slug in ("rulebook", "surveyor", "idle"):
        page.check(f'input[name="agents"][value="{slug}"]')
    keyless_arena.resume_workers()

    # When it is sent with no judge, the run page opens and follows it live
    page.click("#eval-create")
    page.wait_for_url(re.compile(r".*/evaluations/\d+/$"))
    evaluation = Evaluation.objects.get()
    page.evaluate("window.__sameDocument = true")
    expect(page.locator("#eval-status")).to_have_text("done", timeout=120_000)
    expect(page.locator("#eval-live")).to_have_attribute("data-settled", "true")

    # Then, in the same document, the results arrived with the status, never behind it
    assert page.evaluate("window.__sameDocument") is True
    states = page.evaluate("window.__states")
    assert any(s["status"] == "running" and s["done"] == 0 and s["cancel"] for s in states)
    assert consistent(states) == [], states
    assert states[-1] == {
        "status": "done", "done": 9, "cancel": False, "missing": 0, "pending": 0, "busy": False,
    }  # fmt: skip
    expect(page.locator("#eval-cancel")).to_have_count(0)
    results = page.locator("#eval-results")
    expect(results.locator("tbody tr")).to_have_count(3)
    success = results.locator('tr[data-task="note"] td.m-success[data-agent="rulebook"]')
    expect(success).to_have_text("exit 0")
    expect(
        results.locator('tr[data-task="poem"] td.m-success[data-agent="rulebook"]')
    ).to_have_text("exit 1")
    expect(page.locator('#eval-success tr[data-agent="rulebook"] td').first).to_have_text("0.667")
    assert EvalRun.objects.filter(evaluation=evaluation).count() == 9
    assert page.evaluate("window.__wsMessages") >= 2
    assert page.evaluate("window.__violations") == []
    assert violations(page) == []
    page.context.close()

    # Another team's member finds no such evaluation
    context = browser.new_context(base_url=base_url)
    page = context.new_page()
    log_in(page, "charlie")
    assert page.goto(f"/evaluations/{evaluation.pk}/").status == 404
    page.context.close()
