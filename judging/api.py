"""The judging API: the next blind battle, a vote, its status (and, once the battle is
decided, the reveal), undoing it within its window, and the reasons given with it."""

from collections.abc import Mapping

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from arena_site.exceptions import ApplicationError
from arena_site.ratelimit import counted_in_request
from arena_site.schema import ErrorOutput
from battles.api import BattleOutput
from battles.presenters import battle_payload
from judging.models import Vote, VoteReason
from judging.presenters import vote_status_payload
from judging.reason_selectors import judge_vote_reasons, taxonomy
from judging.services import describe, judge_next, reading_time_s, vote_cast, vote_status, vote_undo
from judging.services.reasons import vote_reasons_set
from judging.services.serving import RATE_WINDOWS

RATE_LIMITED = OpenApiResponse(
    ErrorOutput,
    description="Rate limited (code rate_limited): the judge's per-minute limit is spent; "
    "the Retry-After header says how many seconds to wait.",
)
FORBIDDEN = OpenApiResponse(
    ErrorOutput,
    description="consent_required (accept the current terms first), judge_not_approved "
    "(ARENA_JUDGE_APPROVAL is on and an operator has not approved you yet) or "
    "conflict_of_interest (your team entered an agent of this battle).",
)


class VoteStatusOutput(serializers.Serializer):
    vote = serializers.IntegerField()
    battle = serializers.IntegerField()
    choice = serializers.ChoiceField(choices=Vote.Choice.choices)
    final = serializers.BooleanField(help_text="Past the undo window: the vote stands.")
    undo_until = serializers.DateTimeField(
        allow_null=True, help_text="Until when DELETE …/votes/mine/ undoes it; null when final."
    )
    counts = serializers.BooleanField(
        allow_null=True, help_text="Whether the vote counts; null while that is not known yet."
    )
    admissible = serializers.BooleanField()
    inadmissible_reason = serializers.CharField(
        allow_null=True,
        help_text="abstain, too_fast, untrusted_judge or identities_public (the battle was "
        "decided while you held it).",
    )
    submitter_vote = serializers.BooleanField(
        help_text="You belong to the submitting team: a submitter vote, which decides the "
        "battle only when no independent judge's vote counts (published as self-judged)."
    )
    battle_status = serializers.CharField()
    message = serializers.CharField(help_text="What the vote means now, in words.")
    reveal = serializers.DictField(
        allow_null=True,
        help_text="Each side's identity, once the battle is decided (or excluded) and your "
        "vote is final; null before. For a coding battle each side also has `coding`: its "
        "tokens, cost (USD), cost efficiency and composite score, which the blind battle "
        "never shows (their ratio gives the model's price away).",
    )
    status_url = serializers.CharField()


class JudgeBattleOutput(BattleOutput):
    min_read_s = serializers.FloatField(
        help_text="The reading time in seconds, from when the battle was served: a vote "
        "sooner is recorded but does not count."
    )
    vote_url = serializers.CharField(help_text="Where to POST the vote.")


class JudgeNextApi(APIView):
    rate_windows = {"GET": (RATE_WINDOWS["next"],)}  # counted with a bearer token

    @extend_schema(
        responses={200: JudgeBattleOutput, 204: None, 403: FORBIDDEN, 429: RATE_LIMITED},
        description="The battle for you to judge now, blind (sides A and B): the one you hold "
        "until you vote or skip, else the next. Serving it starts your reading time "
        "(served_at, server clock). 204: nothing to judge. Limited to ARENA "
        "JUDGE_NEXT_RATE_PER_MIN requests a minute per judge.",
    )
    def get(self, request):
        battle = judge_next(
            judge=request.user, rate_counted=counted_in_request(request, RATE_WINDOWS["next"])
        )
        if battle is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        body = battle_payload(battle, reveal=False)
        body["min_read_s"] = reading_time_s(battle)
        body["vote_url"] = f"/api/battles/{battle.pk}/votes/"
        return Response(body)


class VoteInput(serializers.Serializer):
    choice = serializers.ChoiceField(
        choices=Vote.Choice.choices,
        help_text="A, B, tie, both_bad, or abstain (a skip: recorded, never counted).",
    )


