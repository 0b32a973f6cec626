"""Admin for battles: evidence, read-only, and the worker hosts with an operator's
actions on them (cordon, drain, forget: ``battles.services.host_admin``). A battle's
judging state changes only through the audited exclusion log (judging admin); tasks,
runs, steps and spans are what the agents did and what judges saw, and are never
edited or deleted here."""

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm

from arena_site.admin import ReadOnlyAdmin
from arena_site.exceptions import ApplicationError
from battles.models import Attachment, Battle, Run, Span, Step, Task, TestDrive
from battles.services.host_admin import (
    host_cordon,
    host_forget,
    host_leases_release,
    host_uncordon,
)
from sandboxes.models import WorkerHost


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ["id", "team", "submitter", "created_at"]
    search_fields = ["instruction"]


class RunInline(admin.TabularInline):
    model = Run
    extra = 0
    fields = ["side", "agent", "status", "end_reason", "agent_fault", "step_budget", "input_digest"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Battle)
class BattleAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "status",
        "agent_a",
        "agent_b",
        "outcome",
        "exclusion_reason",
        "decision_source",
        "redundancy_target",
        "submitted_at",
    ]
    list_filter = ["status", "outcome", "exclusion_reason", "decision_source", "redundancy_target"]
    inlines = [RunInline]


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "battle", "test_drive", "side", "agent", "status", "end_reason",
                    "agent_fault"]  # fmt: skip
    list_filter = ["agent_fault", "end_reason"]


@admin.register(TestDrive)
class TestDriveAdmin(ReadOnlyAdmin):
    """Started from the agent list's "Test drive" action; the page shows the trajectory."""

    list_display = ["id", "agent", "sample", "status", "requested_by", "created_at"]
    list_filter = ["status"]
    inlines = [RunInline]


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "index", "tool", "duration_ms"]


@admin.register(Attachment)
class AttachmentAdmin(ReadOnlyAdmin):
    list_display = ["name", "task", "team", "size", "content_type", "created_at"]


@admin.register(Span)
class SpanAdmin(ReadOnlyAdmin):
    list_display = [
        "run",
        "step_index",
        "kind",
        "name",
        "latency_ms",
        "input_tokens",
        "output_tokens",
    ]
    list_filter = ["kind"]


class HostActionForm(ActionForm):
    """The action bar's reason: every action on a host is kept with it in the history."""

    reason = forms.CharField(required=False, label="Reason", help_text="Why (kept in the history).")


@admin.register(WorkerHost)
class WorkerHostAdmin(admin.ModelAdmin):
    """The worker hosts (they register themselves by beating) and an operator's hands on
    them (``battles.services.host_admin``): cordon, drain, uncordon, release the leases
    of a silent host, forget a silent host. Each asks for a reason, kept in the host's
    history (the admin log)."""

    list_display = [
        "host_id", "backend", "version", "live_workers", "load_1m", "heartbeat_at",
        "lost_at", "cordoned_at", "draining", "cordon_reason",
    ]  # fmt: skip
    readonly_fields = [
        "host_id", "machine", "backend", "version", "load_1m", "workers", "started_at",
        "heartbeat_at", "lost_at", "cordoned_at", "draining", "cordon_reason",
    ]  # fmt: skip
    actions = ["cordon", "drain", "uncordon", "release_leases", "forget"]
    action_form = HostActionForm

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # "forget", with its reason and its battles re-queued

    @admin.display(description="live battle workers")
    def live_workers(self, obj) -> int:
        return len(obj.workers or {})

    @admin.action(description="Cordon: take no new battle (with the reason)")
    def cordon(self, request, queryset):
        self._each(request, queryset, "cordoned", lambda h, r: host_cordon(host=h, reason=r))

    @admin.action(description="Drain: take no new battle, workers stop once idle")
    def drain(self, request, queryset):
        self._each(
            request, queryset, "draining", lambda h, r: host_cordon(host=h, reason=r, drain=True)
        )

    @admin.action(description="Uncordon: take battles again")
    def uncordon(self, request, queryset):
        self._each(request, queryset, "uncordoned", lambda h, r: host_uncordon(host=h))

    @admin.action(description="Release the slot leases of a silent host")
    def release_leases(self, request, queryset):
        self._each(
            request, queryset, "leases released",
            lambda h, r: f"{host_leases_release(host=h, reason=r)} leases",
        )  # fmt: skip

    @admin.action(description="Forget a silent host (its leases freed, its battles re-queued)")
    def forget(self, request, queryset):
        def forget_one(host: str, reason: str) -> str:
            freed, requeued, failed = host_forget(host=host, reason=reason)
            return f"{freed} leases freed, battles re-queued {requeued}, failed {failed}"

        self._each(request, queryset, "forgotten", forget_one)

    def _each(self, request, queryset, done: str, act) -> None:
        reason = " ".join((request.POST.get("reason") or "").split())
        if not reason:
            self.message_user(request, "Say why, in the reason box.", level=messages.ERROR)
            return
        for host in list(queryset):
            try:
                said = act(host.host_id, reason)
            except ApplicationError as exc:
                self.message_user(request, f"{host.host_id}: {exc.message}", messages.ERROR)
                continue
            detail = f" ({said})" if isinstance(said, str) else ""
            # The history keeps it, under the host's id even once the row is forgotten
            self.log_change(request, host, f"{done}{detail}: {reason}")
            self.message_user(request, f"{host.host_id}: {done}{detail}.")
