"""A full disk under the private media directory (a small tmpfs, filled): an upload is
answered 507 in the JSON error envelope, a run whose screenshot or delivery cannot be
written ends with a clear error, the battle ends rather than hangs, and no file is left
half-written."""

import os
import random
import subprocess
import tempfile
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

from battles.models import Battle, Run, Step, Task
from battles.services import battle_run, task_submit
from sandboxes.base import SandboxSpec
from sandboxes.local_backend import LocalBackend
from sandboxes.tools import tool_call

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")

FILLER = "filler"


@pytest.fixture
def full_media(settings):
    """PRIVATE_MEDIA_ROOT on a 512 KiB tmpfs, filled to the last byte."""
    root = Path(tempfile.mkdtemp(prefix="arena-full-media-", dir="/var/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k,mode=0755", "tmpfs", str(root)],
                   check=True)  # fmt: skip
    try:
        with (root / FILLER).open("wb") as out:
            try:
                while True:
                    out.write(b"\0" * 4096)
                    out.flush()
            except OSError:
                pass
        settings.PRIVATE_MEDIA_ROOT = root
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)
        root.rmdir()


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.django_db
def test_an_upload_to_a_full_disk_is_a_507_json_error(api, alice, roster, full_media):
    response = api(alice).post(
        "/api/tasks/",
        {
            "instruction": "Summarise the temperatures in the CSV",
            "attachments": [SimpleUploadedFile("t.csv", b"city,temp\nOslo,3\n" * 2000)],
        },
        format="multipart",
    )
    assert response.status_code == 507
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["error"]["code"] == "storage_full"
    assert Task.objects.count() == 0 and Battle.objects.count() == 0
    assert _files(full_media) == [FILLER]  # nothing half-written


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_screenshots_cannot_be_stored_ends_with_the_reason(
    alice, roster, full_media, settings
):
    settings.ARENA = settings.ARENA.replace(sandbox_desktop=True)
    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(4))

    battle_run(battle_id=battle.pk)

    battle.refresh_from_db()
    assert battle.status != "running"  # ended, not hanging
    for run in Run.objects.filter(battle=battle):
        assert run.status == "ended" and run.end_reason == "error"
        assert "the media disk refused the screenshot of step 0" in run.error
    assert not Step.objects.filter(run__battle=battle).exclude(screenshot="").exists()
    assert _files(full_media) == [FILLER]  # no screenshot, whole or half


def test_a_delivery_to_a_full_disk_leaves_nothing_behind(sandbox_root, full_media):
    spec = SandboxSpec(run_id=None, shell_timeout_s=10, desktop=False)
    box = LocalBackend(sandbox_root, uid_base=settings.ARENA.sandbox_uid_base).provision(
        spec, slot=7
    )
    try:
        assert box.shell("head -c 65536 /dev/urandom > /work/out.bin", None).ok
        with pytest.raises(OSError) as caught:
            result = tool_call(
                box,
                "deliver",
                {"message": "done", "files": ["out.bin"]},
                deliver_dir=full_media / "run-1",
            )
            pytest.fail(f"the delivery was not refused: {result}")
        assert caught.value.errno == 28  # ENOSPC: the lane ends the run with the reason
    finally:
        box.destroy()
    assert _files(full_media) == [FILLER]
    assert sorted(p.name for p in full_media.iterdir()) == [FILLER]
