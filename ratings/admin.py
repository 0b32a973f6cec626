from django.contrib import admin

# Rating state moves only by the rules (decided battles, the refit): read-only here.
from arena_site.admin import ReadOnlyAdmin
from ratings.models import AgentRating, RatingPoint, RatingSnapshot, RefitState, VoteImport


@admin.register(AgentRating)
class AgentRatingAdmin(ReadOnlyAdmin):
    list_display = [
        "agent",
        "arena",
        "streaming_rating",
        "rated_battles",
        "wins",
        "draws",
        "losses",
    ]


class RatingPointInline(admin.TabularInline):
    model = RatingPoint
    extra = 0
    can_delete = False
    readonly_fields = [
        "agent",
        "rating",
        "lower",
        "upper",
        "rank_lower",
        "rank_upper",
        "unavailable",
        "battles",
        "weight",
        "provisional",
    ]

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(RatingSnapshot)
class RatingSnapshotAdmin(ReadOnlyAdmin):
    """Snapshots are written by the refit job only."""

    list_display = ["computed_at", "arena", "battles", "compute_ms", "clusters", "seed"]
    list_filter = ["arena"]
    inlines = [RatingPointInline]


@admin.register(RefitState)
class RefitStateAdmin(ReadOnlyAdmin):
    list_display = ["arena", "runs", "last_run_at", "last_compute_ms", "last_wrote_snapshot"]


@admin.register(VoteImport)
class VoteImportAdmin(ReadOnlyAdmin):
    list_display = ["file_name", "arena", "rows", "battles", "created_at"]
