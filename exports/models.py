"""What the open data keeps between exports (docs/open-data.md)."""

from django.db import models


class RedactedInstruction(models.Model):
    """A task's instruction with personal data replaced by placeholders
    (exports.redaction), made once per task: the ``battles`` table publishes this text,
    never the instruction as submitted. ``entities`` counts what was replaced by type,
    never the values."""

    task = models.OneToOneField(
        "battles.Task", on_delete=models.CASCADE, primary_key=True, related_name="redacted"
    )
    text = models.TextField()
    entities = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Redacted instruction of task {self.task_id}"


class RedactedFollowUp(models.Model):
    """A follow-up the submitter sent both sides of a battle, redacted as instructions
    are (the submitter's own words): the ``follow_ups`` table publishes this text, never
    the follow-up as sent."""

    follow_up = models.OneToOneField(
        "battles.FollowUp", on_delete=models.CASCADE, primary_key=True, related_name="redacted"
    )
    text = models.TextField()
    entities = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Redacted follow-up {self.follow_up_id}"
