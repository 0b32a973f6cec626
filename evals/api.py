"""The evaluations API: create (the suite and rubric files' text in the body, the
desktop tasks' attachments base64-encoded beside them), list, read (with the run
record), cancel. Tenant-scoped (``accounts.tenancy``): another team's evaluation is a
404, as if it did not exist."""

import base64
import binascii

from django.db import transaction
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.tenancy import TenantScopedApiMixin
from arena_site.exceptions import ApplicationError
from arena_site.schema import StrictCharField, error_response
from evals import reducers, services, tournament_selectors, tournaments
from evals.models import Evaluation
from evals.suites import MAX_FILE_BYTES


class FileInput(serializers.Serializer):
    name = StrictCharField(max_length=200, help_text="The file's name, as the record cites it.")
    content = StrictCharField(
        trim_whitespace=False,
        help_text="The file's text (UTF-8), YAML or JSON. Its SHA-256 is its identity.",
    )


class AttachmentInput(serializers.Serializer):
    path = StrictCharField(
        max_length=500, help_text="The path a desktop task names it with (relative to the suite)."
    )
    content_base64 = StrictCharField(
        trim_whitespace=False, help_text="The file's bytes, base64 (standard alphabet, padded)."
    )


class EvaluationCreateInput(serializers.Serializer):
    suite = FileInput(help_text="The task suite (docs/evaluations.md has the format).")
    rubric = FileInput(required=False, help_text="Criteria for the rubric judge.")
    agents = serializers.ListField(
        child=StrictCharField(max_length=64),
        min_length=1,
        max_length=16,
        help_text="Slugs of the candidate agents, in order: your team's or the arena's.",
    )
    judge = StrictCharField(
        max_length=64, required=False, help_text="Slug of the judge (rubric and pairwise)."
    )
    pairwise = serializers.BooleanField(default=False, help_text="Judge every pair of replies.")
    baseline = StrictCharField(
        max_length=64, required=False,
        help_text="Slug of a candidate every other one is judged against (5-level verdicts, "
        "both orders, the judge answering each task first); needs a judge.",
    )  # fmt: skip
    max_tokens = serializers.IntegerField(
        default=4096, min_value=1, max_value=200_000, help_text="Candidates' output budget."
    )
    attachments = serializers.ListField(
        child=AttachmentInput(),
        required=False,
        max_length=500,
        help_text="Every file the suite's desktop tasks name, once each. The whole body is "
        "bounded by the request limit; bigger files go through `manage.py eval run`.",
    )
    step_budget = serializers.IntegerField(
        required=False, min_value=1, max_value=1000,
        help_text="Desktop lanes' steps (default: the battle rule over the candidates).",
    )  # fmt: skip
    wall_budget_s = serializers.IntegerField(
        required=False, min_value=1, max_value=86_400, help_text="Desktop lanes' seconds."
    )
    success_timeout_s = serializers.IntegerField(
        required=False, min_value=1,
        help_text="The success command's bound (default and most: ARENA_SHELL_TIMEOUT_S).",
    )  # fmt: skip
    desktop_lanes = serializers.IntegerField(
        required=False, min_value=1, max_value=16, help_text="Desktop lanes at once (2)."
    )
    tournament = serializers.ChoiceField(
        choices=tournaments.FORMATS, required=False,
        help_text="Play the judge's pairwise games as a tournament of this format (003); "
        "the candidates' order is the schedule's (king of the hill's challenge order, "
        "single elimination's adjacent pairs). The record is then the tournament record.",
    )  # fmt: skip
    best_of = serializers.IntegerField(
        required=False, min_value=1, max_value=99, help_text="Games per series, odd (1)."
    )
    seed = serializers.IntegerField(
        required=False, min_value=0, max_value=2**63 - 1,
        help_text="Seeds the ratings' bootstrap and the elimination seeded fallback (0).",
    )  # fmt: skip
    opening = serializers.ListField(
        child=serializers.ListField(
            child=StrictCharField(max_length=64), min_length=2, max_length=2
        ),
        required=False, max_length=8,
        help_text="Single elimination's first-round pairs of slugs (default: adjacent "
        "candidates in order).",
    )  # fmt: skip
    epochs = serializers.IntegerField(
        required=False, min_value=1, max_value=reducers.MAX_EPOCHS,
        help_text="Runs of each (task, candidate) (1); a tournament takes 1.",
    )  # fmt: skip
    reducer = StrictCharField(
        required=False, max_length=32,
        help_text="One score per task of its epochs': mean (default), max, mode, "
        "pass_at_k:K or at_least_k:K (1 ≤ K ≤ epochs).",
    )  # fmt: skip


def _decoded(attachments: list[dict]) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for item in attachments:
        path = item["path"]
        if path in files:
            raise ApplicationError(
                f"attachment {path!r} is given twice", code="duplicate_attachment"
            )
        try:
            files[path] = base64.b64decode(item["content_base64"], validate=True)
        except (binascii.Error, ValueError):
            raise ApplicationError(
                f"attachment {path!r}: content_base64 is not valid base64",
                code="invalid_attachment",
            ) from None
    return files


