"""Attachments: admission limits, safe names, private storage, access-checked downloads
(attachments and delivered files) and parity (both lanes get the same bytes)."""

import hashlib
import random
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import IntegrityError

from agents import policies
from agents.models import Agent
from battles.attachments import (
    AttachmentCorrupted,
    attachments_place,
    safe_name,
    served_content_type,
)
from battles.models import Attachment, Battle, Run, Step, Task
from battles.parity import LaneAttachment
from battles.services import battle_run, task_submit
from judging.models import Assignment
from tests.conftest import make_person

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
CSV = b"city,temp\nOslo,3\nLisbon,19\n"


def upload(name: str, data: bytes, content_type: str = "application/octet-stream"):
    return SimpleUploadedFile(name, data, content_type=content_type)


class RawUpload:
    """An upload whose name reaches the service untouched (Django's own upload classes
    already strip directories; the service must not rely on that)."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self.size, self.data = name, len(data), data

    def chunks(self, chunk_size: int = 64 * 1024):
        for start in range(0, len(self.data), chunk_size):
            yield self.data[start : start + chunk_size]


def private_files(settings) -> list[Path]:
    root = Path(settings.PRIVATE_MEDIA_ROOT)
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def assert_nothing_created(settings) -> None:
    assert Task.objects.count() == 0
    assert Battle.objects.count() == 0
    assert Attachment.objects.count() == 0
    assert private_files(settings) == []


@pytest.fixture
def small_limits(settings):
    settings.ARENA = settings.ARENA.replace(
        attachments_max_count=2, attachment_max_bytes=100, attachments_max_total_bytes=150
    )


# --- admission --------------------------------------------------------------------------


def test_default_limits(settings):
    arena = settings.ARENA
    assert arena.attachments_max_count == 5
    assert arena.attachment_max_bytes == 10 * 1024**2
    assert arena.attachments_max_total_bytes == 25 * 1024**2


def test_multipart_upload_stores_files_outside_the_web_root(api, alice, bob, roster, settings):
    # given two files sent as multipart, the field repeated
    response = api(alice).post(
        "/api/tasks/",
        {
            "instruction": "Summarise the temperatures in the CSV",
            "start_url": "",
            "attachments": [upload("temps.csv", CSV, "text/csv"), upload("chart.png", PNG)],
        },
        format="multipart",
    )

    # then the task is admitted and the bytes are stored privately under their hashes
    assert response.status_code == 201
    task = Task.objects.get(pk=response.json()["task"])
    rows = list(task.attachments.order_by("pk"))
    assert [(a.name, a.size, a.content_type) for a in rows] == [
        ("temps.csv", len(CSV), "text/csv"),
        ("chart.png", len(PNG), "image/png"),
    ]
    assert [a.sha256 for a in rows] == [
        hashlib.sha256(CSV).hexdigest(),
        hashlib.sha256(PNG).hexdigest(),
    ]
    assert all(a.team.name == "Acme" for a in rows)
    private = Path(settings.PRIVATE_MEDIA_ROOT).resolve()
    web_roots = [Path(settings.STATIC_ROOT), *map(Path, settings.STATICFILES_DIRS)]
    if settings.MEDIA_ROOT:
        web_roots.append(Path(settings.MEDIA_ROOT))
    for row, data in zip(rows, (CSV, PNG), strict=True):
        assert row.path == f"attachments/{task.pk}/{row.sha256}"
        stored = (private / row.path).resolve()
        assert stored.read_bytes() == data
        assert not any(stored.is_relative_to(root.resolve()) for root in web_roots)
    assert private_files(settings) == sorted((private / a.path) for a in rows)  # no leftovers

    # and the task API lists them with download URLs a teammate can use
    listed = api(bob).get(f"/api/tasks/{task.pk}/").json()["attachments"]
    battle = task.battles.get()
    assert listed == [
        {
            "name": "temps.csv",
            "size": len(CSV),
            "sha256": rows[0].sha256,
            "content_type": "text/csv",
            "url": f"/battles/{battle.pk}/attachments/0",
        },
        {
            "name": "chart.png",
            "size": len(PNG),
            "sha256": rows[1].sha256,
            "content_type": "image/png",
            "url": f"/battles/{battle.pk}/attachments/1",
        },
    ]
    assert api(bob).get("/api/tasks/").json()["results"][0]["attachments"] == listed


def test_json_submissions_are_unchanged(api, alice, roster):
    response = api(alice).post("/api/tasks/", {"instruction": "list the files"}, format="json")
    assert response.status_code == 201
    assert set(response.json()) == {"task", "battle", "status"}
    assert Attachment.objects.count() == 0


@pytest.mark.parametrize(
    ("files", "status", "code"),
    [
        ([upload(f"f{i}.txt", b"x") for i in range(3)], 400, "too_many_attachments"),
        ([upload("big.txt", b"x" * 101)], 413, "attachment_too_large"),
        ([upload("a.txt", b"x" * 80), upload("b.txt", b"y" * 80)], 413, "attachments_too_large"),
        ([upload("run.sh", b"#!/bin/sh\nrm -rf /\n")], 400, "unsupported_attachment_type"),
        ([upload("setup.exe", b"MZ\x90\x00")], 400, "unsupported_attachment_type"),
        ([upload("page.html", b"<script>alert(1)</script>")], 400, "unsupported_attachment_type"),
        ([upload("logo.svg", b"<svg onload=alert(1)>")], 400, "unsupported_attachment_type"),
        ([upload("README", b"no extension")], 400, "unsupported_attachment_type"),
        ([upload("fake.png", b"<html>not a png</html>")], 400, "attachment_content_mismatch"),
        ([upload("fake.pdf", b"MZ\x90\x00 an exe")], 400, "attachment_content_mismatch"),
        ([upload("nul.txt", b"text\x00with nul")], 400, "attachment_content_mismatch"),
        ([upload("latin1.csv", b"caf\xe9,1\n")], 400, "attachment_content_mismatch"),
        ([upload("empty.txt", b"")], 400, "empty_attachment"),
        ([upload("....txt", b"x"), upload("ok.txt", b"y")], 400, "unsupported_attachment_type"),
        ([upload("\u200b\u202e.txt", b"x")], 400, "unsupported_attachment_type"),
        ([upload("---", b"x")], 400, "invalid_attachment_name"),
    ],
)
def test_limits_and_types_are_refused_and_nothing_is_created(
    api, alice, roster, settings, small_limits, files, status, code
):
    response = api(alice).post(
        "/api/tasks/",
        {"instruction": "Summarise the attached file", "attachments": files},
        format="multipart",
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    assert_nothing_created(settings)


def test_a_late_failure_in_the_transaction_removes_the_stored_files(
    alice, roster, settings, monkeypatch
):
    # given the last write of admission (the runs) fails, after the files were moved
    from battles import admission_db

    insert = admission_db.rows_insert

    def fail_on_runs(*objs):
        if isinstance(objs[0], Run):
            raise IntegrityError("simulated")
        return insert(*objs)

    monkeypatch.setattr(admission_db, "rows_insert", fail_on_runs)
    with pytest.raises(IntegrityError):
        task_submit(
            user=alice,
            instruction="Summarise the temperatures in the CSV",
            attachments=[upload("temps.csv", CSV)],
        )
    assert_nothing_created(settings)


def test_a_refusal_under_the_lock_removes_the_staged_files(api, alice, roster, settings):
    settings.ARENA = settings.ARENA.replace(queue_max=1)
    client = api(alice)
    assert client.post("/api/tasks/", {"instruction": "list the files"}).status_code == 201
    response = client.post(
        "/api/tasks/",
        {"instruction": "Summarise the temperatures", "attachments": [upload("t.csv", CSV)]},
        format="multipart",
    )
    assert response.status_code == 429 and response.json()["error"]["code"] == "queue_full"
    assert Task.objects.count() == 1 and Attachment.objects.count() == 0
    assert private_files(settings) == []


def test_conversation_with_attachments_stores_nothing(api, alice, roster, settings):
    response = api(alice).post(
        "/api/tasks/", {"instruction": "hi", "attachments": [upload("t.csv", CSV)]}
    )
    assert response.status_code == 200 and response.json()["status"] == "conversation"
    assert_nothing_created(settings)


def test_a_declared_body_over_every_limit_is_refused_before_parsing(
    api, alice, roster, settings, small_limits
):
    response = api(alice).post(
        "/api/tasks/",
        {"instruction": "Summarise it", "attachments": [upload("big.txt", b"x" * (1100 * 1024))]},
        format="multipart",
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert_nothing_created(settings)


def test_a_one_megabyte_instruction_is_413_and_creates_nothing(api, alice, roster, settings):
    response = api(alice).post("/api/tasks/", {"instruction": "x" * 1024**2}, format="json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "instruction_too_long"
    assert_nothing_created(settings)


# --- names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        ("../../etc/passwd.txt", "passwd.txt"),
        ("/abs.txt", "abs.txt"),
        ("/abs", "abs"),
        ("a/b.txt", "b.txt"),
        ("a\\b.txt", "b.txt"),
        ("C:\\Users\\x\\report.pdf", "report.pdf"),
        (".hidden.txt", "hidden.txt"),
        (".hidden", "hidden"),
        ("..／..／etc／passwd.txt", "passwd.txt"),  # full-width solidus: NFKC makes it "/"
        ("．．∕secret.txt", "secret.txt"),  # division slash is no separator: replaced
        ("ｒｅｐｏｒｔ.txt", "report.txt"),  # full-width letters normalised
        ("rep\u202eort.txt", "report.txt"),  # right-to-left override dropped
        ("zero\u200bwidth.txt", "zerowidth.txt"),  # zero-width space dropped
        ("bad\x00name\x07.txt", "badname.txt"),  # control characters dropped
        ("-rf.txt", "rf.txt"),  # never read as a shell option
        ("my file (1).txt", "my_file_(1).txt"),
        ("semi;colon|pipe$$.csv", "semi_colon_pipe_.csv"),
        ("résumé.pdf", "résumé.pdf"),
        ("trailing.txt. ", "trailing.txt"),
        ("....", ""),
        ("", ""),
        ("a" * 300 + ".txt", "a" * 96 + ".txt"),
    ],
)
def test_safe_names(raw, safe):
    assert safe_name(raw) == safe
    assert safe_name(safe) == safe  # idempotent


def test_raw_names_are_sanitised_and_deduplicated_by_the_service(alice, roster):
    battle = task_submit(
        user=alice,
        instruction="Summarise the attached files",
        attachments=[
            RawUpload("../../etc/passwd.txt", b"one"),
            RawUpload("/abs/notes.txt", b"two"),
            RawUpload("a/b/NOTES.txt", b"three"),
            RawUpload(".hidden/notes.txt", b"four"),
            RawUpload("..／..／x.md", b"five"),
        ],
        rng=random.Random(0),
    )
    names = list(battle.task.attachments.order_by("pk").values_list("name", flat=True))
    assert names == ["passwd.txt", "notes.txt", "NOTES-2.txt", "notes-3.txt", "x.md"]


def test_the_form_uploads_attachments(client, alice, roster):
    client.force_login(alice)
    response = client.post(
        "/submit/",
        {
            "instruction": "Summarise the temperatures",
            "start_url": "",
            "attachments": [upload("temps.csv", CSV)],
        },
    )
    battle = Battle.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/battles/{battle.pk}/"
    assert list(battle.task.attachments.values_list("name", "size")) == [("temps.csv", len(CSV))]
    panel = client.get(f"/battles/{battle.pk}/panel/").content.decode()
    assert f'href="/battles/{battle.pk}/attachments/0"' in panel and "temps.csv" in panel


def test_the_form_shows_an_attachment_refusal(client, alice, roster, settings):
    client.force_login(alice)
    response = client.post(
        "/submit/",
        {"instruction": "Summarise it", "attachments": [upload("run.sh", b"echo hi")]},
    )
    assert response.status_code == 200
    assert "run.sh" in response.content.decode() and "not an allowed type" in (
        response.content.decode()
    )
    assert_nothing_created(settings)


# --- downloads --------------------------------------------------------------------------


@pytest.fixture
def battle_with_files(alice, roster, settings):
    """A battle with one attachment whose side A delivered two files (written where the
    lane writes them)."""
    battle = task_submit(
        user=alice,
        instruction="Summarise the temperatures in the CSV",
        attachments=[upload("temps.csv", CSV)],
        rng=random.Random(0),
    )
    run = battle.runs.get(side="A")
    deliveries = Path(settings.PRIVATE_MEDIA_ROOT) / "deliveries" / f"run-{run.pk}"
    deliveries.mkdir(parents=True)
    (deliveries / "summary.txt").write_bytes(b"Lisbon is warmer.\n")
    (deliveries / "page.html").write_bytes(b"<script>alert(document.cookie)</script>")
    (deliveries / "unlisted.txt").write_bytes(b"on disk, never delivered")
    run.delivered_files = [
        {"name": "summary.txt", "size": 18, "sha256": "x"},
        {"name": "page.html", "size": 39, "sha256": "y"},
    ]
    run.save(update_fields=["delivered_files"])
    return battle


def test_the_team_downloads_attachments_and_deliveries_safely(client, bob, battle_with_files):
    battle = battle_with_files
    client.force_login(bob)

    response = client.get(f"/battles/{battle.pk}/attachments/0")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == CSV
    assert response["Content-Disposition"] == 'attachment; filename="temps.csv"'
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["X-Content-Type-Options"] == "nosniff"

    response = client.get(f"/battles/{battle.pk}/deliveries/A/summary.txt")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"Lisbon is warmer.\n"
    assert response["Content-Disposition"] == 'attachment; filename="summary.txt"'

    # an agent's HTML is never served as HTML
    response = client.get(f"/battles/{battle.pk}/deliveries/A/page.html")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["X-Content-Type-Options"] == "nosniff"

    for url in (
        f"/battles/{battle.pk}/attachments/1",
        f"/battles/{battle.pk}/deliveries/A/unlisted.txt",
        f"/battles/{battle.pk}/deliveries/B/summary.txt",
        f"/battles/{battle.pk}/deliveries/C/summary.txt",
        f"/battles/{battle.pk}/deliveries/A/..%2F..%2Fattachments",
    ):
        assert client.get(url).status_code == 404, url


def test_the_battle_payload_links_files_without_naming_agents(api, bob, battle_with_files):
    battle = battle_with_files
    body = api(bob).get(f"/api/battles/{battle.pk}/").json()
    assert body["task"]["attachments"][0]["url"] == f"/battles/{battle.pk}/attachments/0"
    assert body["sides"]["A"]["files"][0] == {
        "name": "summary.txt",
        "size": 18,
        "sha256": "x",
        "url": f"/judge/{battle.pk}/A/files/0",  # blind: by position, never by name
    }
    text = str(body)
    for agent in Agent.objects.all():
        assert agent.slug not in text and agent.display_name not in text


def test_outsiders_and_unserved_judges_get_404(client, charlie, judge, battle_with_files):
    battle = battle_with_files
    urls = [
        f"/battles/{battle.pk}/attachments/0",
        f"/battles/{battle.pk}/deliveries/A/summary.txt",
    ]
    for user in (charlie, judge):
        client.force_login(user)
        for url in urls:
            assert client.get(url).status_code == 404, (user, url)


def test_a_served_judge_sees_the_links_and_downloads(client, judge, battle_with_files):
    battle = battle_with_files
    Battle.objects.filter(pk=battle.pk).update(status=Battle.Status.JUDGING)
    client.force_login(judge)

    page = client.get("/judge/").content.decode()  # serving the battle assigns it

    assert Assignment.objects.filter(judge=judge, battle=battle).exists()
    assert f'href="/battles/{battle.pk}/attachments/0"' in page
    assert f'href="/judge/{battle.pk}/A/files/0"' in page
    for url in (
        f"/battles/{battle.pk}/attachments/0",
        f"/battles/{battle.pk}/deliveries/A/summary.txt",
        f"/judge/{battle.pk}/A/files/0",
    ):
        assert client.get(url).status_code == 200


def test_staff_download(client, terms, battle_with_files):
    staff = make_person("staff", None, terms)
    staff.is_staff = True
    staff.save(update_fields=["is_staff"])
    client.force_login(staff)
    assert client.get(f"/battles/{battle_with_files.pk}/attachments/0").status_code == 200


@pytest.mark.parametrize(
    ("name", "head", "served"),
    [
        ("a.png", PNG[:16], "image/png"),
        ("a.png", b"<html><script>", "application/octet-stream"),
        ("a.pdf", b"%PDF-1.7\n", "application/pdf"),
        ("a.txt", b"hello", "text/plain; charset=utf-8"),
        ("a.json", b'{"a": 1}', "text/plain; charset=utf-8"),
        ("a.zip", b"PK\x03\x04", "application/octet-stream"),
        ("a.html", b"<html>", "application/octet-stream"),
        ("a.svg", b"<svg>", "application/octet-stream"),
        ("noext", b"hello", "application/octet-stream"),
    ],
)
def test_served_content_types(name, head, served):
    assert served_content_type(name, head) == served


# --- lanes ------------------------------------------------------------------------------


def test_placing_refuses_a_work_dir_the_sandbox_prepared(tmp_path, settings):
    # given a sandbox that planted /work/attachments as a link to somewhere else
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    (work / "attachments").symlink_to(elsewhere)
    stored = Path(settings.PRIVATE_MEDIA_ROOT) / "attachments" / "1"
    stored.mkdir(parents=True)
    (stored / hashlib.sha256(CSV).hexdigest()).write_bytes(CSV)
    item = LaneAttachment(
        "t.csv",
        hashlib.sha256(CSV).hexdigest(),
        len(CSV),
        f"attachments/1/{hashlib.sha256(CSV).hexdigest()}",
    )

    with pytest.raises(FileExistsError):
        attachments_place(work_dir=work, owner_uid=None, attachments=(item,))
    assert list(elsewhere.iterdir()) == []


def test_placing_refuses_bytes_that_changed_in_storage(tmp_path, settings):
    stored = Path(settings.PRIVATE_MEDIA_ROOT) / "attachments" / "1"
    stored.mkdir(parents=True)
    digest = hashlib.sha256(CSV).hexdigest()
    (stored / digest).write_bytes(CSV + b"tampered")
    (tmp_path / "work").mkdir()
    with pytest.raises(AttachmentCorrupted):
        attachments_place(
            work_dir=tmp_path / "work",
            owner_uid=None,
            attachments=(LaneAttachment("t.csv", digest, len(CSV), f"attachments/1/{digest}"),),
        )


@pytest.mark.django_db(transaction=True)  # lanes run in threads with their own connections
def test_both_lanes_get_byte_identical_attachments_and_equal_digests(
    alice, bob, roster, monkeypatch, client
):
    # given a task with attachments, run for real by two built-in agents that both
    # inspect /work/attachments with the shell tool and hand one file back
    files = {"temps.csv": CSV, "chart.png": PNG, "notes.md": "# Notes\nünïcode ✓\n".encode()}
    seen: list[tuple[str, ...]] = []

    def probe(self, observation):
        if observation.step == 0:
            seen.append(observation.attachments)
            return policies.Action("shell", {"command": "sha256sum /work/attachments/*"})
        if observation.step == 1:
            return policies.Action(
                "shell", {"command": "stat -c '%a %u %n' /work/attachments/*; id -u"}
            )
        return policies.Action(
            "deliver", {"message": "checked", "files": ["attachments/temps.csv"]}
        )

    monkeypatch.setattr(policies.RulebookPolicy, "next_action", probe)
    monkeypatch.setattr(policies.IdlePolicy, "next_action", probe)
    battle = task_submit(
        user=alice,
        instruction="Summarise the attached files",
        attachments=[upload(name, data) for name, data in files.items()],
        rng=random.Random(0),
    )
    rulebook, idle = Agent.objects.get(slug="rulebook"), Agent.objects.get(slug="idle")
    Battle.objects.filter(pk=battle.pk).update(agent_a=rulebook, agent_b=idle)
    Run.objects.filter(battle=battle, side="A").update(agent=rulebook)
    Run.objects.filter(battle=battle, side="B").update(agent=idle)

    battle_run(battle_id=battle.pk)

    # then both lanes received equal inputs, by digest
    a, b = battle.runs.order_by("side")
    assert a.input_digest and a.input_digest == b.input_digest
    assert (a.end_reason, b.end_reason) == ("delivered", "delivered")
    # and identical bytes, as seen from inside each sandbox
    sums = [Step.objects.get(run=run, index=0).result for run in (a, b)]
    assert all(s["ok"] and s["exit_code"] == 0 for s in sums)
    assert sums[0]["stdout"] == sums[1]["stdout"]
    expected = "".join(
        f"{hashlib.sha256(files[name]).hexdigest()}  /work/attachments/{name}\n"
        for name in sorted(files)
    )
    assert sums[0]["stdout"] == expected
    # read-only files owned by the sandbox's own uid
    for run in (a, b):
        *stats, uid = Step.objects.get(run=run, index=1).result["stdout"].split("\n")[:-1]
        assert [line.split()[:2] for line in stats] == [["444", uid]] * len(files)
    # and the agents were told where the files are
    paths = tuple(f"/work/attachments/{name}" for name in files)
    assert seen == [paths, paths]
    # the delivered copy comes back byte for byte, to the team
    client.force_login(bob)
    response = client.get(f"/battles/{battle.pk}/deliveries/B/temps.csv")
    assert response.status_code == 200 and b"".join(response.streaming_content) == CSV
