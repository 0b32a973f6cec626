"""Every run keeps its initial state (battles.snapshots): one content-addressed manifest
shared by both lanes, the attachments' bytes copied once each, and retention."""

import datetime as dt
import hashlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from arena_site.media import media_exists, media_read
from battles.models import RunSnapshot
from battles.services import battle_run
from battles.snapshots import blob_name, manifest_digest, snapshots_prune
from tests.battles.pairing import submitted_between

pytestmark = pytest.mark.django_db(transaction=True)

CSV = b"city,temp\nOslo,3\nLima,19\n"


def _battle(user, instruction, attachments=()):
    return submitted_between(user, instruction, "rulebook", "idle", attachments=attachments)


def test_both_lanes_share_one_snapshot_holding_the_attachments_bytes(alice, charlie, roster):
    upload = SimpleUploadedFile("temps.csv", CSV, content_type="text/csv")
    battle = _battle(alice, "Which city is warmest in temps.csv?", [upload])
    battle_run(battle_id=battle.pk)

    a, b = battle.runs.order_by("side")
    assert a.snapshot_id is not None and a.snapshot_id == b.snapshot_id
    snapshot = RunSnapshot.objects.get(pk=a.snapshot_id)
    manifest = snapshot.manifest
    assert snapshot.digest == manifest_digest(manifest)
    sha = hashlib.sha256(CSV).hexdigest()
    assert manifest["attachments"] == [{"name": "temps.csv", "sha256": sha, "size": len(CSV)}]
    assert manifest["instruction"] == "Which city is warmest in temps.csv?"
    assert manifest["kind"] == "desktop" and manifest["repo"] is None
    assert manifest["step_budget"] == a.step_budget and manifest["tools"]
    assert manifest["screen"] in (None, {"width": 1280, "height": 800})
    # The bytes live once, under their hash, independent of the task's own copy.
    assert media_read(blob_name(sha), 1 << 20) == CSV

    # The same task from another team: the same initial state, the same row, used again.
    used = snapshot.last_used_at
    upload = SimpleUploadedFile("temps.csv", CSV, content_type="text/csv")
    again = _battle(charlie, "Which city is warmest in temps.csv?", [upload])
    battle_run(battle_id=again.pk)
    assert set(again.runs.values_list("snapshot_id", flat=True)) == {snapshot.pk}
    assert RunSnapshot.objects.count() == 1
    snapshot.refresh_from_db()
    assert snapshot.last_used_at > used


def test_a_start_url_on_the_demo_web_names_the_sites_content(alice, roster):
    battle = _battle(alice, "Open the page and say its title")
    battle.task.start_url = "http://demo.arena.test/"
    battle.task.save(update_fields=["start_url"])
    battle_run(battle_id=battle.pk)
    manifest = battle.runs.first().snapshot.manifest
    web = manifest["simulated_web"]
    assert web["host"] == "demo.arena.test" and len(web["content_sha256"]) == 64


def test_retention_deletes_old_snapshots_and_the_blobs_only_they_named(alice, roster, settings):
    kept_upload = SimpleUploadedFile("keep.csv", b"a,b\n1,2\n", content_type="text/csv")
    old_upload = SimpleUploadedFile("old.csv", b"x,y\n3,4\n", content_type="text/csv")
    old = _battle(alice, "Sum the columns of old.csv", [old_upload])
    kept = _battle(alice, "Sum the columns of keep.csv", [kept_upload])
    battle_run(battle_id=old.pk)
    battle_run(battle_id=kept.pk)
    old_snapshot = old.runs.first().snapshot
    long_ago = timezone.now() - dt.timedelta(days=settings.ARENA.snapshot_retention_days + 1)
    RunSnapshot.objects.filter(pk=old_snapshot.pk).update(last_used_at=long_ago)
    old_sha = old_snapshot.manifest["attachments"][0]["sha256"]
    kept_sha = kept.runs.first().snapshot.manifest["attachments"][0]["sha256"]

    assert snapshots_prune() == 1

    assert not RunSnapshot.objects.filter(pk=old_snapshot.pk).exists()
    assert old.runs.first().snapshot_id is None  # the runs stay, without a snapshot
    assert not media_exists(blob_name(old_sha))
    assert media_exists(blob_name(kept_sha))
    assert snapshots_prune() == 0
