"""Admin for training environments: read-only (an environment is built and validated
by the pipeline, never edited by hand), filtered by status and failure mode. An
operator rejects one with a reason, from the list's action or the change page's link,
on a form that calls ``environments.review.environment_reject``; and supplies the
grader of a ``needs_grader`` one (its JSON, on a form that calls
``environments.review.environment_grader_supply``), which sends it to its replays."""

import json

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from arena_site.admin import ReadOnlyAdmin
from arena_site.exceptions import ApplicationError
from environments.models import Environment
from environments.review import REASON_MAX_CHARS, environment_grader_supply, environment_reject

# What the grader form starts from when the builder kept no draft.
EMPTY_GRADER = {"version": 1, "checks": []}


class RejectForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        max_length=REASON_MAX_CHARS,
        help_text="Why it must not be used (kept with it; shown to operators). It leaves "
        "the public list and its package is no longer served.",
    )


class GraderForm(forms.Form):
    grader = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 24, "cols": 100, "spellcheck": "false"}),
        strip=False,
        help_text='JSON: {"version": 1, "checks": [...]}, at most 50 checks, paths relative '
        "to /work. The environment becomes graded and its two replays are queued.",
    )

    def clean_grader(self) -> object:
        try:
            return json.loads(self.cleaned_data["grader"])
        except (ValueError, RecursionError) as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}") from None


@admin.register(Environment)
class EnvironmentAdmin(ReadOnlyAdmin):
    list_display = [
        "id", "status", "failure_mode", "battle", "run", "validated_at", "conversion_s",
        "rejected_at",
    ]  # fmt: skip
    list_filter = ["status", "failure_mode"]
    list_select_related = ["battle", "run"]
    readonly_fields = ["reject_link", "grader_link"]
    actions = ["reject"]

    def get_fields(self, request, obj=None):
        awaiting = obj is not None and obj.status == Environment.Status.NEEDS_GRADER
        links = ["reject_link", "grader_link"] if awaiting else ["reject_link"]
        return [*links, *(f.name for f in Environment._meta.fields)]

    def get_readonly_fields(self, request, obj=None):
        return self.get_fields(request, obj)

    def _may_review(self, request: HttpRequest) -> bool:
        return (
            request.user.is_active
            and request.user.is_staff
            and request.user.has_perm("environments.change_environment")
        )

    @admin.display(description="Reject")
    def reject_link(self, obj: Environment) -> str:
        if obj.status == Environment.Status.REJECTED:
            return f"Rejected: {obj.rejected_reason}"
        url = reverse("admin:environments_environment_reject", args=[obj.pk])
        return format_html('<a href="{}">Reject this environment (asks why)…</a>', url)

    @admin.display(description="Grader")
    def grader_link(self, obj: Environment) -> str:
        if obj.reference_run_id is None or not obj.state:
            return (
                "No reference run or no state: a grader alone cannot validate it (the "
                "reference replay must pass it). Reject it instead."
            )
        url = reverse("admin:environments_environment_grader", args=[obj.pk])
        return format_html('<a href="{}">Supply a grader…</a>', url)

    @admin.action(description="Reject the selected environment (asks why)…")
    def reject(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Select one environment at a time.", messages.WARNING)
            return None
        return redirect("admin:environments_environment_reject", queryset.get().pk)

    def get_urls(self):
        reject = self.admin_site.admin_view(self.reject_view)
        grader = self.admin_site.admin_view(self.grader_view)
        return [
            path("<int:pk>/reject/", reject, name="environments_environment_reject"),
            path("<int:pk>/grader/", grader, name="environments_environment_grader"),
            *super().get_urls(),
        ]

    def _reviewed(self, request: HttpRequest, pk: int) -> Environment:
        """The environment a review form acts on: 403 without the permission, 404
        when there is none."""
        if not self._may_review(request):
            raise PermissionDenied
        environment = Environment.objects.filter(pk=pk).first()
        if environment is None:
            raise Http404("No such environment.")
        return environment

    def _review_page(self, request, environment, form, *, title: str, template: str):
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.opts,
            "environment": environment,
            "form": form,
        }
        return TemplateResponse(request, template, context)

    def reject_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        environment = self._reviewed(request, pk)
        form = RejectForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                environment_reject(
                    environment_id=pk, reason=form.cleaned_data["reason"], actor=request.user
                )
            except ApplicationError as exc:
                form.add_error("reason", exc.message)
            else:
                self.message_user(request, f"{environment} rejected.", messages.SUCCESS)
                return redirect("admin:environments_environment_change", pk)
        return self._review_page(
            request, environment, form,
            title=f"Reject {environment}", template="admin/environments/reject.html",
        )  # fmt: skip

    def grader_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        environment = self._reviewed(request, pk)
        draft = json.dumps(environment.grader or EMPTY_GRADER, indent=2, ensure_ascii=False)
        form = GraderForm(request.POST or None, initial={"grader": draft})
        if request.method == "POST" and form.is_valid():
            try:
                environment_grader_supply(
                    environment_id=pk, grader=form.cleaned_data["grader"], actor=request.user
                )
            except ApplicationError as exc:
                form.add_error("grader" if exc.code == "invalid_grader" else None, exc.message)
            else:
                self.message_user(
                    request,
                    f"{environment}: grader supplied; its replays are queued.",
                    messages.SUCCESS,
                )
                return redirect("admin:environments_environment_change", pk)
        return self._review_page(
            request, environment, form,
            title=f"Supply a grader for {environment}", template="admin/environments/grader.html",
        )  # fmt: skip
