"""The battles API: submit a task, read tasks and battles. Every view is tenant-scoped
(``accounts.tenancy``): another team's task or battle is a 404."""

from django.conf import settings
from django.db.models import Prefetch, Q, QuerySet
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.tenancy import TenantScopedApiMixin
from accounts.throttling import submission_allowance
from agents.models import Agent
from arena_site.exceptions import ApplicationError
from arena_site.parsers import BoundedMultiPartParser, StrictJSONParser
from arena_site.ratelimit import client_address
from arena_site.schema import LimitedCharField, LimitedListField, StrictCharField, error_response
from battles.attachments import REQUEST_OVERHEAD_BYTES, attachments_check_request_size
from battles.models import Attachment, Battle, Run, Task
from battles.presenters import attachment_rows, battle_payload, battle_what_happened
from battles.selectors import team_ids_of, team_tasks, user_may_see_identities
from battles.services import Conversation, task_submit
from battles.services.conversation import battle_conversation, follow_up_send, question_answer
from battles.services.repo_admission import RepoRequest

START_URL_MAX_CHARS = 2000  # as battles.services.admission checks it


class TaskSubmitInput(serializers.Serializer):
    instruction = LimitedCharField(
        help_text="What both agents should do, in plain text (no control characters but "
        "tab and newline). Over ARENA INSTRUCTION_MAX_CHARS characters (after trimming) "
        "is a 413 instruction_too_long; empty is a 400 empty_instruction.",
        allow_blank=True,
        trim_whitespace=False,
        schema_limits=lambda: {"maxLength": settings.ARENA.instruction_max_chars},
    )
    start_url = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=START_URL_MAX_CHARS,
        help_text="Optional absolute http(s) URL on a public host, port 80 or 443, where "
        "the agents start. Malformed (bad host or port, user info, spaces or control "
        "characters) is a 400 invalid_start_url; a non-public host a 400 "
        "start_url_not_public.",
    )


class RepoTaskFields(serializers.Serializer):
    """A repo task's fields (docs/coding.md): given ``repo_url`` or ``repo_upload``,
    the task is a coding task graded by tests in a judge sandbox."""

    repo_url = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="A repo task's source: an http(s) git URL the egress policy allows "
        "(fetched inside a sandbox through the egress proxy). Or send repo_upload.",
    )
    repo_ref = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="The branch or tag to check out (default HEAD).",
    )
    repo_judge_ref = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="Optional: a branch or tag whose tree the judge sandbox checks out "
        "instead (hidden tests). No agent sandbox ever receives it.",
    )
    success_cmd = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="A repo task's functional gate: a shell command run in the repository "
        "in the judge sandbox; exit 0 passes.",
    )
    test_cmd = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="Optional: the regression tests (pytest's summary, 'X/Y tests passed', "
        "or JUnit XML written to $ARENA_JUNIT_XML are read).",
    )
    time_limit_s = serializers.IntegerField(
        required=False,
        min_value=10,
        max_value=3600,
        help_text="A repo task's time limit for each agent, in seconds (default 600).",
    )


class TaskSubmitMultipartInput(TaskSubmitInput, RepoTaskFields):
    repo_upload = serializers.FileField(
        required=False,
        allow_empty_file=False,
        use_url=False,
        help_text="A repo task's source as a git bundle (git bundle create x.bundle --all) "
        "or a tarball; at most ARENA ATTACHMENTS_MAX_TOTAL_BYTES.",
    )

    attachments = LimitedListField(
        child=serializers.FileField(allow_empty_file=True, use_url=False),
        required=False,
        help_text="Files for the agents (multipart/form-data, the field repeated once per "
        "file). Limits: ARENA ATTACHMENTS_MAX_COUNT files, ATTACHMENT_MAX_BYTES each, "
        "ATTACHMENTS_MAX_TOTAL_BYTES together (413 over a size); text, CSV, JSON, "
        "Markdown, PDF, PNG, JPEG, GIF, WebP and ZIP only. Both sandboxes get them under "
        "/work/attachments/.",
        schema_limits=lambda: {
            "maxItems": settings.ARENA.attachments_max_count,
            "items": {"type": "string", "format": "binary"},
        },
    )


class TaskSubmitOutput(serializers.Serializer):
    task = serializers.IntegerField(help_text="The new task's id.")
    battle = serializers.IntegerField(help_text="Its battle's id: GET /api/battles/{id}/.")
    status = serializers.ChoiceField(choices=Battle.Status.choices)


class ConversationOutput(serializers.Serializer):
    status = serializers.ChoiceField(choices=["conversation"])
    reply = serializers.CharField(help_text="The arena's answer; nothing was started.")


