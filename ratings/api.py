"""The public leaderboard API."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.models import Agent, Arena
from arena_site.exceptions import ApplicationError
from battles.classify import CATEGORIES
from ratings.board_query import KINDS, STYLE_CONTROLLED, BoardQueryError, board_query
from ratings.category_boards import board_for_query
from ratings.style_features import FEATURES


class LeaderboardRowOutput(serializers.Serializer):
    agent = serializers.CharField(help_text="Display name.")
    slug = serializers.CharField()
    url = serializers.CharField(help_text="The agent's page: rating history, head to head.")
    kind = serializers.ChoiceField(choices=Agent.Kind.choices)
    kind_text = serializers.CharField(
        help_text="The kind in words: built-in, scaffold model or remote system."
    )
    organisation = serializers.CharField(
        help_text='The team that entered the agent; "Arena" for the arena\'s own agents.'
    )
    provider = serializers.CharField(
        allow_blank=True, help_text="The model provider a scaffold agent calls; empty for none."
    )
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
        help_text="Fewer than n0 = 30 rated battles in the published refit (on a category's "
        "board: in that category): no rating; the interval is the full scale."
    )
    unavailable = serializers.ChoiceField(
        choices=["no_comparisons", "disconnected", "separated"],
        allow_null=True,
        help_text="Why the battles cannot place the agent on the scale, instead of a number.",
    )
    fit_battles = serializers.IntegerField(
        min_value=0,
        help_text="The agent's battles in the refit (on a category's board: in that category).",
    )
    style_rating = serializers.FloatField(
        allow_null=True,
        help_text="Style-controlled rating: the same battles with each side's style (final "
        "message length and markdown, steps, wall time, files, diff size) held equal. Null "
        "where the rating is, or where style control could not place the agent.",
    )
    style_lower = serializers.FloatField(
        allow_null=True, help_text="95% interval of the style-controlled rating, lower end."
    )
    style_upper = serializers.FloatField(
        allow_null=True, help_text="95% interval of the style-controlled rating, upper end."
    )
    style_rank = serializers.IntegerField(
        min_value=1,
        allow_null=True,
        help_text="Position by style-controlled rating (the rank's rule); null without one.",
    )
    streaming_rating = serializers.FloatField(
        help_text="Streaming Elo, moved on every decided battle (not the published rating)."
    )
    votes = serializers.IntegerField(
        min_value=0,
        help_text="Decided battles that moved the streaming value (always overall, as are "
        "streaming_rating and the record).",
    )
    wins = serializers.IntegerField(min_value=0)
    losses = serializers.IntegerField(min_value=0)
    draws = serializers.IntegerField(min_value=0, help_text="Ties and both-bad outcomes.")


class BootstrapOutput(serializers.Serializer):
    """What a board's rank bands rest on (docs/intervals.md, "Rank bands")."""

    bootstrap_unit = serializers.ChoiceField(
        choices=["battles", "judges", "tasks"],
        allow_null=True,
        help_text="What each replicate of the rank bands resampled: battles, judges (while "
        "the clustered interval is shown) or whole tasks (the arena's choice); null: no fit.",
    )
    bootstrap_clusters = serializers.IntegerField(
        min_value=0,
        allow_null=True,
        help_text="How many judges or tasks a replicate drew from, with replacement; null "
        "when it resampled battles, or without a fit.",
    )


class RefitStatusOutput(BootstrapOutput):
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
        help_text="Intervals are cluster-robust over judges (G ≥ m), else battle-level."
    )
    clusters = serializers.IntegerField(allow_null=True, help_text="G: distinct judges.")
    interval = serializers.ChoiceField(
        choices=["battle", "clustered"],
        allow_null=True,
        help_text="The published interval (docs/intervals.md); null while nothing is published.",
    )
    critical_value = serializers.FloatField(
        allow_null=True, help_text="Its multiplier of the standard error: 1.96, or t(G* − 1)."
    )
    effective_clusters = serializers.FloatField(
        allow_null=True, help_text="G*: the effective number of judges behind the t."
    )
    interval_caveat = serializers.CharField(
        allow_null=True,
        help_text="What the board says beside the intervals when their coverage is known to "
        "fall short (fewer judges than agents: judges' own views go unmeasured); null: nothing.",
    )
    bootstrap_replicates = serializers.IntegerField()
    converged = serializers.BooleanField(
        allow_null=True,
        help_text="The published snapshot's fit converged. False: it stopped at its "
        "iteration cap and its numbers may be off (the board page says so). Null while "
        "nothing is published.",
    )
    iterations = serializers.IntegerField(
        min_value=0,
        allow_null=True,
        help_text="Iterations the published snapshot's fit took; null while nothing is published.",
    )
    pending_battles = serializers.IntegerField(
        help_text="Decided, non-excluded battles no published refit includes yet."
    )
    oldest_pending_age_s = serializers.FloatField(
        allow_null=True,
        help_text="Staleness: age of the oldest of them since its first admissible judgment.",
    )
    staleness_bound_s = serializers.FloatField(
        help_text="Δ + c: a decided battle is in the rating within this many seconds."
    )
    snapshot_id = serializers.IntegerField(allow_null=True)


