"""The judge page in a real browser against the real server: everything the judge's
browser receives before the vote is free of agent identity; the replay marks the
pointer; voting opens after the reading time and works from the keyboard; the reveal
follows; and on a phone both sides and the vote buttons fit the width."""

import datetime as dt
import io
import random
import re
from pathlib import Path

import pytest
from django.utils import timezone
from PIL import Image, ImageDraw
from playwright.sync_api import Page, expect

from accounts.models import Team
from accounts.services import consent_terms_publish
from agents.models import Agent
from agents.services import roster_install_builtins
from battles.models import Battle, Run, Step
from battles.services import task_submit
from judging.models import Assignment
from judging.services import vote_cast
from tests.conftest import make_person
from tests.e2e.test_arena_loop import PASSWORD, production_hash
from tests.servers import ensure_public_arena

pytestmark = pytest.mark.e2e

SCREEN = (1280, 800)
INSTRUCTION = "Open the notes app and write a shopping list with three items"
# 14 words in all: t_read = max(2 s, 14 / 4 words·s⁻¹) = 3.5 s on the test servers.
FINAL_A = "I wrote milk, eggs and bread into the list."
FINAL_B = "The list has three items."


def png(label: str) -> bytes:
    image = Image.new("RGB", SCREEN, (236, 240, 247))
    draw = ImageDraw.Draw(image)
    draw.rectangle((40, 40, SCREEN[0] - 40, 120), fill=(59, 91, 219))
    draw.text((60, 70), label, fill=(255, 255, 255))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def fill_side(run: Run, media_root: Path, steps: list[tuple[str, dict]], final: str) -> None:
    """Test data for a finished lane: steps with screenshots where the lane writes them."""
    now = timezone.now()
    for index, (tool, args) in enumerate(steps):
        relative = f"screens/run-{run.pk}/step-{index}.png"
        (media_root / relative).parent.mkdir(parents=True, exist_ok=True)
        (media_root / relative).write_bytes(png(f"side {run.side} step {index}"))
        Step.objects.create(
            run=run, index=index, tool=tool, args=args, result={"ok": True, "stdout": ""},
            screenshot=relative, started_at=now, duration_ms=1500 + index,
        )  # fmt: skip
    Run.objects.filter(pk=run.pk).update(
        status="ended", end_reason="delivered", final_message=final, started_at=now, ended_at=now
    )


UNDO_S = 3


@pytest.fixture
def undo_window(settings):
    """Before the servers start: they take the window from this process's settings."""
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=UNDO_S)


@pytest.fixture
def judged_battle(undo_window, arena_servers):
    """A battle submitted through admission whose lanes are test data: side A clicks at
    (960, 600), side B types; its target is three judges, so two judges get it."""
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
        ended_at=timezone.now(), redundancy_target=3,
    )  # fmt: skip
    Run.objects.filter(battle=battle, side="A").update(agent=entrant)
    Run.objects.filter(battle=battle, side="B").update(agent=rulebook)
    media = arena_servers.private_media_root
    fill_side(
        battle.runs.get(side="A"),
        media,
        [("screenshot", {}), ("click", {"x": 960, "y": 600}), ("deliver", {"message": FINAL_A})],
        FINAL_A,
    )
    fill_side(
        battle.runs.get(side="B"),
        media,
        [("type", {"text": "milk eggs bread"}), ("deliver", {"message": FINAL_B})],
        FINAL_B,
    )
    judges = []
    for name in ("judith", "jules"):
        judge = make_person(name, f"{name}-team", terms)
        judge.password = production_hash(PASSWORD)  # the servers know no MD5 hasher
        judge.save(update_fields=["password"])
        judges.append(judge)
    battle.refresh_from_db()
    return battle, judges, arena_servers.base_url


def log_in(page: Page, username: str) -> None:
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    # where log-in lands depends on what they did last (judging.selectors.landing_url)
    page.wait_for_url(re.compile(r".*/(judge|submit|my-agents)/$"))


def forbidden_strings(battle: Battle) -> tuple[list[str], list[re.Pattern]]:
    """Every roster agent's identity strings and provider, every entrant team's name,
    the submitting team's name; and patterns for agent and run pks in URL-like places."""
    names = []
    for agent in Agent.objects.select_related("team"):
        names += [*agent.identity_strings(), agent.provider]
        names += [agent.team.name] if agent.team else []
    names.append(battle.team.name)
    patterns = [
        re.compile(rf"(?:agents?|runs?|run-)[/_=:\"' -]*{pk}\b", re.IGNORECASE)
        for pk in [*Agent.objects.values_list("pk", flat=True),
                   *Run.objects.values_list("pk", flat=True)]
    ]  # fmt: skip
    return [n for n in names if n], patterns


