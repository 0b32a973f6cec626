from django.contrib import admin

from sandboxes.models import SandboxLease


@admin.register(SandboxLease)
class SandboxLeaseAdmin(admin.ModelAdmin):
    list_display = ["slot", "host", "backend", "worker_pid", "run", "acquired_at", "released_at"]
    list_filter = ["backend", "host"]
