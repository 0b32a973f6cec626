"""The human baseline through real processes and a real browser (issue 39 item 1): an
operator goes on duty on the operator page, the matchmaker draws the team's human
entrant against a built-in, the operator fills in the demo contact form through the
page (navigate, clicks on the screen's elements, typing) and delivers; a judge decides
the battle blind; the board shows the human row, marked."""

import re
import time

import pytest
from playwright.sync_api import Page, expect

from agents.models import Agent, BaselineOperator
from agents.services import roster_install_builtins
from battles.models import Battle, Run
from battles.services import task_submit
from sandboxes.demoweb.data import ORIGIN, reference_number
from tests.conftest import make_person
from tests.e2e.test_arena_loop import PASSWORD, identity_leaks, new_context, production_hash
from tests.servers import ensure_public_arena

pytestmark = pytest.mark.e2e

CONTACT = ("Grace Hopper", "grace@example.org", "General", "Hello from the baseline")
INSTRUCTION = (
    f"Use the contact form at {ORIGIN}/contact/ to send a message: name Grace Hopper, "
    "email grace@example.org, topic General, message 'Hello from the baseline'. Tell me "
    "the reference number you get."
)


def log_in(page: Page, username: str) -> None:
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    expect(page).not_to_have_url(re.compile(r"/accounts/login/"))


def wait_for_step(page: Page, step: int) -> None:
    """The lane's panel (polled every 2 s) shows the observation of ``step``."""
    expect(page.locator(f'#lane[data-step="{step}"]')).to_be_visible(timeout=60_000)


def act(page: Page, tool: str, step: int, **fields: str) -> None:
    form = page.locator(f'#operate-actions form[data-tool="{tool}"]')
    for name, value in fields.items():
        form.locator(f'[name="{name}"]').fill(value)
    form.locator(f"#act-{tool}").click()
    wait_for_step(page, step + 1)


def click_element(page: Page, name: str, step: int) -> None:
    page.locator(f'#lane-elements button.element[data-name="{name}"]').click()
    wait_for_step(page, step + 1)


