"""Human entrants in battles (docs/human-baseline.md): when the matchmaker draws one,
a real lane driven through the operator's actions (bubblewrap sandbox, Chromium, the
demo web), recorded like an agent's, and the side drawn again when nobody takes the
lane."""

import random
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from agents.human import human_action_submit, human_lane_take
from agents.models import Agent, Arena, BaselineOperator, HumanAction, HumanLane
from arena_site.exceptions import ApplicationError
from battles.models import Battle, Run
from battles.services import battle_run, task_submit
from battles.services.admission import humans_ready
from battles.services.creation import battle_create
from sandboxes.demoweb.data import ORIGIN, reference_number

pytestmark = pytest.mark.django_db(transaction=True)  # lanes run in threads

CONTACT = ("Grace Hopper", "grace@example.org", "General", "Hello from a person")
INSTRUCTION = (
    f"Use the contact form at {ORIGIN}/contact/ to send a message: name Grace Hopper, "
    "email grace@example.org, topic General, message 'Hello from a person'. Tell me the "
    "reference number you get."
)


@pytest.fixture
def human(alice, roster):
    team = alice.memberships.get().team
    agent = Agent.objects.create(
        arena=Arena.objects.public(), slug="acme-person", display_name="Acme person",
        kind=Agent.Kind.HUMAN, team=team, params={"observe": "page_text", "take_s": 60},
    )  # fmt: skip
    BaselineOperator.objects.create(agent=agent, user=alice)
    return agent


def on_duty(agent: Agent) -> None:
    now = timezone.now()
    BaselineOperator.objects.filter(agent=agent).update(on_duty_since=now, seen_at=now)


def only_idle_and(human: Agent) -> None:
    """The roster a draw sees: the idle built-in and the human entrant."""
    Agent.objects.filter(slug__in=["rulebook", "surveyor"]).update(is_paused=True)


def test_a_human_on_duty_is_drawn_and_one_off_duty_never(charlie, human):
    only_idle_and(human)
    with pytest.raises(ApplicationError) as refused:
        task_submit(user=charlie, instruction="what is 6*7", rng=random.Random(1))
    assert refused.value.code == "roster_too_small"  # off duty: not in the draw
    on_duty(human)
    battle = task_submit(user=charlie, instruction="what is 6*7", rng=random.Random(1))
    assert {battle.agent_a.slug, battle.agent_b.slug} == {"idle", "acme-person"}
    # busy now (its battle is queued): not drawn into a second one
    with pytest.raises(ApplicationError) as busy:
        task_submit(user=charlie, instruction="what is 7*8", rng=random.Random(2))
    assert busy.value.code == "roster_too_small"


def test_a_human_never_meets_its_own_teams_task(alice, human):
    only_idle_and(human)
    on_duty(human)
    with pytest.raises(ApplicationError) as refused:
        task_submit(user=alice, instruction="what is 6*7", rng=random.Random(1))
    assert refused.value.code == "roster_too_small"


def test_a_draw_takes_at_most_one_human(charlie, human, bob):
    from battles import admission_db

    team = bob.memberships.get().team
    other = Agent.objects.create(
        arena=Arena.objects.public(), slug="p2", display_name="P2", kind="human", team=team
    )
    BaselineOperator.objects.create(agent=other, user=bob)
    on_duty(human)
    on_duty(other)
    entries = [
        admission_db.RosterEntry(a.pk, a.team_id, None, None, 0, None, 0, a.kind, [])
        for a in Agent.objects.order_by("pk")
    ]
    for seed in range(10):
        kept = humans_ready(entries, random.Random(seed))
        assert sum(e.kind == "human" for e in kept) == 1
        assert len(kept) == len(entries) - 1


