"""A refused submission leaves no file behind: nothing in the private media (attachments,
repository uploads, their staging files) and nothing in Django's upload directory.
Every kind of refusal that comes after the body is read is tried through the API (and
the submit page), with every upload spooled to a file (FILE_UPLOAD_MAX_MEMORY_SIZE 0),
and the files under both roots are listed before and after."""

import gzip
import io
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import IntegrityError
from django.test import Client

from accounts.models import Membership
from accounts.services import consent_terms_publish
from agents.models import Agent, Arena
from battles import admission_db
from battles.coding_models import RepoSource
from battles.models import Attachment, Task
from battles.services.repo_admission import StagedUpload
from tests.conftest import make_person

CSV = b"city,temp\nOslo,3\nLisbon,19\n"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


def tarball(name: str = "fix") -> bytes:
    """A gzipped tarball, the same bytes at every call (gzip's header time is fixed)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        data = b"def add(a, b):\n    return a + b\n"
        info = tarfile.TarInfo(f"{name}-main/calc.py")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=0)


@dataclass(frozen=True)
class Disk:
    media: Path
    temp: Path

    def files(self) -> dict[str, list[str]]:
        return {
            "media": _listing(self.media),
            "upload temp": _listing(self.temp),
        }


def _listing(root: Path) -> list[str]:
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
def disk(settings, tmp_path) -> Disk:
    temp = tmp_path / "django-uploads"
    temp.mkdir()
    settings.FILE_UPLOAD_TEMP_DIR = str(temp)
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 0  # every upload is spooled to a file
    return Disk(media=Path(settings.PRIVATE_MEDIA_ROOT), temp=temp)


@pytest.fixture
def coders(roster) -> list[Agent]:
    """Two agents that work on repositories (the built-ins cannot)."""
    return [
        Agent.objects.create(
            arena=Arena.objects.public(), slug=f"coder-{n}", display_name=f"Coder {n}",
            kind="scaffold", provider="anthropic", model_id="m", tool_set=["shell", "deliver"],
        )
        for n in (1, 2)
    ]  # fmt: skip


def desktop(**fields) -> dict:
    return {
        "instruction": "Summarise the temperatures in the attached CSV",
        "attachments": [SimpleUploadedFile("temps.csv", CSV), SimpleUploadedFile("c.png", PNG)],
        **fields,
    }


def repo(**fields) -> dict:
    return {
        "instruction": "Make the tests of calc.py pass",
        "success_cmd": "python3 -m pytest -q",
        "repo_upload": SimpleUploadedFile("fix.tar.gz", tarball()),
        **fields,
    }


def earlier(client, body: dict) -> None:
    """A task admitted before the refused one (its files are expected to stay)."""
    answer = client.post("/api/tasks/", body, format="multipart")
    assert answer.status_code == 201, answer.content


@dataclass(frozen=True)
class Case:
    body: Callable[[], dict]
    status: int
    code: str
    given: Callable[..., None] = lambda **_: None


def _settings(**changes):
    def given(settings, **_):
        settings.ARENA = settings.ARENA.replace(**changes)

    return given


def _then(*steps):
    def given(**kw):
        for step in steps:
            step(**kw)

    return given


def _earlier(body: Callable[[], dict]):
    def given(client, **_):
        earlier(client, body())

    return given


def _earlier_by_bob(body: Callable[[], dict]):
    def given(api, bob, **_):
        earlier(api(bob), body())

    return given


def _new_terms(**_):
    consent_terms_publish(text="New terms: read them again.")


def _no_coders(coders, **_):
    Agent.objects.filter(pk__in=[a.pk for a in coders]).update(is_paused=True)


CASES = {
    # desktop tasks with attachments
    "a type not allowed": Case(
        lambda: desktop(attachments=[SimpleUploadedFile("run.sh", b"#!/bin/sh\n")]),
        400, "unsupported_attachment_type",
    ),
    "bytes that are not what the name says": Case(
        lambda: desktop(attachments=[SimpleUploadedFile("fake.png", b"<html>")]),
        400, "attachment_content_mismatch",
    ),
    "conversation, not a task": Case(lambda: desktop(instruction="hi"), 200, ""),
    "a start URL not public": Case(
        lambda: desktop(start_url="http://127.0.0.1/"), 400, "start_url_not_public"
    ),
    "near-duplicate": Case(desktop, 409, "near_duplicate", _earlier(desktop)),
    "the arena's queue full": Case(
        desktop, 429, "queue_full",
        _then(_settings(queue_max=1), _earlier(lambda: desktop(instruction="List the files"))),
    ),
    "the team's quota": Case(
        desktop, 429, "team_quota",
        _then(_settings(team_queue_quota=1),
              _earlier(lambda: desktop(instruction="List the files"))),
    ),
    "the account's hourly allowance": Case(
        desktop, 429, "rate_limited",
        _then(_settings(submit_account_rate_per_hour=1),
              _earlier(lambda: desktop(instruction="List the files"))),
    ),
    "the address's hourly allowance": Case(
        desktop, 429, "rate_limited",
        _then(_settings(submit_address_rate_per_hour=1),
              _earlier_by_bob(lambda: desktop(instruction="List the files"))),
    ),
    "consent out of date": Case(desktop, 403, "consent_required", _new_terms),
    # repo tasks with an uploaded repository
    "not a bundle or a tarball": Case(
        lambda: repo(repo_upload=SimpleUploadedFile("r.bundle", b"just some text\n")),
        400, "invalid_repo_upload",
    ),
    "a repository over the limit": Case(
        repo, 413, "repo_too_large", _settings(attachments_max_total_bytes=64)
    ),
    "a bad ref": Case(lambda: repo(repo_ref="--upload-pack=x"), 400, "invalid_repo"),
    "a repository with attachments": Case(
        lambda: repo(attachments=[SimpleUploadedFile("t.csv", CSV)]), 400, "invalid_repo"
    ),
    "fewer than two coding agents": Case(repo, 503, "roster_too_small", _no_coders),
    "a repo task with the queue full": Case(
        repo, 429, "queue_full",
        _then(_settings(queue_max=1), _earlier(lambda: desktop(instruction="List the files"))),
    ),
    "a repo task near-duplicate": Case(repo, 409, "near_duplicate", _earlier(repo)),
    "a repo task over the account's allowance": Case(
        repo, 429, "rate_limited",
        _then(_settings(submit_account_rate_per_hour=1),
              _earlier(lambda: desktop(instruction="List the files"))),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_refused_submission_leaves_no_file(api, alice, bob, coders, disk, settings, case):
    client = api(alice)
    case.given(client=client, settings=settings, api=api, bob=bob, coders=coders)
    before = disk.files()
    tasks = Task.objects.count()

    answer = client.post("/api/tasks/", case.body(), format="multipart")

    assert answer.status_code == case.status, answer.content
    if case.code:
        assert answer.json()["error"]["code"] == case.code
    assert Task.objects.count() == tasks
    assert disk.files() == before
    assert before["upload temp"] == []


def test_the_fixture_spools_every_upload_to_a_file_while_the_request_runs(
    api, alice, coders, disk, monkeypatch
):
    # (so the upload directory's emptiness afterwards means what the tests take it for)
    from battles.services import admission

    seen = []
    real = admission.attachments_stage

    def looking(pending):
        seen.append(_listing(disk.temp))
        return real(pending)

    monkeypatch.setattr(admission, "attachments_stage", looking)
    assert api(alice).post("/api/tasks/", desktop(), format="multipart").status_code == 201
    assert len(seen) == 1 and len(seen[0]) == 2  # both attachments, as files
    assert _listing(disk.temp) == []


def test_an_admitted_repo_task_keeps_its_upload_under_its_hash(api, alice, coders, disk):
    answer = api(alice).post("/api/tasks/", repo(), format="multipart")

    assert answer.status_code == 201, answer.content
    source = RepoSource.objects.get(task_id=answer.json()["task"])
    assert disk.files() == {"media": [source.upload_path], "upload temp": []}
    assert (disk.media / source.upload_path).read_bytes() == tarball()


def _fail_the_battle_insert(monkeypatch) -> None:
    def failing(**_):
        raise IntegrityError("simulated: the battle's insert failed")

    monkeypatch.setattr(admission_db, "battle_and_runs_insert", failing)


def test_a_failure_after_the_upload_was_placed_removes_it(api, alice, coders, disk, monkeypatch):
    _fail_the_battle_insert(monkeypatch)

    with pytest.raises(IntegrityError):
        api(alice).post("/api/tasks/", repo(), format="multipart")

    assert disk.files() == {"media": [], "upload temp": []}
    assert not RepoSource.objects.exists()


def test_a_failure_keeps_the_same_bytes_another_task_refers_to(
    api, alice, bob, coders, disk, monkeypatch
):
    # Given bob's admitted task with these very bytes (stored once, by hash)
    assert tarball() == tarball()
    earlier(api(bob), repo(instruction="Fix calc.py so its tests pass"))
    (stored,) = disk.files()["media"]
    placed = []
    monkeypatch.setattr(StagedUpload, "place", _recording(StagedUpload.place, placed))
    # When alice's submission of the same bytes fails after its placement
    _fail_the_battle_insert(monkeypatch)
    with pytest.raises(IntegrityError):
        api(alice).post("/api/tasks/", repo(), format="multipart")
    # Then bob's task keeps its file (alice's placement found it there)
    assert [(p.name, p.created) for p in placed] == [(stored, False)]
    assert disk.files() == {"media": [stored], "upload temp": []}
    assert (disk.media / stored).read_bytes() == tarball()


def _recording(place, placed: list):
    def recording(self) -> None:
        place(self)
        placed.append(self)

    return recording


def test_a_failure_after_attachments_were_stored_removes_them(
    api, alice, roster, disk, monkeypatch
):
    _fail_the_battle_insert(monkeypatch)

    with pytest.raises(IntegrityError):
        api(alice).post("/api/tasks/", desktop(), format="multipart")

    assert disk.files() == {"media": [], "upload temp": []}
    assert not Attachment.objects.exists()


def test_a_user_without_a_team_is_refused_and_nothing_stays(api, terms, roster, disk):
    loner = make_person("loner", None, terms)
    assert not Membership.objects.filter(user=loner).exists()

    answer = api(loner).post("/api/tasks/", desktop(), format="multipart")

    assert answer.status_code == 403 and answer.json()["error"]["code"] == "no_team"
    assert disk.files() == {"media": [], "upload temp": []}


PAGE_CASES = {
    "content mismatch": ({}, SimpleUploadedFile("fake.png", b"<html>"), 200,
                         "does not contain image/png"),
    "queue full": ({"queue_max": 1}, SimpleUploadedFile("t.csv", CSV), 200, "queue is full"),
    "hourly allowance": ({"submit_account_rate_per_hour": 1}, SimpleUploadedFile("t.csv", CSV),
                         429, "the most one account may"),
}  # fmt: skip


@pytest.mark.parametrize(("changes", "upload", "status", "words"), PAGE_CASES.values(),
                         ids=PAGE_CASES.keys())  # fmt: skip
def test_the_submit_page_leaves_no_file_either(
    alice, roster, disk, settings, changes, upload, status, words
):
    page = Client()
    page.force_login(alice)
    assert page.post("/submit/", {"instruction": "List the files"}).status_code == 302
    settings.ARENA = settings.ARENA.replace(**changes)
    before = disk.files()

    upload.seek(0)
    answer = page.post(
        "/submit/",
        {"instruction": "Summarise the temperatures in the CSV", "attachments": [upload]},
    )

    assert answer.status_code == status
    assert words in answer.content.decode()
    assert disk.files() == before and before["upload temp"] == []
    assert Task.objects.count() == 1
