from django.contrib import admin

from agents.models import Agent, Arena


@admin.register(Arena)
class ArenaAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "team", "created_at"]


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = [
        "display_name",
        "slug",
        "kind",
        "arena",
        "is_baseline",
        "is_paused",
        "retired_at",
    ]
    list_filter = ["kind", "arena", "is_baseline", "is_paused"]
    search_fields = ["display_name", "slug", "model_id"]
