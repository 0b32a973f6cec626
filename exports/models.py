"""What the open data keeps between exports (docs/open-data.md)."""

from django.db import models


class Redacted(models.Model):
    """A text of a person's with personal data replaced by placeholders
    (exports.redaction), made once: the open data publishes this text, never the one
    as given. ``entities`` counts what was replaced by type, never the values."""

    text = models.TextField()
    entities = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True


class RedactedInstruction(Redacted):
    """A task's instruction redacted: the ``battles`` table publishes it."""

    task = models.OneToOneField(
        "battles.Task", on_delete=models.CASCADE, primary_key=True, related_name="redacted"
    )

    def __str__(self) -> str:
        return f"Redacted instruction of task {self.task_id}"


class RedactedFollowUp(Redacted):
    """A follow-up the submitter sent both sides of a battle, redacted as instructions
    are (their own words): the ``follow_ups`` table publishes it."""

    follow_up = models.OneToOneField(
        "battles.FollowUp", on_delete=models.CASCADE, primary_key=True, related_name="redacted"
    )

    def __str__(self) -> str:
        return f"Redacted follow-up {self.follow_up_id}"