def identity_hits(text: str, names: list[str], patterns: list[re.Pattern]) -> list[str]:
    lowered = text.lower()
    hits = [n for n in names if re.search(rf"(?<![a-z0-9]){re.escape(n.lower())}(?![a-z0-9])",
                                          lowered)]  # fmt: skip
    return hits + [p.pattern for p in patterns if p.search(text)]


def test_everything_before_the_vote_is_blind_then_the_keyboard_votes(judged_battle, browser):
    battle, (judith, _), base_url = judged_battle
    names, patterns = forbidden_strings(battle)
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    log_in(page, "judith")

    # Record everything the judge's browser receives from here until the vote.
    responses, frames, sockets = [], [], []
    page.on("response", lambda response: responses.append(response))

    def on_socket(ws):
        sockets.append(ws.url)
        ws.on("framereceived", lambda frame: frames.append(frame))

    page.on("websocket", on_socket)
    page.goto("/judge/")

    # The replay: both sides open at their latest screen, the pointer marked where a step
    # clicked
    side_a = page.locator('section.replay[data-side="A"]')
    side_b = page.locator('section.replay[data-side="B"]')
    expect(side_a.locator("output.position")).to_have_text("3 / 3")
    expect(side_b.locator("output.position")).to_have_text("2 / 2")
    expect(side_a.locator("img.shot")).to_be_visible()
    expect(side_a.locator(".pointer")).to_be_hidden()  # step 2 delivers: no pointer
    page.keyboard.press("ArrowLeft")  # both sides one step back
    expect(side_a.locator("output.position")).to_have_text("2 / 3")
    expect(side_b.locator("output.position")).to_have_text("1 / 2")
    pointer = side_a.locator(".pointer")
    expect(pointer).to_be_visible()
    shot, mark = side_a.locator("img.shot").bounding_box(), pointer.bounding_box()
    centre = (mark["x"] + mark["width"] / 2, mark["y"] + mark["height"] / 2)
    assert centre[0] == pytest.approx(shot["x"] + shot["width"] * 960 / SCREEN[0], abs=2)
    assert centre[1] == pytest.approx(shot["y"] + shot["height"] * 600 / SCREEN[1], abs=2)
    side_a.locator("input.scrub").fill("2")
    expect(side_a.locator("output.position")).to_have_text("3 / 3")
    expect(side_a.locator(".final .message")).to_have_text(FINAL_A)

    # Voting is closed for the reading time; a key pressed early does nothing
    form = page.locator("#vote-form")
    min_read = float(form.get_attribute("data-min-read"))
    assert min_read == 3.5
    vote_b = form.locator('button[value="B"]')
    expect(vote_b).to_be_disabled()
    expect(vote_b.locator("kbd")).to_have_text("B")
    expect(page.locator("#read-timer")).to_contain_text("voting opens in")
    page.keyboard.press("b")
    expect(page.locator("#reveal-card")).to_have_count(0)
    expect(vote_b).to_be_enabled(timeout=min_read * 1000 + 5_000)

    # Everything received so far is blind: bodies, frames and the URLs themselves
    page.wait_for_load_state("networkidle")
    assert any("/steps/" in r.url for r in responses)  # the screenshots were fetched
    bodies = [("document", page.content())]
    for response in responses:
        assert identity_hits(response.url, names, patterns) == [], response.url
        if not 300 <= response.status < 400:
            bodies.append((response.url, response.body().decode("latin-1")))
        if "/steps/" in response.url:
            assert re.fullmatch(rf".*/judge/{battle.pk}/[AB]/steps/\d+/screenshot", response.url), (
                response.url
            )
    bodies += [("ws frame", f if isinstance(f, str) else f.decode("latin-1")) for f in frames]
    assert len(bodies) >= 6  # the page, htmx, its extension, our JS and CSS, screens
    leaks = [(where, hit) for where, body in bodies for hit in identity_hits(body, names, patterns)]
    assert leaks == []
    assert not re.search(r"\b1[56]0[0-9]\s*ms\b|duration", page.content())  # no timings

    # When the judge presses B once voting is open
    seen_before_vote = len(responses), len(frames)
    page.keyboard.press("b")

    # Then her vote is recorded with an undo button for its window, and no name shows
    card = page.locator("#reveal-card")
    expect(card).to_be_visible()
    expect(card.locator(".choice")).to_have_text("B is better")
    expect(page.locator("#undo")).to_be_visible()
    expect(form.locator('button[value="B"]')).to_have_class(re.compile(r"\bchosen\b"))
    # After the window the vote is final; the battle (three judges wanted) is still open,
    # so the names still do not show, and nothing received since the vote names anyone
    expect(page.locator("#names-later")).to_be_visible(timeout=(UNDO_S + 5) * 1000)
    expect(page.locator("#undo")).to_have_count(0)
    expect(card.locator("#vote-counts")).to_contain_text("Your vote is in")
    expect(card.locator(".reveal-a")).to_have_count(0)
    after = [r for r in responses[seen_before_vote[0] :] if not 300 <= r.status < 400]
    later = [("document", page.content())]
    later += [(r.url, r.body().decode("latin-1")) for r in after]
    later += [("ws frame", f if isinstance(f, str) else f.decode("latin-1"))
              for f in frames[seen_before_vote[1] :]]  # fmt: skip
    assert [(w, hit) for w, body in later for hit in identity_hits(body, names, patterns)] == []
    vote = battle.votes.get(judge=judith)
    assert (vote.choice, vote.admissible, vote.counted) == ("B", True, False)

    # When two more judges' votes decide the battle, her page shows who was who
    from tests.judging.battle_factories import people

    now = timezone.now()
    for other, choice in zip(people(2, prefix="late"), ("B", "A"), strict=True):
        Assignment.objects.create(
            judge=other, battle=battle, served_at=now - dt.timedelta(minutes=1)
        )
        vote_cast(judge=other, battle_id=battle.pk, choice=choice)
    # (their undo windows end; the server's scheduled job or her page's next poll
    # resolves the battle)
    expect(card.locator(".reveal-a")).to_have_text("Nimbus Seven", timeout=20_000)
    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == ("decided", "B")
    expect(card.locator(".reveal-b")).to_have_text("Rulebook")
    expect(card.locator("#vote-counts")).to_contain_text("Your vote counts")
    expect(page.locator("#who-A")).to_contain_text("Nimbus Seven")
    context.close()