class AttachmentOutput(serializers.Serializer):
    name = serializers.CharField(help_text="The sanitised file name.")
    size = serializers.IntegerField(min_value=1, help_text="Bytes.")
    sha256 = serializers.CharField(min_length=64, max_length=64)
    content_type = serializers.CharField()
    url = serializers.CharField(
        allow_null=True, help_text="Download (your team, the battle's judges and staff only)."
    )


class TaskOutput(serializers.ModelSerializer):
    battles = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    start_url = serializers.CharField(help_text="The start URL; empty when none.")
    attachments = serializers.SerializerMethodField()

    class Meta:
        model = Task
        fields = ["id", "instruction", "start_url", "created_at", "battles", "attachments"]

    @extend_schema_field(AttachmentOutput(many=True))
    def get_attachments(self, task: Task) -> list[dict]:
        battles = list(task.battles.all())
        return attachment_rows(task.attachments.all(), battles[0].pk if battles else None)


class BattleRowOutput(serializers.ModelSerializer):
    class Meta:
        model = Battle
        fields = ["id", "status", "task", "submitted_at"]


class StepResultOutput(serializers.Serializer):
    ok = serializers.BooleanField(allow_null=True)
    stdout = serializers.CharField(allow_null=True)
    stderr = serializers.CharField(allow_null=True)
    exit_code = serializers.IntegerField(allow_null=True)
    truncated = serializers.BooleanField()
    timed_out = serializers.BooleanField()
    error = serializers.CharField(allow_null=True)


class StepPageOutput(serializers.Serializer):
    url = serializers.CharField()
    title = serializers.CharField()


class StepOutput(serializers.Serializer):
    index = serializers.IntegerField(min_value=0)
    screenshot = serializers.CharField(allow_null=True, help_text="The screenshot's URL.")
    tool = serializers.CharField()
    args = serializers.JSONField(help_text="The tool call's arguments.")
    result = StepResultOutput()
    page = StepPageOutput(
        allow_null=True, help_text="The browser page the step left, as the sandbox saw it."
    )


class DeliveredFileOutput(serializers.Serializer):
    name = serializers.CharField()
    size = serializers.IntegerField(min_value=0)
    sha256 = serializers.CharField()
    url = serializers.CharField()


class IdentityOutput(serializers.Serializer):
    agent = serializers.CharField(help_text="Display name.")
    slug = serializers.CharField()
    kind = serializers.ChoiceField(choices=Agent.Kind.choices)
    provider = serializers.CharField()
    model = serializers.CharField()
    baseline = serializers.BooleanField()


class SideOutput(serializers.Serializer):
    status = serializers.ChoiceField(choices=Run.Status.choices)
    end_reason = serializers.ChoiceField(choices=Run.EndReason.choices, allow_blank=True)
    final_message = serializers.CharField()
    files = DeliveredFileOutput(many=True)
    steps = StepOutput(many=True)
    identity = IdentityOutput(
        required=False, help_text="Who played this side; only once you may see it."
    )


class SidesOutput(serializers.Serializer):
    A = SideOutput(allow_null=True)
    B = SideOutput(allow_null=True)


class BattleTaskOutput(serializers.Serializer):
    instruction = serializers.CharField()
    start_url = serializers.CharField()
    attachments = AttachmentOutput(many=True)


class WhatHappenedOutput(serializers.Serializer):
    headline = serializers.CharField(help_text="Where the battle stands, in words.")
    detail = serializers.CharField(allow_blank=True)
    failure_reason = serializers.CharField(
        allow_blank=True, help_text="Why it failed, in words (never an agent's name)."
    )
    rerun_of = serializers.IntegerField(
        allow_null=True, help_text="The failed battle this one runs your task again for."
    )
    rerun = serializers.IntegerField(
        allow_null=True, help_text="The battle that runs your task again after this one failed."
    )


class BattleOutput(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Battle.Status.choices)
    task = BattleTaskOutput()
    sides = SidesOutput()
    outcome = serializers.ChoiceField(
        choices=Battle.Outcome.choices,
        allow_null=True,
        help_text="The decision, once you may see it; null before.",
    )
    what_happened = WhatHappenedOutput(
        allow_null=True,
        required=False,
        help_text="For the battle's own team (and staff) only: where it stands in words, "
        "and the re-run when an agent failed it. Absent for anyone else.",
    )


def _tasks_with_files(team_ids: list[int]) -> QuerySet:
    return team_tasks(team_ids).prefetch_related(
        Prefetch("battles", queryset=Battle.objects.order_by("pk")),
        Prefetch("attachments", queryset=Attachment.objects.order_by("pk")),
    )


