"""With the private media on S3 (a real SeaweedFS, tests/s3_server.py) a refused
submission leaves nothing either: not in the bucket, not in the local staging area
its attachments pass through, not in Django's upload directory."""

from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import IntegrityError

from battles import admission_db
from battles.models import Attachment

CSV = b"city,temp\nOslo,3\nLisbon,19\n"


def keys(s3_server, prefix: str) -> list[str]:
    listing = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=f"{prefix}/")
    return sorted(item["Key"] for item in listing.get("Contents", []))


def local(root: Path) -> list[str]:
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
def upload_temp(settings, tmp_path) -> Path:
    temp = tmp_path / "django-uploads"
    temp.mkdir()
    settings.FILE_UPLOAD_TEMP_DIR = str(temp)
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 0
    return temp


def submit(api, user, instruction: str):
    body = {"instruction": instruction, "attachments": [SimpleUploadedFile("temps.csv", CSV)]}
    return api(user).post("/api/tasks/", body, format="multipart")


def test_refusals_leave_nothing_in_the_bucket_or_on_disk(
    api, alice, roster, settings, s3_media, s3_server, upload_temp, monkeypatch
):
    root = Path(settings.PRIVATE_MEDIA_ROOT)
    # Given one admitted task: its attachment is in the bucket, nothing local
    assert submit(api, alice, "Summarise the temperatures in the CSV").status_code == 201
    (stored,) = keys(s3_server, s3_media)
    assert (local(root), local(upload_temp)) == ([], [])

    # When the queue is full, the next one is refused after its file was staged
    settings.ARENA = settings.ARENA.replace(queue_max=1)
    answer = submit(api, alice, "Chart the temperatures of both cities")
    assert answer.status_code == 429 and answer.json()["error"]["code"] == "queue_full"
    assert keys(s3_server, s3_media) == [stored]
    assert (local(root), local(upload_temp)) == ([], [])

    # And when the battle's insert fails after the file was uploaded to the bucket
    settings.ARENA = settings.ARENA.replace(queue_max=1000)

    def failing(**_):
        raise IntegrityError("simulated: the battle's insert failed")

    monkeypatch.setattr(admission_db, "battle_and_runs_insert", failing)
    with pytest.raises(IntegrityError):
        submit(api, alice, "Which city is warmer? Answer in one word")
    assert keys(s3_server, s3_media) == [stored]
    assert (local(root), local(upload_temp)) == ([], [])
    assert Attachment.objects.count() == 1
