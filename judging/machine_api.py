"""The machine judge's API: a battle's machine verdicts (only once it is decided or
excluded), the machine-judged board, and the human–machine agreement. The board and
the agreement are figures over decided battles only, for any signed-in account (their
pages are public, like the leaderboard's)."""

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.models import Arena
from arena_site.exceptions import ApplicationError
from arena_site.schema import ErrorOutput
from battles.selectors import access_battle
from judging.machine_board import machine_board_document
from judging.machine_reads import (
    HUMAN_OUTCOMES,
    MACHINE_OUTCOMES,
    battle_machine_verdicts,
    machine_agreement,
)
from judging.models import MachineVerdict
from ratings.api import StyleOutput

METHODS = MachineVerdict.Method.values


class MachineVerdictOutput(serializers.Serializer):
    method = serializers.ChoiceField(choices=MachineVerdict.Method.choices)
    judge_model = serializers.CharField(help_text="The judge's model id.")
    status = serializers.ChoiceField(
        choices=MachineVerdict.Status.choices,
        help_text="resolved (a verdict), failed (for good; never a tie) or skipped (the "
        "judge's model plays in the battle).",
    )
    outcome = serializers.CharField(
        allow_null=True, help_text='"A", "B" or "tie"; null unless resolved.'
    )
    reason = serializers.CharField(allow_blank=True, help_text="Why it failed or was skipped.")
    agreement = serializers.BooleanField(
        allow_null=True,
        help_text="Pairwise: both orders gave the same winner (false: a draw by disagreement).",
    )
    ab_winner = serializers.CharField(allow_null=True, help_text="Pairwise, A shown first.")
    ba_winner = serializers.CharField(
        allow_null=True, help_text="Pairwise, B shown first, mapped back to A/B."
    )
    ab_reason = serializers.CharField(allow_blank=True)
    ba_reason = serializers.CharField(allow_blank=True)
    ab_raw = serializers.ListField(child=serializers.CharField(), help_text="Raw completions.")
    ba_raw = serializers.ListField(child=serializers.CharField())
    rubric_sha256 = serializers.CharField(allow_null=True, help_text="Rubric: its SHA-256.")
    score_a = serializers.FloatField(allow_null=True, help_text="Rubric: weighted score in [0, 1].")
    score_b = serializers.FloatField(allow_null=True)
    criteria = serializers.DictField(
        allow_null=True,
        help_text='Rubric: per side ("A", "B") the judgement of each criterion (score, '
        "scale, weight, justification, status, error, corrected, raw).",
    )
    calls = serializers.IntegerField(help_text="Model calls made, every attempt counted.")
    created_at = serializers.DateTimeField()


class BattleMachineVerdictsOutput(serializers.Serializer):
    battle = serializers.IntegerField()
    verdicts = MachineVerdictOutput(many=True)


class BattleMachineVerdictsApi(APIView):
    @extend_schema(
        responses={
            200: BattleMachineVerdictsOutput,
            404: OpenApiResponse(ErrorOutput, description="No such battle you may see."),
            409: OpenApiResponse(
                ErrorOutput,
                description="verdicts_not_public: the battle can still be voted on; its "
                "machine verdicts show once it is decided or excluded.",
            ),
        },
        description="The machine judge's verdicts on a battle (docs/evaluations.md, "
        '"Machine judges on live battles"), for its team, the judges it was served to and '
        "staff — only once the battle is decided or excluded: never while a vote on it can "
        "count. They never decide the battle.",
    )
    def get(self, request, pk: int):
        battle = access_battle(request.user, pk)
        verdicts = battle_machine_verdicts(battle)
        if verdicts is None:
            raise ApplicationError(
                f"Battle {pk} is {battle.status}: its machine verdicts are shown once it is "
                "decided or excluded.",
                code="verdicts_not_public",
                status=409,
            )
        return Response({"battle": battle.pk, "verdicts": verdicts})


class MachineBoardRowOutput(serializers.Serializer):
    agent = serializers.CharField(help_text="Display name.")
    slug = serializers.CharField()
    kind = serializers.CharField()
    provider = serializers.CharField(allow_blank=True)
    organisation = serializers.CharField()
    rank = serializers.IntegerField(allow_null=True, help_text="Null without a rating.")
    rating = serializers.FloatField(
        allow_null=True,
        help_text="Bradley-Terry rating from the machine's verdicts (Elo scale); null while "
        "provisional (fewer than min_battles machine-judged battles) or unplaceable.",
    )
    lower = serializers.FloatField(allow_null=True, help_text="95% interval, lower end.")
    upper = serializers.FloatField(allow_null=True, help_text="95% interval, upper end.")
    rank_lower = serializers.IntegerField(allow_null=True)
    rank_upper = serializers.IntegerField(allow_null=True)
    provisional = serializers.BooleanField()
    unavailable = serializers.CharField(allow_null=True)
    style_rating = serializers.FloatField(
        allow_null=True,
        help_text="Style-controlled rating from the machine's verdicts: each side's style "
        'held equal (docs/intervals.md, "Style control"); null where rating is, or unplaced.',
    )
    style_lower = serializers.FloatField(allow_null=True, help_text="Its 95% interval, lower.")
    style_upper = serializers.FloatField(allow_null=True, help_text="Its 95% interval, upper.")
    style_rank = serializers.IntegerField(
        allow_null=True, help_text="Position by style-controlled rating; null without one."
    )
    battles = serializers.IntegerField(help_text="Machine-judged rated battles of the agent.")
    wins = serializers.IntegerField()
    draws = serializers.IntegerField(help_text="The machine said tie.")
    losses = serializers.IntegerField()


