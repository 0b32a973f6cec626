"""Admin for judging: judges and their trust, votes, and the two audit logs through
which an operator excludes or re-admits a battle and changes a judge's standing
(untrusted, trusted again, approved, probation ended). Adding a log entry performs the
action through the service; entries are never edited or deleted."""

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.shortcuts import redirect
from django.urls import reverse

from agents.admin import ArenaAdmin
from agents.models import Agent, Arena
from arena_site.admin import ReadOnlyAdmin
from arena_site.exceptions import ApplicationError
from battles.models import Battle
from evals.suites import SuiteError
from judging.models import (
    Assignment,
    ExclusionLogEntry,
    JudgeProfile,
    JudgeTrustLogEntry,
    MachineVerdict,
    Vote,
)
from judging.services import battle_exclude, battle_readmit, judge_standing_set, judge_trust_set
from judging.services.exclusions import battle_exclusion_check
from judging.services.machine import (
    arena_machine_judge_configure,
    machine_judge_problem,
    machine_rubric_parse,
)

StandingAction = JudgeTrustLogEntry.Action


@admin.register(JudgeProfile)
class JudgeProfileAdmin(admin.ModelAdmin):
    list_display = [
        "user", "trust", "agree_count", "seen_count", "is_untrusted", "approved_at",
        "established_at",
    ]  # fmt: skip
    list_filter = ["is_untrusted"]
    search_fields = ["user__username"]
    # Trust moves only by the rules; standing changes go through the audited log.
    readonly_fields = [
        "user", "trust", "agree_count", "seen_count", "is_untrusted", "approved_at",
        "established_at",
    ]  # fmt: skip
    actions = ["mark_untrusted", "approve", "establish"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def _to_log(self, request, queryset, action: str):
        if queryset.count() != 1:
            self.message_user(request, "Select one judge at a time.", messages.WARNING)
            return None
        profile = queryset.get()
        url = reverse("admin:judging_judgetrustlogentry_add")
        return redirect(f"{url}?judge={profile.user_id}&action={action}")

    @admin.action(description="Mark the selected judge untrusted (asks why)…")
    def mark_untrusted(self, request, queryset):
        return self._to_log(request, queryset, StandingAction.UNTRUST)

    @admin.action(description="Approve the selected account as a judge (asks why)…")
    def approve(self, request, queryset):
        return self._to_log(request, queryset, StandingAction.APPROVE)

    @admin.action(description="End the selected judge's probation (asks why)…")
    def establish(self, request, queryset):
        return self._to_log(request, queryset, StandingAction.ESTABLISH)


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdmin):
    """What was served to whom and when (the reading time's start): evidence."""

    list_display = ["judge", "battle", "served_at", "voided_at"]
    raw_id_fields = ["judge", "battle"]


@admin.register(Vote)
class VoteAdmin(ReadOnlyAdmin):
    """Votes are evidence: they change only through the judging services."""

    list_display = [
        "judge",
        "battle",
        "choice",
        "admissible",
        "inadmissible_reason",
        "is_submitter",
        "counted",
        "retracted",
        "voted_at",
    ]
    list_filter = ["choice", "admissible", "retracted", "counted", "is_submitter"]
    raw_id_fields = ["judge", "battle"]


class ExclusionForm(forms.ModelForm):
    class Meta:
        model = ExclusionLogEntry
        fields = ["battle", "action", "reason", "note"]
        widgets = {"reason": forms.Select(choices=[("", "—"), *Battle.ExclusionReason.choices])}
        help_texts = {
            "reason": "Exclude: the SPEC §5.3 reason. Re-admit: leave empty.",
            "note": "Why (kept in the log).",
        }

    def clean(self):
        data = super().clean()
        battle, action = data.get("battle"), data.get("action")
        if battle is None or not action:
            return data
        if not (data.get("note") or "").strip():
            self.add_error("note", "Say why.")
        try:
            battle_exclusion_check(battle=battle, action=action, reason=data.get("reason", ""))
        except ApplicationError as exc:
            raise ValidationError(exc.message) from exc
        return data


@admin.register(ExclusionLogEntry)
class ExclusionLogEntryAdmin(admin.ModelAdmin):
    """The exclusion log (read-only); "add" excludes or re-admits a battle."""

    form = ExclusionForm
    list_display = ["at", "battle", "action", "reason", "actor", "note"]
    list_filter = ["action", "reason"]
    search_fields = ["battle__id", "note"]
    raw_id_fields = ["battle"]

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if data["action"] == ExclusionLogEntry.Action.EXCLUDE:
            entry = battle_exclude(
                battle_id=data["battle"].pk,
                reason=data["reason"],
                note=data["note"],
                actor=request.user,
            )
        else:
            entry = battle_readmit(
                battle_id=data["battle"].pk, note=data["note"], actor=request.user
            )
            battle = Battle.objects.get(pk=entry.battle_id)
            self.message_user(request, f"Battle {battle.pk} is now {battle.status}.")
        obj.pk = entry.pk  # the admin's redirect and message name the stored entry
        obj.at, obj.actor, obj.reason = entry.at, entry.actor, entry.reason