def test_on_a_phone_the_sides_stack_and_the_vote_buttons_fit(judged_battle, browser):
    battle, (_, jules), base_url = judged_battle
    context = browser.new_context(
        base_url=base_url,
        viewport={"width": 375, "height": 740},
        device_scale_factor=2,
        is_mobile=True,
        has_touch=True,
    )
    page = context.new_page()
    log_in(page, "jules")
    page.goto("/judge/")
    side_a = page.locator('section.replay[data-side="A"]')
    side_b = page.locator('section.replay[data-side="B"]')
    expect(side_b.locator("img.shot")).to_be_visible()
    page.wait_for_load_state("networkidle")

    # No horizontal scrolling, anywhere on the page
    widths = page.evaluate(
        "[document.documentElement.scrollWidth, document.body.scrollWidth, window.innerWidth]"
    )
    assert max(widths[:2]) <= widths[2] == 375, widths
    # The sides stack, each within the width
    box_a, box_b = side_a.bounding_box(), side_b.bounding_box()
    for box in (box_a, box_b):
        assert box["x"] >= 0 and box["x"] + box["width"] <= 375, box
    assert box_b["y"] >= box_a["y"] + box_a["height"]
    # Every vote button is on screen and within the width, wherever the judge scrolls
    for where in ("top", "side B"):
        if where == "side B":
            side_b.scroll_into_view_if_needed()
        for button in page.locator("#vote-form button.vote").all():
            expect(button).to_be_in_viewport()
            box = button.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 375, (where, box)
    # And a tap votes once the reading time has passed
    vote_tie = page.locator('#vote-form button[value="tie"]')
    expect(vote_tie).to_be_enabled(timeout=10_000)
    vote_tie.tap()
    expect(page.locator("#reveal-card .choice")).to_have_text("Tie")
    expect(page.locator("#undo")).to_be_in_viewport()
    assert battle.votes.get(judge=jules).choice == "tie"
    context.close()
