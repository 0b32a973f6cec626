"""Blindness in real time (SPEC §5.1), through a real browser against real processes:
judge J holds battle X on the judge page with the public leaderboard open in another
tab; another judge's vote decides X. Every frame and response J's browser received before
the decision names neither of X's agents; the decision's board frame does (the
streaming values of the two that fought move), and from that moment J's vote on X can no
longer count: J's page says so at once, and J's vote is stored as not counting."""

import json
import time
import urllib.request

import pytest
from playwright.sync_api import expect

from accounts.services import api_token_create, consent_terms_publish
from agents.models import Agent
from agents.services import roster_install_builtins
from battles.models import Battle
from judging.models import Vote
from tests.conftest import make_person
from tests.e2e.test_arena_loop import PAGE_PROBE, PASSWORD, production_hash, wait_for_socket
from tests.judging.battle_factories import ended_battle
from tests.servers import ensure_public_arena

pytestmark = pytest.mark.e2e

MIN_READ_S = 2  # the children's reading floor (tests/servers.py child_env)


def recorder(page, into: list[tuple[str, str]]) -> None:
    """Keeps every response body and websocket frame the page receives."""

    def on_response(response):
        try:
            into.append((response.url, response.text()))
        except Exception:  # a redirect or an image has no text body
            into.append((response.url, ""))

    page.on("response", on_response)
    page.on(
        "websocket",
        lambda ws: ws.on("framereceived", lambda frame: into.append((ws.url, str(frame)))),
    )


def names_in(received: list[tuple[str, str]], agents: list[Agent]) -> list[tuple[str, str]]:
    found = []
    for where, body in received:
        for agent in agents:
            for name in (agent.display_name, agent.model_id):
                if name and name in body:
                    found.append((where, name))
    return found


def log_in(context, username: str):
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/judge/")  # a judge lands on the judge page
    return page


def api(base_url: str, token: str, method: str, path: str, body: dict | None = None):
    request = urllib.request.Request(  # noqa: S310 - the test's own loopback server
        base_url + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return response.status, json.loads(response.read() or b"null")


def test_a_decision_while_a_judge_holds_the_battle_voids_their_vote_and_tells_them(
    arena_servers, browser
):
    # Given the terms, the built-in roster, a finished battle X between two of them
    terms = consent_terms_publish(text="You agree to publication.")
    roster = roster_install_builtins(arena=ensure_public_arena())
    submitter = make_person("sam", "Submitters", terms)
    battle = ended_battle(submitter, a="rulebook", b="surveyor")
    # and two judges of their own teams: J in the browser, K through the API
    judith = make_person("judith", "Judith's", terms)
    judith.password = production_hash(PASSWORD)
    judith.save(update_fields=["password"])
    kim = make_person("kim", "Kim's", terms)
    _, token = api_token_create(user=kim)
    arena_servers.resume_workers()

    # (Playwright's wait_for_function evaluates its predicate as a string, which the
    # pages' CSP forbids; tests/e2e/test_csp.py checks the policy itself)
    context = browser.new_context(
        base_url=arena_servers.base_url, viewport={"width": 1280, "height": 800}, bypass_csp=True
    )
    context.add_init_script(PAGE_PROBE)
    context.add_init_script(
        'document.addEventListener("htmx:wsOpen", () => { window.__wsOpen = true; });'
    )
    seen_by_judge: list[tuple[str, str]] = []
    board_frames: list[tuple[str, str]] = []
    board = log_in(context, "judith")
    recorder(board, board_frames)
    board.goto("/")
    wait_for_socket(board)
    before = {row.get_attribute("data-agent"): row.locator("td.votes").inner_text()
              for row in board.locator("tr[data-agent]").all()}  # fmt: skip
    assert set(before.values()) == {"0"}
    judge = context.new_page()
    recorder(judge, seen_by_judge)
    # When J opens the judge page, she holds X
    judge.goto("/judge/")
    expect(judge.locator("#vote-form")).to_have_attribute("hx-post", f"/judge/{battle.pk}/vote/")
    judge.wait_for_function("window.__wsOpen === true", timeout=15_000)
    assert names_in(seen_by_judge, roster) == []

    # And K, served the same battle, votes after reading it: the vote decides X
    status, served = api(arena_servers.base_url, token, "GET", "/api/judge/next/")
    assert (status, served["id"]) == (200, battle.pk)
    assert names_in([("api", json.dumps(served))], roster) == []
    time.sleep(MIN_READ_S + 0.5)
    status, voted = api(
        arena_servers.base_url, token, "POST", f"/api/battles/{battle.pk}/votes/", {"choice": "A"}
    )
    assert (status, voted["counts"]) == (201, True)
    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == (Battle.Status.DECIDED, "A")

    # Then the board J watches names who fought: their streaming values move, nobody
    # else's (before the decision no frame had changed a row) ...
    for slug in ("rulebook", "surveyor"):
        expect(board.locator(f'tr[data-agent="{slug}"] td.votes')).to_have_text("1", timeout=15_000)
    expect(board.locator('tr[data-agent="idle"] td.votes')).to_have_text("0")
    assert any("surveyor" in frame for where, frame in board_frames if "/ws/" in where)
    assert names_in(seen_by_judge, roster) == []  # the judge page itself still names no one
    # ... and from that moment J's vote cannot count, and her page tells her so
    notice = judge.locator(f"#voided-{battle.pk}")
    expect(notice).to_contain_text("Other judges have decided this battle", timeout=15_000)
    vote_b = judge.locator('#vote-form button[value="B"]')
    expect(vote_b).to_be_enabled(timeout=MIN_READ_S * 1000 + 10_000)
    vote_b.click()
    expect(judge.locator("#vote-counts")).to_contain_text("does not count", timeout=15_000)
    expect(judge.locator("#vote-counts")).to_contain_text("decided while you held it")
    mine = Vote.objects.get(battle=battle, judge=judith)
    assert (mine.admissible, mine.inadmissible_reason, mine.counted) == (
        False, "identities_public", False,
    )  # fmt: skip
    counted = list(Vote.objects.filter(battle=battle, counted=True).values_list("judge", flat=True))
    assert counted == [kim.pk]
    context.close()