class TaskListCreateApi(TenantScopedApiMixin, generics.ListAPIView):
    serializer_class = TaskOutput
    # The one multipart endpoint; attachments_check_request_size bounds it first.
    parser_classes = [StrictJSONParser, BoundedMultiPartParser]

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return _tasks_with_files(team_ids).order_by("-id")

    @extend_schema(
        request={
            "application/json": TaskSubmitInput,
            "multipart/form-data": TaskSubmitMultipartInput,
        },
        responses={
            201: TaskSubmitOutput,
            200: OpenApiResponse(
                ConversationOutput, description="Conversation, not a task: nothing started."
            ),
            403: error_response(
                403, "consent_required (accept the current terms first) or no_team."
            ),
            409: error_response(
                409, "near_duplicate: nearly the same as one of your tasks of the last "
                "ARENA DUP_WINDOW_DAYS days (earlier_task and similarity name it)."
            ),
            413: error_response(
                413, "request_too_large (the body; for multipart, the attachment total "
                f"plus {REQUEST_OVERHEAD_BYTES} bytes), instruction_too_long, "
                "attachment_too_large or attachments_too_large."
            ),
            429: error_response(
                429, "queue_full (the arena's queue) or team_quota (your team's queued "
                "tasks); or rate_limited: your account (all its teams) or your address "
                "(all its accounts) had ARENA SUBMIT_ACCOUNT_RATE_PER_HOUR / "
                "SUBMIT_ADDRESS_RATE_PER_HOUR tasks admitted this hour (per names "
                "which). Always with Retry-After."
            ),
            503: error_response(
                503, "roster_too_small: fewer than two active agents your team did not "
                "enter."
            ),
        },
        description="Admits a task and starts a battle (201), or, when the text is "
        'conversation rather than a task, answers {"status": "conversation", "reply"} '
        "(200) and starts nothing. JSON, or multipart/form-data with attachments. "
        "Checked in this order: the body's declared size and the hourly allowance "
        "(before the body is read), consent, the instruction, the attachments, "
        "conversation or task, the start URL, near-duplicates, the queue. A refused "
        "submission leaves no file behind.",
    )  # fmt: skip
    def post(self, request):
        attachments_check_request_size(request)  # before the body is parsed
        try:
            # Also before the body is parsed: a spent allowance costs no upload. Given
            # back unless a task is admitted (docs/security.md "Throttles").
            with submission_allowance(user_id=request.user.pk, address=client_address(request)):
                data = TaskSubmitMultipartInput(data=request.data)
                data.is_valid(raise_exception=True)
                battle = task_submit(
                    user=request.user,
                    instruction=data.validated_data["instruction"],
                    start_url=data.validated_data.get("start_url", ""),
                    attachments=data.validated_data.get("attachments", []),
                    repo=repo_request(data.validated_data),
                )
        except Conversation as talk:
            # Nothing was created: a reply, not a task.
            return Response({"status": "conversation", "reply": talk.reply})
        body = {"task": battle.task_id, "battle": battle.pk, "status": battle.status}
        return Response(body, status=status.HTTP_201_CREATED)


def repo_request(fields: dict) -> RepoRequest | None:
    """The repo task the submitted fields describe, or None for a desktop task."""
    if not fields.get("repo_url") and fields.get("repo_upload") is None:
        return None
    return RepoRequest(
        url=fields.get("repo_url", ""),
        ref=fields.get("repo_ref") or "HEAD",
        judge_ref=fields.get("repo_judge_ref", ""),
        upload=fields.get("repo_upload"),
        success_cmd=fields.get("success_cmd", ""),
        test_cmd=fields.get("test_cmd", ""),
        time_limit_s=fields.get("time_limit_s", 600),
    )


class TaskDetailApi(TenantScopedApiMixin, generics.RetrieveAPIView):
    serializer_class = TaskOutput

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return _tasks_with_files(team_ids)


class _BattleScope:
    """Battles a user may read here: their teams' own and those served to them to judge;
    every battle for staff (operators)."""

    request: object

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        user = self.request.user  # type: ignore[attr-defined]
        if user.is_staff:
            return Battle.objects.select_related("task")
        return (
            Battle.objects.filter(Q(team_id__in=team_ids) | Q(assignments__judge=user))
            .select_related("task")
            .distinct()
        )


@extend_schema_view(
    get=extend_schema(
        operation_id="battles_list",
        description="Your teams' battles and those served to you to judge, newest first.",
    )
)
class BattleListApi(_BattleScope, TenantScopedApiMixin, generics.ListAPIView):
    serializer_class = BattleRowOutput

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return super().scoped_queryset(team_ids).order_by("-id")


class BattleDetailApi(_BattleScope, TenantScopedApiMixin, APIView):
    @extend_schema(
        operation_id="battles_retrieve",
        responses={200: BattleOutput},
        description="The battle, blind (sides A and B, no identity, no outcome) unless it "
        "is closed and you voted on it or belong to its team, or you are staff.",
    )
    def get(self, request, pk: int):
        battle = self.get_object()
        payload = battle_payload(battle, reveal=user_may_see_identities(request.user, battle))
        if request.user.is_staff or battle.team_id in team_ids_of(request.user):
            payload["what_happened"] = battle_what_happened(battle)
        return Response(payload)


