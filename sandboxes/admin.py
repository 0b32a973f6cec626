from django.contrib import admin

from sandboxes.models import FleetSettings, SandboxLease


@admin.register(SandboxLease)
class SandboxLeaseAdmin(admin.ModelAdmin):
    list_display = [
        "slot", "host", "backend", "worker_pid", "run", "acquired_at", "heartbeat_at",
        "released_at",
    ]  # fmt: skip
    list_filter = ["backend", "host"]


@admin.register(FleetSettings)
class FleetSettingsAdmin(admin.ModelAdmin):
    """The fleet's one row (``sandboxes.fleet``): its times can be changed here (every
    host must then be restarted with the same ARENA_HOST_HEARTBEAT_S and
    ARENA_HOST_DEAD_AFTER_S); its key ring only by ``manage.py agent_keys_rotate``."""

    list_display = ["__str__", "set_by", "updated_at"]
    fields = ["heartbeat_s", "dead_after_s", "kek_fingerprints", "set_by", "updated_at"]
    readonly_fields = ["kek_fingerprints", "set_by", "updated_at"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
