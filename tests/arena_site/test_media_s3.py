"""Shared media on a real S3 server (SeaweedFS, tests/s3_server.py): what a lane stores
(screenshots, deliveries) and what a submission stores (attachments) round-trip through
the bucket, the serving views keep their access checks, signed URLs expire and name one
object, and a requeued battle's media are deleted from the bucket."""

import hashlib
import random
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.utils import timezone

from agents import policies
from agents.models import Agent
from arena_site.media import media_save
from battles.media import delivery_name, screenshot_name
from battles.models import Battle, Run, Step
from battles.services import battle_run, task_submit
from battles.services.orchestration import _battle_requeue
from judging.models import Assignment

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
CSV = b"city,temp\nOslo,3\nLisbon,19\n"


def keys(s3_server, prefix: str) -> list[str]:
    listing = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=f"{prefix}/")
    return sorted(item["Key"][len(prefix) + 1 :] for item in listing.get("Contents", []))


def stored_bytes(s3_server, prefix: str, name: str) -> bytes:
    answer = s3_server.client().get_object(Bucket=s3_server.bucket, Key=f"{prefix}/{name}")
    return answer["Body"].read()


def local_files(settings) -> list[str]:
    root = Path(settings.PRIVATE_MEDIA_ROOT)
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def fetch(url: str) -> tuple[int, bytes, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 (loopback)
            return answer.status, answer.read(), dict(answer.headers)
    except urllib.error.HTTPError as error:
        return error.code, b"", {}


def submitted(user) -> Battle:
    return task_submit(
        user=user,
        instruction="Summarise the temperatures in the CSV",
        attachments=[SimpleUploadedFile("temps.csv", CSV)],
        rng=random.Random(0),
    )


@pytest.mark.django_db(transaction=True)  # lanes run in threads with their own connections
def test_a_battle_keeps_its_attachments_screenshots_and_deliveries_in_the_bucket(
    alice, bob, charlie, judge, roster, monkeypatch, client, settings, s3_media, s3_server
):
    # given two lanes that read the attachments from /work and hand one file back
    def probe(self, observation):
        if observation.step == 0:
            return policies.Action("shell", {"command": "sha256sum /work/attachments/*"})
        return policies.Action("deliver", {"message": "done", "files": ["attachments/temps.csv"]})

    monkeypatch.setattr(policies.RulebookPolicy, "next_action", probe)
    monkeypatch.setattr(policies.IdlePolicy, "next_action", probe)
    battle = task_submit(
        user=alice,
        instruction="Summarise the attached files",
        attachments=[SimpleUploadedFile("temps.csv", CSV), SimpleUploadedFile("chart.png", PNG)],
        rng=random.Random(0),
    )
    rulebook, idle = Agent.objects.get(slug="rulebook"), Agent.objects.get(slug="idle")
    Battle.objects.filter(pk=battle.pk).update(agent_a=rulebook, agent_b=idle)
    Run.objects.filter(battle=battle, side="A").update(agent=rulebook)
    Run.objects.filter(battle=battle, side="B").update(agent=idle)
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in
               (("temps.csv", CSV), ("chart.png", PNG))}  # fmt: skip
    # the attachments are in the bucket, not on this host's disk
    assert keys(s3_server, s3_media) == sorted(
        f"attachments/{battle.task_id}/{digest}" for digest in digests.values()
    )
    assert [f for f in local_files(settings) if not f.startswith("attachments/.incoming")] == []

    # when the battle runs
    battle_run(battle_id=battle.pk)

    # then each sandbox got the attachments' bytes from the bucket
    a, b = battle.runs.order_by("side")
    assert (a.end_reason, b.end_reason) == ("delivered", "delivered")
    expected = "".join(f"{digests[name]}  /work/attachments/{name}\n" for name in sorted(digests))
    assert [Step.objects.get(run=run, index=0).result["stdout"] for run in (a, b)] == [
        expected,
        expected,
    ]
    # and the screenshots and the deliveries went to the bucket, nothing to local disk
    stored = keys(s3_server, s3_media)
    for run in (a, b):
        assert delivery_name(run.pk, "temps.csv") in stored
        assert stored_bytes(s3_server, s3_media, delivery_name(run.pk, "temps.csv")) == CSV
        shots = list(run.steps.values_list("screenshot", flat=True))
        assert shots and all(shot in stored for shot in shots)
        assert stored_bytes(s3_server, s3_media, shots[0]).startswith(b"\x89PNG")
    assert [f for f in local_files(settings) if not f.startswith("attachments/.incoming")] == []

    # and the team is served all three through the arena, with today's headers
    client.force_login(bob)
    shot = client.get(f"/battles/{battle.pk}/screens/A/0.png")
    assert shot.status_code == 200 and shot["Content-Type"] == "image/png"
    assert b"".join(shot.streaming_content).startswith(b"\x89PNG")
    attachment = client.get(f"/battles/{battle.pk}/attachments/0")
    assert attachment.status_code == 200 and b"".join(attachment.streaming_content) == CSV
    assert attachment["Content-Type"] == "text/plain; charset=utf-8"
    assert attachment["Content-Disposition"] == 'attachment; filename="temps.csv"'
    assert attachment["X-Content-Type-Options"] == "nosniff"
    delivered = client.get(f"/battles/{battle.pk}/deliveries/B/temps.csv")
    assert delivered.status_code == 200 and b"".join(delivered.streaming_content) == CSV

    # and an outsider, or a judge not served the battle, gets 404 for each
    urls = [
        f"/battles/{battle.pk}/screens/A/0.png",
        f"/battles/{battle.pk}/attachments/0",
        f"/battles/{battle.pk}/deliveries/B/temps.csv",
        f"/judge/{battle.pk}/A/steps/0/screenshot",
        f"/judge/{battle.pk}/B/files/0",
    ]
    for user in (charlie, judge):
        client.force_login(user)
        for url in urls:
            assert client.get(url).status_code == 404, (user, url)


