from django.contrib import admin

from sandboxes.models import SandboxLease, WorkerHost


@admin.register(SandboxLease)
class SandboxLeaseAdmin(admin.ModelAdmin):
    list_display = [
        "slot", "host", "backend", "worker_pid", "run", "acquired_at", "heartbeat_at",
        "released_at",
    ]  # fmt: skip
    list_filter = ["backend", "host"]


@admin.register(WorkerHost)
class WorkerHostAdmin(admin.ModelAdmin):
    """Read-only: hosts register themselves by beating."""

    list_display = ["host_id", "machine", "started_at", "heartbeat_at", "lost_at"]
    readonly_fields = ["host_id", "machine", "started_at", "heartbeat_at", "lost_at"]

    def has_add_permission(self, request) -> bool:
        return False
