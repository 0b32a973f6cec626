"""The token's cached entry across web processes: two real web server processes (as
`make run` starts them) on the test database answer a token from the entry one of them
cached; a revocation, and a user deactivated in the admin, made in a third process
(this one) are refused by both on the very next request."""

import http.client
import json

import pytest

from accounts import token_cache
from accounts.models import ApiToken
from accounts.services import api_token_create, api_token_revoke
from arena_site.redis import redis_client
from tests.accounts.test_token_cache import user_form
from tests.servers import (
    START_TIMEOUT_S,
    ServerProcess,
    child_env,
    free_port,
    http_answers,
    poll_until,
    wait_for_child_sessions_to_end,
    web_command,
)


def get_tasks(port: int, plain: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/api/tasks/", headers={"Authorization": f"Bearer {plain}"})
        response = conn.getresponse()
        body = response.read()
        if response.status not in (200, 401):
            raise AssertionError((response.status, body[:500]))
        if response.status == 401:
            assert json.loads(body)["error"]["code"] == "not_authenticated"
        return response.status
    finally:
        conn.close()


@pytest.mark.django_db(transaction=True)
def test_two_web_processes_refuse_a_revoked_token_and_a_deactivated_user_at_once(
    alice, bob, admin_client, sandbox_root, tmp_path
):
    alices_token, alices = api_token_create(user=alice)
    _, bobs = api_token_create(user=bob)
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    ports = [free_port(), free_port()]
    webs = [
        ServerProcess.start(f"web-{i}", web_command(port), env, tmp_path / "logs")
        for i, port in enumerate(ports)
    ]
    try:
        for port in ports:
            poll_until(
                lambda port=port: http_answers(f"http://127.0.0.1:{port}/accounts/login/"),
                timeout=START_TIMEOUT_S,
                what="the web server",
                processes=webs,
            )
        first, second = ports
        # Given each token cached by the first process and answered from it by the second
        assert [get_tasks(first, alices), get_tasks(first, bobs)] == [200, 200]
        for digest in (alices_token.digest, ApiToken.objects.get(user=bob).digest):
            assert redis_client().hget(token_cache.entry_key(digest), "u") is not None
        assert [get_tasks(second, alices), get_tasks(second, bobs)] == [200, 200]

        # When alice's token is revoked here
        api_token_revoke(token=alices_token)
        # Then both processes refuse it on the very next request; bob's still works
        assert [get_tasks(second, alices), get_tasks(first, alices)] == [401, 401]
        assert [get_tasks(second, bobs), get_tasks(first, bobs)] == [200, 200]

        # When an operator deactivates bob in the admin
        bob.refresh_from_db()
        saved = admin_client.post(
            f"/admin/auth/user/{bob.pk}/change/", user_form(bob, is_active="")
        )
        assert saved.status_code == 302
        # Then both refuse his token on the very next request
        assert [get_tasks(first, bobs), get_tasks(second, bobs)] == [401, 401]
        assert all(web.alive() for web in webs)
    finally:
        for web in webs:
            web.stop()
        wait_for_child_sessions_to_end()
