"""A run's initial state, content-addressed (battles.snapshots): what rebuilds the
sandbox as it was before the agent's first action."""

from django.db import models


class RunSnapshot(models.Model):
    """One initial state. ``digest`` is the SHA-256 of the canonical ``manifest``, so
    both lanes of a battle (identical inputs) share one row and a task re-run shares it
    too. The manifest names its files by SHA-256; their bytes live once each in the
    private storage under ``snapshots/blobs/``."""

    digest = models.CharField(max_length=64, unique=True)
    manifest = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    # The last run that started from it: retention counts from here
    # (ARENA_SNAPSHOT_RETENTION_DAYS).
    last_used_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"Snapshot {self.digest[:12]}"