class MachineBoardChoiceOutput(serializers.Serializer):
    judge_model = serializers.CharField()
    method = serializers.ChoiceField(choices=MachineVerdict.Method.choices)
    battles = serializers.IntegerField()


class MachineBoardOutput(serializers.Serializer):
    arena = serializers.CharField()
    judge_model = serializers.CharField(allow_null=True, help_text="Null: no machine verdicts.")
    method = serializers.CharField(allow_null=True)
    battles = serializers.IntegerField(help_text="Rated battles with this judge's verdict.")
    computed_at = serializers.DateTimeField(allow_null=True)
    min_battles = serializers.IntegerField(allow_null=True)
    enough = serializers.BooleanField(help_text="Some agent has a rating on this board.")
    interval = serializers.CharField(allow_null=True, help_text="battle: one judge, one cluster.")
    converged = serializers.BooleanField(allow_null=True)
    boards = MachineBoardChoiceOutput(many=True, help_text="Every machine board of the arena.")
    style = StyleOutput(
        allow_null=True, help_text="Style control of this board; null: none computed yet."
    )
    order = serializers.ChoiceField(
        choices=["plain", "controlled"], help_text="The rows' order: rating or style-controlled."
    )
    rows = MachineBoardRowOutput(many=True)


class MachineBoardApi(APIView):
    permission_classes = [AllowAny]  # public, as the human board is

    @extend_schema(
        responses={
            200: MachineBoardOutput,
            400: OpenApiResponse(
                ErrorOutput,
                description="invalid_method: not pairwise, rubric; invalid_board_query: a "
                "style other than controlled or plain.",
            ),
            404: OpenApiResponse(
                ErrorOutput,
                description="no_machine_board: no verdicts of that judge model and method "
                "(the message lists the boards there are).",
            ),
        },
        parameters=[
            OpenApiParameter("judge_model", required=False, description="The judge's model id."),
            OpenApiParameter("method", enum=METHODS, required=False),
            OpenApiParameter(
                "style",
                enum=["controlled", "plain"],
                required=False,
                description="controlled: rows by style-controlled rating; omitted: by rating.",
            ),
        ],
        description='The "machine-judged" board of the public arena: Bradley-Terry over the '
        "machine judge's verdicts on rated battles (one per battle), with the category "
        "boards' fit and parameters. Never mixed into the human board. Omitted parameters: "
        "the arena's current judge's pairwise board (else the first there is).",
    )  # fmt: skip
    def get(self, request):
        arena = Arena.objects.public()
        body = machine_board_document(
            arena,
            request.query_params.get("judge_model"),
            request.query_params.get("method"),
            request.query_params.get("style"),
        )
        return Response(MachineBoardOutput(body).data)


class AgreementCellOutput(serializers.Serializer):
    n = serializers.IntegerField(help_text="Human-decided battles with a machine verdict.")
    agreed = serializers.IntegerField()
    agreement = serializers.FloatField(
        allow_null=True, help_text="agreed / n (human both-bad counts as a draw)."
    )
    kappa = serializers.FloatField(
        allow_null=True,
        help_text="Cohen's κ over A, B, draw; null when undefined (n = 0, or chance "
        "agreement 1: both always said the same one category).",
    )
    confusion = serializers.DictField(
        child=serializers.DictField(child=serializers.IntegerField()),
        help_text=f"confusion[human][machine]: human outcomes {', '.join(HUMAN_OUTCOMES)} "
        f"(rows) × machine outcomes {', '.join(MACHINE_OUTCOMES)} (columns).",
    )


class AgreementCategoryOutput(AgreementCellOutput):
    category = serializers.CharField(help_text="browsing, files_and_data, general, uncategorised")
    label = serializers.CharField()


class AgreementJudgeOutput(serializers.Serializer):
    judge_model = serializers.CharField()
    method = serializers.ChoiceField(choices=MachineVerdict.Method.choices)
    overall = AgreementCellOutput()
    categories = AgreementCategoryOutput(many=True)


class MachineAgreementOutput(serializers.Serializer):
    arena = serializers.CharField()
    human_outcomes = serializers.ListField(child=serializers.CharField())
    machine_outcomes = serializers.ListField(child=serializers.CharField())
    judges = AgreementJudgeOutput(many=True)


class MachineAgreementApi(APIView):
    permission_classes = [AllowAny]  # decided battles only: public once decided

    @extend_schema(
        responses={200: MachineAgreementOutput},
        description="How often the machine judge agrees with the humans, per judge model and "
        "method, overall and per task category: on battles of the public arena decided by "
        "human votes (crowd or submitter; not imports) that have a resolved machine verdict. "
        "n, agreement rate, Cohen's κ and the confusion table.",
    )
    def get(self, request):
        arena = Arena.objects.public()
        body = {"arena": arena.slug, **machine_agreement(arena_id=arena.pk)}
        return Response(MachineAgreementOutput(body).data)