def test_an_operator_is_drawn_drives_the_contact_form_and_is_judged_blind(
    arena_servers, browser, terms
):
    # Given the built-ins (two paused: the draw is then the human against Idle), a
    # team's human entrant with its operator, a submitter and a judge of other teams
    roster = roster_install_builtins(arena=ensure_public_arena())
    Agent.objects.filter(slug__in=["rulebook", "surveyor"]).update(is_paused=True)
    opal = make_person("opal", "Acme", terms)
    charlie = make_person("charlie", "Umbrella", terms)
    judith = make_person("judith", "judges", terms)
    for person in (opal, judith):
        person.password = production_hash(PASSWORD)
        person.save(update_fields=["password"])
    human = Agent.objects.create(
        arena=ensure_public_arena(), slug="acme-person", display_name="Acme person",
        kind=Agent.Kind.HUMAN, team=opal.memberships.get().team,
        params={"observe": "page_text"},
    )  # fmt: skip
    BaselineOperator.objects.create(agent=human, user=opal)
    base_url = arena_servers.base_url

    # When the operator goes on duty on the operator page
    operator = new_context(browser, base_url).new_page()
    log_in(operator, "opal")
    operator.goto("/operate/")
    operator.click("#duty-on")
    expect(operator.locator("#duty-state")).to_have_text("on duty")

    # and a task is submitted: the draw takes the human entrant against a built-in
    battle = task_submit(user=charlie, instruction=INSTRUCTION)
    assert {battle.agent_a_id, battle.agent_b_id} == {human.pk, roster[2].pk}
    side = battle.runs.get(agent=human).side
    # one judge decides it (the draw asks for three judges in a share of battles)
    Battle.objects.filter(pk=battle.pk).update(redundancy_target=1)
    arena_servers.resume_workers()

    # Then the lane is offered on the page; the operator takes it
    operator.locator("#take-lane").click(timeout=120_000)
    expect(operator.locator("#operate-actions")).to_be_visible()
    expect(operator.locator("#lane-instruction")).to_have_text(INSTRUCTION)
    # its first screen shows once the lane has made its first observation (the sandbox
    # started, the page read): under CI's load that took more than the default 5 s
    expect(operator.locator("#screen")).to_be_visible(timeout=30_000)
    # and the lane's desktop live beside it (several frames a second while it runs)
    live = operator.locator("#live-desktops figure.live-lane")
    expect(live).not_to_have_attribute("data-frames", "0", timeout=20_000)
    forms = operator.locator("#operate-actions form.tool-form")
    offered = {f.get_attribute("data-tool") for f in forms.all()}
    assert {"click", "type", "key", "scroll", "navigate", "shell", "deliver", "give_up"} <= offered

    # When the operator fills in the contact form through the page and delivers
    act(operator, "navigate", 0, url=f"{ORIGIN}/contact/")
    step = 1
    for label, value in (("Name", CONTACT[0]), ("Email", CONTACT[1]), ("Message", CONTACT[3])):
        click_element(operator, label, step)
        act(operator, "type", step + 1, text=value)
        step += 2
    click_element(operator, "Send", step)
    expect(operator.locator("#lane-page")).to_contain_text("Message sent")
    reference = reference_number(*CONTACT)
    form = operator.locator('#operate-actions form[data-tool="deliver"]')
    form.locator('[name="message"]').fill(f"Sent. The reference number is {reference}.")
    form.locator("#act-deliver").click()
    expect(operator.locator("#no-lane")).to_be_visible(timeout=60_000)

    # Then the lane is recorded like an agent's, and the battle opens for judging
    deadline = time.monotonic() + 120
    while Battle.objects.get(pk=battle.pk).status != Battle.Status.JUDGING:
        assert time.monotonic() < deadline, Battle.objects.get(pk=battle.pk).status
        time.sleep(0.5)
    run = battle.runs.get(agent=human)
    assert run.end_reason == Run.EndReason.DELIVERED and reference in run.final_message
    tools = list(run.steps.order_by("index").values_list("tool", flat=True))
    assert tools == ["navigate", *["click", "type"] * 3, "click", "deliver"]
    digests = set(battle.runs.values_list("input_digest", flat=True))
    assert len(digests) == 1 and digests != {""}

    # When a judge opens the judge page: the battle is served blind
    judge = new_context(browser, base_url).new_page()
    log_in(judge, "judith")
    judge.goto("about:blank")
    responses, frames = [], []
    judge.on("response", lambda response: responses.append(response))
    judge.on("websocket", lambda ws: ws.on("framereceived", lambda frame: frames.append(frame)))
    judge.goto("/judge/")
    expect(judge.locator(".card .instruction")).to_have_text(INSTRUCTION)
    vote = judge.locator(f'#vote-form button[value="{side}"]')
    expect(vote).to_be_enabled(timeout=60_000)
    bodies = [judge.content()]
    bodies += [r.body().decode(errors="replace") for r in responses if not 300 <= r.status < 400]
    bodies += [f if isinstance(f, str) else f.decode(errors="replace") for f in frames]
    agents = [human, *roster]
    assert [
        leak for body in bodies for leak in identity_leaks(body, agents, with_slugs=False)
    ] == []
    for body in bodies:  # nor the operator, nor the human's team
        assert "opal" not in body and "Acme" not in body
    assert identity_leaks(judge.content(), agents, with_slugs=True) == []

    # and votes for the human's side: the reveal names it
    vote.click()
    expect(judge.locator("#reveal-card")).to_be_visible()
    # (the names show once the battle is decided: after the vote's undo window, by the
    # decider, which under load takes more than the default 5 s)
    expect(judge.locator(f".reveal-{side.lower()}")).to_have_text("Acme person", timeout=30_000)

    # Then the board shows the human baseline as its own row, marked, with the vote
    judge.goto("/")
    row = judge.locator('tr[data-agent="acme-person"]')
    expect(row.locator("span.tag.human")).to_have_text("human baseline")
    expect(row.locator("td.votes")).to_have_text("1", timeout=30_000)
    battle.refresh_from_db()
    assert (battle.status, battle.outcome) == (Battle.Status.DECIDED, side)