class CategoryBoardOutput(BootstrapOutput):
    category = serializers.ChoiceField(choices=list(CATEGORIES))
    label = serializers.CharField()
    battles = serializers.IntegerField(help_text="Rated battles of tasks of this category.")
    computed_at = serializers.DateTimeField(help_text="When this board's fit was computed.")
    compute_ms = serializers.IntegerField()
    min_battles = serializers.IntegerField(help_text="Battles in the category a rating needs.")
    enough = serializers.BooleanField(
        help_text="Some agent has min_battles here; false: too few battles, no rating shown."
    )
    rated_agents = serializers.IntegerField()
    robust_intervals = serializers.BooleanField()
    clusters = serializers.IntegerField(allow_null=True, help_text="Distinct judges.")
    bootstrap_replicates = serializers.IntegerField()
    converged = serializers.BooleanField(
        allow_null=True,
        help_text="This board's fit converged. False: it stopped at its iteration cap and "
        "its numbers may be off. Null when the board has no fit (too few battles).",
    )
    iterations = serializers.IntegerField(
        min_value=0, allow_null=True, help_text="Iterations of this board's fit; null: no fit."
    )


class CategoryCountOutput(serializers.Serializer):
    slug = serializers.CharField(
        help_text="The category: browsing, files_and_data or general (its ?category= value)."
    )
    label = serializers.CharField()
    battles = serializers.IntegerField(help_text="Rated battles of tasks of this category.")


class MatricesOutput(serializers.Serializer):
    agents = serializers.ListField(
        child=serializers.CharField(), help_text="Agent slugs: the rows' and columns' order."
    )
    names = serializers.ListField(child=serializers.CharField(), help_text="Display names.")
    battles = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(min_value=0)),
        help_text="battles[i][j]: rated battles between agents i and j.",
    )
    win_rate = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField(allow_null=True)),
        help_text="win_rate[i][j]: agent i's share of its battles against j (ties and "
        "both-bad count half); null where they never met or i = j.",
    )
    left_out = serializers.IntegerField(
        help_text="Agents with battles beyond the first 16 of the board, not in the tables."
    )


class StyleCoefficientOutput(serializers.Serializer):
    name = serializers.ChoiceField(choices=list(FEATURES))
    label = serializers.CharField()
    coef = serializers.FloatField(
        allow_null=True,
        help_text="Rating points a one-standard-deviation style lead (normalised side "
        "difference) is worth in the verdicts.",
    )
    lower = serializers.FloatField(allow_null=True, help_text="95% interval, lower end.")
    upper = serializers.FloatField(allow_null=True, help_text="95% interval, upper end.")
    n = serializers.IntegerField(min_value=0, help_text="Battles with it known on both sides.")


class StyleDroppedOutput(serializers.Serializer):
    name = serializers.ChoiceField(choices=list(FEATURES))
    label = serializers.CharField()
    reason = serializers.CharField(
        help_text='Why it is not in the fit: "not measured" (on no battle), "constant" '
        "(the same side difference wherever measured)."
    )


class StyleOutput(serializers.Serializer):
    """Style control of the board shown (docs/intervals.md, "Style control")."""

    status = serializers.ChoiceField(
        choices=["fitted", "not_enough"],
        help_text="fitted: the style-controlled columns are filled; not_enough: reason says "
        "why they are empty.",
    )
    reason = serializers.CharField(allow_blank=True)
    battles = serializers.IntegerField(min_value=0, help_text="Battles in the style fit.")
    interval = serializers.ChoiceField(choices=["battle", "clustered"], required=False)
    critical_value = serializers.FloatField(allow_null=True, required=False)
    rated_agents = serializers.IntegerField(min_value=0)
    coefficients = StyleCoefficientOutput(many=True)
    dropped = StyleDroppedOutput(many=True)


class LeaderboardOutput(serializers.Serializer):
    arena = serializers.CharField()
    refit = RefitStatusOutput()
    category = CategoryBoardOutput(
        allow_null=True,
        help_text="The category's own fit when ?category= names one; null for the overall board.",
    )
    categories = CategoryCountOutput(many=True)
    matrices = MatricesOutput()
    exclusions = serializers.DictField(
        child=serializers.IntegerField(),
        allow_null=True,
        help_text="Excluded battles per reason, in the order the exclusion rules apply.",
    )
    self_judged_only = serializers.IntegerField(
        allow_null=True,
        help_text="Decided battles that rest on the submitting team's own blind votes alone.",
    )
    style = StyleOutput(
        allow_null=True,
        help_text="Style control of this board (overall or the category's); null while "
        "none has been computed for its published fit.",
    )
    rows = LeaderboardRowOutput(many=True)


class LeaderboardApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(
        responses={200: LeaderboardOutput},
        parameters=[
            OpenApiParameter(
                "category",
                enum=list(CATEGORIES),
                required=False,
                description="A task category's board (its own fit); omitted: the overall board.",
            ),
            OpenApiParameter(
                "kind", enum=list(KINDS), required=False, description="Only agents of this kind."
            ),
            OpenApiParameter(
                "provider",
                required=False,
                description="Only agents of this provider (case-insensitive).",
            ),
            OpenApiParameter(
                "organisation",
                required=False,
                description='Only agents of this team ("Arena": the arena\'s own).',
            ),
            OpenApiParameter(
                "style",
                enum=[STYLE_CONTROLLED, "plain"],
                required=False,
                description="controlled: rows by style-controlled rating (rows without one "
                "after); omitted or plain: by rating.",
            ),
        ],
        description=(
            "The public arena's board: rated agents by published rating, then provisional "
            "and unavailable agents by streaming value. Retired agents are not listed; "
            "their battles stay in the refit. With ?category=, the board of that kind of "
            "task. Filters keep ranks of the whole board. Each row carries its style-controlled "
            "rating too; ?style=controlled orders by it. 400 for an unknown category, kind "
            "or order."
        ),
    )
    def get(self, request):
        arena = Arena.objects.public()
        try:
            query = board_query(request.query_params)
        except BoardQueryError as exc:
            raise ApplicationError(str(exc), code="invalid_board_query") from exc
        board = board_for_query(arena_id=arena.pk, query=query)  # precomputed documents
        return Response(LeaderboardOutput({"arena": arena.slug, **board}).data)
