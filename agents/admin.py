from django import forms
from django.contrib import admin

from agents.models import Agent, Arena


@admin.register(Arena)
class ArenaAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "team", "created_at"]


class AgentForm(forms.ModelForm):
    """The remote secret is write-only: never rendered back, kept when left empty."""

    remote_secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="HMAC secret for remote agents. Leave empty to keep the current one.",
    )

    class Meta:
        model = Agent
        fields = [
            "arena", "slug", "display_name", "kind", "team", "aliases", "provider", "model_id",
            "system_prompt", "params", "builtin_policy", "remote_secret", "tool_set",
            "step_budget", "wall_budget_s", "is_baseline", "is_paused", "retired_at",
        ]  # fmt: skip

    def clean_remote_secret(self) -> str:
        value = self.cleaned_data.get("remote_secret", "")
        if not value and self.instance.pk:
            return self.instance.remote_secret
        return value


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    list_display = [
        "display_name",
        "slug",
        "kind",
        "provider",
        "model_id",
        "arena",
        "is_baseline",
        "is_paused",
        "retired_at",
    ]
    list_filter = ["kind", "arena", "is_baseline", "is_paused", "provider"]
    search_fields = ["display_name", "slug", "model_id", "aliases"]
    fieldsets = [
        (None, {"fields": ["arena", "slug", "display_name", "kind", "team", "aliases"]}),
        ("Model", {"fields": ["provider", "model_id", "system_prompt", "params"]}),
        ("Built-in / remote", {"fields": ["builtin_policy", "remote_secret"]}),
        ("Budgets and tools", {"fields": ["tool_set", "step_budget", "wall_budget_s"]}),
        ("Status", {"fields": ["is_baseline", "is_paused", "retired_at"]}),
    ]
