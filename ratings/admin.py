from django.contrib import admin

from ratings.models import AgentRating


@admin.register(AgentRating)
class AgentRatingAdmin(admin.ModelAdmin):
    list_display = [
        "agent",
        "arena",
        "streaming_rating",
        "rated_battles",
        "wins",
        "draws",
        "losses",
    ]
