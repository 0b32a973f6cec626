"""What a command-line client needs beside the evaluations API: an evaluation's progress
(what its page's bar shows: answers, criterion scores, pair judgements or games, done
out of expected) and a tournament's audit report, the same document as the page's
download, with a bearer token. Tenant-scoped (``accounts.tenancy``): another team's
evaluation is a 404."""

from django.db.models import QuerySet
from django.http import HttpResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views.decorators.csp import csp_override
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.tenancy import TenantScopedApiMixin
from arena_site.exceptions import ApplicationError
from arena_site.schema import error_response
from evals.models import Evaluation
from evals.presenters import progress_of
from evals.report import audit_report_html
from evals.tournament_selectors import record_of
from evals.views import REPORT_CSP


class ProgressPartOutput(serializers.Serializer):
    key = serializers.CharField(help_text="runs, scores or pairs.")
    label = serializers.CharField(help_text="As the evaluation's page names it.")
    done = serializers.IntegerField(min_value=0)
    expected = serializers.IntegerField(min_value=0)


class ProgressOutput(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField(help_text="pending, running, done or cancelled.")
    finished = serializers.BooleanField(help_text="done or cancelled: nothing more comes.")
    done = serializers.IntegerField(min_value=0)
    expected = serializers.IntegerField(
        min_value=0,
        help_text="A running tournament's is an estimate (series that end early play fewer "
        "games); once finished it is what was played.",
    )
    percent = serializers.IntegerField(min_value=0, max_value=100)
    parts = ProgressPartOutput(many=True)


class _TeamEvaluations(TenantScopedApiMixin):
    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return Evaluation.objects.filter(team_id__in=team_ids).select_related("suite", "rubric")


class EvaluationProgressApi(_TeamEvaluations, APIView):
    @extend_schema(
        operation_id="evaluations_progress",
        responses={200: ProgressOutput, 404: error_response(404)},
        description="How far the evaluation is: each kind of work done out of expected, "
        "as its page's progress bar shows it. Cheap to poll (five queries).",
    )
    def get(self, request, pk: int):
        evaluation = self.get_object()
        progress = progress_of([evaluation])[evaluation.pk]
        body = {
            "id": evaluation.pk,
            "status": evaluation.status,
            "finished": progress.finished,
            "done": progress.done,
            "expected": progress.expected,
            "percent": progress.percent,
            "parts": progress.parts,
        }
        return Response(ProgressOutput(body).data)


class EvaluationReportApi(_TeamEvaluations, APIView):
    @extend_schema(
        operation_id="evaluations_report",
        responses={
            (200, "text/html"): OpenApiResponse(
                OpenApiTypes.STR, description="The audit report, one standalone HTML file."
            ),
            404: error_response(
                404, "not_found, or no_report: the evaluation has no tournament (its "
                "record is at /api/evaluations/{id}/)."
            ),
        },
        description="A tournament's audit report (the page's download) from its record so "
        "far, as an attachment.",
    )  # fmt: skip
    @method_decorator(csp_override(REPORT_CSP))
    def get(self, request, pk: int):
        evaluation = self.get_object()
        if not evaluation.tournament:
            raise ApplicationError(
                f"evaluation {evaluation.pk} has no tournament, so no audit report; its "
                f"record is at /api/evaluations/{evaluation.pk}/",
                code="no_report",
                status=404,
            )
        response = HttpResponse(
            audit_report_html(record_of(evaluation)), content_type="text/html; charset=utf-8"
        )
        response["Content-Disposition"] = (
            f'attachment; filename="evaluation-{evaluation.pk}-report.html"'
        )
        response["X-Content-Type-Options"] = "nosniff"
        response["Cache-Control"] = "private, no-store"
        return response


urlpatterns = [
    path(
        "evaluations/<id:pk>/progress/", EvaluationProgressApi.as_view(), name="evaluation-progress"
    ),
    path(
        "evaluations/<id:pk>/report.html", EvaluationReportApi.as_view(), name="evaluation-report"
    ),
]
