"""An agent's standing on the roster (paused, retired, its arena, its entrant team)
changes in the admin only with a reason, kept in the agent standing log."""

from agents.models import Agent, AgentStandingLogEntry

CHANGE = "/admin/agents/agent/{}/change/"


def form_of(agent: Agent, **changes) -> dict:
    data = {
        "arena": agent.arena_id,
        "slug": agent.slug,
        "display_name": agent.display_name,
        "kind": agent.kind,
        "team": agent.team_id or "",
        "aliases": "[]",
        "provider": agent.provider,
        "model_id": agent.model_id,
        "system_prompt": agent.system_prompt,
        "params": "{}",
        "builtin_policy": agent.builtin_policy,
        "remote_secret": "",
        "tool_set": "[]",
        "step_budget": "",
        "wall_budget_s": "",
        "standing_note": "",
        "retired_at_0": "",
        "retired_at_1": "",
    }
    if agent.is_baseline:
        data["is_baseline"] = "on"
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_pausing_without_a_reason_is_refused(admin_client, roster):
    agent = Agent.objects.get(slug="surveyor")
    response = admin_client.post(CHANGE.format(agent.pk), form_of(agent, is_paused="on"))
    assert response.status_code == 200
    assert "Say why" in response.content.decode()
    agent.refresh_from_db()
    assert agent.is_paused is False
    assert not AgentStandingLogEntry.objects.exists()


def test_pausing_with_a_reason_is_logged(admin_client, admin_user, roster):
    agent = Agent.objects.get(slug="surveyor")
    response = admin_client.post(
        CHANGE.format(agent.pk), form_of(agent, is_paused="on", standing_note="provider outage")
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    agent.refresh_from_db()
    assert agent.is_paused is True
    entry = AgentStandingLogEntry.objects.get()
    assert (entry.agent, entry.changes, entry.note, entry.actor) == (
        agent, {"is_paused": [False, True]}, "provider outage", admin_user,
    )  # fmt: skip


def test_other_edits_need_no_reason_and_write_no_entry(admin_client, roster):
    agent = Agent.objects.get(slug="surveyor")
    response = admin_client.post(CHANGE.format(agent.pk), form_of(agent, aliases='["Surveyor v2"]'))
    assert response.status_code == 302
    assert not AgentStandingLogEntry.objects.exists()


def test_the_log_cannot_be_edited_or_deleted_and_agents_are_not_deleted(admin_client, roster):
    agent = Agent.objects.get(slug="idle")
    assert (
        admin_client.post(f"/admin/agents/agent/{agent.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert Agent.objects.filter(pk=agent.pk).exists()
    assert admin_client.get("/admin/agents/agentstandinglogentry/add/").status_code == 403
