"""Reads of the sandboxes app."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from arena_site.hosts import host_id
from sandboxes.models import WorkerHost


def hosts_silent() -> list[str]:
    """Ids of hosts whose last beat is older than ARENA_HOST_DEAD_AFTER_S (a host
    that never beat — a test's or a command's process — is never among them)."""
    cutoff = timezone.now() - timedelta(seconds=settings.ARENA.host_dead_after_s)
    return list(
        WorkerHost.objects.filter(heartbeat_at__lt=cutoff)
        .exclude(host_id=host_id())
        .values_list("host_id", flat=True)
    )