def _choice_of(data) -> str:
    """``VoteInput``'s one field, checked as its serializer would (the same 400s) at a
    tenth of the CPU: the vote is the arena's hottest request."""
    if not isinstance(data, Mapping):
        raise serializers.ValidationError(
            {
                api_settings.NON_FIELD_ERRORS_KEY: [
                    f"Invalid data. Expected a dictionary, but got {type(data).__name__}."
                ]
            }
        )
    if "choice" not in data:
        raise serializers.ValidationError({"choice": ["This field is required."]})
    choice = data["choice"]
    if choice is None:
        raise serializers.ValidationError({"choice": ["This field may not be null."]})
    if not isinstance(choice, str) or choice not in Vote.Choice.values:
        raise serializers.ValidationError({"choice": [f'"{choice}" is not a valid choice.']})
    return choice


class VoteCreateApi(APIView):
    rate_windows = {"POST": (RATE_WINDOWS["vote"],)}  # counted with a bearer token

    @extend_schema(
        request=VoteInput,
        responses={
            201: VoteStatusOutput,
            403: FORBIDDEN,
            404: OpenApiResponse(ErrorOutput, description="The battle was not served to you."),
            409: OpenApiResponse(
                ErrorOutput,
                description="already_voted (one live vote per judge and battle) or not_judging.",
            ),
            429: RATE_LIMITED,
        },
        description="Casts your vote on a battle served to you. It is stored at once and can "
        "be undone until undo_until (ARENA VOTE_UNDO_WINDOW_S); then it is final. Poll "
        "status_url: the reveal comes once the battle is decided. A vote counts only when "
        "admissible (not a skip, not before the reading time, not from an untrusted judge, "
        "not on a battle decided while you held it). Limited to ARENA VOTE_RATE_PER_MIN votes "
        "and undos a minute per judge.",
    )
    def post(self, request, pk: int):
        vote = vote_cast(
            judge=request.user,
            battle_id=pk,
            choice=_choice_of(request.data),
            rate_counted=counted_in_request(request, RATE_WINDOWS["vote"]),
        )
        # The vote is committed: it is answered 201 from what vote_cast holds (as
        # resolved), with no further query that an outage could fail.
        body = vote_status_payload(describe(vote, now=timezone.now()))
        return Response(body, status=status.HTTP_201_CREATED)


class VoteUndoOutput(serializers.Serializer):
    vote = serializers.IntegerField()
    battle = serializers.IntegerField()
    undone = serializers.BooleanField(help_text="Always true: the vote no longer stands.")
    undone_at = serializers.DateTimeField()


class VoteMineApi(APIView):
    rate_windows = {"DELETE": (RATE_WINDOWS["vote"],)}  # counted with a bearer token

    @extend_schema(
        operation_id="battles_votes_mine_retrieve",
        responses={
            200: VoteStatusOutput,
            404: OpenApiResponse(ErrorOutput, description="You have no live vote on it."),
        },
        description="Your live vote on the battle and what it means now; the reveal once the "
        "battle is decided and your vote is final.",
    )
    def get(self, request, pk: int):
        return Response(vote_status_payload(vote_status(judge=request.user, battle_id=pk)))

    @extend_schema(
        operation_id="battles_votes_mine_destroy",
        responses={
            200: VoteUndoOutput,
            404: OpenApiResponse(ErrorOutput, description="You have no live vote on it."),
            409: OpenApiResponse(
                ErrorOutput,
                description="vote_final: the undo window has passed (or the battle was "
                "decided with your vote); a final vote stands.",
            ),
            429: RATE_LIMITED,
        },
        description="Undoes your vote within its window, before any name was shown. You may "
        "then vote on the battle again (its reading time still runs from when it was served).",
    )
    def delete(self, request, pk: int):
        vote = vote_undo(
            judge=request.user,
            battle_id=pk,
            rate_counted=counted_in_request(request, RATE_WINDOWS["vote"]),
        )
        return Response(
            {"vote": vote.pk, "battle": pk, "undone": True, "undone_at": vote.retracted_at}
        )


class ReasonSideInput(serializers.Serializer):
    tags = serializers.ListField(
        child=serializers.ChoiceField(choices=VoteReason.Tag.choices),
        required=False,
        help_text="Codes of the taxonomy (GET /api/vote-reasons/tags/), any number, each "
        "counted once; [] or absent clears them.",
    )
    note = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=VoteReason.NOTE_MAX,
        help_text=f"Free text, at most {VoteReason.NOTE_MAX} characters once trimmed; "
        "personal data: never published in the open data.",
    )


