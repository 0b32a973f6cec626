"""A malformed URL is a 400 naming its field, never a 500: urllib raises ValueError
for an unclosed IPv6 bracket, an IPv6 literal that is not one or a port out of range,
and every field that takes a URL must catch it. Tried on every such field: a task's
repo_url and start_url, a remote agent's endpoint, a scaffold agent's base_url, an
evaluation suite's repo."""

import json
from urllib.parse import urlsplit

import pytest
from cryptography.fernet import Fernet
from django.urls import reverse

from agents.models import Agent
from arena_site.secret import KEK_ENV_NAME
from battles.coding_models import RepoSource
from battles.models import Task
from evals.models import Evaluation

# urllib raises ValueError reading each of these (urlsplit, .hostname or .port)
RAISING = [
    "http://[::1/repo.git",  # the bracket never closes
    "http://[zz::1]/r",  # not an IPv6 address
    "https://[::ffff:1.2.3.4:80/x",  # the port inside the open bracket
    "http://[::1]:80x/r.git",  # a port that is not a number
    "https://example.com:99999/r.git",  # a port out of range
    "http://]::1[/r.git",
]
# urllib reads these without a word; a fetch through the egress proxy cannot use them
ODD = [
    "http://[fe80::1%25eth0]/x",  # a zone id: an interface of whoever reads it
    "http://a[::1]/r.git",  # a host before the bracket
    "http://[v1.fe]/r.git",  # an IPvFuture literal
]
MALFORMED = RAISING + ODD


@pytest.mark.parametrize("url", RAISING)
def test_urllib_raises_on_each_of_the_table(url):
    # (so the table tries what it says it tries)
    with pytest.raises(ValueError):
        parts = urlsplit(url)
        parts.hostname, parts.port  # noqa: B018


@pytest.mark.parametrize("url", MALFORMED)
def test_a_repo_url(api, alice, roster, url):
    answer = api(alice).post(
        "/api/tasks/",
        {"instruction": "Make the tests pass.", "repo_url": url, "success_cmd": "pytest -q"},
        format="multipart",
    )

    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["code"] == "invalid_repo"
    assert error["message"].startswith(f"repo_url {url!r} is not a well-formed http(s) URL")
    assert not Task.objects.exists() and not RepoSource.objects.exists()


@pytest.mark.parametrize(
    "url", ["https://example.com/r.git", "https://[2001:db8::1]/r.git", "http://git.example:8080/r"]
)
def test_a_well_formed_repo_url_passes_the_check(api, alice, roster, url):
    # (the roster has no coding agents: passing the URL check, the task meets the roster)
    answer = api(alice).post(
        "/api/tasks/",
        {"instruction": "Make the tests pass.", "repo_url": url, "success_cmd": "pytest -q"},
        format="multipart",
    )
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "roster_too_small"


@pytest.mark.parametrize("url", MALFORMED)
def test_a_start_url(api, alice, roster, url):
    answer = api(alice).post(
        "/api/tasks/", {"instruction": "Find the opening hours on this page", "start_url": url}
    )

    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["code"] in ("invalid_start_url", "start_url_not_public")
    assert error["message"].startswith("start_url must")
    assert not Task.objects.exists()


@pytest.fixture
def kek(monkeypatch) -> None:
    monkeypatch.setenv(KEK_ENV_NAME, Fernet.generate_key().decode())


@pytest.mark.parametrize("url", MALFORMED)
def test_a_remote_agents_endpoint(api, alice, kek, url):
    answer = api(alice).post(
        reverse("api:agents"),
        {"kind": "remote", "display_name": "Odd", "endpoint": url},
        format="json",
    )

    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["code"] == "entry_refused"
    assert "endpoint" in error["message"]
    assert not Agent.objects.filter(team__isnull=False).exists()


@pytest.mark.parametrize("url", RAISING)
def test_a_scaffold_agents_base_url(api, alice, kek, url):
    answer = api(alice).post(
        reverse("api:agents"),
        {"kind": "scaffold", "display_name": "Odd", "provider": "openai_compatible",
         "model_id": "m-1", "params": {"base_url": url}},
        format="json",
    )  # fmt: skip

    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["message"].startswith(
        "params base_url must be an http(s) URL with a host name or address"
    )
    assert not Agent.objects.filter(team__isnull=False).exists()


@pytest.mark.parametrize("url", RAISING)
def test_an_evaluation_suites_repo(api, alice, roster, url):
    suite = {"tasks": [{"id": "t1", "kind": "repo", "prompt": "Fix it.", "repo": url,
                        "success_cmd": "pytest -q"}]}  # fmt: skip
    answer = api(alice).post(
        reverse("api:evaluations"),
        {"suite": {"name": "suite.json", "content": json.dumps(suite)},
         "agents": [roster[0].slug]},
        format="json",
    )  # fmt: skip

    assert answer.status_code == 400, answer.content
    message = answer.json()["error"]["message"]
    assert "field 'repo'" in message and "must be an http(s) git URL" in message
    assert not Evaluation.objects.exists()