def drive_contact_form(user, run_id: int, errors: list) -> None:
    """The operator, through the same services as the page: take the lane, then one
    action at a time, each once the lane took the previous one."""
    try:
        deadline = time.monotonic() + 120
        while not HumanLane.objects.filter(run_id=run_id).exists():
            assert time.monotonic() < deadline, "the lane never started"
            time.sleep(0.2)
        human_lane_take(user=user, run_id=run_id)

        def act(tool: str, args: dict) -> HumanLane:
            action = human_action_submit(user=user, run_id=run_id, tool=tool, args=args)
            while HumanAction.objects.filter(pk=action.pk, consumed_at=None).exists():
                assert time.monotonic() < deadline, f"{tool} was never taken"
                time.sleep(0.1)
            # the next observation: the step after this one is shown
            while HumanLane.objects.get(run_id=run_id).step <= action.step:
                assert time.monotonic() < deadline, "the lane stopped"
                time.sleep(0.1)
            return HumanLane.objects.get(run_id=run_id)

        def element(lane: HumanLane, name: str) -> dict:
            return next(e for e in lane.page["elements"] if e["name"] == name)

        lane = act("navigate", {"url": f"{ORIGIN}/contact/"})
        for label, value in (("Name", CONTACT[0]), ("Email", CONTACT[1]), ("Message", CONTACT[3])):
            target = element(lane, label)
            lane = act("click", {"x": target["x"], "y": target["y"]})
            lane = act("type", {"text": value})
        send = element(lane, "Send")
        lane = act("click", {"x": send["x"], "y": send["y"]})
        assert lane.page["title"].startswith("Message sent"), lane.page
        human_action_submit(
            user=user, run_id=run_id, tool="deliver",
            args={"message": f"Sent. The reference is {reference_number(*CONTACT)}."},
        )  # fmt: skip
    except BaseException as exc:  # the test thread reports it
        errors.append(exc)
    finally:
        connection.close()


def test_a_human_drives_the_contact_form_and_every_step_is_recorded(alice, charlie, human):
    idle = Agent.objects.get(slug="idle")
    battle = battle_create(task=_task(charlie), agent_a=human, agent_b=idle, redundancy_target=1)
    run = battle.runs.get(side="A")
    errors: list = []
    operator = threading.Thread(target=drive_contact_form, args=(alice, run.pk, errors))
    operator.start()
    battle_run(battle_id=battle.pk)
    operator.join(timeout=30)
    assert not errors, errors
    battle.refresh_from_db()
    assert battle.status == Battle.Status.SCREENING
    a, b = battle.runs.order_by("side")
    assert a.end_reason == Run.EndReason.DELIVERED
    assert reference_number(*CONTACT) in a.final_message
    tools = list(a.steps.order_by("index").values_list("tool", flat=True))
    assert tools == ["navigate", *["click", "type"] * 3, "click", "deliver"]
    assert [s.args for s in a.steps.filter(tool="type").order_by("index")] == [
        {"text": CONTACT[0]}, {"text": CONTACT[1]}, {"text": CONTACT[3]},
    ]  # fmt: skip
    assert all(s.screenshot for s in a.steps.all())  # the screen after each step, as an agent's
    # the same inputs as the other side: the parity digest
    assert a.input_digest and a.input_digest == b.input_digest
    assert HumanLane.objects.get(run_id=a.pk).ended_at is not None
    assert not HumanAction.objects.filter(consumed_at=None).exists()


def _task(user):
    from battles.models import Task

    return Task.objects.create(
        team=user.memberships.get().team, submitter=user, instruction=INSTRUCTION
    )


def test_an_untaken_side_is_drawn_again_and_the_battle_goes_on(charlie, human):
    # nobody takes the offered lane within take_s: before any lane starts, the side is
    # drawn again (never a human, never the other side's agent) and the battle runs on
    Agent.objects.filter(pk=human.pk).update(params={"take_s": 2})
    human.refresh_from_db()
    on_duty(human)
    idle = Agent.objects.get(slug="idle")
    task = _task(charlie)
    battle = battle_create(task=task, agent_a=idle, agent_b=human, redundancy_target=1)
    lane_offered = []

    def watch() -> None:  # the operator page's view: the lane is offered with the task
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not lane_offered:
            lane = HumanLane.objects.filter(agent=human).first()
            if lane is not None:
                lane_offered.append((lane.instruction, lane.taken_at, lane.ended_at))
            time.sleep(0.05)
        connection.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    battle_run(battle_id=battle.pk)
    watcher.join()

    battle.refresh_from_db()
    assert lane_offered and lane_offered[0] == (INSTRUCTION, None, None)
    assert battle.status == Battle.Status.SCREENING  # not voided: judged as any battle
    assert battle.agent_a_id == idle.pk and battle.agent_b_id not in (idle.pk, human.pk)
    replacement = Agent.objects.get(pk=battle.agent_b_id)
    assert replacement.kind != Agent.Kind.HUMAN
    a, b = battle.runs.order_by("side")
    assert b.agent_id == replacement.pk and b.end_reason != Run.EndReason.ERROR
    assert a.input_digest and a.input_digest == b.input_digest
    assert a.step_budget == b.step_budget and a.wall_budget_s == b.wall_budget_s
    assert not Battle.objects.filter(rerun_of=battle).exists()
    assert time.monotonic() - started >= 2  # it waited for the operator first
    lane = HumanLane.objects.get(agent=human)
    assert lane.taken_at is None and lane.ended_at is not None  # offered no more
    assert BaselineOperator.objects.get(agent=human).on_duty_since is None


