"""Admins curate the roster; the remote secret is never rendered back."""

import threading

import pytest

from agents.models import Agent, Arena
from examples.remote_entrant.server import EntrantServer


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


@pytest.fixture
def entrant():
    """The reference entrant holding the agent's secret: saving an agent in play asks
    its health call (loopback is allow-listed by tests/agents/conftest.py)."""
    server = EntrantServer(("127.0.0.1", 0), b"keep-me")
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_saving_without_a_new_secret_keeps_the_old_one(client, django_user_model, db, entrant):
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
        "params": f'{{"endpoint": "{entrant.url}"}}',
        "tool_set": "[]",
        "remote_secret": "",
    }
    response = client.post(f"/admin/agents/agent/{agent.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    agent.refresh_from_db()
    assert agent.display_name == "Team System v2" and agent.remote_secret == "keep-me"
