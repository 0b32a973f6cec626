"""A battle's two lanes run for real: bubblewrap sandboxes, built-in agents, stored steps."""

import random

import pytest
from django.utils import timezone

from agents.models import Agent
from battles.models import Battle, Run, Step
from battles.services import battle_run, task_submit
from judging.services import battle_screen

pytestmark = pytest.mark.django_db(transaction=True)  # lanes run in threads with own connections


def submit_between(user, instruction, slug_a, slug_b) -> Battle:
    battle = task_submit(user=user, instruction=instruction, rng=random.Random(0))
    a, b = Agent.objects.get(slug=slug_a), Agent.objects.get(slug=slug_b)
    Battle.objects.filter(pk=battle.pk).update(agent_a=a, agent_b=b)
    Run.objects.filter(battle=battle, side="A").update(agent=a)
    Run.objects.filter(battle=battle, side="B").update(agent=b)
    return battle


def test_both_lanes_run_and_every_step_is_stored(alice, roster):
    battle = submit_between(
        alice, "Create a file named notes.txt containing hello arena", "rulebook", "idle"
    )

    battle_run(battle_id=battle.pk)

    battle.refresh_from_db()
    assert battle.status == "screening"  # no judge sees it before the leak scan ran
    battle_screen(battle_id=battle.pk)  # the judging queue's job
    battle.refresh_from_db()
    assert battle.status == "judging"
    assert battle.dequeued_at <= battle.lanes_started_at <= battle.ended_at
    a, b = battle.runs.order_by("side")
    assert (a.end_reason, b.end_reason) == ("delivered", "gave_up")
    # The wording varies with the task (agents/builtins/wording.py); the content does not.
    assert "notes.txt" in a.final_message and a.final_message.endswith(": hello arena")
    assert a.delivered_files[0]["name"] == "notes.txt" and a.delivered_files[0]["size"] == 12
    assert list(a.steps.values_list("tool", flat=True)) == ["shell", "shell", "deliver"]
    assert a.steps.get(index=1).result["stdout"] == "hello arena\n"
    assert b.final_message and "notes.txt" not in b.final_message
    assert Step.objects.filter(run=b).count() == 1


def test_lanes_receive_identical_inputs(alice, roster):
    battle = submit_between(alice, "what is 6*7", "rulebook", "surveyor")
    battle_run(battle_id=battle.pk)
    digests = list(battle.runs.values_list("input_digest", flat=True))
    assert len(digests) == 2 and digests[0] and digests[0] == digests[1]


def test_competence_differs_visibly(alice, roster):
    battle = submit_between(alice, "what is 6*7", "rulebook", "surveyor")
    battle_run(battle_id=battle.pk)
    a, b = battle.runs.order_by("side")
    assert "42" in a.final_message and "6*7" in a.final_message
    assert "42" not in b.final_message.splitlines()[0]
    assert "/work" in b.final_message and b.steps.first().tool == "shell"  # its survey


def test_running_a_battle_twice_is_a_no_op(alice, roster):
    battle = submit_between(alice, "list the files", "rulebook", "idle")
    battle_run(battle_id=battle.pk)
    steps = Step.objects.filter(run__battle=battle).count()

    battle_run(battle_id=battle.pk)

    assert Step.objects.filter(run__battle=battle).count() == steps


def test_sandboxes_are_destroyed_and_slots_released(alice, roster, settings):
    from sandboxes.models import SandboxLease

    battle = submit_between(alice, "list the files", "rulebook", "surveyor")
    battle_run(battle_id=battle.pk)
    root = settings.ARENA.sandbox_root
    assert list(root.iterdir()) == []
    assert SandboxLease.objects.filter(released_at=None).count() == 0
    assert SandboxLease.objects.count() == 2


def test_a_broken_agent_is_a_recorded_error_not_a_crashed_battle(alice, roster, monkeypatch):
    from agents import policies

    def explode(self, observation):
        raise RuntimeError("boom")

    monkeypatch.setattr(policies.IdlePolicy, "next_action", explode)
    battle = submit_between(alice, "list the files", "rulebook", "idle")
    battle_run(battle_id=battle.pk)
    battle_screen(battle_id=battle.pk)
    battle.refresh_from_db()
    # the battle ends normally; side B's built-in policy (the arena's own code) broke,
    # so rule 3 (the arena's fault, not a performance) keeps it from judges and the rating
    assert (battle.status, battle.exclusion_reason) == ("excluded", "arena_fault")
    b = battle.runs.get(side="B")
    assert b.end_reason == "error" and b.error == "agent error: RuntimeError"


def test_every_step_has_a_screenshot_served_only_to_those_who_may_see(
    alice, bob, charlie, judge, roster, client
):
    from judging.models import Assignment

    battle = submit_between(alice, "what is 6*7", "rulebook", "surveyor")
    battle_run(battle_id=battle.pk)
    steps = Step.objects.filter(run__battle=battle)
    assert steps.count() >= 4 and all(step.screenshot for step in steps)
    url = f"/battles/{battle.pk}/screens/A/0.png"

    client.force_login(bob)  # a teammate
    response = client.get(url)
    assert response.status_code == 200 and response["Content-Type"] == "image/png"
    assert b"".join(response.streaming_content).startswith(b"\x89PNG")

    client.force_login(charlie)  # an outsider
    assert client.get(url).status_code == 404

    client.force_login(judge)  # a judge, only once served the battle
    assert client.get(url).status_code == 404
    Assignment.objects.create(judge=judge, battle=battle, served_at=timezone.now())
    assert client.get(url).status_code == 200
    assert client.get(f"/battles/{battle.pk}/screens/A/99.png").status_code == 404
    assert client.get(f"/battles/{battle.pk}/screens/C/0.png").status_code == 404
