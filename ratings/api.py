"""The public leaderboard API."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.models import Agent, Arena
from ratings.services import leaderboard_current


class LeaderboardRowOutput(serializers.Serializer):
    agent = serializers.CharField(help_text="Display name.")
    slug = serializers.CharField()
    url = serializers.CharField(help_text="The agent's page: rating history, head to head.")
    kind = serializers.ChoiceField(choices=Agent.Kind.choices)
    baseline = serializers.BooleanField()
    rank = serializers.IntegerField(
        min_value=1,
        allow_null=True,
        help_text="Position by published rating; null when there is none.",
    )
    rating = serializers.FloatField(
        allow_null=True,
        help_text="Published rating (Bradley-Terry refit, Elo scale). Null while the agent "
        "is provisional or unavailable.",
    )
    lower = serializers.FloatField(allow_null=True, help_text="95% interval, lower end.")
    upper = serializers.FloatField(allow_null=True, help_text="95% interval, upper end.")
    rank_lower = serializers.IntegerField(
        min_value=1, allow_null=True, help_text="95% bootstrap rank band, best rank (1 = top)."
    )
    rank_upper = serializers.IntegerField(
        min_value=1, allow_null=True, help_text="95% bootstrap rank band, worst rank."
    )
    provisional = serializers.BooleanField(
        help_text="Fewer than n0 = 30 rated battles in the published refit: no refit value; "
        "the interval is the full scale."
    )
    unavailable = serializers.ChoiceField(
        choices=["no_comparisons", "disconnected", "separated"],
        allow_null=True,
        help_text="Why the refit cannot place the agent (SPEC §7.4), instead of a number.",
    )
    fit_battles = serializers.IntegerField(
        min_value=0, help_text="The agent's battles in the refit."
    )
    streaming_rating = serializers.FloatField(
        help_text="Streaming Elo, moved on every decided battle (not the published rating)."
    )
    votes = serializers.IntegerField(
        min_value=0, help_text="Decided battles that moved the streaming value."
    )
    wins = serializers.IntegerField(min_value=0)
    losses = serializers.IntegerField(min_value=0)
    draws = serializers.IntegerField(min_value=0, help_text="Ties and both-bad outcomes.")


class RefitStatusOutput(serializers.Serializer):
    period_s = serializers.IntegerField(help_text="Δ: the refit runs every this many seconds.")
    last_run_at = serializers.DateTimeField(
        allow_null=True, help_text="When the refit last ran (even if nothing had changed)."
    )
    compute_ms = serializers.IntegerField(
        allow_null=True, help_text="c: the last run's compute time."
    )
    published_at = serializers.DateTimeField(
        allow_null=True, help_text="When the published snapshot was computed."
    )
    battles = serializers.IntegerField(help_text="Rated battles in the published snapshot.")
    robust_intervals = serializers.BooleanField(
        help_text="Intervals are cluster-robust over judges (G ≥ m), else model-based."
    )
    clusters = serializers.IntegerField(allow_null=True, help_text="G: distinct judges.")
    bootstrap_replicates = serializers.IntegerField()
    pending_battles = serializers.IntegerField(
        help_text="Decided, non-excluded battles no published refit includes yet."
    )
    oldest_pending_age_s = serializers.FloatField(
        allow_null=True,
        help_text="Staleness: age of the oldest of them since its first admissible judgment.",
    )
    staleness_bound_s = serializers.FloatField(help_text="Δ + c (SPEC §6).")
    snapshot_id = serializers.IntegerField(allow_null=True)


class LeaderboardOutput(serializers.Serializer):
    arena = serializers.CharField()
    refit = RefitStatusOutput()
    exclusions = serializers.DictField(
        child=serializers.IntegerField(),
        allow_null=True,
        help_text="Excluded battles per reason, in SPEC §5.3 order.",
    )
    self_judged_only = serializers.IntegerField(
        allow_null=True,
        help_text="Decided battles that rest on the submitting team's own blind votes alone.",
    )
    rows = LeaderboardRowOutput(many=True)


class LeaderboardApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(
        responses={200: LeaderboardOutput},
        description=(
            "The public arena's board: rated agents by published rating, then provisional "
            "and unavailable agents by streaming value. Retired agents are not listed; "
            "their battles stay in the refit."
        ),
    )
    def get(self, request):
        arena = Arena.objects.public()
        board = leaderboard_current(arena_id=arena.pk)  # the precomputed document
        return Response(LeaderboardOutput({"arena": arena.slug, **board}).data)
