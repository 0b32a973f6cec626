"""What a test drive's page shows: its status in words, its one lane's steps and
screenshots, and how it ended, as the panel the page renders and its socket re-sends
after every change (battles.services.live.test_drive_publish)."""

from django.template.loader import render_to_string

from battles.models import TestDrive
from battles.verdict import end_reason_words

# A drive's status, as the page says it.
DRIVE_STATUS_WORDS = {
    TestDrive.Status.QUEUED: "Waiting for a sandbox.",
    TestDrive.Status.RUNNING: "Running.",
    TestDrive.Status.ENDED: "Done.",
    TestDrive.Status.FAILED: "Failed.",
}
DRIVE_STATUS_LABELS = {
    TestDrive.Status.QUEUED: "queued",
    TestDrive.Status.RUNNING: "running",
    TestDrive.Status.ENDED: "done",
    TestDrive.Status.FAILED: "failed",
}


def test_drive_context(drive: TestDrive) -> dict:
    """The panel's context: the drive, its run and steps, whether it may still change."""
    run = drive.runs.prefetch_related("steps").first()
    return {
        "drive": drive,
        "run": run,
        "steps": list(run.steps.all()) if run else [],
        "live": drive.status in (TestDrive.Status.QUEUED, TestDrive.Status.RUNNING),
        "status_label": DRIVE_STATUS_LABELS.get(drive.status, drive.status),
        "status_words": DRIVE_STATUS_WORDS.get(drive.status, ""),
        "ended_words": end_reason_words(run.end_reason) if run and run.end_reason else "",
    }


def render_test_drive_panel(drive_id: int) -> str:
    """The drive's panel (status, steps, end), as the page shows it and its socket
    sends it."""
    drive = TestDrive.objects.select_related("agent").get(pk=drive_id)
    return render_to_string("battles/_test_drive_panel.html", test_drive_context(drive))
