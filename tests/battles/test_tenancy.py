"""An outsider (charlie, team Umbrella) must neither see nor learn of Acme's rows."""

import pytest

from battles.services import task_submit


@pytest.fixture
def acme_battle(alice, roster, rng):
    return task_submit(
        user=alice, instruction="Create a file named a.txt containing secret plan", rng=rng
    )


def test_teammate_sees_task_and_battle(api, bob, acme_battle):
    client = api(bob)
    assert client.get(f"/api/tasks/{acme_battle.task_id}/").status_code == 200
    assert client.get(f"/api/battles/{acme_battle.pk}/").status_code == 200
    assert [t["id"] for t in client.get("/api/tasks/").json()["results"]] == [acme_battle.task_id]


def test_outsider_gets_404_on_task_and_battle(api, charlie, acme_battle):
    client = api(charlie)
    for url in (f"/api/tasks/{acme_battle.task_id}/", f"/api/battles/{acme_battle.pk}/"):
        response = client.get(url)
        assert response.status_code == 404
        assert response.json() == {"error": {"code": "not_found", "message": "Not found."}}


def test_outsider_lists_exclude_other_teams(api, charlie, acme_battle):
    client = api(charlie)
    assert client.get("/api/tasks/").json()["results"] == []
    assert client.get("/api/battles/").json()["results"] == []


def test_outsider_gets_404_on_battle_pages(client, charlie, acme_battle):
    client.force_login(charlie)
    assert client.get(f"/battles/{acme_battle.pk}/").status_code == 404
    assert client.get(f"/battles/{acme_battle.pk}/panel/").status_code == 404
    assert "secret plan" not in client.get("/submit/").content.decode()


def test_outsider_cannot_vote_on_an_unserved_battle(api, charlie, acme_battle):
    acme_battle.status = "judging"
    acme_battle.save()
    response = api(charlie).post(
        f"/api/battles/{acme_battle.pk}/votes/", {"choice": "A"}, format="json"
    )
    assert response.status_code == 404
    assert acme_battle.votes.count() == 0


def test_battle_api_hides_identities_from_the_team_before_they_vote(api, alice, acme_battle):
    body = api(alice).get(f"/api/battles/{acme_battle.pk}/").json()
    assert set(body) >= {"id", "status", "sides"}
    assert set(body["sides"]) == {"A", "B"}
    assert "identity" not in body["sides"]["A"] and "identity" not in body["sides"]["B"]
    text = str(body)
    for agent in (acme_battle.agent_a, acme_battle.agent_b):
        assert agent.display_name not in text