@pytest.fixture
def battle_with_files(alice, roster, s3_media):
    """A judged battle with one attachment; side A delivered a file whose name names
    an agent, side B a plain one; a screenshot of side A's first step."""
    battle = submitted(alice)
    Battle.objects.filter(pk=battle.pk).update(status=Battle.Status.JUDGING)
    a, b = battle.runs.order_by("side")
    leaky = "surveyor-notes.txt"  # a built-in agent's name
    media_save(delivery_name(a.pk, leaky), b"notes\n")
    media_save(delivery_name(b.pk, "summary.txt"), b"Lisbon is warmer.\n")
    Run.objects.filter(pk=a.pk).update(delivered_files=[{"name": leaky, "size": 6}])
    Run.objects.filter(pk=b.pk).update(delivered_files=[{"name": "summary.txt", "size": 18}])
    media_save(screenshot_name(a.pk, 0), PNG)
    Step.objects.create(
        run=a, index=0, tool="screenshot", args={}, result={}, screenshot=screenshot_name(a.pk, 0),
        started_at=timezone.now(), duration_ms=1,
    )  # fmt: skip
    battle.refresh_from_db()
    return battle


def test_signed_urls_come_after_the_check_name_one_object_and_expire(
    client, bob, charlie, judge, settings, battle_with_files
):
    settings.MEDIA_SIGNED_URL_S = 2
    battle = battle_with_files
    client.force_login(charlie)  # an outsider is refused before any URL is made
    answer = client.get(f"/battles/{battle.pk}/attachments/0")
    assert answer.status_code == 404 and "Location" not in answer

    client.force_login(bob)
    answer = client.get(f"/battles/{battle.pk}/attachments/0")
    assert answer.status_code == 302 and answer["Cache-Control"] == "private, no-store"
    url = answer["Location"]
    status, body, headers = fetch(url)
    assert (status, body) == (200, CSV)
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert headers["Content-Disposition"] == 'attachment; filename="temps.csv"'
    shot = client.get(f"/battles/{battle.pk}/screens/A/0.png")
    assert shot.status_code == 302 and fetch(shot["Location"])[:2] == (200, PNG)

    # a signature is for its own object only
    other = urlsplit(shot["Location"])
    parts = urlsplit(url)
    assert fetch(urlunsplit(parts._replace(path=other.path)))[0] == 403

    # and it expires
    time.sleep(3.1)
    assert fetch(url)[0] == 403
    assert client.get(f"/battles/{battle.pk}/attachments/0").status_code == 302  # a fresh one


def test_a_judge_gets_blind_media_and_no_url_undoes_a_blinded_name(
    client, judge, settings, battle_with_files
):
    settings.MEDIA_SIGNED_URL_S = 60
    battle = battle_with_files
    Assignment.objects.create(judge=judge, battle=battle, served_at=timezone.now())
    client.force_login(judge)
    identities = [s for agent in Agent.objects.all() for s in agent.identity_strings()]

    leaky = client.get(f"/judge/{battle.pk}/A/files/0")  # streamed under its blind name
    plain = client.get(f"/judge/{battle.pk}/B/files/0")  # its own name: a signed URL
    shot = client.get(f"/judge/{battle.pk}/A/steps/0/screenshot")

    assert leaky.status_code == 200 and b"".join(leaky.streaming_content) == b"notes\n"
    assert leaky["Content-Disposition"] == 'attachment; filename="file-1.txt"'
    assert plain.status_code == 302 and fetch(plain["Location"])[1] == b"Lisbon is warmer.\n"
    assert shot.status_code == 302 and fetch(shot["Location"])[1] == PNG
    shown = " ".join([str(leaky.headers), plain["Location"], shot["Location"]]).lower()
    for identity in identities:
        assert identity.lower() not in shown, identity


def test_a_requeued_battle_loses_its_media_in_the_bucket(
    alice, roster, s3_media, s3_server, django_capture_on_commit_callbacks
):
    battle = submitted(alice)
    runs = list(battle.runs.order_by("side"))
    for run in runs:
        media_save(screenshot_name(run.pk, 0), PNG)
        media_save(delivery_name(run.pk, "out.txt"), b"x")
    assert len(keys(s3_server, s3_media)) == 5  # the attachment and four run files

    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        _battle_requeue(Battle.objects.select_for_update().get(pk=battle.pk))

    attachment = f"attachments/{battle.task_id}/{hashlib.sha256(CSV).hexdigest()}"
    assert keys(s3_server, s3_media) == [attachment]
