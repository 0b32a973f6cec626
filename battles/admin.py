from django.contrib import admin

from battles.models import Attachment, Battle, Run, Span, Step, Task


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["id", "team", "submitter", "created_at"]
    search_fields = ["instruction"]


class RunInline(admin.TabularInline):
    model = Run
    extra = 0
    fields = ["side", "agent", "status", "end_reason", "step_budget", "input_digest"]
    readonly_fields = fields


@admin.register(Battle)
class BattleAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "status",
        "agent_a",
        "agent_b",
        "outcome",
        "exclusion_reason",
        "self_judged",
        "redundancy_target",
        "submitted_at",
    ]
    list_filter = ["status", "outcome", "exclusion_reason", "self_judged", "redundancy_target"]
    inlines = [RunInline]
    # Judging state changes only through the audited exclusion log (judging admin).
    readonly_fields = [
        "status",
        "outcome",
        "evidence_weight",
        "exclusion_reason",
        "self_judged",
        "cluster_judge",
        "streaming_applied",
    ]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "battle", "side", "agent", "status", "end_reason"]


@admin.register(Step)
class StepAdmin(admin.ModelAdmin):
    list_display = ["id", "run", "index", "tool", "duration_ms"]


@admin.register(Attachment)
class AttachmentAdmin(admin.ModelAdmin):
    list_display = ["name", "task", "team", "size", "content_type", "created_at"]
    readonly_fields = ["sha256", "path", "size"]


@admin.register(Span)
class SpanAdmin(admin.ModelAdmin):
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
