"""Admin for the roster. An agent's standing (paused, retired, its arena, its entrant
team) changes only with a reason, kept in the agent standing log; agents are retired,
never deleted (their battles stay in the ratings)."""

from django import forms
from django.contrib import admin
from django.db import transaction

from agents.models import Agent, AgentStandingLogEntry, Arena
from agents.services import (
    agent_destinations_check,
    agent_keys_check,
    agent_standing_changes,
    agent_standing_log,
)
from arena_site.admin import ReadOnlyAdmin
from arena_site.exceptions import ApplicationError


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
    standing_note = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Why the standing changes",
        help_text="Required when pausing, retiring, reinstating, or moving the agent to "
        "another arena or team; kept in the agent standing log.",
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

    def clean(self):
        data = super().clean()
        # The endpoint or base URL the worker would call: no internal address unless an
        # operator allow-lists it (ARENA_INTERNAL_ALLOWLIST), checked again at each call.
        try:
            agent_destinations_check(
                kind=data.get("kind", ""), provider=data.get("provider", ""),
                params=data.get("params"),
            )  # fmt: skip
        except ApplicationError as exc:
            self.add_error("params", exc.message)
        try:  # an agent that could not make one call is never saved to be drawn
            agent_keys_check(
                kind=data.get("kind", ""), provider=data.get("provider", ""),
                params=data.get("params"),
            )  # fmt: skip
        except ApplicationError as exc:
            self.add_error("provider" if exc.code == "unknown_provider" else "params", exc.message)
        if self.instance.pk:
            self.standing_changes = agent_standing_changes(agent=self.instance, proposed=data)
            if self.standing_changes and not (data.get("standing_note") or "").strip():
                self.add_error("standing_note", "Say why (kept in the agent standing log).")
        else:
            self.standing_changes = {}
        return data


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
        ("Status", {"fields": ["is_baseline", "is_paused", "retired_at", "standing_note"]}),
    ]

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # retire instead: battles keep their agents

    @transaction.atomic
    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if change and form.standing_changes:
            agent_standing_log(
                agent=obj,
                changes=form.standing_changes,
                note=form.cleaned_data["standing_note"],
                actor=request.user,
            )


@admin.register(AgentStandingLogEntry)
class AgentStandingLogEntryAdmin(ReadOnlyAdmin):
    """Entries are written by the agent form above."""

    list_display = ["at", "agent", "changes", "actor", "note"]
    list_filter = ["agent__arena"]
    search_fields = ["agent__slug", "note"]
