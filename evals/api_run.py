"""One prompt on one agent over the API (seed 003's ``run --model M --prompt P``; the
``arena run`` client command): ``POST /api/runs/`` stores a one-task chat suite and an
evaluation of that one agent on it (the same models and job as any evaluation: no table
of its own) and starts it on the evals queue; ``GET /api/runs/{id}/`` answers its reply
once the job has it. Tenant-scoped (``accounts.tenancy``): another team's run is a 404."""

import json

from django.db import transaction
from django.db.models import QuerySet
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.tenancy import TenantScopedApiMixin
from arena_site.exceptions import ApplicationError
from arena_site.schema import StrictCharField, error_response
from evals import services
from evals.models import EvalRun, Evaluation

PROMPT_MAX_CHARS = 100_000
# The suite's file name as the record cites it, and its one task's id.
RUN_SUITE_NAME = "one-prompt-run.json"
RUN_TASK_ID = "prompt"


class RunCreateInput(serializers.Serializer):
    agent = StrictCharField(
        max_length=64, help_text="Slug of a model agent: your team's or the arena's, approved."
    )
    prompt = StrictCharField(
        max_length=PROMPT_MAX_CHARS,
        trim_whitespace=False,
        help_text="What the agent is asked, as the user's one message (no system prompt but "
        "the agent's own). Plain text: no control characters but tab and newlines.",
    )
    max_tokens = serializers.IntegerField(
        default=4096, min_value=1, max_value=200_000, help_text="The reply's output budget."
    )

    def validate_prompt(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("The prompt is empty.")
        if any(ord(c) < 32 and c not in "\t\n\r" for c in value):
            raise serializers.ValidationError(
                "The prompt contains control characters; only tab and newlines are allowed."
            )
        return value


class RunOutput(serializers.Serializer):
    id = serializers.IntegerField(help_text="The evaluation's id (GET /api/evaluations/{id}/).")
    status = serializers.CharField(
        help_text="pending, running, done or cancelled (done or cancelled: nothing more comes)."
    )
    agent = serializers.CharField(help_text="The agent's slug.")
    prompt = serializers.CharField()
    reply = serializers.CharField(
        allow_null=True, help_text="The agent's answer; null until it came, or when it failed."
    )
    error = serializers.CharField(
        allow_blank=True, help_text="Why the call failed for good (after its retries)."
    )
    usage = serializers.DictField(help_text="Tokens in/out/cache and cost, as the record has.")
    duration_ms = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


def run_view(evaluation: Evaluation) -> dict:
    """The run as ``RunOutput`` says; 404 ``not_a_run`` for an evaluation that is not
    one prompt on one agent (it has its record at /api/evaluations/{id}/)."""
    candidates = list(evaluation.candidates.all())
    tasks = evaluation.suite.tasks
    if len(candidates) != 1 or len(tasks) != 1 or tasks[0].get("kind", "chat") != "chat":
        raise ApplicationError(
            f"evaluation {evaluation.pk} is not a one-prompt run ({len(tasks)} tasks, "
            f"{len(candidates)} agents); read it at /api/evaluations/{evaluation.pk}/",
            code="not_a_run",
            status=404,
        )
    run = EvalRun.objects.filter(evaluation=evaluation).order_by("replicate", "pk").first()
    return {
        "id": evaluation.pk,
        "status": evaluation.status,
        "agent": candidates[0].agent.slug,
        "prompt": tasks[0]["prompt"],
        "reply": run.output if run is not None and run.status == EvalRun.Status.DONE else None,
        "error": run.error if run is not None else "",
        "usage": (run.usage or {}) if run is not None else {},
        "duration_ms": run.duration_ms if run is not None else None,
        "created_at": evaluation.created_at,
        "finished_at": evaluation.finished_at,
    }


class _TeamEvaluations(TenantScopedApiMixin):
    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return (
            Evaluation.objects.filter(team_id__in=team_ids)
            .select_related("suite")
            .prefetch_related("candidates__agent")
        )


class RunCreateApi(_TeamEvaluations, APIView):
    @extend_schema(
        operation_id="runs_create",
        request=RunCreateInput,
        responses={
            201: RunOutput,
            400: error_response(400, "invalid (a field: an empty prompt, ...), not_a_model."),
            404: error_response(404, "unknown_agent: not your team's nor the arena's."),
        },
        description="Asks one agent one prompt: a one-task chat evaluation of that agent "
        "(its suite stored as any other), started on the evals queue. Poll "
        "GET /api/runs/{id}/ until its status is done.",
    )
    def post(self, request):
        data = RunCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        team = self.get_team()
        suite_text = json.dumps({"tasks": [{"id": RUN_TASK_ID, "prompt": v["prompt"]}]})
        with transaction.atomic():
            suite = services.suite_store(team=team, name=RUN_SUITE_NAME, data=suite_text.encode())
            evaluation = services.evaluation_create(
                team=team,
                suite=suite,
                agent_slugs=[v["agent"]],
                max_tokens=v["max_tokens"],
                user=request.user,
            )
            services.evaluation_enqueue(evaluation.pk)
        created = self.get_queryset().get(pk=evaluation.pk)
        return Response(RunOutput(run_view(created)).data, status=status.HTTP_201_CREATED)


class RunDetailApi(_TeamEvaluations, APIView):
    @extend_schema(
        operation_id="runs_retrieve",
        responses={
            200: RunOutput,
            404: error_response(
                404, "not_found: no such evaluation of your team's; not_a_run: an "
                "evaluation that is not one prompt on one agent."
            ),
        },
        description="The run: its status, and once the agent answered, the reply.",
    )  # fmt: skip
    def get(self, request, pk: int):
        return Response(RunOutput(run_view(self.get_object())).data)


urlpatterns = [
    path("runs/", RunCreateApi.as_view(), name="runs"),
    path("runs/<id:pk>/", RunDetailApi.as_view(), name="run"),
]
