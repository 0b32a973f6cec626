"""Conversations with both sides in Chromium (docs/conversations.md): the submitter talks
to a running battle from its page — a follow-up to both sides, an answer to each side's
question — and a judge then sees the exchanges on the judge page.

The web server is the real one (a child process on the test database); the battle's
lanes run in this process (real bubblewrap sandboxes) so that both sides can be the
scripted agent that asks (tests/battles/test_conversation.py) — the arena's worker
stays suspended and never takes the battle."""

import threading

import pytest
from playwright.sync_api import expect

from battles.models import Battle, FollowUpReceipt, Run
from battles.parity import conversation_digest
from judging.services import battle_screen
from tests.battles.test_conversation import askers, battle_between, run_battle  # noqa: F401
from tests.e2e.test_arena_loop import new_context
from tests.e2e.test_live_pages import log_in, person

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FOLLOW_UP = "Please use a bright shade."


def test_the_submitter_talks_to_both_sides_and_the_judge_sees_it(
    arena_servers,
    browser,
    roster,
    askers,  # noqa: F811
):
    alice = person("alice", "Acme")
    person("jules", "Jury")
    battle = battle_between(alice, "idle", "surveyor")
    lanes = threading.Thread(target=run_battle, args=(battle.pk,))
    context = new_context(browser, arena_servers.base_url)
    page = context.new_page()
    log_in(page, "alice")
    page.goto(f"/battles/{battle.pk}/")
    lanes.start()
    try:
        # given both sides asking (the box polls while the battle runs)
        box = page.locator("#conversation")
        expect(box.locator(".question-pending")).to_have_count(2, timeout=90_000)
        expect(box).to_contain_text("Side A asks")
        expect(box).to_contain_text("Side B asks")

        # when the submitter sends a follow-up, then answers each side differently
        page.fill("#follow-up-text", FOLLOW_UP)
        page.click("#follow-up-send")
        expect(page.locator("#follow-up-1")).to_contain_text(FOLLOW_UP)
        side_a = box.locator('.question[data-side="A"]')
        side_a.locator("textarea").fill("red")
        side_a.get_by_role("button", name="Answer side A").click()
        expect(side_a).to_contain_text("You answered: red")
        side_b = box.locator('.question[data-side="B"]')
        side_b.locator("textarea").fill("green")
        side_b.get_by_role("button", name="Answer side B").click()
        expect(side_b).to_contain_text("You answered: green")

        # then the page shows both sides receiving the follow-up, at their next step
        expect(page.locator("#follow-up-1")).to_contain_text(
            "Side A: received at step 2 · Side B: received at step 2", timeout=60_000
        )
    finally:
        lanes.join(timeout=120)
    assert not lanes.is_alive()
    a, b = battle.runs.order_by("side")
    assert (a.steps.get(index=0).result["stdout"], b.steps.get(index=0).result["stdout"]) == (
        "red",
        "green",
    )
    assert a.conversation_digest == b.conversation_digest == conversation_digest("", 1, FOLLOW_UP)
    assert FollowUpReceipt.objects.filter(run__battle=battle).count() == 2
    expect(page.locator("#conversation")).to_contain_text("Side A asks")
    assert not Run.objects.filter(battle=battle).exclude(status="ended").exists()

    # and a judge, served the battle, sees each side's exchange and the follow-up
    battle_screen(battle_id=battle.pk)
    assert Battle.objects.get(pk=battle.pk).status == "judging"
    judge_context = new_context(browser, arena_servers.base_url)
    judge_page = judge_context.new_page()
    log_in(judge_page, "jules")
    judge_page.goto("/judge/")
    expect(judge_page.locator("#follow-ups")).to_contain_text(FOLLOW_UP)
    expect(judge_page.locator("#side-A .exchange")).to_contain_text("Which colour should it be?")
    expect(judge_page.locator("#side-A .steps")).to_contain_text("red")
    expect(judge_page.locator("#side-B .steps")).to_contain_text("green")
    assert "green" not in judge_page.locator("#side-A .steps").inner_text()
    context.close()
    judge_context.close()
