"""Admin for battles: evidence, read-only. A battle's judging state changes only through
the audited exclusion log (judging admin); tasks, runs, steps and spans are what the
agents did and what judges saw, and are never edited or deleted here."""

from django.contrib import admin

from arena_site.admin import ReadOnlyAdmin
from battles.models import Attachment, Battle, Run, Span, Step, Task, TestDrive


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
