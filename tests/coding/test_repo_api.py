"""Submitting a repo task through POST /api/tasks/: the upload sniffed by its bytes and
stored by hash, the task a coding task drawn between coding agents only, and every bad
field refused with its code and a message that says what to send instead."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from battles.coding_models import RepoSource
from battles.models import Battle, Task
from tests.coding import repos

pytestmark = pytest.mark.django_db


def submit(api, user, **fields):
    data = {"instruction": "Make the tests pass.", "success_cmd": "python3 -m pytest -q"}
    data.update(fields)
    return api(user).post("/api/tasks/", data, format="multipart")


def test_a_bundle_makes_a_coding_battle_between_coding_agents(api, alice, coders, tmp_path):
    response = submit(api, alice, repo_upload=repos.bundle(repos.FIX, tmp_path), repo_ref="main",
                      test_cmd="python3 -m pytest -q", time_limit_s=120)  # fmt: skip
    assert response.status_code == 201, response.json()
    task = Task.objects.get(pk=response.json()["task"])
    assert (task.kind, task.category) == ("repo", "coding")
    source = RepoSource.objects.get(task=task)
    assert (source.origin, source.ref, source.time_limit_s) == ("bundle", "main", 120)
    assert source.upload_path == f"repos/uploads/{source.upload_sha256}"
    battle = Battle.objects.get(pk=response.json()["battle"])
    assert {battle.agent_a_id, battle.agent_b_id} == {a.pk for a in coders}


def test_a_tarball_is_known_by_its_bytes_whatever_its_name(api, alice, coders):
    upload = repos.tarball(repos.FIX)
    upload.name = "repo.bundle"  # the client's name says bundle; the bytes say gzip
    response = submit(api, alice, repo_upload=upload)
    assert response.status_code == 201, response.json()
    assert RepoSource.objects.get(task_id=response.json()["task"]).origin == "tarball"


@pytest.mark.parametrize(
    ("fields", "status", "code", "says"),
    [
        ({"repo_url": "https://example.com/r.git", "repo_upload": "BUNDLE"}, 400,
         "invalid_repo", "exactly one source"),
        ({"repo_url": "ftp://example.com/r.git"}, 400, "invalid_repo", "http(s) git URL"),
        ({"repo_url": "https://me:pw@example.com/r.git"}, 400, "invalid_repo", "credentials"),
        ({"repo_url": "https://example.com/r.git", "repo_ref": "--upload-pack=x"}, 400,
         "invalid_repo", "must be a branch, tag or HEAD"),
        ({"repo_url": "https://example.com/r.git", "success_cmd": ""}, 400, "invalid_repo",
         "success_cmd must be a shell command"),
        ({"repo_url": "https://example.com/r.git", "time_limit_s": 5}, 400, "invalid", ""),
        ({"repo_upload": "TEXT"}, 400, "invalid_repo_upload", "neither a git bundle"),
        ({"repo_url": "https://example.com/r.git", "start_url": "https://example.com/"}, 400,
         "invalid_repo", "no attachments and no start URL"),
    ],
)  # fmt: skip
def test_bad_repo_fields_are_refused_and_nothing_is_created(
    api, alice, coders, tmp_path, fields, status, code, says
):
    if fields.get("repo_upload") == "BUNDLE":
        fields["repo_upload"] = repos.bundle(repos.FIX, tmp_path)
    elif fields.get("repo_upload") == "TEXT":
        fields["repo_upload"] = SimpleUploadedFile("repo.bundle", b"just some text\n")
    response = submit(api, alice, **fields)
    assert response.status_code == status, response.json()
    body = response.json()
    assert code in str(body) and says in str(body)
    assert not Task.objects.exists() and not RepoSource.objects.exists()


def test_without_two_coding_agents_the_task_is_refused(api, alice, roster, tmp_path):
    # The built-ins of the roster cannot work on a repository.
    response = submit(api, alice, repo_upload=repos.bundle(repos.FIX, tmp_path))
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "roster_too_small"
    assert "fewer than two coding agents" in response.json()["error"]["message"]
