"""Slot leases: which sandbox slot (and so which unprivileged uid) a live sandbox holds,
on which host and under which worker pid, so a janitor can find what dead workers left."""

from django.db import models
from django.db.models import Q


class SandboxLease(models.Model):
    slot = models.PositiveIntegerField()
    backend = models.CharField(max_length=20)
    host = models.CharField(max_length=255)
    worker_pid = models.PositiveIntegerField()
    run = models.ForeignKey("battles.Run", null=True, blank=True, on_delete=models.SET_NULL)
    path = models.CharField(max_length=500, blank=True)
    acquired_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["host", "slot"],
                condition=Q(released_at=None),
                name="sandboxlease_one_live_per_slot",
            )
        ]

    def __str__(self) -> str:
        return f"slot {self.slot} on {self.host}"