def test_an_untaken_side_nobody_can_take_ends_as_the_entrants_failure(charlie, human):
    # no other agent can take the side (only idle and the human are active): the lane
    # starts untaken and ends as the entrant's failure at once (the failure path: with
    # fewer than two agents left, no re-run can be drawn either)
    Agent.objects.filter(pk=human.pk).update(params={"take_s": 2})
    human.refresh_from_db()
    on_duty(human)
    only_idle_and(human)
    idle = Agent.objects.get(slug="idle")
    task = _task(charlie)
    battle = battle_create(task=task, agent_a=idle, agent_b=human, redundancy_target=1)
    started = time.monotonic()

    battle_run(battle_id=battle.pk)

    assert time.monotonic() - started < 30  # one wait for the operator, not two
    battle.refresh_from_db()
    human_run = battle.runs.get(agent=human)
    assert human_run.end_reason == Run.EndReason.ERROR and human_run.agent_fault
    assert "no operator took the lane" in human_run.error
    assert battle.status == Battle.Status.FAILED
    assert not Battle.objects.filter(rerun_of=battle).exists()
    assert BaselineOperator.objects.get(agent=human).on_duty_since is None


def test_a_lane_waiting_for_its_operator_keeps_its_battle_alive(charlie, human, monkeypatch):
    monkeypatch.setattr("agents.human.KEEPALIVE_S", 0.3)
    idle = Agent.objects.get(slug="idle")
    battle = battle_create(task=_task(charlie), agent_a=human, agent_b=idle, redundancy_target=1)
    run = battle.runs.get(side="A")
    beats, errors = [], []

    def slow_operator():
        try:
            deadline = time.monotonic() + 60
            # the lane is offered (with the task) before the lanes start: taken, they do
            while not HumanLane.objects.filter(run_id=run.pk, instruction=INSTRUCTION).exists():
                assert time.monotonic() < deadline, "the lane was never offered"
                time.sleep(0.1)
            human_lane_take(user=charlie_operator, run_id=run.pk)
            # its first screen: the policy waits for the operator's first action now
            while not HumanLane.objects.filter(run_id=run.pk, screenshot__isnull=False).exists():
                assert time.monotonic() < deadline, "the lane never showed its screen"
                time.sleep(0.1)
            for _ in range(5):  # the operator thinks for 2.5 s; the battle's heartbeat moves
                beats.append(Battle.objects.get(pk=battle.pk).heartbeat_at)
                time.sleep(0.5)
            human_action_submit(
                user=charlie_operator, run_id=run.pk, tool="give_up", args={"message": "no"}
            )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    charlie_operator = BaselineOperator.objects.get(agent=human).user
    thread = threading.Thread(target=slow_operator)
    thread.start()
    battle_run(battle_id=battle.pk)
    thread.join(timeout=30)
    assert not errors, errors
    # beating while it waited (the other lane, Idle, ended after its first step)
    assert len(set(beats[2:])) == 3 and beats == sorted(beats)
    assert battle.runs.get(side="A").end_reason == Run.EndReason.GAVE_UP


@pytest.mark.parametrize(
    ("message", "excluded"),
    [("Sent as Grace Hopper: REF-123456.", False), ("Sent by alice: REF-123456.", True)],
)
def test_the_leak_scan_reads_a_humans_words_for_its_operators_name(
    charlie, human, message, excluded
):
    from judging.services import battle_screen

    idle = Agent.objects.get(slug="idle")
    battle = battle_create(task=_task(charlie), agent_a=human, agent_b=idle, redundancy_target=1)
    now = timezone.now()
    for run, final in ((battle.runs.get(side="A"), message), (battle.runs.get(side="B"), "no")):
        Run.objects.filter(pk=run.pk).update(
            status=Run.Status.ENDED, end_reason=Run.EndReason.DELIVERED, final_message=final,
            started_at=now, ended_at=now, input_digest="d",
        )  # fmt: skip
    Battle.objects.filter(pk=battle.pk).update(status=Battle.Status.SCREENING)

    reason = battle_screen(battle_id=battle.pk)

    assert reason == (Battle.ExclusionReason.NAMED_MODEL if excluded else "")
