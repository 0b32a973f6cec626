"""The judging API: the next blind battle, and votes."""

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from battles.presenters import battle_payload, battle_reveal
from battles.services import task_check_admissible
from judging.models import Vote
from judging.services import judge_next, reading_time_s, vote_cast


class JudgeNextApi(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, 204: None})
    def get(self, request):
        battle = judge_next(judge=request.user)
        if battle is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        body = battle_payload(battle, reveal=False)
        body["min_read_s"] = reading_time_s(battle)
        body["vote_url"] = f"/api/battles/{battle.pk}/votes/"
        return Response(body)


class VoteInput(serializers.Serializer):
    choice = serializers.ChoiceField(
        choices=Vote.Choice.choices, help_text="A, B, tie, both_bad or abstain."
    )


class VoteCreateApi(APIView):
    @extend_schema(request=VoteInput, responses={201: OpenApiTypes.OBJECT})
    def post(self, request, pk: int):
        task_check_admissible(user=request.user)
        data = VoteInput(data=request.data)
        data.is_valid(raise_exception=True)
        vote = vote_cast(judge=request.user, battle_id=pk, choice=data.validated_data["choice"])
        body = {
            "vote": vote.pk,
            "choice": vote.choice,
            "admissible": vote.admissible,
            "inadmissible_reason": vote.inadmissible_reason or None,
            "reveal": battle_reveal(vote.battle),
            "min_read_s": settings.ARENA["MIN_READ_S"],
        }
        return Response(body, status=status.HTTP_201_CREATED)
