"""The battles API: submit a task, read tasks and battles (tenant-scoped)."""

from django.db.models import Prefetch, Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.tenancy import TenantScopedApiMixin
from battles.attachments import attachments_check_request_size
from battles.models import Attachment, Battle, Task
from battles.presenters import attachment_rows, battle_payload
from battles.selectors import user_may_see_identities
from battles.services import Conversation, task_submit


class TaskSubmitInput(serializers.Serializer):
    instruction = serializers.CharField(
        help_text="What both agents should do, in plain text.",
        allow_blank=True,
        trim_whitespace=False,
    )
    start_url = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="Optional http(s) URL on a public host where the agents start.",
    )
    attachments = serializers.ListField(
        child=serializers.FileField(allow_empty_file=True, use_url=False),
        required=False,
        help_text="Files for the agents (multipart/form-data, the field repeated once per "
        "file). Limits: ARENA ATTACHMENTS_MAX_COUNT files, ATTACHMENT_MAX_BYTES each, "
        "ATTACHMENTS_MAX_TOTAL_BYTES together; text, CSV, JSON, Markdown, PDF, PNG, JPEG, "
        "GIF, WebP and ZIP only. Both sandboxes get them under /work/attachments/.",
    )


class TaskSubmitOutput(serializers.Serializer):
    task = serializers.IntegerField()
    battle = serializers.IntegerField()
    status = serializers.CharField()


class AttachmentOutput(serializers.Serializer):
    name = serializers.CharField(help_text="The sanitised file name.")
    size = serializers.IntegerField(help_text="Bytes.")
    sha256 = serializers.CharField()
    content_type = serializers.CharField()
    url = serializers.CharField(
        allow_null=True, help_text="Download (your team, the battle's judges and staff only)."
    )


class TaskOutput(serializers.ModelSerializer):
    battles = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    attachments = serializers.SerializerMethodField()

    class Meta:
        model = Task
        fields = ["id", "instruction", "start_url", "created_at", "battles", "attachments"]

    @extend_schema_field(AttachmentOutput(many=True))
    def get_attachments(self, task: Task) -> list[dict]:
        battles = list(task.battles.all())
        return attachment_rows(task.attachments.all(), battles[0].pk if battles else None)


def _tasks_with_files(team_ids: list[int]) -> QuerySet:
    return Task.objects.filter(team_id__in=team_ids).prefetch_related(
        Prefetch("battles", queryset=Battle.objects.order_by("pk")),
        Prefetch("attachments", queryset=Attachment.objects.order_by("pk")),
    )


class TaskListCreateApi(TenantScopedApiMixin, generics.ListAPIView):
    serializer_class = TaskOutput

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return _tasks_with_files(team_ids).order_by("-id")

    @extend_schema(
        request={
            "application/json": TaskSubmitInput,
            "multipart/form-data": TaskSubmitInput,
        },
        responses={201: TaskSubmitOutput, 200: OpenApiTypes.OBJECT},
        description="Admits a task and starts a battle (201), or, when the text is "
        'conversation rather than a task, answers {"status": "conversation", "reply"} '
        "(200) and starts nothing.",
    )
    def post(self, request):
        attachments_check_request_size(request)  # before the body is parsed
        data = TaskSubmitInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            battle = task_submit(
                user=request.user,
                instruction=data.validated_data["instruction"],
                start_url=data.validated_data.get("start_url", ""),
                attachments=data.validated_data.get("attachments", []),
            )
        except Conversation as talk:
            # Nothing was created: a reply, not a task.
            return Response({"status": "conversation", "reply": talk.reply})
        body = {"task": battle.task_id, "battle": battle.pk, "status": battle.status}
        return Response(body, status=status.HTTP_201_CREATED)


class TaskDetailApi(TenantScopedApiMixin, generics.RetrieveAPIView):
    serializer_class = TaskOutput

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return _tasks_with_files(team_ids)


class BattleScopedMixin(TenantScopedApiMixin):
    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        user = self.request.user
        if user.is_staff:
            return Battle.objects.select_related("task")
        return (
            Battle.objects.filter(Q(team_id__in=team_ids) | Q(assignments__judge=user))
            .select_related("task")
            .distinct()
        )


class BattleListApi(BattleScopedMixin, APIView):
    @extend_schema(operation_id="battles_list", responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        battles = self.get_queryset().order_by("-id")[:100]
        rows = [
            {"id": b.pk, "status": b.status, "task": b.task_id, "submitted_at": b.submitted_at}
            for b in battles
        ]
        return Response({"results": rows})


class BattleDetailApi(BattleScopedMixin, APIView):
    @extend_schema(
        operation_id="battles_retrieve",
        responses={200: OpenApiTypes.OBJECT},
        description="The battle, blind (sides A and B) unless you voted on it or are staff.",
    )
    def get(self, request, pk: int):
        battle = generics.get_object_or_404(self.get_queryset(), pk=pk)
        return Response(
            battle_payload(battle, reveal=user_may_see_identities(request.user, battle))
        )