# -- conversations with both sides (docs/conversations.md) ------------------------------


class ConversationTextInput(serializers.Serializer):
    text = StrictCharField(
        allow_blank=True,
        trim_whitespace=False,
        help_text="Plain text (tab and newline allowed), at most 2000 characters after "
        "trimming: longer is a 413, empty a 400.",
    )


class FollowUpOutput(serializers.Serializer):
    seq = serializers.IntegerField(help_text="The follow-up's number in this battle, from 1.")
    text = serializers.CharField()
    sent_at = serializers.DateTimeField()
    received_at_step = serializers.DictField(
        child=serializers.IntegerField(allow_null=True),
        help_text='Per side ("A", "B"): the step whose observation carried it; null while '
        "that side has not received it yet.",
    )


class QuestionOutput(serializers.Serializer):
    id = serializers.IntegerField()
    side = serializers.ChoiceField(choices=["A", "B"])
    step = serializers.IntegerField(help_text="The asking side's step (its ask_user call).")
    question = serializers.CharField()
    status = serializers.ChoiceField(choices=["pending", "answered", "unanswered"])
    answer = serializers.CharField(allow_blank=True)
    seconds_left = serializers.IntegerField(
        allow_null=True, help_text="While pending: how long the side still waits."
    )


class ConversationStateOutput(serializers.Serializer):
    follow_ups = FollowUpOutput(many=True)
    questions = QuestionOutput(many=True)
    can_send = serializers.BooleanField(help_text="Whether a follow-up would be taken now.")
    closed_reason = serializers.CharField(allow_blank=True)
    max_chars = serializers.IntegerField()
    answer_max_chars = serializers.IntegerField()
    digests = serializers.DictField(
        child=serializers.CharField(allow_blank=True),
        help_text="Per side: the conversation digest of what it received (battles.parity).",
    )
    same_on_both_sides = serializers.BooleanField()


class _TeamBattleConversation(TenantScopedApiMixin):
    """The battle's conversation, for its own team only (another team's, or one a judge
    was served: 404)."""

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return Battle.objects.filter(team_id__in=team_ids).prefetch_related("runs")

    def conversation(self, request, pk: int) -> dict:
        battle = self.get_queryset().filter(pk=pk).first()
        if battle is None:
            raise ApplicationError("No such battle.", code="not_found", status=404)
        return battle_conversation(battle)


class BattleConversationApi(_TeamBattleConversation, APIView):
    @extend_schema(
        operation_id="battles_conversation",
        responses={200: ConversationStateOutput, 404: error_response(404)},
        description="Your team's battle's follow-ups and the agents' questions.",
    )
    def get(self, request, pk: int):
        return Response(ConversationStateOutput(self.conversation(request, pk)).data)


class FollowUpCreateApi(_TeamBattleConversation, APIView):
    @extend_schema(
        operation_id="battles_follow_up",
        request=ConversationTextInput,
        responses={
            201: ConversationStateOutput,
            404: error_response(404),
            409: error_response(409, "lanes_not_started, lanes_ended, follow_ups_not_offered"),
            413: error_response(413, "follow_up_too_long"),
            429: error_response(429, "follow_up_too_soon (with Retry-After), "
                                "follow_ups_exhausted"),
        },
        description="Sends a follow-up to both sides of your team's running battle: each "
        "receives it at its next step. Refused unless both sides are running.",
    )  # fmt: skip
    def post(self, request, pk: int):
        data = ConversationTextInput(data=request.data)
        data.is_valid(raise_exception=True)
        follow_up_send(user=request.user, battle_id=pk, text=data.validated_data["text"])
        state = ConversationStateOutput(self.conversation(request, pk)).data
        return Response(state, status=status.HTTP_201_CREATED)


class QuestionAnswerApi(_TeamBattleConversation, APIView):
    @extend_schema(
        operation_id="battles_question_answer",
        request=ConversationTextInput,
        responses={
            200: ConversationStateOutput,
            404: error_response(404),
            409: error_response(409, "already_answered, question_closed"),
            413: error_response(413, "answer_too_long"),
        },
        description="Answers one side's pending ask_user question; only that side "
        "receives the answer.",
    )
    def post(self, request, pk: int, question_id: int):
        data = ConversationTextInput(data=request.data)
        data.is_valid(raise_exception=True)
        question_answer(
            user=request.user,
            battle_id=pk,
            question_id=question_id,
            text=data.validated_data["text"],
        )
        return Response(ConversationStateOutput(self.conversation(request, pk)).data)