class EvaluationOutput(serializers.ModelSerializer):
    suite = serializers.CharField(source="suite.name")
    suite_sha256 = serializers.CharField(source="suite.sha256")
    agents = serializers.SerializerMethodField()

    class Meta:
        model = Evaluation
        fields = [
            "id",
            "status",
            "suite",
            "suite_sha256",
            "agents",
            "pairwise",
            "tournament",
            "best_of",
            "seed",
            "opening",
            "created_at",
            "started_at",
            "finished_at",
        ]

    def get_agents(self, evaluation) -> list[str]:
        return [c.agent.slug for c in evaluation.candidates.all()]


def _scoped(team_ids: list[int]) -> QuerySet:
    return (
        Evaluation.objects.filter(team_id__in=team_ids)
        .select_related("suite")
        .prefetch_related("candidates__agent")
    )


@extend_schema_view(
    get=extend_schema(operation_id="evaluations_list", description="Your team's, newest first.")
)
class EvaluationListCreateApi(TenantScopedApiMixin, generics.ListAPIView):
    serializer_class = EvaluationOutput

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return _scoped(team_ids).order_by("-id")

    @extend_schema(
        operation_id="evaluations_create",
        request=EvaluationCreateInput,
        responses={
            201: EvaluationOutput,
            400: error_response(
                400, "invalid_suite / invalid_rubric (the message names the file, the task and "
                "the field), judge_is_candidate, no_judge, duplicate_agent, not_a_model, "
                "cannot_drive, too_few_agents, invalid_desktop_setting; attachments: "
                "missing_attachment, unknown_attachment, duplicate_attachment, "
                "invalid_attachment, too_many_attachments, empty_attachment, "
                "invalid_tournament, not_a_tournament, invalid_seed, rubric_in_tournament, "
                "baseline_not_candidate, baseline_in_tournament, baseline_with_pairwise, "
                "invalid_epochs (epochs, reducer or K), "
                "invalid_attachment_name, unsupported_attachment_type, "
                "attachment_content_mismatch (each naming the task and the path)."
            ),
            404: error_response(404, "unknown_agent: not your team's nor the arena's."),
            413: error_response(
                413, "file_too_large, request_too_large, attachment_too_large, "
                "attachments_too_large (per task)."
            ),
        },
        description="Stores the suite (and rubric) and the desktop tasks' attachments "
        "(content-addressed, SHA-256) and starts the evaluation on the evals queue. The "
        "files arrive as text, the attachments as base64; bigger than the request limit, "
        "use `manage.py eval run`.",
    )  # fmt: skip
    def post(self, request):
        data = EvaluationCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        team = self.get_team()
        files = _decoded(v.get("attachments", []))
        for part in ("suite", "rubric"):
            if part in v and len(v[part]["content"].encode()) > MAX_FILE_BYTES:
                return Response(
                    {"error": {"code": "file_too_large", "message": f"the {part} is too big"}},
                    status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
                )
        with transaction.atomic():
            suite = services.suite_store(
                team=team, name=v["suite"]["name"], data=v["suite"]["content"].encode()
            )
            rubric = (
                services.rubric_store(
                    team=team, name=v["rubric"]["name"], data=v["rubric"]["content"].encode()
                )
                if "rubric" in v
                else None
            )
            evaluation = services.evaluation_create(
                team=team,
                suite=suite,
                agent_slugs=v["agents"],
                rubric=rubric,
                judge_slug=v.get("judge"),
                pairwise=v["pairwise"],
                max_tokens=v["max_tokens"],
                user=request.user,
                attachments=files,
                step_budget=v.get("step_budget"),
                wall_budget_s=v.get("wall_budget_s"),
                success_timeout_s=v.get("success_timeout_s"),
                desktop_lanes=v.get("desktop_lanes"),
                tournament=v.get("tournament", ""),
                best_of=v.get("best_of", 1),
                seed=v.get("seed", 0),
                opening=v.get("opening"),
                baseline_slug=v.get("baseline"),
                epochs=v.get("epochs"),
                reducer=v.get("reducer", "mean"),
            )
            services.evaluation_enqueue(evaluation.pk)
        return Response(
            EvaluationOutput(_scoped([team.pk]).get(pk=evaluation.pk)).data,
            status=status.HTTP_201_CREATED,
        )


class EvaluationDetailApi(TenantScopedApiMixin, APIView):
    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return _scoped(team_ids)

    @extend_schema(
        operation_id="evaluations_retrieve",
        responses={200: dict},
        description="The evaluation's run record so far: provenance, results, judgements "
        "and statistics (evals/record.schema.json); a tournament's is the tournament record "
        "(evals/tournament_record.schema.json: games, series, coverage, ratings).",
    )
    def get(self, request, pk: int):
        return Response(tournament_selectors.record_of(self.get_object()))


class EvaluationCancelApi(TenantScopedApiMixin, APIView):
    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return _scoped(team_ids)

    @extend_schema(
        operation_id="evaluations_cancel",
        request=None,
        responses={200: EvaluationOutput},
        description="Stops the evaluation before its next call; what is stored stays. A "
        "finished evaluation is left as it is.",
    )
    def post(self, request, pk: int):
        evaluation = services.evaluation_cancel(evaluation=self.get_object())
        return Response(EvaluationOutput(evaluation).data)
