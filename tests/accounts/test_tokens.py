from django.core.management import call_command
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.services import api_token_create, api_token_revoke


def test_token_is_stored_only_as_a_digest(alice):
    token, plain = api_token_create(user=alice)
    assert plain.startswith("arena_")
    assert plain not in (token.digest, token.hint)
    assert token.digest == ApiToken.digest_of(plain)
    assert not ApiToken.objects.filter(digest=plain).exists()


def test_bearer_token_authenticates_and_revocation_ends_it(alice):
    token, plain = api_token_create(user=alice)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert client.get("/api/tasks/").status_code == 200

    api_token_revoke(token=token)

    response = client.get("/api/tasks/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert "revoked" in response.json()["error"]["message"]


def test_wrong_token_is_401_with_error_shape(alice):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer arena_not-a-real-token")
    response = client.get("/api/tasks/")
    assert response.status_code == 401
    assert set(response.json()["error"]) == {"code", "message"}


def test_no_credentials_is_401(db):
    response = APIClient().get("/api/tasks/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_arena_token_command_prints_a_working_token(alice, capsys):
    call_command("arena_token", user="alice")
    plain = capsys.readouterr().out.strip()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert client.get("/api/tasks/").status_code == 200


def test_settings_page_shows_a_new_token_once(client, alice):
    client.force_login(alice)
    created = client.post("/accounts/settings/", {"action": "create", "name": "ci"})
    plain = created.context["new_token"]
    assert plain in created.content.decode()
    again = client.get("/accounts/settings/")
    assert plain not in again.content.decode()
    assert ApiToken.objects.get(user=alice, name="ci").hint in again.content.decode()


def test_a_user_cannot_revoke_another_users_token(client, alice, charlie):
    token, _ = api_token_create(user=alice)
    client.force_login(charlie)
    client.post("/accounts/settings/", {"action": "revoke", "token": token.pk})
    token.refresh_from_db()
    assert token.revoked_at is None
