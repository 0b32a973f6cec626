"""A test drive runs one agent alone on a sample task in a real sandbox, through the
battle lane, and shows its trajectory (steps, screenshots, final message) to the
agent's team and to admins only: another team's user gets 404 and changes nothing."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Agent, Arena
from battles import admission_db
from battles.models import Run, TestDrive
from battles.services import test_drives as drives  # (its test_* names are not tests)
from tests.servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)  # the lane has its own connection


def team_agent(user, slug="acme-rulebook", **fields) -> Agent:
    """An agent entered by ``user``'s team (a built-in policy: offline and fast)."""
    values = {"kind": "builtin", "builtin_policy": "rulebook", **fields}
    return Agent.objects.create(
        arena=Arena.objects.public(), slug=slug, display_name="Acme Rulebook",
        team=user.memberships.get().team, **values,
    )  # fmt: skip


def test_the_team_drives_its_agent_and_sees_every_step_and_screenshot(alice, bob, client):
    agent = team_agent(alice)
    client.force_login(bob)  # a teammate, not the one who entered it

    start = client.post(f"/my-agents/{agent.pk}/test-drives/", {"sample": "files"})

    drive = TestDrive.objects.get(agent=agent)
    assert start.status_code == 302 and start["Location"] == f"/test-drives/{drive.pk}/"
    assert drive.status == "queued" and drive.team_id == agent.team_id
    drives.test_drive_run(drive_id=drive.pk)  # the worker's job

    drive.refresh_from_db()
    run = drive.runs.get()
    assert drive.status == "ended" and run.end_reason == "delivered"
    steps = list(run.steps.order_by("index"))
    assert steps and all(step.screenshot for step in steps)
    page = client.get(f"/test-drives/{drive.pk}/").content.decode()
    assert "Create a file named hello.txt" in page
    assert f"<code>{steps[0].tool}</code>" in page
    assert run.final_message and run.final_message.split("\n")[0][:40] in page
    shot = client.get(f"/test-drives/{drive.pk}/screens/0.png")
    assert shot.status_code == 200 and b"".join(shot.streaming_content).startswith(b"\x89PNG")
    assert client.get(f"/test-drives/{drive.pk}/screens/99.png").status_code == 404
    listing = client.get(f"/my-agents/{agent.pk}/test-drives/").content.decode()
    assert f'href="/test-drives/{drive.pk}/"' in listing


def test_another_team_gets_404_everywhere_and_changes_nothing(alice, charlie, client):
    agent = team_agent(alice)
    drive = drives.test_drive_start(user=alice, agent_id=agent.pk)
    client.force_login(charlie)

    assert client.get(f"/test-drives/{drive.pk}/").status_code == 404
    assert client.get(f"/test-drives/{drive.pk}/screens/0.png").status_code == 404
    assert client.get(f"/my-agents/{agent.pk}/test-drives/").status_code == 404
    assert (
        client.post(f"/my-agents/{agent.pk}/test-drives/", {"sample": "files"}).status_code == 404
    )
    assert TestDrive.objects.count() == 1
    from arena_site.exceptions import ApplicationError

    with pytest.raises(ApplicationError) as refused:
        drives.test_drive_start(user=charlie, agent_id=agent.pk)
    assert refused.value.status == 404
    # the arena's own agents are the admins' alone
    builtin = Agent.objects.create(
        arena=Arena.objects.public(), slug="house", display_name="House", kind="builtin",
        builtin_policy="idle",
    )  # fmt: skip
    with pytest.raises(ApplicationError):
        drives.test_drive_start(user=alice, agent_id=builtin.pk)


def test_admins_drive_any_agent_from_the_admin_action(admin_client, alice, settings):
    settings.ARENA = settings.ARENA.replace(sandbox_desktop=False)
    agent = team_agent(alice)

    action = admin_client.post(
        "/admin/agents/agent/", {"action": "test_drive", "_selected_action": [agent.pk]}
    )
    assert action.status_code == 302
    assert action["Location"] == f"/my-agents/{agent.pk}/test-drives/"
    started = admin_client.post(action["Location"], {"sample": "question"})
    drive = TestDrive.objects.get(agent=agent)
    assert started["Location"] == f"/test-drives/{drive.pk}/"
    assert admin_client.get(f"/test-drives/{drive.pk}/").status_code == 200


def test_one_live_drive_per_agent_and_known_samples_only(alice):
    from arena_site.exceptions import ApplicationError

    agent = team_agent(alice)
    drives.test_drive_start(user=alice, agent_id=agent.pk)
    with pytest.raises(ApplicationError) as twice:
        drives.test_drive_start(user=alice, agent_id=agent.pk)
    assert twice.value.status == 409 and "already queued or running" in twice.value.message
    with pytest.raises(ApplicationError) as unknown:
        drives.test_drive_start(user=alice, agent_id=agent.pk, sample="world-peace")
    assert unknown.value.code == "invalid_sample"


def test_a_failing_agent_s_drive_shows_why_and_counts_for_nothing(alice, client, settings):
    settings.ARENA = settings.ARENA.replace(internal_allowlist="127.0.0.0/8", sandbox_desktop=False)
    agent = team_agent(
        alice, slug="acme-remote", kind="remote", builtin_policy="", remote_secret="s",
        params={"endpoint": f"http://127.0.0.1:{free_port()}/act", "timeout_s": 1},
        is_paused=True,  # a paused agent can be driven: that is how its team sees why
    )  # fmt: skip
    drive = drives.test_drive_start(user=alice, agent_id=agent.pk)

    drives.test_drive_run(drive_id=drive.pk)

    run = Run.objects.get(test_drive=drive)
    assert run.end_reason == "error" and run.agent_fault and "connection failed" in run.error
    client.force_login(alice)
    page = client.get(f"/test-drives/{drive.pk}/").content.decode()
    assert "connection failed" in page and "(the agent's own failure)" in page
    agent.refresh_from_db()
    assert agent.failure_streak == 0  # a drive is not a battle
    Agent.objects.filter(pk=agent.pk).update(is_paused=False)
    locked = admission_db.admission_lock(slug="public", team_id=0)
    assert {e.agent_id: e.failed_lanes for e in locked.roster}[agent.pk] == 0


def test_a_drive_whose_worker_stopped_is_failed_so_another_can_start(alice):
    agent = team_agent(alice)
    stuck = drives.test_drive_start(user=alice, agent_id=agent.pk)
    TestDrive.objects.filter(pk=stuck.pk).update(
        status="running", heartbeat_at=timezone.now() - timedelta(hours=1)
    )

    assert drives.test_drives_fail_stuck(stuck_after_s=60) == [stuck.pk]

    stuck.refresh_from_db()
    assert stuck.status == "failed" and "stopped" in stuck.failure_reason
    assert Run.objects.get(test_drive=stuck).end_reason == "error"
    assert drives.test_drive_start(user=alice, agent_id=agent.pk).status == "queued"
