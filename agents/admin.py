"""Admin for the roster. An agent's standing (paused, retired, its arena, its entrant
team) changes only with a reason, kept in the agent standing log; agents are retired,
never deleted (their battles stay in the ratings)."""

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.db import transaction
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from agents.human import operator_check
from agents.models import Agent, AgentStandingLogEntry, Arena, BaselineOperator
from agents.registration import agent_approve, agent_reject
from agents.services import (
    agent_pause_fields,
    agent_standing_changes,
    agent_standing_log,
    entry_problems,
)
from arena_site.admin import ReadOnlyAdmin
from arena_site.exceptions import ApplicationError


@admin.register(Arena)
class ArenaAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "team", "bootstrap_unit", "created_at"]
    board_fields = ["bootstrap_unit"]

    def get_fieldsets(self, request, obj=None):
        """The arena's fields as its form gives them (an admin that extends this one may
        narrow its form's fields), then the board's own in a section of their own."""
        fields = [f for f in self.get_fields(request, obj) if f not in self.board_fields]
        return [
            (None, {"fields": fields}),
            (
                "Leaderboard",
                {
                    "fields": self.board_fields,
                    "description": "How the board's rank bands are resampled "
                    "(docs/intervals.md, “Rank bands”).",
                },
            ),
        ]

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)  # a class of its own, fresh fields
        for name in self.board_fields:
            if name in form.base_fields:
                # Posted empty or without it (a form or script from before it existed),
                # the arena keeps its choice.
                field = form.base_fields[name]
                field.required = False
                field.empty_value = (
                    getattr(obj, name) if obj else Arena._meta.get_field(name).default
                )
        return form


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
        "another arena or team; kept in the agent standing log. When pausing, the "
        "agent's team reads it as the reason.",
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

    def _post_clean(self):
        super()._post_clean()  # the instance now holds the form's values
        if self.errors:
            return  # a malformed field first; the entry checks may call the endpoint
        # An agent that could not make one move is never saved to be drawn: the one door
        # (agents.services.entry_problems) checks the provider and its key, the address
        # policy (no internal address unless ARENA_INTERNAL_ALLOWLIST has it, checked
        # again at each call) and a remote endpoint's health call.
        for field, message in entry_problems(self.instance).items():
            self.add_error(field if field in self.fields else None, message)

    def clean(self):
        data = super().clean()
        if self.instance.pk:
            self.standing_changes = agent_standing_changes(agent=self.instance, proposed=data)
            if self.standing_changes and not (data.get("standing_note") or "").strip():
                self.add_error("standing_note", "Say why (kept in the agent standing log).")
        else:
            self.standing_changes = {}
        return data


class ApprovalActionForm(ActionForm):
    """The action bar's note: Approve / Reject an entry say it to its team."""

    note = forms.CharField(
        required=False,
        label="Note",
        help_text="Approve / Reject: the note the team reads (required to reject).",
    )


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
        "failure_streak",
        "paused_reason",
        "retired_at",
        "approval",
    ]
    list_filter = ["kind", "arena", "is_baseline", "is_paused", "provider", "approval"]
    readonly_fields = [
        "failure_streak", "paused_reason", "test_drives",
        "approval", "approval_note", "approved_by", "approved_at", "has_provider_key",
    ]  # fmt: skip
    actions = ["test_drive", "approve_entries", "reject_entries"]
    # A team's entry waits for an admin (agents/registration.py): Approve / Reject, with
    # the note of the action bar (required to reject; its team reads it).
    action_form = ApprovalActionForm
    search_fields = ["display_name", "slug", "model_id", "aliases"]
    fieldsets = [
        (None, {"fields": ["arena", "slug", "display_name", "kind", "team", "aliases"]}),
        ("Model", {"fields": ["provider", "model_id", "system_prompt", "params"]}),
        ("Built-in / remote", {"fields": ["builtin_policy", "remote_secret"]}),
        ("Budgets and tools", {"fields": ["tool_set", "step_budget", "wall_budget_s"]}),
        (
            "Status",
            {
                "fields": [
                    "is_baseline",
                    "is_paused",
                    "paused_reason",
                    "failure_streak",
                    "retired_at",
                    "standing_note",
                    "test_drives",
                ]
            },
        ),
        (
            "Approval (a team's entry is drawn only once approved)",
            {
                "fields": [
                    "approval",
                    "approval_note",
                    "approved_by",
                    "approved_at",
                    "has_provider_key",
                ]
            },
        ),
    ]

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # retire instead: battles keep their agents

    @admin.display(description="Team's own provider key", boolean=True)
    def has_provider_key(self, obj) -> bool:
        return bool(obj.provider_key_encrypted)  # never the key, nor its ciphertext

    @admin.action(description="Approve the entry (it may be drawn into battles)")
    def approve_entries(self, request, queryset):
        self._approval_decide(request, queryset, approve=True)

    @admin.action(description="Reject the entry (with the note: why)")
    def reject_entries(self, request, queryset):
        self._approval_decide(request, queryset, approve=False)

    def _approval_decide(self, request, queryset, *, approve: bool) -> None:
        note = (request.POST.get("note") or "").strip()
        done, refused = [], []
        for agent in queryset:
            try:
                if approve:
                    agent_approve(agent=agent, actor=request.user, note=note)
                else:
                    agent_reject(agent=agent, actor=request.user, note=note)
                done.append(agent.display_name)
            except ApplicationError as exc:
                refused.append(f"{agent.display_name}: {exc.message}")
        if done:
            verb = "Approved" if approve else "Rejected"
            self.message_user(request, f"{verb}: {', '.join(done)}.", messages.SUCCESS)
        for line in refused:
            self.message_user(request, line, messages.ERROR)

    @admin.display(description="Test drives")
    def test_drives(self, obj) -> str:
        if obj.pk is None:
            return "-"
        return format_html(
            '<a href="{}">Its test drives, and start one</a>',
            reverse("battles:test-drives-of", args=[obj.pk]),
        )

    @admin.action(description="Test drive: run alone on a sample task")
    def test_drive(self, request, queryset):
        """To the agent's test-drive page (battles app: the layers keep the roster's
        admin from importing battles), where a sample task is chosen and started."""
        agents = list(queryset[:2])
        if len(agents) != 1:
            self.message_user(request, "Select one agent to test-drive.", messages.WARNING)
            return None
        return HttpResponseRedirect(reverse("battles:test-drives-of", args=[agents[0].pk]))

    @transaction.atomic
    def save_model(self, request, obj, form, change):
        if change and form.standing_changes:
            agent_pause_fields(
                agent=obj, changes=form.standing_changes, note=form.cleaned_data["standing_note"]
            )
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


class BaselineOperatorForm(forms.ModelForm):
    class Meta:
        model = BaselineOperator
        fields = ["agent", "user"]

    def clean(self):
        data = super().clean()
        if data.get("agent") and data.get("user"):
            try:
                operator_check(agent=data["agent"], user=data["user"])
            except ApplicationError as exc:
                raise forms.ValidationError(exc.message) from exc
        return data


@admin.register(BaselineOperator)
class BaselineOperatorAdmin(admin.ModelAdmin):
    """Marks a team member as an operator of the team's human entrant
    (docs/human-baseline.md); the person goes on duty from the operator page."""

    form = BaselineOperatorForm
    list_display = ["user", "agent", "on_duty_since", "seen_at"]
    readonly_fields = ["on_duty_since", "seen_at"]
    raw_id_fields = ["user"]