class TrustForm(forms.ModelForm):
    class Meta:
        model = JudgeTrustLogEntry
        fields = ["judge", "action", "note"]
        help_texts = {"note": "Why (kept in the log)."}

    def clean(self):
        data = super().clean()
        judge, action = data.get("judge"), data.get("action")
        if judge is None or not action:
            return data
        profile = JudgeProfile.objects.filter(user=judge).first()
        if action in (StandingAction.UNTRUST, StandingAction.TRUST):
            untrusted = bool(profile and profile.is_untrusted)
            if (action == StandingAction.UNTRUST) == untrusted:
                state = "untrusted" if untrusted else "trusted"
                raise ValidationError(f"{judge} is already {state}.")
        elif action == StandingAction.APPROVE and profile and profile.approved_at:
            raise ValidationError(f"{judge} is already approved.")
        elif action == StandingAction.ESTABLISH and profile and profile.established_at:
            raise ValidationError(f"{judge} is already past probation.")
        return data


@admin.register(JudgeTrustLogEntry)
class JudgeTrustLogEntryAdmin(admin.ModelAdmin):
    """The judge trust log (read-only); "add" marks a judge untrusted or trusted again."""

    form = TrustForm
    list_display = ["at", "judge", "action", "actor", "note"]
    list_filter = ["action"]
    raw_id_fields = ["judge"]

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "judge":
            kwargs["queryset"] = get_user_model().objects.order_by("username")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        action = data["action"]
        if action in (StandingAction.UNTRUST, StandingAction.TRUST):
            entry = judge_trust_set(
                judge_id=data["judge"].pk,
                untrusted=action == StandingAction.UNTRUST,
                note=data["note"],
                actor=request.user,
            )
        else:
            entry = judge_standing_set(
                judge_id=data["judge"].pk, action=action, note=data["note"], actor=request.user
            )
        obj.pk = entry.pk
        obj.at, obj.actor = entry.at, entry.actor


# --- the machine judge of live battles -----------------------------------------------


class ArenaMachineJudgeForm(forms.ModelForm):
    """The arena with its machine judge: the judge must be one of the arena's own
    models, at least one method on, the rubric criteria as an offline rubric file's
    (``evals.suites``); every refusal names what to change."""

    class Meta:
        model = Arena
        fields = ["slug", "name", "team", "machine_judge", "machine_judge_pairwise",
                  "machine_judge_rubric"]  # fmt: skip
        help_texts = {
            "machine_judge_rubric": 'A JSON list, e.g. [{"name": "correctness", '
            '"description": "Does it do what the task asks?", "scale": 5, "weight": 2}]. '
            "Empty: no rubric judging.",
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["machine_judge"].queryset = Agent.objects.filter(
            kind=Agent.Kind.SCAFFOLD, team=None, retired_at=None
        ).exclude(model_id="")

    def clean_machine_judge_rubric(self):
        rubric = self.cleaned_data.get("machine_judge_rubric")
        if rubric in (None, "", [], {}):
            return None
        try:
            machine_rubric_parse(rubric, arena_slug=self.cleaned_data.get("slug") or "arena")
        except SuiteError as exc:
            raise ValidationError(str(exc)) from None
        return rubric

    def clean(self):
        data = super().clean()
        judge = data.get("machine_judge")
        if judge is not None:
            problem = machine_judge_problem(judge)
            if problem:
                self.add_error("machine_judge", problem)
            elif not (
                data.get("machine_judge_pairwise")
                or data.get("machine_judge_rubric")
                or "machine_judge_rubric" in self.errors  # that error says it already
            ):
                self.add_error(
                    "machine_judge_pairwise",
                    "A machine judge needs a method: tick pairwise judging or give rubric "
                    "criteria.",
                )
        return data


admin.site.unregister(Arena)


@admin.register(Arena)
class ArenaWithMachineJudgeAdmin(ArenaAdmin):
    form = ArenaMachineJudgeForm
    list_display = [*ArenaAdmin.list_display, "machine_judge"]
    readonly_fields = ["machine_judge_rubric_sha256"]

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        data = form.cleaned_data
        arena_machine_judge_configure(
            arena=obj,
            judge=data.get("machine_judge"),
            pairwise=bool(data.get("machine_judge_pairwise")),
            rubric=data.get("machine_judge_rubric"),
        )


@admin.register(MachineVerdict)
class MachineVerdictAdmin(ReadOnlyAdmin):
    list_display = ["battle", "judge_model", "method", "status", "outcome", "agreement",
                    "created_at"]  # fmt: skip
    list_filter = ["method", "status", "judge_model"]
    search_fields = ["battle__id", "judge_model"]
