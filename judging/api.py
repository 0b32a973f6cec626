"""The judging API: the next blind battle, votes, and taking a vote back."""

from datetime import timedelta

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from battles.presenters import battle_payload, battle_reveal
from battles.services import task_check_admissible
from judging.models import Vote
from judging.services import judge_next, reading_time_s, vote_cast, vote_retract


class ErrorOutput(serializers.Serializer):
    error = serializers.DictField(help_text='{"code": str, "message": str}')


RATE_LIMITED = OpenApiResponse(
    ErrorOutput,
    description="Rate limited (code rate_limited): the judge's per-minute limit is spent; "
    "the Retry-After header says how many seconds to wait.",
)


class JudgeNextApi(APIView):
    @extend_schema(
        responses={200: OpenApiTypes.OBJECT, 204: None, 429: RATE_LIMITED},
        description="The next battle for you to judge, blind (sides A and B). Serving it "
        "starts your reading time (served_at, server clock). 204: nothing to judge. "
        "Limited to ARENA JUDGE_NEXT_RATE_PER_MIN requests a minute per judge.",
    )
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
    @extend_schema(
        request=VoteInput,
        responses={
            201: OpenApiTypes.OBJECT,
            404: OpenApiResponse(ErrorOutput, description="The battle was not served to you."),
            409: OpenApiResponse(
                ErrorOutput,
                description="already_voted (one live vote per judge and battle), "
                "vote_retracted (you retracted a vote on it after its reveal) or not_judging.",
            ),
            429: RATE_LIMITED,
        },
        description="Casts your vote on a battle served to you and returns the reveal. "
        "Every vote is stored; it counts only when admissible (not an abstention, not "
        "before the reading time, not from an untrusted judge). Limited to ARENA "
        "VOTE_RATE_PER_MIN votes and retractions a minute per judge.",
    )
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
            "min_read_s": settings.ARENA.min_read_s,
            "retract_until": _retract_until(vote),
        }
        return Response(body, status=status.HTTP_201_CREATED)


def _retract_until(vote: Vote) -> str:
    until = vote.voted_at + timedelta(seconds=settings.ARENA.vote_retract_window_s)
    return until.isoformat()


class VoteRetractOutput(serializers.Serializer):
    vote = serializers.IntegerField()
    retracted = serializers.BooleanField()
    retracted_at = serializers.DateTimeField()


class VoteRetractApi(APIView):
    @extend_schema(
        operation_id="battles_votes_mine_destroy",
        responses={
            200: VoteRetractOutput,
            404: OpenApiResponse(
                ErrorOutput, description="You have no live vote on this battle (not_found)."
            ),
            409: OpenApiResponse(
                ErrorOutput,
                description="retract_window_closed: more than ARENA VOTE_RETRACT_WINDOW_S "
                "seconds (default 120) have passed since the vote.",
            ),
            429: RATE_LIMITED,
        },
        description="Retracts your live vote on the battle within VOTE_RETRACT_WINDOW_S of "
        "casting it. The vote is kept, marked retracted, and no longer counts; if it decided "
        "the battle, the battle reopens (its streaming rating change is reverted) and is "
        "re-resolved from the remaining votes. You cannot vote on the battle again: you "
        "have seen its reveal.",
    )
    def delete(self, request, pk: int):
        vote = vote_retract(judge=request.user, battle_id=pk)
        return Response({"vote": vote.pk, "retracted": True, "retracted_at": vote.retracted_at})