class ReasonsInput(serializers.Serializer):
    A = ReasonSideInput(required=False, help_text="Side A's tags and note.")
    B = ReasonSideInput(required=False, help_text="Side B's tags and note.")


class ReasonSideOutput(serializers.Serializer):
    tags = serializers.ListField(child=serializers.CharField(), help_text="In taxonomy order.")
    note = serializers.CharField()
    updated_at = serializers.DateTimeField(allow_null=True, help_text="Null: never tagged.")


class ReasonsOutput(serializers.Serializer):
    vote = serializers.IntegerField()
    battle = serializers.IntegerField()
    sides = serializers.DictField(
        child=ReasonSideOutput(), help_text='{"A": {...}, "B": {...}}: both sides, always.'
    )


class ReasonTagOutput(serializers.Serializer):
    code = serializers.CharField()
    label = serializers.CharField()
    definition = serializers.CharField(help_text="The one line the judge page shows.")
    kind = serializers.ChoiceField(choices=["wrong", "right"], help_text="Went wrong or right.")


def _reasons_body(vote_id: int, battle_id: int, sides: dict) -> dict:
    return {"vote": vote_id, "battle": battle_id, "sides": sides}


def _sides_of(data) -> Mapping:
    """The body's shape (a side letter → {tags, note}); what is in it is the service's
    to check (``judging.services.reasons``), after the battle's 404."""
    if not isinstance(data, Mapping) or not all(isinstance(v, Mapping) for v in data.values()):
        raise ApplicationError(
            'The body must be an object like {"A": {"tags": ["completed"], "note": "..."}}.',
            code="invalid_body",
        )
    for side, given in data.items():
        unknown = sorted(set(given) - {"tags", "note"})
        if unknown:
            raise ApplicationError(
                f"Side {str(side)[:5]}: unknown field {unknown[0][:40]!r} (tags, note).",
                code="invalid_body",
            )
    return data


class VoteReasonsApi(APIView):
    @extend_schema(
        operation_id="battles_votes_mine_reasons_retrieve",
        responses={
            200: ReasonsOutput,
            404: OpenApiResponse(
                ErrorOutput, description="No such battle for you, or no live vote of yours on it."
            ),
        },
        description="Your reasons for your live vote on the battle: each side's tags and note "
        "(sides named A and B only).",
    )
    def get(self, request, pk: int):
        vote, sides = judge_vote_reasons(judge=request.user, battle_id=pk)
        return Response(_reasons_body(vote.pk, pk, sides))

    @extend_schema(
        operation_id="battles_votes_mine_reasons_update",
        request=ReasonsInput,
        responses={
            200: ReasonsOutput,
            400: OpenApiResponse(
                ErrorOutput,
                description="invalid_side (not A or B), unknown_tag, invalid_tags, "
                "invalid_note, note_too_long, invalid_body, or no_vote (vote on the battle "
                "first: reasons go with a live vote).",
            ),
            404: OpenApiResponse(
                ErrorOutput,
                description="A battle you may not open (another team's, never served to you).",
            ),
        },
        description="After voting, say why: tags from the fixed taxonomy and a note for side "
        "A, side B or both; each side named is replaced, a side not named keeps what it had. "
        "Never required; editable as long as your vote stands. Tag counts are published per "
        "agent only from admissible, independent votes on decided battles (docs/method.md).",
    )
    def put(self, request, pk: int):
        vote_reasons_set(judge=request.user, battle_id=pk, sides=_sides_of(request.data))
        vote, sides = judge_vote_reasons(judge=request.user, battle_id=pk)
        return Response(_reasons_body(vote.pk, pk, sides))


class ReasonTagsApi(APIView):
    @extend_schema(
        operation_id="vote_reasons_tags_list",
        responses={200: ReasonTagOutput(many=True)},
        description="The taxonomy of reasons judges may give after voting, in order: "
        '"went wrong" codes, then "went right" ones (docs/method.md, Reasons with votes).',
    )
    def get(self, request):
        return Response(taxonomy())
