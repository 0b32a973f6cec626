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
