"""The training-environments API (docs/environments.md): the list of
environments and one environment's package. Public like the open data: anyone gets
the validated environments whose source battle is published, staff every one; any
other environment is a 404, as one that does not exist. Package downloads are bounded
per client address per hour (ARENA_EXPORT_RATE_PER_HOUR, their own window)."""

from django.http import HttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, serializers
from rest_framework.permissions import AllowAny
from rest_framework.views import APIView

from arena_site.exceptions import ApplicationError
from arena_site.ratelimit import downloads_count
from arena_site.schema import error_response
from environments.models import Environment
from environments.packages import PackageError, environment_package
from environments.selectors import (
    downloadable_environment,
    environment_row,
    visible_environments,
)

NOT_FOUND = error_response(
    404, "not_found: no such environment, or not one you may see (not validated, its "
    "battle not published yet, or rejected)."
)  # fmt: skip
RATE_LIMITED = error_response(
    429, "rate_limited: more package downloads from your address this hour than "
    "ARENA_EXPORT_RATE_PER_HOUR; Retry-After says when to try again."
)  # fmt: skip
BAD_TOKEN = error_response(
    401, "not_authenticated: an Authorization header that is not a valid API token "
    "(anonymous calls need none; staff see every environment)."
)  # fmt: skip
UNAVAILABLE = error_response(
    503, "package_unavailable: a file the environment names is missing from storage or "
    "no longer has its bytes; an operator has to look."
)  # fmt: skip


class EnvironmentOutput(serializers.Serializer):
    id = serializers.IntegerField()
    failure_mode = serializers.ChoiceField(
        choices=Environment.FailureMode.choices, help_text="How the source run failed."
    )
    status = serializers.ChoiceField(
        choices=Environment.Status.choices,
        help_text="Always validated for anyone but staff.",
    )
    battle = serializers.IntegerField(
        allow_null=True,
        help_text="The source battle's id once the open data publishes it (staff: always); "
        "null before.",
    )
    validated_at = serializers.DateTimeField(
        allow_null=True, help_text="When both replays agreed with the grader."
    )
    conversion_s = serializers.FloatField(
        allow_null=True, help_text="Seconds from the run's failure to the validation."
    )
    conversion_target_s = serializers.FloatField(
        help_text="Its target: 2 × the source run's duration + 300 s."
    )
    package_url = serializers.CharField(
        allow_null=True, help_text="Its package (tar.gz) once validated; null before."
    )


def _output(environment: Environment, user) -> dict:
    row = environment_row(environment, user)
    validated = environment.status == Environment.Status.VALIDATED
    return {
        **{key: row[key] for key in ("id", "failure_mode", "status", "battle")},
        "validated_at": row["validated_at"],
        "conversion_s": row["conversion_s"],
        "conversion_target_s": row["conversion_target_s"],
        "package_url": reverse("api:environment-package", kwargs={"pk": environment.pk})
        if validated
        else None,
    }


@extend_schema_view(
    get=extend_schema(
        operation_id="environments_list",
        responses={200: EnvironmentOutput(many=True), 401: BAD_TOKEN},
        description="Training environments made from failed runs, newest first: the "
        "validated ones whose source battle is published (staff: every one).",
    )
)
class EnvironmentListApi(generics.ListAPIView):
    permission_classes = [AllowAny]
    serializer_class = EnvironmentOutput

    def get_queryset(self):
        return visible_environments(self.request.user)

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        rows = [_output(environment, request.user) for environment in page]
        return self.get_paginated_response(EnvironmentOutput(rows, many=True).data)


def _count_download(request) -> None:
    downloads_count(request, name="environment-packages", what="environment packages")


class EnvironmentPackageApi(APIView):
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="environments_package",
        responses={
            (200, "application/gzip"): OpenApiResponse(
                OpenApiTypes.BINARY,
                description="The environment as a tar.gz: task.json, snapshot.json, "
                "grader.json, trajectories/, files/<sha256> and suite.json.",
            ),
            401: BAD_TOKEN,
            404: NOT_FOUND,
            429: RATE_LIMITED,
            503: UNAVAILABLE,
        },
        description="One validated environment's package, built on request "
        "(deterministic: the same environment gives the same bytes). Counts against "
        "the hourly download limit.",
    )
    def get(self, request, pk: int):
        try:
            environment = downloadable_environment(request.user, pk)
        except Environment.DoesNotExist:
            raise ApplicationError(
                f"No environment {pk} you may download.", code="not_found", status=404
            ) from None
        _count_download(request)
        try:
            data = environment_package(environment)
        except PackageError as exc:
            raise ApplicationError(str(exc), code="package_unavailable", status=503) from None
        response = HttpResponse(data, content_type="application/gzip")
        response["Content-Disposition"] = f'attachment; filename="arena-env-{pk}.tar.gz"'
        return response
