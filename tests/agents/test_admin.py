"""Admins curate the roster; the remote secret is never rendered back."""

from agents.models import Agent, Arena


def test_remote_secret_is_write_only_in_the_admin(client, django_user_model, db):
    admin = django_user_model.objects.create_superuser("root", password="pw-for-admin-42")
    agent = Agent.objects.create(
        arena=Arena.objects.public(),
        slug="team-system",
        display_name="Team System",
        kind="remote",
        params={"endpoint": "http://127.0.0.1:9/act"},
        remote_secret="s3cret-value-never-shown",
    )
    client.force_login(admin)
    page = client.get(f"/admin/agents/agent/{agent.pk}/change/")
    assert page.status_code == 200
    assert "s3cret-value-never-shown" not in page.content.decode()


def test_saving_without_a_new_secret_keeps_the_old_one(client, django_user_model, db):
    admin = django_user_model.objects.create_superuser("root", password="pw-for-admin-42")
    agent = Agent.objects.create(
        arena=Arena.objects.public(),
        slug="team-system",
        display_name="Team System",
        kind="remote",
        remote_secret="keep-me",
    )
    client.force_login(admin)
    form = {
        "arena": agent.arena_id,
        "slug": "team-system",
        "display_name": "Team System v2",
        "kind": "remote",
        "aliases": "[]",
        "params": '{"endpoint": "http://127.0.0.1:9/act"}',
        "tool_set": "[]",
        "remote_secret": "",
    }
    response = client.post(f"/admin/agents/agent/{agent.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    agent.refresh_from_db()
    assert agent.display_name == "Team System v2" and agent.remote_secret == "keep-me"
